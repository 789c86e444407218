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

"""Heartbeats through the real protocol (``simulation: {wire: true}``).

In this mode the simulated agents (hosts with ``watchdog:`` or
``isolation:``) are the real :class:`instanceha.heartbeat.agent.Agent`
without its sockets: each beat is a signed version 2 datagram (boot id,
sequence number, time stamp on the host's clock, its report) that every
copy's real :class:`instanceha.heartbeat.listener.HeartbeatListener`
checks (signature with the host's key derived from the master key,
freshness against the copy's own clock, replay) and answers while it
leads; the agent checks the signed answer as it does on a host. So the
timeline can script what the protocol must withstand::

    100 wire compute-1 replay       # its last datagram, sent again
    100 wire compute-1 forge        # a datagram signed with a wrong key
    100 wire compute-1 stale        # a datagram 10 minutes old
    100 wire compute-1 key new.key  # its agent signs with the key derived
                                    # from this master from now on

and a key rotation (``reload heartbeat.key_file ...``) is checked by the
listener as in production. The listener's verdict on what it was sent
is logged (``listener HOST rejected copy=... reason=...`` when an
agent's own heartbeats start or stop being refused; always for the
injected ones). A forged or replayed datagram accepted is an invariant
violation. Shutdown announcements still take the simpler path of
:mod:`instanceha.sim.announce`.
"""

import dataclasses
import hashlib

from instanceha.heartbeat import agent as agent_mod
from instanceha.heartbeat import keys as keys_mod
from instanceha.heartbeat import protocol


class AgentKeys:
    """The agent's key ring: its host key, changed by the timeline."""

    def __init__(self, key: bytes):
        self.keys = (key,)

    def reload(self) -> None:
        pass


class WireSide:
    """What the real agent asks of its host side, in the simulation.

    The report comes from the host side of :mod:`instanceha.sim.hostside`
    (when the host has one) with the watchdog as the simulated device
    says; the answers the agent accepts are kept for the beat.
    """

    def __init__(self, sides, host: str):
        self.sides = sides
        self.host = host
        #: The deadline the next heartbeat announces (None: not armed).
        self.deadline: float | None = None
        #: (sequence, answer) accepted during this beat.
        self.answer: tuple[int, protocol.Answer] | None = None

    def report(self, sequence: int) -> protocol.Report:
        side = self.sides.side(self.host) if self.sides is not None and (
            self.host in self.sides.sides) else None
        base = side.report(sequence) if side is not None else (
            protocol.Report())
        if self.deadline is None:
            return dataclasses.replace(base, watchdog=protocol.WD_IDLE,
                                       deadline=0.0)
        return dataclasses.replace(base, watchdog=protocol.WD_ARMED,
                                   deadline=self.deadline)

    def answered(self, sequence: int, sent_at: float,
                 answer: protocol.Answer, collector: tuple) -> None:
        self.answer = (sequence, answer)

    def stood_down(self, collector: tuple, collectors: int) -> None:
        pass


class Wire:
    """The world's agents and what they send, as real datagrams."""

    def __init__(self, world, master: bytes, mode: str):
        self.world = world
        self.master = master
        self.mode = mode
        #: host -> (agent run, its Agent).
        self.agents: dict[str, tuple[int, agent_mod.Agent]] = {}
        #: host -> the last datagrams its agent sent (oldest first).
        self.last: dict[str, list[bytes]] = {}
        #: host -> the master its agent's key derives from (``key``).
        self.masters: dict[str, bytes] = {}
        #: (copy, host) -> the reason its agent's heartbeats are refused.
        self._refused: dict[tuple, str | None] = {}

    def host_key(self, host: str, master: bytes | None = None) -> bytes:
        master = master or self.masters.get(host, self.master)
        if self.mode == keys_mod.SHARED:
            return master
        return keys_mod.derive_host_key(master, host)

    def wall(self) -> float:
        """The hosts' wall clock (Nova's, unskewed), in epoch seconds."""
        return self.world.clock.at(self.world.clock.t).timestamp()

    def agent(self, host: str) -> agent_mod.Agent:
        """The current run's agent (a new run: a new boot id)."""
        h = self.world.hosts[host]
        run, agent = self.agents.get(host, (None, None))
        if agent is None or run != h.agent_boot:
            clock = self.world.clock
            sides = self.world.watchdogs.sides
            agent = agent_mod.Agent(
                host, AgentKeys(self.host_key(host)), [],
                self.world.timing.agent_interval, wall=self.wall,
                side=WireSide(sides, host), clock=lambda: clock.t)
            # Deterministic boot ids: every run of a case is the same.
            agent.boot_id = hashlib.sha256(('%s %d' % (
                host, h.agent_boot)).encode()).digest()[
                    :protocol.BOOT_ID_SIZE]
            self.agents[host] = (h.agent_boot, agent)
        return agent

    def send(self, host: str, deadline: float | None,
             listeners: list) -> tuple[int, protocol.Answer] | None:
        """One beat to every copy; the answer the agent accepted."""
        agent = self.agent(host)
        side = agent.side
        side.deadline, side.answer = deadline, None
        data = agent._packets()[1]
        self.last[host] = (self.last.get(host, []) + [data])[-3:]
        for lst in listeners:
            replies: list[bytes] = []
            accepted, reason = lst.receive(host, data, replies.append)
            self._verdict(lst.copy, host, reason)
            if not self.world.hosts[host].answers_ok:
                continue
            for raw in replies:
                try:
                    rep = protocol.decode(raw, agent.keyring.keys,
                                          replies=True)
                except protocol.Rejected:
                    continue
                if rep.reply == protocol.ANSWER:
                    agent._answer(rep, (lst.copy, 0))
        return side.answer

    def _verdict(self, copy: str, host: str, reason: str | None) -> None:
        """Log when an agent's own heartbeats start or stop being refused."""
        key = (copy, host)
        if self._refused.get(key) != reason:
            if reason is not None:
                self.world.say('listener', 'rejected', host, copy=copy,
                               reason=reason)
            elif self._refused.get(key) is not None:
                self.world.say('listener', 'accepted', host, copy=copy)
        self._refused[key] = reason

    def inject(self, host: str, what: str, listeners: list) -> None:
        """A datagram the timeline makes up (module doc)."""
        agent = self.agent(host)
        if what == 'replay':
            # An older one than the last: a duplicate of the last is
            # merely ignored.
            data = (self.last.get(host) or [None])[0]
            if data is None:
                from instanceha.sim import world as sim_world
                raise sim_world.ScenarioError(
                    'wire %s replay: its agent sent nothing yet' % host)
        else:
            key = (b'f' * 64 if what == 'forge' else agent.keyring.keys[0])
            stamp = self.wall() - (600 if what == 'stale' else 0)
            data = protocol.encode(host, agent.boot_id, agent.sequence + 1,
                                   stamp, key)
        for lst in listeners:
            # (An answer would go to whoever sent it: not the agent.)
            accepted, reason = lst.receive(host, data, None)
            if accepted:
                self.world.say('listener', 'accepted', host, copy=lst.copy,
                               injected=what)
                self.world.violate('%s datagram of %s accepted by %s'
                                   % (what, host, lst.copy))
            else:
                self.world.say('listener', 'rejected', host, copy=lst.copy,
                               injected=what, reason=reason)

    def set_key(self, host: str, master: bytes) -> None:
        """The host's agent signs with the key of another master."""
        self.masters[host] = master
        self.agent(host).keyring = AgentKeys(self.host_key(host, master))
