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

"""Detect-only mode."""

from instanceha.plugins.gates import base


class DisabledGate(base.Gate):
    """Block every new recovery while ``[DEFAULT] disabled`` is true.

    Detection and the plan (and its log lines) still happen, so an
    operator sees what would have been done.
    """

    pure = True
    detect_only = True
    description = 'detect and log only while [DEFAULT] disabled = true'

    def check(self, ctx: base.GateContext) -> base.GateVerdict:
        if not self.conf.disabled:
            return base.GateVerdict()
        return base.GateVerdict(
            block_all='detect-only mode ([DEFAULT] disabled = true): '
                      'would recover %s' % ', '.join(sorted(ctx.candidates)))
