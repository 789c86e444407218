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

"""Pausing instance HA: an operator's hold, with an end, for every copy.

An operator about to touch the network or the cluster stack runs
``instanceha-manage pause --reason TEXT --for 30m``. The pause is kept in
the coordination backend (a :class:`~instanceha.engine.ports.PauseSource` to the engine), so it
survives restarts and leader changes and every copy reads the same one.

While paused the leader still reads Nova, plans and logs every poll (as
in ``[DEFAULT] disabled`` mode), but the plan starts nothing: each host
that would be recovered is held (BLOCKED, with the pause as its reason)
and a ``recovery_held`` event says so. A host not yet fenced is therefore
never fenced, marked or evacuated. A host already past fencing (fenced,
marked, evacuating, ...) finishes its recovery: it is powered off and
proven so, and stopping half-way would leave it disabled with its
instances neither here nor there, which is worse than finishing.

A pause with an end (``until``) lifts itself when that time passes: the
engine notices at its next poll and says so (``pause_expired``). Its
times are on Nova's clock when the record says so (``clock: nova``,
what ``instanceha-manage pause`` writes when it can read Nova's time),
like every time the service keeps in Nova: a copy whose clock was
stepped, or one started on another machine, judges the same end as one
that never stopped. Each poll measures how far our clock is from Nova's
and turns the end into a time of the monotonic clock, which the reads
between polls go by (a step of the wall clock moves nothing).
"""

import dataclasses
import datetime
import logging

from instanceha.engine import events
from instanceha.engine import marker
from instanceha.engine import plan as plan_mod
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

_FORMAT = '%Y-%m-%dT%H:%M:%SZ'


def _when(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.strptime(text, _FORMAT).replace(
        tzinfo=datetime.timezone.utc)


def _text(when: datetime.datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(datetime.timezone.utc).strftime(_FORMAT)


@dataclasses.dataclass(frozen=True)
class Pause(marker.NovaClockTimes):
    """One operator's pause: why, since when, until when (None: no end)."""

    reason: str
    since: datetime.datetime
    until: datetime.datetime | None = None
    #: Who set it (user@machine), for ``status``.
    by: str = ''
    #: ``since`` and ``until`` are on Nova's clock; False: on the clock
    #: of the machine that wrote them (Nova's time was not known then,
    #: or an earlier version wrote it), taken to be ours.
    nova_clock: bool = False

    def left(self, now: datetime.datetime,
             skew: float | None = None) -> float | None:
        """Seconds until it ends (None: no end), ``now`` on our clock.

        ``skew``: seconds our clock is ahead of Nova's now.
        """
        if self.until is None:
            return None
        return (self.ours(self.until, skew) - now).total_seconds()

    def expired(self, now: datetime.datetime,
                skew: float | None = None) -> bool:
        left = self.left(now, skew)
        return left is not None and left <= 0

    def describe(self) -> str:
        end = ('until %s' % _text(self.until) if self.until
               else 'indefinitely')
        who = self.by or 'an operator'
        return 'paused %s by %s: %s' % (end, who, self.reason)

    def to_dict(self) -> dict:
        out = {'reason': self.reason, 'since': _text(self.since),
               'until': _text(self.until), 'by': self.by}
        if self.nova_clock:
            out['clock'] = 'nova'
        return out

    @classmethod
    def from_dict(cls, data: dict) -> 'Pause':
        """Parse a stored pause; raises ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError('a stored pause must be a mapping')
        try:
            return cls(reason=str(data.get('reason') or ''),
                       since=_when(data['since']),
                       until=_when(data.get('until')),
                       by=str(data.get('by') or ''),
                       nova_clock=data.get('clock') == 'nova')
        except KeyError:
            raise ValueError('a stored pause has no "since" time') from None
        except (TypeError, ValueError) as exc:
            raise ValueError('a stored pause has a bad time: %s' % exc
                             ) from None


class PauseWatch:
    """The engine's view of the pause, read once per poll.

    Tells the story of a pause (``paused``, ``resumed``, ``pause_expired``)
    once per change, and keeps the last known pause while the backend
    cannot be read (a pause is never lifted because a read failed).
    """

    def __init__(self, source: ports.PauseSource | None, sink, clock):
        self.source = source
        self.sink = sink
        self.clock = clock
        self.active: Pause | None = None
        self._expired_seen: Pause | None = None
        #: Seconds our clock is ahead of Nova's, as the last poll measured.
        self.skew: float | None = None
        #: The pause last judged, and the monotonic time it ends.
        self._ends: tuple[Pause, float] | None = None

    def _expired(self, pause: Pause, fresh: bool) -> bool:
        """Whether ``pause`` has ended, on Nova's clock.

        A poll (``fresh``: the skew was just measured) turns its end into
        a monotonic time; a read between polls goes by that, so that a
        step of our wall clock neither stretches nor cuts the pause.
        """
        if pause.until is None:
            return False
        mono = self.clock.monotonic()
        if fresh or self._ends is None or self._ends[0] != pause:
            left = pause.left(self.clock.now(), self.skew)
            self._ends = (pause, mono + left)
        return mono >= self._ends[1]

    def check(self, skew: float | None = None,
              fresh: bool = False) -> Pause | None:
        """Read the pause now; returns it if it is in force.

        ``fresh``: a poll's read, ``skew`` measured by it (seconds our
        clock is ahead of Nova's).
        """
        if fresh:
            self.skew = skew
        if self.source is None:
            return None
        try:
            stored = self.source.current()
        except exceptions.InstanceHAError as exc:
            LOG.warning('cannot read the pause state (%s); keeping the '
                        'last known: %s', exc,
                        self.active.describe() if self.active
                        else 'not paused')
            stored = self.active
        if stored is not None and self._expired(stored, fresh):
            if stored != self._expired_seen:
                self._expired_seen = stored
                self.sink.emit(events.PAUSE_EXPIRED, reason=stored.reason,
                               since=_text(stored.since),
                               until=_text(stored.until))
            stored = None
        elif stored is None and self.active is not None:
            self.sink.emit(events.RESUMED, reason=self.active.reason)
        if stored is not None and stored != self.active:
            self.sink.emit(events.PAUSED, reason=stored.reason,
                           until=_text(stored.until) or 'indefinite',
                           by=stored.by or 'unknown')
        self.active = stored
        return stored

    def apply(self, plan: plan_mod.Plan,
              skew: float | None = None) -> plan_mod.Plan:
        """Read the pause; while in force, hold what the plan would start.

        ``skew``: seconds our clock is ahead of Nova's, measured by the
        poll that made ``plan``. Each held host gets a ``recovery_held``
        event (every poll, as in ``[DEFAULT] disabled`` mode) and becomes
        BLOCKED with the pause as its last reason, so nothing new is
        fenced, marked or evacuated.
        """
        pause = self.check(skew, fresh=True)
        if pause is None:
            return plan
        for d in plan.to_recover():
            self.sink.emit(events.RECOVERY_HELD, d.host,
                           note='would recover, but instance HA is paused',
                           reason='; '.join(d.reasons), pause=pause.reason)
        return hold(plan, pause)


def hold(plan: plan_mod.Plan, pause: Pause | None) -> plan_mod.Plan:
    """The plan with every host it would recover held by the pause."""
    if pause is None or not plan.to_recover():
        return plan
    why = 'paused: %s (%s)' % (pause.reason, 'until %s' % _text(pause.until)
                               if pause.until else 'no end set')
    decisions = tuple(
        dataclasses.replace(d, decision=plan_mod.Decision.BLOCKED,
                            reasons=d.reasons + (why,))
        if d.decision is plan_mod.Decision.RECOVER else d
        for d in plan.decisions)
    return dataclasses.replace(plan, decisions=decisions)
