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

"""The ``watchdog`` fencing level: a host proven off by its own watchdog.

For hosts without a usable BMC (or as the last level, for when the BMC
network failed with the management network). The host's heartbeat agent
arms a watchdog device and feeds it only while it hears this service's
signed answers; cut off for its announced deadline D, the host resets
(doc/host-side.md, deadline arithmetic). So a host that announced itself
armed to the leading copy, and that this copy has not answered for D
plus a safety margin, has reset: its instances run nowhere.

Nothing is powered: "off" is read from the heartbeat listener's view
(:class:`instanceha.engine.watchdogs.WatchdogWatch`) and only ever holds for
a host whose armed announcement is current (heard and answered by this
copy while it led, its leadership proven without a gap since). A host
that never announced an armed watchdog, or announced it to another copy
(a leader change, a restart of the service: the wait starts over from
this copy's own answers) is never counted. A host whose heartbeats come
back is no longer counted either: its new announcement is answered, so
its deadline moves on.

Every reading carries the seconds left (``wait_left``); the engine's
power proof refuses one whose deadline has not passed now, whatever the
level claims.
"""

import logging
import math

from instanceha.engine import watchdogs as watchdogs_mod
from instanceha.plugins.fencing import base

LOG = logging.getLogger(__name__)


class NotCountedError(base.DeviceError):
    """No armed watchdog this copy may count on: nothing to wait for."""

    reason = 'no armed watchdog to count on'
    retryable = False


class PendingError(base.DeviceError):
    """Armed, but its deadline and the margin have not passed yet."""

    reason = 'watchdog deadline not passed'
    # Waiting within the chain's time would hold every other level; the
    # engine tries the fence again later.
    retryable = False


def _non_negative(value) -> float:
    if isinstance(value, bool):
        raise ValueError('expected a number, got %r' % (value,))
    number = float(value)
    if number < 0 or not math.isfinite(number):
        raise ValueError('must be 0 or more, got %r' % (value,))
    return number


class WatchdogFencing(base.FencingDriver):
    """Counts a silent host reset once its watchdog's deadline passed."""

    name = 'watchdog'
    description = ('The host\'s own watchdog (hardware or softdog), armed '
                   'by its heartbeat agent: counts the host off once this '
                   'copy has not answered it for its announced deadline '
                   'plus a margin. Powers nothing.')
    counts_watchdogs = True

    PARAMS = {
        'margin': base.Param(
            'Seconds added to the host\'s announced watchdog deadline '
            'before it counts as reset (default [heartbeat] '
            'watchdog_margin)', convert=_non_negative),
        'min_deadline': base.Param(
            'The shortest announced deadline this level counts on '
            '(default [heartbeat] watchdog_min_deadline); must exceed a '
            'leader election', convert=base.to_positive),
    }

    def validate(self) -> None:
        super().validate()
        detectors = self.conf.detection.detectors or []
        if 'heartbeat' not in detectors:
            self._fail('the watchdog level needs the heartbeat detector: '
                       'add heartbeat to [detection] detectors (the agents '
                       'announce their watchdogs in their heartbeats)')
        if not self.min_deadline:
            self._fail('the watchdog level counts no host while [heartbeat] '
                       'watchdog_min_deadline is 0: set it (or this '
                       'device\'s min_deadline) above a leader election, '
                       'see doc/host-side.md')

    @property
    def margin(self) -> float:
        value = self.params.get('margin')
        return float(self.conf.heartbeat.watchdog_margin
                     if value is None else value)

    @property
    def min_deadline(self) -> float:
        value = self.params.get('min_deadline')
        return float(self.conf.heartbeat.watchdog_min_deadline
                     if value is None else value)

    def describe_target(self) -> str:
        return 'the host\'s watchdog'

    def _wait(self) -> watchdogs_mod.WatchdogWait:
        if self.watchdogs is None:
            return watchdogs_mod.WatchdogWait(
                counted=False, left=None,
                detail='no heartbeat listener runs in this copy')
        return self.watchdogs.watchdog_wait(self.host, self.min_deadline)

    def deadline_left(self) -> float:
        wait = self._wait()
        if not wait.counted or wait.left is None:
            return math.inf
        return wait.left + self.margin

    def _read_power(self, deadline: float) -> base.PowerState:
        wait = self._wait()
        if not wait.counted or wait.left is None:
            raise NotCountedError(self, wait.detail)
        left = wait.left + self.margin
        if left > 0:
            raise PendingError(self, '%s; counted reset in %.0f s (deadline '
                               'and a margin of %.0f s)' % (
                                   wait.detail, math.ceil(left),
                                   self.margin))
        return base.PowerState.OFF

    def _request_power(self, state: base.PowerState,
                       deadline: float) -> None:
        """Nothing to ask: the host resets (and boots) by itself."""

    def power_off(self, timeout: float | None = None) -> None:
        """Return once the deadline has passed, waiting within ``timeout``.

        :raises NotCountedError: no armed watchdog to count on.
        :raises PendingError: the deadline is further than ``timeout``.
        """
        deadline = self._deadline(timeout)
        while True:
            try:
                self._read_power(deadline)
            except PendingError:
                left = self.deadline_left()
                if left > self.remaining(deadline):
                    raise
                self.clock.sleep(max(left, 0.0) + 0.001)
                continue
            LOG.warning('host %s counted off by its watchdog: this copy has '
                        'not answered it for its announced deadline and '
                        '%.0f s more', self.host, self.margin)
            return

    def power_on(self, timeout: float | None = None) -> None:
        """Nothing to do: a watchdog reset reboots the host by itself."""
        LOG.info('host %s: not powered on by its watchdog level: a '
                 'watchdog reset reboots the host by itself', self.host)
