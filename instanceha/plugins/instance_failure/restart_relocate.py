# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""max_restart, then max_relocate, then error (Proxmox ha-manager's rule)."""

from instanceha.plugins.instance_failure import base


class RestartRelocate(base.RecoveryStrategy):
    """Restart in place, then relocate, then give up.

    A crashed instance is started again on its host up to
    ``[instance_failure] max_restart`` times; after that each crash moves
    it (cold migration, Nova's scheduler choosing the host, then a start)
    up to ``max_relocate`` times; after that it is put in the error
    state. The counters reset only after a successful start, so an
    instance that keeps crashing walks the chain once and stops, instead
    of being restarted for ever.
    """

    description = ('restart up to max_restart times, relocate up to '
                   'max_relocate times, then the error state')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[instance_failure] max_restart': 'restarts in place',
                '[instance_failure] max_relocate': 'relocations after'}

    def next_step(self, counters: base.Counters) -> base.Step:
        opts = self.conf.instance_failure
        if counters.restarts < opts.max_restart:
            return base.Step.RESTART
        if counters.relocations < opts.max_relocate:
            return base.Step.RELOCATE
        return base.Step.ERROR
