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

"""What the leading copy answers each host's agent (the host's side).

The heartbeat listener answers every version 2 heartbeat the leading copy
accepts (:mod:`instanceha.heartbeat.protocol`); this module decides the
content, after every tick of the engine, from what the tick read:

* the host's isolation policy: its response (``[heartbeat]
  isolation_response``, overridden by the aggregate metadata
  ``isolation_response_key``) and the instances it applies to, those
  instanceha would recover (the same filters as evacuation: an instance
  excluded from recovery gets no isolation response either), whether or
  not the host is in scope right now (maintenance keeps them protected);
* the operator's pause, with what is left of it: agents release their
  watchdogs for the pause window.

Only the leading copy answers, at the moment of the answer (the
coordinator is asked per answer, not per tick): an agent that hears
answers hears a copy that may act. Nothing here changes the engine or
the cloud. See doc/host-side.md.
"""

import dataclasses
import logging
import math
import threading

from instanceha.engine import decide
from instanceha.engine import shutdown
from instanceha import exceptions
from instanceha.heartbeat import protocol

LOG = logging.getLogger(__name__)

#: Hosts whose instances may be read for their policy in one tick, at
#: least (more when needed to keep every host within policy_max_age).
MIN_READS = 4


def response_of(conf, snapshot, host: str) -> tuple[str, str]:
    """(isolation response, where it comes from) for ``host``.

    An aggregate's metadata ``[heartbeat] isolation_response_key`` wins
    over ``[heartbeat] isolation_response`` (the same rule as the
    shutdown policy's aggregate override).
    """
    group = conf.heartbeat
    return shutdown.aggregate_choice(
        snapshot, host, group.isolation_response_key, protocol.RESPONSES,
        group.isolation_response, ('an isolation response',
                                   'isolation responses',
                                   '[heartbeat] isolation_response'))


class HostSide:
    """Computes each host's answer after every tick; answers on demand.

    :param engine: the recovery engine: its snapshot, drivers (filters),
        pause watch and coordinator are read, nothing is changed.
    :param detector: the heartbeat detector, whose listener answers.
    :param cloud: where the instances of agent hosts are read (default:
        the engine's cloud port).
    """

    def __init__(self, conf, engine, detector, cloud=None):
        self.conf = conf
        self.engine = engine
        self.detector = detector
        self._cloud = cloud
        self._policies: dict[str, protocol.Policy] = {}
        self._lock = threading.Lock()
        #: The snapshot the policies were computed from.
        self._seen = None
        #: host -> when this copy last read its instances (monotonic).
        self._read_at: dict[str, float] = {}

    def _leads(self) -> bool:
        env = self.engine.env
        return bool(env.coordinator.is_leader() and not env.guard.halted)

    def proven_for(self) -> float:
        """Seconds this copy's leadership is proven for (listener thread).

        The listener counts an armed host's watchdog only across answers
        whose proofs overlap: no other copy can have answered between.
        """
        if not self._leads():
            return 0.0
        return self.engine.env.coordinator.proven_for()

    def _pause_left(self) -> float | None:
        pause = getattr(getattr(self.engine, 'pause', None), 'active', None)
        if pause is None:
            return None
        if pause.until is None:
            return math.inf
        now = self.engine.env.clock.now()
        return max(0.0, (pause.until - now).total_seconds())

    def answer(self, host: str) -> protocol.Answer | None:
        """The answer to ``host`` (listener thread); None: not leading."""
        if not self._leads():
            return None
        with self._lock:
            policy = self._policies.get(host)
        return protocol.Answer(policy=policy, pause=self._pause_left())

    def policy(self, host: str) -> protocol.Policy | None:
        with self._lock:
            return self._policies.get(host)

    def _monotonic(self) -> float:
        return self.engine.env.clock.monotonic()

    def _policies_from(self, snapshot, hosts) -> dict[str, protocol.Policy]:
        """The policies of ``hosts``, whose servers ``snapshot`` lists."""
        # Scope filters (an operator's maintenance, a migrate drain, a
        # frozen shutdown) say whether the host is recovered *now*, not
        # whether its instances are protected: the watchdog stays armed
        # and the response applies through them.
        filters = [f for f in self.engine.drivers.filters
                   if not f.out_of_scope]
        wait = self.conf.heartbeat.isolation_shutdown_wait
        policies = {}
        for host in hosts:
            response, _ = response_of(self.conf, snapshot, host)
            protected: tuple = ()
            if not decide.host_reasons(filters, host, snapshot):
                kept, _ = decide.eligible_servers(filters, host, snapshot)
                protected = tuple(sorted(s.id for s in kept))
            policies[host] = protocol.Policy(response, wait, protected)
        return policies

    def _due(self, snapshot, hosts: list[str], now: float) -> list[str]:
        """Hosts whose agents use their protected instances, policy old.

        Only an agent with a watchdog (it arms while it protects
        something) or an isolation response other than ``none`` uses the
        list; reading the others' instances would cost Nova a call a
        host every ``policy_max_age`` for nothing (200 calls a minute at
        1,000 hosts). A host never read comes first; then the oldest
        reads, as many as keep every host younger than ``[heartbeat]
        policy_max_age`` (never fewer than :data:`MIN_READS` a tick).
        """
        listener = getattr(self.detector, 'listener', None)
        reporting = getattr(listener, 'reporting', None)
        if reporting is None:
            return []
        agents = {h for h in reporting() & set(hosts)
                  if listener.watchdog(h) is not None or response_of(
                      self.conf, snapshot, h)[0] != protocol.RESPONSE_NONE}
        max_age = float(self.conf.heartbeat.policy_max_age)
        due = sorted((self._read_at.get(h, -math.inf), h) for h in agents
                     if now - self._read_at.get(h, -math.inf) >= max_age)
        tick = float(getattr(self.conf, 'tick_interval', 1.0) or 1.0)
        limit = max(MIN_READS, math.ceil(len(agents) * tick / max_age))
        return [h for _, h in due[:limit]]

    def _read(self, snapshot, hosts: list[str], now: float) -> None:
        """List the servers of ``hosts`` (one bounded call each)."""
        try:
            cloud = self._cloud or self.engine.env.cloud
            more = cloud.snapshot(
                hosts=frozenset(hosts), aggregates=False, services=snapshot)
        except exceptions.InstanceHAError as exc:
            LOG.warning('cannot read the instances of %s for their '
                        'isolation policy: %s', ', '.join(hosts), exc)
            return
        listed = set(more.servers_read or hosts)
        merged = dataclasses.replace(
            snapshot, servers=tuple(
                s for s in snapshot.servers if s.host not in listed
            ) + tuple(more.servers),
            servers_read=(None if snapshot.servers_read is None
                          else snapshot.servers_read | listed))
        fresh = self._policies_from(merged, sorted(listed))
        with self._lock:
            self._policies.update(fresh)
        self._read_at.update(dict.fromkeys(listed, now))

    def refresh(self) -> None:
        """Recompute the policies from the engine's latest snapshot.

        A host whose instances the tick did not read keeps its previous
        policy: a partial read must not look like an empty host. A host
        whose agent takes answers has its instances read by this copy
        when it never had them, and again every ``[heartbeat]
        policy_max_age`` (a healthy host is never listed by the engine's
        own reads): its agent learns what it protects without every host
        being listed every poll.
        """
        snapshot = self.engine.snapshot
        if snapshot is None:
            return
        now = self._monotonic()
        hosts = [svc.host for svc in snapshot.services]
        if snapshot is not self._seen:
            self._seen = snapshot
            known = [h for h in hosts if snapshot.servers_known(h)]
            fresh = self._policies_from(snapshot, known)
            with self._lock:
                self._policies = {h: p for h, p in self._policies.items()
                                  if h in fresh or h in hosts}
                self._policies.update(fresh)
            self._read_at = {h: t for h, t in self._read_at.items()
                             if h in hosts}
            self._read_at.update(dict.fromkeys(known, now))
        due = self._due(snapshot, hosts, now) if self._leads() else []
        if due:
            self._read(snapshot, due, now)

    def step(self) -> None:
        listener = self.detector.listener
        if listener is None:
            return
        if getattr(listener, 'answerer', None) is None:
            listener.leadership = self.proven_for
            listener.answerer = self.answer
        self.refresh()

    def tick_started(self) -> None:
        pass

    def tick_finished(self, engine, error: str | None = None) -> None:
        self.step()
