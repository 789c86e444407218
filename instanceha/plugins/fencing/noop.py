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

"""A fencing driver that proves nothing. For labs only."""

import logging

from instanceha.plugins.fencing import base

LOG = logging.getLogger(__name__)


class NoopFencing(base.FencingDriver):
    description = ('Does nothing and claims success; proves nothing. Labs '
                   'only: evacuating an unfenced host can corrupt data.')

    def validate(self) -> None:
        super().validate()
        if not self.conf.fencing.allow_noop:
            self._fail('the noop driver proves nothing about the host\'s '
                       'power state; it is refused unless [fencing] '
                       'allow_noop = true (labs only)')

    def _warn(self, action: str) -> None:
        LOG.warning('host %s: noop fencing driver "%s" did nothing; nothing '
                    'was proven about this host\'s power state', self.host,
                    action)

    def describe_target(self) -> str:
        return 'noop'

    def _request_power(self, state: base.PowerState, deadline: float
                       ) -> None:
        self._warn('power %s' % state.value)

    def _read_power(self, deadline: float) -> base.PowerState:
        self._warn('power status')
        return base.PowerState.UNKNOWN

    def power_off(self, timeout: float | None = None) -> None:
        self._warn('power off')

    def power_on(self, timeout: float | None = None) -> None:
        self._warn('power on')
