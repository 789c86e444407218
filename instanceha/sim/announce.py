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

"""A clean shutdown in the simulated world (timeline ``announce``).

What a compute host does when someone runs ``reboot`` or ``poweroff``
on it, as :mod:`instanceha.heartbeat.agent` and its systemd unit do it:
the agent stops beating and announces the shutdown, repeating it every
second until a copy of the service answers (``noted``; under the migrate
policy ``draining`` until ``drained``), at most the agent's answer and
drain timeouts; then nova-compute and the guests stop and, after
``shutdown_time``, the host powers off or reboots. ``hang``: the
shutdown never completes (the kernel hangs: powered on, nothing runs).
"""

import dataclasses

from instanceha.engine import shutdown
from instanceha.heartbeat import protocol

#: The agent's defaults (instanceha-heartbeat-agent --answer-timeout,
#: --drain-timeout).
ANSWER_TIMEOUT = 10.0
DRAIN_TIMEOUT = 300.0


@dataclasses.dataclass
class SimAnnouncement:
    kind: str
    #: The agent run that announced it (Host.agent_boot).
    boot: int
    first: float
    last: float
    #: The latest answer heard (the agent keeps it between rounds).
    status: str | None = None


def as_announcement(host: str, ann: SimAnnouncement
                    ) -> shutdown.Announcement:
    return shutdown.Announcement(host=host, kind=ann.kind,
                                 boot_id=str(ann.boot).encode(),
                                 first=ann.first, last=ann.last)


def returned(world, host: str) -> bool:
    """A heartbeat from a later agent run than the announcement's."""
    h = world.hosts.get(host)
    ann = h.announcement if h is not None else None
    return bool(ann is not None and h.agent_boot > ann.boot
                and world.agent_last(h) is not None)


def announce(world, host: str, kind: str, hang: bool = False) -> None:
    """``host``'s agent announces ``kind``; the shutdown follows."""
    from instanceha.sim import world as sim_world
    h = world.host(host)
    if not (h.agent_alive and h.agent_running):
        raise sim_world.ScenarioError(
            'announce %s: its heartbeat agent is not running (powered off, '
            'crashed or cut off)' % host)
    t = world.clock.t
    h.agent_running = False
    world._refresh(h)
    ann = h.announcement = SimAnnouncement(kind=kind, boot=h.agent_boot,
                                           first=t, last=t)
    token = h.boot_token

    def ask() -> None:
        if h.boot_token != token or not h.agent_alive:
            return  # crashed or switched off meanwhile
        now = world.clock.t
        ann.last = now
        answers = [a for a in (lst.answer(host)
                               for lst in world.heartbeat_listeners) if a]
        waited = now - ann.first
        if answers:
            ann.status = answers[0]
        # As the agent: the latest answer counts until another comes (a
        # copy that stops answering mid-drain leaves it waiting).
        if protocol.DRAINED in answers or protocol.NOTED in answers:
            go_down(answers[0])
        elif ann.status == protocol.DRAINING and waited < DRAIN_TIMEOUT:
            world.at(now + 1, ask)
        elif ann.status is None and waited < ANSWER_TIMEOUT:
            world.at(now + 1, ask)
        else:
            go_down(ann.status or 'none')

    def go_down(answer: str) -> None:
        world.say('host', 'shutting_down', host, kind=kind, answer=answer)
        h.compute_running = False
        world._guests_stop(h)
        world._refresh(h)
        world.at(world.clock.t + world.timing.shutdown_time, finish)

    def finish() -> None:
        if h.boot_token != token or not h.powered:
            return
        if hang:
            world.say('host', 'shutdown_hung', host, kind=kind)
            world.crash(host)
        elif kind == protocol.POWEROFF:
            world.say('host', 'powered_off', host)
            world.set_power(host, False)
        else:
            world.say('host', 'rebooting', host)
            h.os_running = False
            h.boot_token += 1
            new = h.boot_token
            world._refresh(h)
            world.at(world.clock.t + world.timing.boot_time,
                     lambda: world._booted(h, new))

    ask()
