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

"""The hosts' watchdogs, as physical truth of the simulated world.

A host whose topology entry says ``watchdog: SECONDS`` runs a heartbeat
agent with a watchdog of that deadline D (doc/host-side.md). Every
``agent_interval`` its agent sends a heartbeat to every running copy of
the service, saying whether it is armed; a copy that leads answers.
Hearing an answer arms the watchdog and feeds it: the host resets D
seconds after the heartbeat whose answer it last heard, unless a later
answer comes. A reset stops the kernel and every guest at once, then the
host boots again (``boot_time``) with a new agent run, not armed.

What cuts a host off from the answers: a cut network, a partition, a
crashed or stopped leader, answers lost one way (``watchdog HOST
answers-lost``), an agent that hangs (``watchdog HOST hang``: it neither
beats nor feeds) or is killed (``agent HOST kill``: the device stays
armed; ``agent HOST start`` runs a new agent, which feeds it again once
it hears the service). A crashed kernel stops feeding too: the device
(a hardware watchdog) resets it. A host whose watchdog is not armed
never resets by itself. A
cleanly stopped agent releases its watchdog once a leading copy heard it
say so (it stays armed, and resets, otherwise).

A host whose agent has a host side (``isolation: SECONDS``) releases its
watchdog while the service's answers say instance HA is paused, as the
real agent does, and arms again at the next answer once the pause is
over. Not modelled (each only ever makes a host reset where the real
agent would not, never the reverse): the release of a watchdog during a
pause on a host without a host side, the stand-down of a copy that stops
cleanly, the idle grace of a host without protected instances. An agent
arms as soon as a leading copy answers it.

The invariants of :mod:`instanceha.sim.world` (no instance runs twice)
then check the service's ``watchdog`` fencing level: a host it counted
off must really have stopped running the armed run (reset by its
watchdog, or crashed or powered off by anything else after the last
answer it heard) before its instances started elsewhere.
"""

import dataclasses

from instanceha.heartbeat import protocol
from instanceha.sim import world as sim_world


@dataclasses.dataclass
class Dog:
    """One host's agent and watchdog device (``deadline`` None: none)."""

    deadline: float | None
    #: The device is armed (it resets the host unless fed).
    armed: bool = False
    #: Send time of the heartbeat whose answer the agent last heard (the
    #: device's last feed, as far as the service can tell).
    heard: float | None = None
    #: The agent run whose heartbeats say armed (a new run says so only
    #: once it heard the service; the device stays armed meanwhile).
    run: int = -1
    #: The boot (Host.boots) the device was armed in.
    boot: int = -1


class Watchdogs:
    """The agents of one world's hosts, beating on its clock.

    Each host with a watchdog (``watchdog: SECONDS``) or a host side
    (``isolation: SECONDS``, :mod:`instanceha.sim.hostside`) has one beat
    loop; the host side looks at its link after every beat.
    """

    def __init__(self, world: sim_world.World):
        self.world = world
        self.dogs: dict[str, Dog] = {}
        #: The host sides (instanceha.sim.hostside.HostSides), if any.
        self.sides = None

    def add(self, host: str, deadline: float | None) -> None:
        if deadline is not None and deadline <= 0:
            raise sim_world.ScenarioError(
                'host %s: watchdog must be a deadline in seconds > 0, got '
                '%r' % (host, deadline))
        if host in self.dogs:
            return
        self.dogs[host] = Dog(deadline=None if deadline is None
                              else float(deadline))
        self.world.at(0.0, lambda: self._beat(host))

    def dog(self, host: str) -> Dog:
        self.world.host(host)
        if host not in self.dogs or self.dogs[host].deadline is None:
            raise sim_world.ScenarioError(
                'host %s has no watchdog (topology: watchdog: SECONDS)'
                % host)
        return self.dogs[host]

    def _listeners(self) -> list:
        return list(self.world.answering.values())

    def _send(self, host: str, t: float, deadline: float | None
              ) -> tuple[int, protocol.Answer] | None:
        """One heartbeat to every copy; what a leading one answered.

        (sequence answered, answer); the sequence is 0 unless the
        heartbeats go through the real protocol (instanceha.sim.wire).
        """
        w = self.world
        h = w.hosts[host]
        if not (h.network_ok and h.service_link_ok):
            return None
        if w.wire is not None:
            return w.wire.send(host, deadline, self._listeners())
        answer = None
        for lst in self._listeners():
            if lst.hear(host, t, deadline):
                answer = lst.answer_to(host)
        if answer is None or not h.answers_ok:
            return None
        return 0, answer

    def _beat(self, host: str) -> None:
        w = self.world
        t = w.clock.t
        w.at(t + w.timing.agent_interval, lambda: self._beat(host))
        h, dog = w.hosts[host], self.dogs[host]
        if dog.boot != h.boots or not h.powered:
            # A new boot, or no power: the device stopped.
            dog.boot, dog.armed, dog.heard = h.boots, False, None
        if dog.run != h.agent_boot:
            dog.run = h.agent_boot
            announced = False
        else:
            announced = dog.armed
        if not (h.powered and h.os_running) or h.agent_hung or (
                h.agent_killed):
            return
        if not h.agent_running:
            # A clean stop: released once a leading copy heard it say so.
            if dog.armed and self._send(host, t, None) is not None:
                dog.armed = False
                w.say('host', 'watchdog_released', host)
            return
        wd = dog.deadline is not None
        sequence, answer = self._send(
            host, t, dog.deadline if wd and announced and dog.armed
            else None) or (0, None)
        side = None
        if self.sides is not None and host in self.sides.sides:
            self.sides.beat(host, t, answer, sequence)
            side = self.sides.side(host)
        if wd and side is not None and side.paused:
            # As the real agent: released while the service says instance
            # HA is paused (until the resume, or the pause's end).
            if dog.armed:
                dog.armed = False
                w.say('host', 'watchdog_released', host, why='paused')
            return
        if answer is None or not wd:
            return
        if not dog.armed:
            w.say('host', 'watchdog_armed', host, deadline=dog.deadline)
        h.self_fenced = False
        dog.armed, dog.heard = True, t
        boot = dog.boot
        w.at(t + dog.deadline, lambda: self._expire(host, t, boot))

    def run_ended(self, host: str) -> None:
        """The host's guests stopped with its run.

        Power lost, a crash, a reset, or a clean shutdown going down
        (nothing of that run starts a guest again: it powers off,
        reboots or hangs seconds later). An armed run that ends,
        however it ends, is what the service's
        watchdog level counts on: its guests are dead, and a new boot
        runs none of them until its agent hears the service again (a
        power cycle after the last answer proves as much as a reset).
        """
        h, dog = self.world.hosts[host], self.dogs.get(host)
        if dog is not None and dog.armed and dog.run == h.agent_boot:
            h.self_fenced = True

    def _expire(self, host: str, heard: float, boot: int) -> None:
        """The device's deadline since a feed: it resets unless fed again.

        A crashed or hung kernel is reset too (a hardware device counts
        on without it; a reset during a boot starts the boot again); a
        host without power, booted since, or writing a crash dump, is
        not.
        """
        w = self.world
        h, dog = w.hosts[host], self.dogs[host]
        if (dog.boot != boot or h.boots != boot or not h.powered
                or not dog.armed or dog.heard != heard or w.in_kdump(h)):
            return
        self.world.say('host', 'watchdog_reset', host,
                       heard_at=round(heard, 3))
        h.self_fenced = True
        self.world.reset(host)
