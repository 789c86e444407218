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

"""A cap on hosts started per cycle."""

from instanceha.plugins.gates import base


class PerCycleGate(base.Gate):
    """Start at most ``[gates] max_hosts_per_cycle`` hosts per cycle.

    The others stay blocked for this cycle and are candidates again in
    the next one; hosts go in name order so the choice is reproducible.
    Only new starts count: a host whose workflow started in an earlier
    cycle (e.g. fencing failed and is retried) is neither counted nor
    blocked, so a host that can never be fenced cannot take the cap of
    every cycle and starve the others.
    """

    pure = True
    description = 'start at most [gates] max_hosts_per_cycle hosts a cycle'

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[gates] max_hosts_per_cycle': 'cap, 0 for none'}

    def check(self, ctx: base.GateContext) -> base.GateVerdict:
        cap = self.conf.gates.max_hosts_per_cycle
        new = ctx.candidates - ctx.started
        if not cap or len(new) <= cap:
            return base.GateVerdict()
        hosts = sorted(new)
        why = ('cap of %d host(s) per cycle reached by %s; waits for the '
               'next cycle' % (cap, ', '.join(hosts[:cap])))
        return base.GateVerdict(blocked_hosts={h: why for h in hosts[cap:]})
