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

    instanceha:evacuating 2026-11-29T12:00:05Z fenced_at=... spare=h9 rid=...
    instanceha:failed 2026-11-29T12:00:05Z FAILED 2 instance(s) not ...

The layout is the state, a UTC time stamp, then ``key=value`` fields and
finally a free note (FAILED puts the word in capitals first, so it stands
out). Every part of instanceha reads and writes markers through
:class:`Marker` only; markers written by earlier versions (fields only, or
a free note only) parse unchanged.
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


def short_id(server_id: str) -> str:
    """The part of an instance id a marker keeps (it has 255 characters)."""
    return server_id.replace('-', '')[:12]


@dataclasses.dataclass(frozen=True)
class Marker:
    """What one marker says; :meth:`render` and :meth:`parse` invert."""

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

    def fields(self) -> list[tuple[str, str]]:
        out = []
        if self.fenced_at is not None:
            out.append(('fenced_at', format_ts(self.fenced_at)))
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
    def parse(cls, reason: str | None) -> 'Marker | None':
        """The marker in ``reason``; None when it is not one of ours."""
        if not reason:
            return None
        m = _RE.match(reason.strip())
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
            note=' '.join(tokens).strip(), extra=tuple(extra))

    def details(self) -> str:
        """The fields and note, as ``hosts list`` and the plan show them."""
        return ' '.join(['%s=%s' % kv for kv in self.fields()] +
                        ([self.note] if self.note else []))

    def replace(self, **changes) -> 'Marker':
        return dataclasses.replace(self, **changes)


_KNOWN = frozenset({'fenced_at', 'spare', 'kdump', 'rid', 'stopped',
                    'gave_up', 'shutdown'})


def parse(reason: str | None) -> Marker | None:
    """Shorthand for :meth:`Marker.parse`."""
    return Marker.parse(reason)
