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

"""The listeners of the simulated world: what its hosts sent.

The heartbeat and kdump detectors run unchanged in the simulation; they
get their listeners from :class:`SimListeners` instead of opening UDP
sockets, and those answer from the :class:`~instanceha.sim.world.World`:
the hosts' heartbeat agents, their shutdown announcements
(:mod:`instanceha.sim.announce`) and fence_kdump messages.
"""

import datetime
import types

from instanceha.engine import ports
from instanceha.sim import world as sim_world


class SimKdumpListener:
    """Stands in for the kdump detector's UDP listener.

    The real kdump detector runs unchanged; only what it would have heard
    from fence_kdump_send comes from the world.
    """

    def __init__(self, world: sim_world.World):
        self.world = world
        self.started_at = world.clock.monotonic()

    def start(self) -> None:
        pass

    def set_known_hosts(self, hosts) -> None:
        pass

    def last_message(self, host: str) -> datetime.datetime | None:
        return self.world.kdump_last_message(host)

    def record(self, host: str):
        from instanceha.heartbeat import listener
        last = self.last_message(host)
        if last is None:
            return None
        h = self.world.hosts[host]
        first = self.world.local(h.kdump_start)
        count = 1 + int((last - first).total_seconds()
                        // self.world.timing.kdump_interval)
        return listener.KdumpRecord(first=first, last=last, count=count,
                                    address='192.0.2.%s' % h.id)

    def stop(self) -> None:
        pass


class SimHeartbeatListener:
    """Stands in for the heartbeat detector's UDP listener.

    It also answers the agents whose hosts have a watchdog while its copy
    leads, and keeps what the real listener keeps for the ``watchdog``
    fencing level (:meth:`watchdog`).
    """

    def __init__(self, world: sim_world.World, copy: str | None = None,
                 keyring=None, max_clock_skew: float = 15.0,
                 log_interval: float = 60.0):
        self.world = world
        #: The copy of the service it belongs to.
        self.copy = copy
        #: host -> (arrival of its latest heartbeat, announced deadline
        #: or None when not armed).
        self._reports: dict[str, tuple[float, float | None]] = {}
        #: host -> when this copy last answered it.
        self._answered: dict[str, float] = {}
        #: Since when this copy answers (None: it does not).
        self.leading_since: float | None = None
        if copy is not None:
            world.answering[copy] = self
        self.started_at = world.clock.monotonic()
        #: The listener's socket side, always up in the simulation.
        self.udp = types.SimpleNamespace(running=True)
        #: As HeartbeatListener.responder (set by the shutdown handler).
        self.responder = None
        #: host -> agent run of the announcement this copy forgot.
        self._forgotten: dict[str, int] = {}
        #: As HeartbeatListener: what this copy answers an agent (set by
        #: the copy's host side, instanceha.daemon.hostside) and for how
        #: long its leadership is proven (unused here: see :meth:`hear`).
        self.answerer = None
        self.leadership = None
        #: host -> the answer it was last sent.
        self._answers: dict = {}
        #: With heartbeats through the real protocol (instanceha.sim.wire):
        #: the real listener that checks and answers them.
        self.real = None
        if world.wire is not None and keyring is not None:
            self._wire(keyring, max_clock_skew, log_interval)
        world.heartbeat_listeners.append(self)

    def _wire(self, keyring, max_clock_skew: float,
              log_interval: float) -> None:
        """Check the agents' datagrams with the real listener."""
        from instanceha.heartbeat import listener
        from instanceha.heartbeat import protocol
        w = self.world
        real = self.real = listener.HeartbeatListener(
            [], keyring, max_clock_skew, clock=self.now,
            wall=lambda: w.local(w.clock.t).timestamp(),
            log_interval=log_interval)

        def leads() -> bool:
            return self.copy is not None and w.is_leader(self.copy)

        def answer(host: str):
            if not leads():
                return None
            return (protocol.Answer() if self.answerer is None
                    else self.answerer(host))
        real.answerer = answer
        # The simulated election loses no lease unseen (see hear()): a
        # leader's proof lasts past its next answer.
        real.leadership = lambda: 3 * w.timing.agent_interval if leads() \
            else 0.0
        # As the heartbeat detector's reload expects of a listener.
        self._host_ring = keyring
        self.set_keys = self._set_keys
        self.stranded_by = real.stranded_by

    def _set_keys(self, keyring) -> None:
        self.real.set_keys(keyring)
        self._host_ring = keyring

    def receive(self, host: str, data: bytes, reply) -> tuple[bool, str]:
        """A datagram from ``host``'s address: (accepted, why not)."""
        real = self.real
        before = dict(real.rejects.counts)
        h = self.world.hosts[host]
        if real.handle(data, '192.0.2.%s' % h.id, reply) is not None:
            return True, None
        reason = next((r for r, n in real.rejects.counts.items()
                       if n != before.get(r, 0)), 'unknown')
        return False, reason

    def start(self) -> None:
        pass

    def stats(self) -> dict:
        return {}

    # -- shutdown announcements (instanceha.sim.announce) ---------------

    def _heard(self, host: str):
        h = self.world.hosts.get(host)
        ann = h.announcement if h is not None else None
        if (ann is None or ann.last < self.started_at
                or self._forgotten.get(host) == ann.boot):
            return None
        return ann

    def announcement(self, host: str):
        from instanceha.sim import announce
        ann = self._heard(host)
        return announce.as_announcement(host, ann) if ann else None

    def announced(self) -> dict:
        return {h: a for h in sorted(self.world.hosts)
                for a in [self.announcement(h)] if a is not None}

    def returned(self, host: str) -> bool:
        from instanceha.sim import announce
        return self._heard(host) is not None and announce.returned(
            self.world, host)

    def forget_announcement(self, host: str) -> None:
        ann = self._heard(host)
        if ann is not None:
            self._forgotten[host] = ann.boot

    def answer(self, host: str) -> str | None:
        """What this copy answers the host's agent (None: nothing)."""
        ann = self.announcement(host)
        responder = self.responder
        return responder(ann) if ann and responder else None

    def now(self) -> float:
        return self.world.clock.monotonic()

    # -- the agents' answers and watchdogs (instanceha.sim.watchdogs) ----

    def hear(self, host: str, t: float, deadline: float | None) -> bool:
        """A heartbeat of ``host``'s agent arrives; True: answered.

        As the real listener: answered only while this copy leads; the
        first answer starts its leadership's count. (The simulated
        election has no lease to lose unseen: leadership ends only when
        a copy stops, and nobody leads while a crashed leader's lease
        runs.)
        """
        from instanceha.heartbeat import protocol
        now = self.now()
        self._reports[host] = (now, deadline)
        answer = None
        if self.copy is not None and self.world.is_leader(self.copy):
            answer = (protocol.Answer() if self.answerer is None
                      else self.answerer(host))
        if answer is None:
            self.leading_since = None
            return False
        if self.leading_since is None:
            self.leading_since = now
        self._answered[host] = now
        self._answers[host] = answer
        return True

    def answer_to(self, host: str):
        """The answer :meth:`hear` sent ``host`` last."""
        return self._answers.get(host)

    def reporting(self) -> set[str]:
        """Hosts whose agents take answers (as the real listener)."""
        if self.real is not None:
            return self.real.reporting()
        return set(self._reports)

    def watchdog(self, host: str, min_deadline: float = 0.0):
        """As :meth:`HeartbeatListener.watchdog`, from what it heard."""
        from instanceha.heartbeat import listener
        if self.real is not None:
            return self.real.watchdog(host, min_deadline)
        received, deadline = self._reports.get(host, (None, None))
        if deadline is None:
            return None
        last = self._answered.get(host)
        since = self.leading_since
        current = bool(deadline >= min_deadline and since is not None
                       and received >= since and last is not None
                       and last >= since)
        return listener.WatchdogView(
            current=current, deadline=deadline, announced=received,
            last_answer=last, reset_by=last + deadline if current else None)

    def set_known_hosts(self, hosts) -> None:
        if self.real is not None:
            self.real.set_known_hosts(hosts)

    def age(self, host: str) -> float | None:
        wire = self.world.wire
        if wire is not None and self.real is not None and (
                host in self.world.watchdogs.dogs):
            # Its agent's heartbeats go through the real protocol.
            return self.real.age(host)
        h = self.world.hosts.get(host)
        last = None if h is None else self.world.agent_last(h)
        if last is None or last < self.started_at:
            return None
        return self.now() - last

    def record(self, host: str):
        return None

    def stop(self) -> None:
        if self in self.world.heartbeat_listeners:
            self.world.heartbeat_listeners.remove(self)
        if self.world.answering.get(self.copy) is self:
            del self.world.answering[self.copy]


class SimKdumpWatch(ports.KdumpWatch):
    """What a fence_kdump listener would have heard in the world."""

    def __init__(self, world: sim_world.World):
        self.world = world

    def last_message(self, host: str) -> datetime.datetime | None:
        return self.world.kdump_last_message(host)


class SimListeners(ports.ListenerFactory):
    """The simulator's listener factory: what the world's hosts sent.

    The heartbeat and kdump detectors run unchanged; they ask this
    factory instead of opening UDP sockets.
    """

    def __init__(self, world: sim_world.World, copy: str | None = None):
        self.world = world
        self.copy = copy

    def heartbeat(self, endpoints, keyring, max_clock_skew,
                  log_interval) -> SimHeartbeatListener:
        return SimHeartbeatListener(self.world, self.copy, keyring,
                                    max_clock_skew, log_interval)

    def kdump(self, endpoints, address_map,
              reverse_dns) -> SimKdumpListener:
        return SimKdumpListener(self.world)
