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

"""The clean shutdown's wiring to the heartbeat listener.

What an announced host goes through is a workflow kind of the engine's
runtime (:mod:`instanceha.engine.clean_shutdown`). What is left here is
what lies above the engine: after every tick of the engine, the leading
copy shows the kind what the listener heard (a
:class:`~instanceha.engine.clean_shutdown.World`) and lets the runtime
take its steps; the listener asks what to answer an agent
(:meth:`ShutdownHandler.respond`); and the migrate drain is the
operator's maintenance (:mod:`instanceha.ops.maintenance`), run as the
kind's job.
"""

from collections.abc import Callable
import datetime
import logging
import types

from instanceha.engine import clean_shutdown
from instanceha.engine import reasons
from instanceha.engine import shutdown
from instanceha.engine import shutdown_flow
from instanceha.heartbeat import protocol
from instanceha.ops import maintenance

LOG = logging.getLogger(__name__)

#: Seconds between two looks at moves an earlier leader started.
DRAIN_RECHECK = 5.0


class Drains(shutdown_flow.Effects):
    """migrate's maintenance work, run as jobs of the clean shutdown."""

    def __init__(self, conf, env, run_all: Callable):
        self.conf = conf
        self.env = env
        self._run_all = run_all

    def _maintenance(self, purpose: str) -> maintenance.Maintenance:
        """Nova maintenance work, its progress logged as ``purpose``'s."""
        return maintenance.Maintenance(
            self.env.cloud, out=lambda text: LOG.info(
                'shutdown %s: %s', purpose, text), clock=self.env.clock,
            run_all=self._run_all)

    def drain(self, host: str, now: datetime.datetime, note: str,
              resumed: bool) -> list:
        """Move ``host``'s instances away; moves others began are awaited.

        So is an instance something else acts on (a task under way,
        instance HA restarting it): moved once it has settled.

        An operator who enabled the host (or gave it a reason of their
        own) meanwhile took it: a resumed drain then stops.
        """
        work = self._maintenance('drain')
        clock, cloud = self.env.clock, self.env.cloud
        timeout = self.conf.shutdown.drain_timeout
        deadline = clock.monotonic() + timeout
        # Each instance's latest outcome, over the rounds.
        outcomes: dict[str, maintenance.Outcome] = {}
        again = resumed
        while True:
            if again and not reasons.of_disabled(
                    cloud.read_services().service(host)).drain:
                return list(outcomes.values())
            this_round = work.start(
                host, now, note=note, wait=True, timeout=timeout,
                concurrency=max(1, self.conf.workers), settle=True)
            outcomes.update((o.server.id, o) for o in this_round)
            # Moves another copy started are not followed by start():
            # asked again until they have ended.
            if (not any(o.result == 'running' for o in this_round)
                    or clock.monotonic() >= deadline):
                return list(outcomes.values())
            again = True
            clock.sleep(DRAIN_RECHECK)

    def end(self, host: str) -> None:
        self._maintenance('return').end(host)


class ShutdownHandler:
    """Shows the clean shutdown what the listener heard; answers agents.

    :param engine: the recovery engine (its snapshot, environment and
        runtime; the kind is registered with its runtime).
    :param detector: the heartbeat detector, whose listener heard the
        announcements.
    :param run_all: runs the live migrations of one host (see
        :class:`instanceha.ops.maintenance.Maintenance`).
    """

    def __init__(self, conf, engine, detector,
                 run_all: Callable = maintenance.threaded_map):
        self.conf = conf
        self.engine = engine
        self.detector = detector
        self.flow = clean_shutdown.CleanShutdowns(
            conf, engine.env, engine.workflows,
            Drains(conf, engine.env, run_all))

    @property
    def env(self):
        return self.engine.env

    def _leads(self) -> bool:
        return bool(self.env.coordinator.is_leader()
                    and not self.env.guard.halted)

    def _paused(self) -> bool:
        return bool(getattr(getattr(self.engine, 'pause', None), 'active',
                            None))

    def respond(self, ann: shutdown.Announcement) -> str | None:
        """The reply to an announcement (listener thread); None: none.

        Only the leading copy answers. migrate: ``draining`` until the
        host's instances were moved, then ``drained``; otherwise
        ``noted``, once what was decided is in Nova (until then the
        agent asks again a second later).
        """
        if not self._leads():
            return None
        if self.conf.disabled:
            return protocol.NOTED  # detect-only: nothing will be drained
        flow = self.flow
        noted = flow.noted(ann.host, ann)
        if noted is not None:
            action = noted.action
        else:
            policy, _ = shutdown.policy_of(self.conf, self.engine.snapshot,
                                           ann.host)
            action = flow.action(policy, ann.kind, self._paused())
        if action != shutdown.MIGRATE:
            return (protocol.NOTED if noted is not None and
                    flow.known(ann.host) else None)
        if noted is None:
            return protocol.DRAINING
        return {'draining': protocol.DRAINING,
                'drained': protocol.DRAINED}.get(
                    flow.drain_answer(ann.host), protocol.NOTED)

    def step(self) -> None:
        """After every tick: the clean shutdowns' steps, as the leader."""
        listener = self.detector.listener
        if listener is None:
            return
        if getattr(listener, 'responder', None) is None:
            listener.responder = self.respond
        snapshot = self.engine.snapshot
        if not self._leads() or snapshot is None or self.conf.disabled:
            return
        pending = listener.announced()
        world = shutdown_flow.World(
            snapshot=snapshot, pending=types.MappingProxyType(pending),
            returned=frozenset(h for h in pending if listener.returned(h)),
            ages=types.MappingProxyType(
                {s.host: listener.age(s.host) for s in snapshot.services}),
            now=listener.now(),
            recovering=frozenset(self.engine.host_states()),
            paused=self._paused())
        self.flow.heard(world)
        self.engine.workflows.run(world, kinds=(shutdown_flow.KIND,))
        forget = getattr(listener, 'forget_announcement', None)
        for host in sorted(pending):
            if forget is not None and self.flow.settled(host):
                forget(host)

    # The service's tick loop tells every observer about each tick.

    def tick_started(self) -> None:
        pass

    def tick_finished(self, engine, error: str | None = None) -> None:
        self.step()


def find_detector(drivers):
    """The heartbeat detector among the configured ones, or None."""
    from instanceha.plugins.detectors import heartbeat
    for det in drivers.detectors:
        if isinstance(det, heartbeat.HeartbeatDetector):
            return det
    return None
