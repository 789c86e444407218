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

"""The host's own side of instance HA, as physical truth of the world.

A host whose topology entry says ``isolation: SECONDS`` runs the real
host side of the heartbeat agent (:mod:`instanceha.heartbeat.hostagent`:
the link state machine of :mod:`instanceha.heartbeat.isolation` and the
isolation response of :mod:`instanceha.heartbeat.response`) on the
world's clock, with ``SECONDS`` as its isolation timeout. Only what the
agent touches is simulated:

* its isolation addresses (``isolation_addresses: N``, default 1: the
  default gateway; 0: none) answer while the host has its network and
  they were not taken down (``addresses HOST down``);
* its answers come from the copies' heartbeat listeners, which the
  production :class:`instanceha.daemon.hostside.HostSide` of each copy
  fills (the isolation policy, the pause), as in the service;
* its hypervisor is the world's guests on that host: ``destroy`` stops a
  guest at once, ``shutdown`` after ``guest_shutdown_time``; Nova learns
  it from nova-compute's power-state sync, once that runs again.

The agent beats every ``agent_interval`` with the host's watchdog, if it
has one (:mod:`instanceha.sim.watchdogs`), evaluates its link after
every beat and probes its addresses in the same instant when it wants
to (the real agent probes in a thread of its own, within a second).

Invariants checked at every action of a response: the guest is one the
service's filters keep for recovery at that moment (an instance excluded
from HA gets no response; a policy older than a change of the filters'
inputs is not modelled here), and the host's isolation addresses have
not answered for a whole agent interval before (a partitioned host gets
no response).
"""

import dataclasses

from instanceha.engine import decide
from instanceha.engine import model
from instanceha.heartbeat import hostagent
from instanceha.heartbeat import isolation
from instanceha.heartbeat import protocol
from instanceha.heartbeat import response
from instanceha.sim import guests
from instanceha.sim import world as sim_world


class SimProber:
    """The part of :class:`isolation.Prober` the monitor reads."""

    def __init__(self, world, host: str, count: int):
        self.world = world
        self.host = host
        self.addresses = ['gateway-%d' % i for i in range(count)]
        self.wanted = False
        #: (when the latest round ended, whether any address answered).
        self.latest: tuple[float, bool] | None = None

    def want(self, wanted: bool) -> None:
        self.wanted = wanted

    def round(self) -> bool:
        ok = self.world.addresses_answer(self.host)
        self.latest = (self.world.clock.t, ok)
        return ok

    def stop(self) -> None:
        pass


class SimHypervisor:
    """The host's guests as ``virsh`` sees them (domain name: the UUID)."""

    def __init__(self, world, host: str):
        self.world = world
        self.host = host

    def _guest(self, uuid: str):
        for srv in self.world.servers.values():
            if srv.id.lower() == uuid and self.host in srv.running_on:
                return srv
        raise response.VirshError('virsh: domain %s not found' % uuid)

    def running(self) -> set[str]:
        return {s.id.lower() for s in self.world.servers.values()
                if self.host in s.running_on}

    def destroy(self, uuid: str) -> None:
        srv = self._guest(uuid)
        check_response(self.world, self.host, srv)
        guests.stopped(self.world, srv, 'guest_destroyed',
                       by='isolation_response')

    def shutdown(self, uuid: str) -> None:
        srv = self._guest(uuid)
        check_response(self.world, self.host, srv)
        self.world.say('host', 'guest_shutdown_asked', self.host,
                       server=srv.name)
        token = self.world.hosts[self.host].boot_token

        def done() -> None:
            h = self.world.hosts[self.host]
            if h.boot_token == token and self.host in srv.running_on:
                guests.stopped(self.world, srv, 'guest_shut_down')
        self.world.at(self.world.clock.t + self.world.timing.
                      guest_shutdown_time, done)


def check_response(world, host: str, srv) -> None:
    """The invariants of an isolation response's action (module doc)."""
    filters = world.recovery_filters
    if filters is not None and not _protected(world, filters, host, srv):
        world.violate('isolation response on %s to instance %s, which is '
                      'excluded from recovery' % (host, srv.name))
    since = world.hosts[host].addresses_since
    if (world.addresses_answer(host) and since is not None
            and world.clock.t - since > world.timing.agent_interval):
        world.violate('isolation response on %s, whose isolation addresses '
                      'answer (partitioned, not isolated)' % host)


def _protected(world, filters, host: str, srv) -> bool:
    snap = model.Snapshot(
        taken_at=world.local(world.clock.t),
        services=tuple(world.service_model(h) for h in world.hosts.values()),
        servers=tuple(world.server_model(s) for s in world.servers.values()
                      if s.host == host),
        aggregates=tuple(world.aggregates.values()),
        images=dict(world.images))
    if decide.host_reasons(filters, host, snap):
        return False
    kept, _ = decide.eligible_servers(filters, host, snap)
    return any(s.id == srv.id for s in kept)


@dataclasses.dataclass
class Side:
    """One host's agent host side and what it runs on."""

    timeout: float
    addresses: int
    side: hostagent.HostSide | None = None
    #: The agent run it belongs to (Host.agent_boot).
    run: int = -1


class HostSides:
    """The host sides of a world's agents (driven by its watchdog beats)."""

    def __init__(self, world):
        self.world = world
        #: Runs an isolation response as a job in simulated time (set by
        #: the simulation: its agents' executor).
        self.spawn = None
        self.sides: dict[str, Side] = {}

    def add(self, host: str, timeout: float, addresses: int) -> None:
        if timeout <= 0 or addresses < 0:
            raise sim_world.ScenarioError(
                'host %s: isolation must be an isolation timeout in seconds '
                '> 0 and isolation_addresses a count >= 0' % host)
        self.sides[host] = Side(float(timeout), int(addresses))

    def side(self, host: str) -> hostagent.HostSide:
        """The current agent run's host side (a new run starts afresh)."""
        entry, h = self.sides[host], self.world.hosts[host]
        if entry.side is None or entry.run != h.agent_boot:
            clock = self.world.clock
            prober = SimProber(self.world, host, entry.addresses)
            monitor = isolation.LinkMonitor(entry.timeout, prober,
                                            clock=lambda: clock.t)
            entry.side = hostagent.HostSide(
                monitor, hypervisor=SimHypervisor(self.world, host),
                clock=lambda: clock.t, spawn=self.spawn, sleep=clock.sleep)
            entry.run = h.agent_boot
        return entry.side

    def beat(self, host: str, t: float, answer: protocol.Answer | None,
             sequence: int = 0) -> None:
        """After a beat: the answer heard (None: none), then a look."""
        side = self.side(host)
        if answer is not None:
            side.answered(sequence, t, answer, ('service', 0))
        monitor = side.monitor
        before = monitor.state
        monitor.evaluate()
        if monitor.prober.wanted:
            monitor.prober.round()
        new = monitor.evaluate()
        if new != before and before != protocol.UNKNOWN:
            self.world.say('host', 'link_' + new, host)
        side.tick()
