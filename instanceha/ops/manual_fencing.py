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

"""Fencing by hand: read, power off or power on one host's fencing devices.

``instanceha-manage fencing status|off|on HOST`` and ``fencing
validate`` use this module; the simulator's ``fencing`` timeline command
does too. Power changes go through the fencing topology the service uses
(the same file, levels, drivers, retries and chain timeout), so a host
an operator can fence by hand is a host the service can fence.

Powering a host off or on while the service holds it in a recovery
would fight that recovery (a host being fenced, evacuated or powered
back on): :func:`check_not_held` refuses it. Whether the service holds
the host is read from Nova -- the marker on the host's compute service
-- so the answer is the same on every machine, whichever copy leads.
"""

import dataclasses

from instanceha.engine import marker as marker_mod
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config

S = states.HostState

#: Marker states in which the service holds the host in a recovery.
#: FAILED and LEFT_DISABLED wait for an operator: fencing them by hand is
#: part of fixing them.
HELD = frozenset(S) - {S.HEALTHY, S.FAILED, S.LEFT_DISABLED}

#: ``fencing validate`` verdicts of one host.
OK, DEGRADED, FAILED, INVALID = 'OK', 'DEGRADED', 'FAILED', 'INVALID'


class Refused(exceptions.InstanceHAError):
    """Not carried out, on purpose (a recovery, no confirmation)."""


@dataclasses.dataclass(frozen=True)
class DeviceReading:
    """What one device reported (``state``) or why it could not."""

    device: str
    state: str | None
    problem: str | None = None
    #: Where the device is (address, plug), never a secret.
    target: str = ''
    #: The driver proves nothing about the power (noop).
    proves_nothing: bool = False

    def describe(self) -> str:
        if self.problem is not None:
            return '%s: FAILED' % self.device
        return '%s %s%s' % (self.device, self.state, (
            ' (noop: proves nothing)' if self.proves_nothing else ''))


@dataclasses.dataclass(frozen=True)
class LevelReading:
    """One fencing level: its devices' readings."""

    index: int
    devices: tuple[DeviceReading, ...]

    @property
    def works(self) -> bool:
        """Every device answered: the level can be used to fence."""
        return all(d.problem is None for d in self.devices)

    def describe(self) -> str:
        return 'level %d: %s' % (self.index, ', '.join(
            d.describe() for d in self.devices))

    def problems(self) -> list[str]:
        return ['level %d %s' % (self.index, d.problem)
                for d in self.devices if d.problem is not None]


def read_device(drv: base.FencingDriver) -> DeviceReading:
    """Ask one device for its power state (changes nothing)."""
    proves_nothing = drv.name == 'noop'
    target = drv.redact(drv.describe_target())
    try:
        state = base.PowerState(drv.power_status()).value
    except exceptions.FencingError as exc:
        return DeviceReading(drv.device, None, str(getattr(exc, 'short',
                                                           exc)), target)
    except Exception as exc:  # a driver bug must still be reported
        return DeviceReading(drv.device, None, 'device %s: unexpected %s: %s'
                             % (drv.device, type(exc).__name__,
                                drv.redact(str(exc))), target)
    return DeviceReading(drv.device, state, target=target,
                         proves_nothing=proves_nothing)


def read_levels(entry: config.HostEntry) -> list[LevelReading]:
    """Every device of every level of one host, in order."""
    return [LevelReading(index, tuple(read_device(d) for d in level))
            for index, level in enumerate(entry.levels, 1)]


def verdict(levels: list[LevelReading]) -> tuple[str, str]:
    """(OK, DEGRADED or FAILED, the line ``fencing validate`` prints).

    DEGRADED: at least one level answers and at least one does not; the
    host can be fenced (through the first level that works) but a level
    the service would try is broken. FAILED: no level answers.
    """
    broken = [lv for lv in levels if not lv.works]
    working = [lv for lv in levels if lv.works]
    if not broken:
        return OK, 'OK (%s)' % '; '.join(lv.describe() for lv in levels)
    problems = ' | '.join(p for lv in broken for p in lv.problems())
    if not working:
        return FAILED, 'FAILED: %s' % problems
    return DEGRADED, 'DEGRADED: level %s broken, level %d works (%s): %s' % (
        ', '.join(str(lv.index) for lv in broken), working[0].index,
        working[0].describe(), problems)


def power_summary(levels: list[LevelReading]) -> str:
    """What the levels say about the host's power, as the service reads it.

    Off is proven by a level whose every device reports off (one outlet
    of a dual-fed server proves nothing); on by a level whose every
    device reports on.
    """
    for lv in levels:
        if lv.works and all(d.state == 'off' and not d.proves_nothing
                            for d in lv.devices):
            return 'off (level %d reports off)' % lv.index
    for lv in levels:
        if lv.works and all(d.state == 'on' for d in lv.devices):
            return 'on (level %d reports on)' % lv.index
    return 'unknown (no level reports all its devices off or on)'


def check_not_held(cloud: ports.CloudPort, host: str
                   ) -> tuple[str, list[str]]:
    """Refuse when the service holds ``host`` in a recovery.

    Reads the compute services from Nova. Returns what was found, for the
    operator ("no compute service" or the host's instanceha state), and
    every compute host name (the fencing file's host matching judges
    ambiguity on them, as the service does).

    :raises Refused: the host's marker says a recovery is running.
    :raises InstanceHAError: Nova cannot be read (then nobody can tell,
        and nothing is done).
    """
    try:
        services = cloud.read_services().services
    except exceptions.InstanceHAError as exc:
        raise exceptions.InstanceHAError(
            'cannot tell whether instanceha holds host %s in a recovery: '
            'reading Nova failed: %s; nothing was done' % (host, exc)
        ) from None
    names = [s.host for s in services]
    found = [s for s in services if s.host.lower() == host.lower()] or [
        s for s in services if config.same_host(s.host, host)]
    if not found:
        return 'no nova-compute service named %s' % host, names
    held = []
    for service in found:
        parsed = reasons.of_service(service).marker
        if parsed is not None and parsed.state in HELD:
            held.append((service.host, parsed))
    if held:
        name, parsed = held[0]
        raise Refused(
            'refused: instanceha holds host %s in a recovery (state %s '
            'since %s); powering it by hand would fight that recovery. Wait '
            'until "instanceha-manage hosts list" no longer shows it in a '
            'recovery' % (name, parsed.state.value,
                          marker_mod.format_ts(parsed.when)))
    states_seen = []
    for service in found:
        parsed = reasons.of_service(service).marker
        states_seen.append('%s %s' % (service.host, parsed.state.value
                                      if parsed else 'not in a recovery'))
    return ', '.join(states_seen), names


def power(fencer: ports.Fencer, host: str, action: str
          ) -> ports.FenceResult:
    """Power ``host`` off (the chain, level by level) or on.

    On goes through the levels in order: a tool run by hand does not know
    which level powered the host off.
    """
    if action == 'off':
        return fencer.fence(host)
    if action == 'on':
        return fencer.unfence(host)
    raise ValueError('action must be "off" or "on", not %r' % action)
