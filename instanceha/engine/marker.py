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

"""The recovery marker in Nova's ``disabled_reason``: one codec.

A marker makes a host's workflow durable in Nova itself, so that a
restarted service (or a new leader) resumes where the last one stopped,
and ``openstack compute service list --long`` tells the story::

    instanceha:evacuating 2026-11-29T12:00:05Z fenced_at=... clock=nova ...
    instanceha:failed 2026-11-29T12:00:05Z FAILED 2 instance(s) not ...

The layout is the state, a UTC time stamp, then ``key=value`` fields and
finally a free note (FAILED puts the word in capitals first, so it stands
out). Every part of instanceha writes markers through :class:`Marker`
and reads them through :func:`instanceha.engine.reasons.read` only;
markers written by earlier versions (fields only, or a free note only)
read unchanged.

Times are on Nova's clock (``clock=nova``): the copy that reads a marker
back may run on a clock stepped since it was written (an NTP step, a
restart on another machine), and only Nova's clock names the same moment
for both. The writer converts with the skew it measures between its
clock and Nova's (:attr:`instanceha.engine.model.Snapshot.clock_skew`),
the reader with the skew it measures now (:meth:`Marker.ours`). A marker
without ``clock=nova`` (written by an earlier version) has its times on
the writer's clock: they are read as they are, as those versions did.
"""

import dataclasses
import datetime
import re

from instanceha.engine.states import HostState

PREFIX = 'instanceha'
#: The one time stamp format of markers (and of operator-facing times).
TS_FORMAT = '%Y-%m-%dT%H:%M:%SZ'
#: Nova's limit on ``disabled_reason``.
MAX_LENGTH = 255

_RE = re.compile(
    r'^%s:(?P<state>[a-z_]+) (?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)'
    r'(?: (?P<rest>.*))?$' % PREFIX, re.DOTALL)
_FIELD_RE = re.compile(r'^(?P<key>[a-z][a-z_]*)=(?P<value>\S*)$')


def format_ts(when: datetime.datetime) -> str:
    """``when`` as the markers write it (UTC, seconds)."""
    return when.astimezone(datetime.timezone.utc).strftime(TS_FORMAT)


def parse_ts(text: str) -> datetime.datetime | None:
    """A marker time stamp back as an aware datetime; None if malformed."""
    try:
        return datetime.datetime.strptime(text, TS_FORMAT).replace(
            tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return None


def to_nova(ours: datetime.datetime,
            skew: float | None) -> datetime.datetime:
    """A time of our clock as Nova's clock read it at that moment.

    ``skew``: seconds our clock was ahead of Nova's then (negative:
    behind; None: unknown, taken as none).
    """
    return ours - datetime.timedelta(seconds=skew or 0.0)


def from_nova(nova: datetime.datetime,
              skew: float | None) -> datetime.datetime:
    """A time of Nova's clock on our clock (``skew``: see :func:`to_nova`)."""
    return nova + datetime.timedelta(seconds=skew or 0.0)


class NovaClockTimes:
    """Times of a record kept in Nova, read back by any copy.

    On Nova's clock when the record says so (its ``nova_clock``), else on
    the clock of the copy that wrote it (a record of an earlier version),
    which is taken to be ours.
    """

    nova_clock: bool

    def ours(self, when: datetime.datetime | None,
             skew: float | None) -> datetime.datetime | None:
        """``when`` (one of this record's times) on our clock now.

        ``skew``: seconds our clock is ahead of Nova's now.
        """
        if when is None or not self.nova_clock:
            return when
        return from_nova(when, skew)

    def on_nova(self, when: datetime.datetime | None,
                skew: float | None) -> datetime.datetime | None:
        """``when`` (one of this record's times) on Nova's clock."""
        if when is None or self.nova_clock:
            return when
        return to_nova(when, skew)


def short_id(server_id: str) -> str:
    """The part of an instance id a marker keeps (it has 255 characters)."""
    return server_id.replace('-', '')[:12]


@dataclasses.dataclass(frozen=True)
class Marker(NovaClockTimes):
    """What one marker says; :meth:`render` and :meth:`decode` invert."""

    state: HostState
    #: When the state was entered (the marker was written).
    when: datetime.datetime
    #: When the host was proven off (the start of its failure episode).
    fenced_at: datetime.datetime | None = None
    #: The spare host claimed for this host's instances.
    spare: str | None = None
    #: The host was found crash-dumping instead of being powered off.
    kdump: bool = False
    #: This recovery's id (the same in every marker of one recovery).
    recovery: str | None = None
    #: Instances given up (:func:`short_id`): never evacuated again.
    gave_up: tuple[str, ...] = ()
    #: The host's evacuation was stopped (an instance was given up and
    #: ``on_instance_failure = stop_host``): nothing more is started.
    stopped: bool = False
    #: The host announced this shutdown (``poweroff``) and was proven off
    #: by reading its devices: it is not powered on again (the shutdown
    #: policy failover); a resumed copy reads it here.
    shutdown: str | None = None
    #: Free text for operators (the failure note), written last.
    note: str = ''
    #: ``key=value`` fields this version does not know, kept as written.
    extra: tuple[tuple[str, str], ...] = ()
    #: ``when`` and ``fenced_at`` are on Nova's clock (``clock=nova``);
    #: False: on the clock of the copy that wrote them (a marker of an
    #: earlier version). See :meth:`~NovaClockTimes.ours`.
    nova_clock: bool = False

    def on_nova_clock(self, skew: float | None) -> 'Marker':
        """This marker with its times on Nova's clock.

        ``skew``: seconds our clock is ahead of Nova's now (what an
        earlier version's times are converted with: they were written by
        a clock taken to be ours).
        """
        if self.nova_clock:
            return self
        return dataclasses.replace(
            self, when=to_nova(self.when, skew),
            fenced_at=self.on_nova(self.fenced_at, skew), nova_clock=True)

    def fields(self) -> list[tuple[str, str]]:
        out = []
        if self.fenced_at is not None:
            out.append(('fenced_at', format_ts(self.fenced_at)))
        if self.nova_clock:
            out.append(_NOVA_CLOCK)
        if self.spare:
            out.append(('spare', self.spare))
        if self.kdump:
            out.append(('kdump', 'yes'))
        if self.recovery:
            out.append(('rid', self.recovery))
        if self.stopped:
            out.append(('stopped', 'yes'))
        if self.shutdown:
            out.append(('shutdown', self.shutdown))
        if self.gave_up:
            out.append(('gave_up', ','.join(self.gave_up)))
        return out + list(self.extra)

    def render(self) -> str:
        """The ``disabled_reason`` text; at most :data:`MAX_LENGTH`.

        Only the free note is shortened to fit (the fields are what a
        resumed service needs).
        """
        parts = [self.render_head()] + ['%s=%s' % kv
                                        for kv in self.fields()]
        text = ' '.join(parts)
        note = ' '.join(self.note.split())
        if note:
            room = MAX_LENGTH - len(text) - 1
            if room > 3:
                text += ' ' + (note if len(note) <= room
                               else note[:room - 3] + '...')
        return text[:MAX_LENGTH]

    def fitted(self) -> 'Marker':
        """This marker, with its fields within Nova's 255 characters.

        Instance ids given up that do not fit are dropped and the marker
        says ``stopped=yes`` instead: a resumed copy then starts nothing
        more on the host (never an instance evacuated twice; the ones left
        are the operator's, as for a FAILED host).
        """
        marker = self
        while marker.gave_up and len(' '.join(
                [marker.render_head()] + ['%s=%s' % kv
                                          for kv in marker.fields()])
                ) > MAX_LENGTH:
            marker = dataclasses.replace(marker, gave_up=marker.gave_up[:-1],
                                         stopped=True)
        return marker

    def render_head(self) -> str:
        """The state and time stamp (and FAILED), without the fields."""
        head = '%s:%s %s' % (PREFIX, self.state.value, format_ts(self.when))
        if self.state is HostState.FAILED:
            head += ' FAILED'
        return head

    def __str__(self) -> str:
        return self.render()

    @classmethod
    def decode(cls, text: str) -> 'Marker | None':
        """The marker in ``text`` (stripped); None when it is not one.

        Called by :func:`instanceha.engine.reasons.read` only: every
        other reader asks that what a reason is.
        """
        m = _RE.match(text)
        if not m:
            return None
        try:
            state = HostState(m.group('state'))
        except ValueError:
            return None
        when = parse_ts(m.group('ts'))
        if when is None:
            return None
        tokens = (m.group('rest') or '').split(' ')
        if state is HostState.FAILED and tokens and tokens[0] == 'FAILED':
            tokens = tokens[1:]
        known: dict[str, str] = {}
        extra = []
        while tokens:
            fm = _FIELD_RE.match(tokens[0])
            if not fm:
                break
            tokens.pop(0)
            key, value = fm.group('key'), fm.group('value')
            if key in _KNOWN:
                known[key] = value
            else:
                extra.append((key, value))
        fenced_at = parse_ts(known.get('fenced_at', ''))
        return cls(
            state=state, when=when, fenced_at=fenced_at,
            spare=known.get('spare') or None,
            kdump=known.get('kdump') == 'yes',
            recovery=known.get('rid') or None,
            gave_up=tuple(i for i in known.get('gave_up', '').split(',')
                          if i),
            stopped=known.get('stopped') == 'yes',
            shutdown=known.get('shutdown') or None,
            nova_clock=known.get('clock') == 'nova',
            note=' '.join(tokens).strip(), extra=tuple(extra))

    def details(self) -> str:
        """The fields and note, as ``hosts list`` and the plan show them.

        Without ``clock=nova``: how the times are kept, not news.
        """
        return ' '.join(['%s=%s' % kv for kv in self.fields()
                         if kv != _NOVA_CLOCK] +
                        ([self.note] if self.note else []))

    def replace(self, **changes) -> 'Marker':
        return dataclasses.replace(self, **changes)


#: The field saying a record's times are on Nova's clock.
_NOVA_CLOCK = ('clock', 'nova')
#: ... as it is written.
NOVA_CLOCK_FIELD = '%s=%s' % _NOVA_CLOCK

_KNOWN = frozenset({'fenced_at', 'spare', 'kdump', 'rid', 'stopped',
                    'gave_up', 'shutdown', 'clock'})
