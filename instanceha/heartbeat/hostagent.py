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

"""The host's side of instance HA, inside the heartbeat agent.

The agent (:mod:`instanceha.heartbeat.agent`) moves datagrams; this
module decides what they mean for the host:

* isolation detection (:mod:`instanceha.heartbeat.isolation`): the link
  state, reported in every version 2 heartbeat with the changes no
  answer has acknowledged yet;
* the isolation policy the service last sent (the response and the
  protected instances), cached: an isolated agent cannot ask for it;
* the operator's pause, as the last answer told it, ending by itself
  on this host's clock when its time is up;
* whether every copy of the service said it stops (a clean stop);
* the isolation response (:mod:`instanceha.heartbeat.response`), once
  per isolation episode, never while instance HA is paused;
* the watchdog (:mod:`instanceha.heartbeat.watchdog`), opt-in.

Times are the agent's monotonic clock. What an answer says is dated at
the moment the heartbeat it answers was sent, never later.
"""

from collections.abc import Callable
import logging
import math
import time

from instanceha.heartbeat import isolation
from instanceha.heartbeat import protocol
from instanceha.heartbeat import response as response_mod
from instanceha.heartbeat import watchdog as watchdog_mod

LOG = logging.getLogger(__name__)


class HostSide:
    """Everything the agent does for the host besides sending heartbeats.

    :param monitor: the link state machine.
    :param hypervisor: applies the isolation response (None: never).
    :param watchdog: self-fencing (None: not configured).
    :param clock: monotonic clock.
    :param spawn: how the isolation response runs apart (see
        :class:`~instanceha.heartbeat.response.Response`), with ``sleep``.
    """

    def __init__(self, monitor: isolation.LinkMonitor,
                 hypervisor: response_mod.Virsh | None = None,
                 watchdog: watchdog_mod.Watchdog | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 spawn: Callable[[Callable[[], None]], object] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.monitor = monitor
        self.hypervisor = hypervisor
        self.watchdog = watchdog
        self._clock = clock
        self._spawn = spawn
        self._sleep = sleep
        #: The current isolation episode's response (None: none).
        self.response: response_mod.Response | None = None
        self._was_isolated = False
        #: The isolation policy last sent by the service (None: none yet).
        self.policy: protocol.Policy | None = None
        #: The pause ends at this monotonic time (inf: until resumed);
        #: None: not paused.
        self.paused_until: float | None = None
        #: Collectors that said they stop, and how many there are.
        self._stood_down: set[tuple] = set()
        self._collectors = 0

    # -- what the agent hears ------------------------------------------------

    def answered(self, sequence: int, sent_at: float,
                 answer: protocol.Answer, collector: tuple) -> None:
        """A valid answer to heartbeat ``sequence``, sent at ``sent_at``."""
        self.monitor.heard(sent_at)
        self.monitor.acknowledged(sequence)
        if self.watchdog is not None:
            self.watchdog.acknowledged(sequence)
        self._stood_down.discard(collector)
        if answer.policy is not None and answer.policy != self.policy:
            self.policy = answer.policy
            LOG.info('isolation policy from the service: %s for %d '
                     'protected instance(s)', self.policy.response,
                     len(self.policy.protected))
        if answer.pause is None:
            if self.paused_until is not None:
                LOG.info('instance HA resumed')
            self.paused_until = None
        else:
            until = sent_at + answer.pause
            if self.paused_until is None:
                LOG.info('instance HA is paused (%s)', 'no end set'
                         if math.isinf(answer.pause) else
                         '%.0f s left' % answer.pause)
            self.paused_until = until

    def stood_down(self, collector: tuple, collectors: int) -> None:
        """``collector`` said its copy stops (a clean stop)."""
        if collector not in self._stood_down:
            LOG.info('the service copy at [%s]:%d stops', *collector)
        self._stood_down.add(collector)
        self._collectors = collectors

    # -- what the agent asks -------------------------------------------------

    @property
    def paused(self) -> bool:
        until = self.paused_until
        return until is not None and self._clock() < until

    @property
    def service_stopped(self) -> bool:
        """Every collector said its copy stops, none answered since."""
        return bool(self._collectors) and len(
            self._stood_down) >= self._collectors

    def report(self, sequence: int) -> protocol.Report:
        """The report heartbeat ``sequence`` carries."""
        mon = self.monitor
        wd, deadline = (self.watchdog.report(sequence) if self.watchdog
                        else (protocol.WD_OFF, 0.0))
        return protocol.Report(
            state=mon.state, changes=mon.changes, watchdog=wd,
            deadline=deadline,
            policy_digest=self.policy.digest() if self.policy else b'',
            pending=mon.pending(sequence))

    def tick(self) -> None:
        """Look again (after every beat and every batch of answers)."""
        isolated = self.monitor.evaluate() == protocol.ISOLATED
        if isolated and not self._was_isolated:
            self._respond()
        self._was_isolated = isolated
        if self.watchdog is not None:
            self.watchdog.step(
                self.monitor.heard_at,
                bool(self.policy and self.policy.protected), self.paused,
                self.service_stopped)

    def releasing(self) -> bool:
        """Ask for the watchdog's release (the agent stops).

        :returns: whether an answer must acknowledge it first.
        """
        if self.watchdog is None or not self.watchdog.device.armed:
            return False
        self.watchdog.release()
        return True

    @property
    def released(self) -> bool:
        return self.watchdog is None or not self.watchdog.device.armed

    def _respond(self) -> None:
        """A new isolation episode: apply the cached response."""
        pol = self.policy
        if pol is None or pol.response == protocol.RESPONSE_NONE:
            LOG.warning('host isolated; isolation response: none%s',
                        '' if pol else ' (no policy from the service yet)')
            return
        if self.paused:
            LOG.warning('host isolated; instance HA is paused: no '
                        'isolation response')
            return
        if self.hypervisor is None:
            LOG.error('host isolated; isolation response %s, but no '
                      'hypervisor to apply it', pol.response)
            return
        running = self.response
        if running is not None and running.alive:
            return
        self.response = response_mod.Response(
            self.hypervisor, pol,
            lambda: self.monitor.state == protocol.ISOLATED,
            clock=self._clock, sleep=self._sleep, spawn=self._spawn)
        self.response.start()

    def close(self) -> None:
        self.monitor.prober.stop()
        if self.watchdog is not None:
            self.watchdog.close()
