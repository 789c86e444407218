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

"""Proactive evacuation: which hosts to empty before their hardware fails.

Pure decisions on what the BMCs said (:class:`Reading`, one per host and
round) and what Nova says. A condition (``power_supply Critical``, ...)
is classified by the configured rules as ``ignore``, ``warn`` or
``evacuate``; a host with an ``evacuate`` condition is emptied through
the maintenance path (live migration, no fencing) only if, in order:

1. instance HA is not paused, and no gate of the recovery holds a
   failed host (a mass failure, a failure domain down: emptying more
   hosts then moves load onto what the recovery will need);
2. not more than ``threshold`` percent of the hosts read ask for it at
   once (a firmware or sensor fault across a fleet is not a fleet's
   hardware failing: nothing is emptied);
3. the condition was seen in ``confirm`` readings in a row (a flapping
   sensor never gets there);
4. the host was not emptied for a condition within ``cooldown`` seconds;
5. fewer than ``max_starts`` hosts were emptied within ``window``
   seconds (a rate limit across the cloud);
6. its instances would find room elsewhere (the failover capacity).

Only enabled, up hosts that are not forced down are candidates: a host
an operator disabled, one in maintenance or in a recovery is left alone.
A host is never fenced for a health condition: that is not this module's
to ask.
"""

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses

from instanceha.engine import model

IGNORE = 'ignore'
WARN = 'warn'
EVACUATE = 'evacuate'
ACTIONS = (IGNORE, WARN, EVACUATE)


@dataclasses.dataclass(frozen=True)
class Limits:
    """The gates' settings (``[proactive]``)."""

    confirm: int = 2
    cooldown: float = 3600.0
    max_starts: int = 1
    window: float = 3600.0
    threshold: int = 50


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What is done about one host this round, and why."""

    host: str
    #: ``evacuate`` (start now), ``held`` (would, but a gate says no),
    #: ``warn`` (a condition to report only).
    action: str
    conditions: tuple[str, ...]
    why: str = ''


def parse_rules(texts: Iterable[str]) -> dict[tuple[str, str], str]:
    """``kind:Health=action`` items (``*`` for any) -> a rule table.

    :raises ValueError: naming the item that is not one.
    """
    rules = {}
    for text in texts:
        key, _, action = text.partition('=')
        kind, _, health = key.strip().partition(':')
        if action.strip() not in ACTIONS or not kind or not health:
            raise ValueError('%r is not KIND:HEALTH=ACTION (action one of '
                             '%s)' % (text, ', '.join(ACTIONS)))
        rules[(kind.strip(), health.strip())] = action.strip()
    return rules


def classify(kind: str, health: str,
             rules: Mapping[tuple[str, str], str]) -> str:
    """The action for one condition: the most specific rule, else warn."""
    for key in ((kind, health), (kind, '*'), ('*', health), ('*', '*')):
        if key in rules:
            return rules[key]
    return WARN


def candidate(service: model.Service | None) -> bool:
    """Enabled, up, not forced down: a host we may empty."""
    return (service is not None and not service.disabled
            and not service.forced_down and service.state == model.UP)


@dataclasses.dataclass
class Proactive:
    """The decisions and the little they remember between rounds."""

    rules: Mapping[tuple[str, str], str]
    limits: Limits = dataclasses.field(default_factory=Limits)
    #: Host -> readings in a row with an evacuate condition.
    seen: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Host -> when it was last emptied (monotonic seconds).
    started: dict[str, float] = dataclasses.field(default_factory=dict)

    def _sorted(self, readings: Mapping[
            str, Iterable[model.HardwareCondition] | None],
                snapshot: model.Snapshot) -> tuple[dict, dict]:
        """Host -> (evacuate conditions, warn conditions), candidates."""
        evacuate, warn = {}, {}
        for host, conditions in sorted(readings.items()):
            if not candidate(snapshot.service(host)):
                continue
            for c in conditions or ():
                action = classify(c.kind, c.health, self.rules)
                if action == EVACUATE:
                    evacuate.setdefault(host, []).append(c.describe())
                elif action == WARN:
                    warn.setdefault(host, []).append(c.describe())
        return evacuate, warn

    def _gate(self, host: str, now: float) -> str | None:
        """Why ``host`` is not emptied now, by gates 3-5 (None: it may)."""
        lim = self.limits
        if self.seen.get(host, 0) < lim.confirm:
            return 'confirming: seen in %d of %d readings in a row' % (
                self.seen.get(host, 0), lim.confirm)
        last = self.started.get(host)
        if last is not None and now - last < lim.cooldown:
            return 'cool-down: emptied %d s ago (cooldown %d s)' % (
                now - last, lim.cooldown)
        recent = [t for t in self.started.values() if now - t < lim.window]
        if len(recent) >= lim.max_starts:
            return 'rate limit: %d host(s) emptied in the last %d s ' \
                '(max_starts %d)' % (len(recent), lim.window, lim.max_starts)
        return None

    def decide(self, readings: Mapping[
            str, Iterable[model.HardwareCondition] | None],
               snapshot: model.Snapshot, now: float, *,
               paused: bool = False, held: str = '',
               absorbed: Callable[[str], str | None] = lambda h: None
               ) -> list[Verdict]:
        """This round's verdicts; the hosts to empty are ``evacuate``.

        :param readings: host -> its conditions (None: its BMC could not
            be read; that host's count is kept, not reset).
        :param held: why the recovery's gates hold failed hosts now
            ('' when they do not).
        :param absorbed: host -> why its instances would not find room
            (None: they would).
        """
        evacuate, warn = self._sorted(readings, snapshot)
        for host, conditions in readings.items():
            if conditions is not None and host not in evacuate:
                self.seen.pop(host, None)  # gone: a flap starts over
        for host in evacuate:
            self.seen[host] = self.seen.get(host, 0) + 1
        out = [Verdict(h, WARN, tuple(c)) for h, c in sorted(warn.items())
               if h not in evacuate]
        read = sum(1 for h, c in readings.items() if c is not None and
                   candidate(snapshot.service(h)))
        mass = (read and len(evacuate) * 100 > self.limits.threshold * read
                and len(evacuate) > 1)
        for host, conditions in sorted(evacuate.items()):
            why = None
            if paused:
                why = 'instance HA is paused'
            elif held:
                why = 'the recovery\'s gates hold failed hosts (%s)' % held
            elif mass:
                why = ('%d of %d hosts read ask to be emptied (> threshold '
                       '%d%%): a sensor or firmware fault is likelier; none '
                       'is emptied' % (len(evacuate), read,
                                       self.limits.threshold))
            why = why or self._gate(host, now) or absorbed(host)
            if why is None:
                self.started[host] = now
            out.append(Verdict(host, 'held' if why else EVACUATE,
                               tuple(conditions), why or ''))
        return out
