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

"""One reading of every reason instanceha writes into Nova.

Nova keeps two free texts instanceha writes: a compute service's
``disabled_reason`` and a server's lock reason. Whose a disabled host is
-- ours to resume, an operator's to leave alone, or nobody's -- is read
from that text alone, after a restart as well as on a new leader, so
every part of instanceha reads it here (:func:`read`, :func:`of_service`,
:func:`of_lock`) and gets one tagged answer (:class:`Reading`):

================  ====================================================
kind              the text (what writes it)
================  ====================================================
``recovery``      ``instanceha:<state> <UTC> [fields] [note]``: a host's
                  recovery (:class:`~instanceha.engine.marker_mod.Marker`)
``service_down``  the same grammar with the state ``service_down``: a
                  process failure (:mod:`instanceha.engine.process_failure`)
``shutdown``      ``instanceha-shutdown <UTC> reboot|poweroff until=<UTC>
                  [action=failover] [clock=nova] [note]``: an announced
                  shutdown's freeze or failover record (:class:`Frozen`)
``maintenance``   ``instanceha-maintenance <UTC> [note]``: an operator's
                  ``maintenance start`` (:class:`Maintenance`)
``lock``          ``instanceha: evacuating from <host> [(was <STATUS>)]``:
                  the lock of an instance we evacuate (:class:`Lock`)
``operator``      any other text: someone else's
``nobody``        no text at all
================  ====================================================

The grammars never overlap, and each of ours renders with its own
``render()`` the very text its decoder reads back; the text of every
earlier version still reads the same (no grammar changes without a new
field an earlier version skips). Each type's ``decode`` is called here
only: whoever needs to know what a text is asks :func:`read`.
"""

import dataclasses
import datetime
import enum
import re

from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine.states import HostState

#: How the note of the maintenance of a host drained by the shutdown
#: policy migrate starts (only such a maintenance is ended by the
#: clean shutdown, :mod:`instanceha.engine.clean_shutdown`).
DRAIN_NOTE = 'shutdown policy migrate:'
#: A shutdown record's action for the failover policy (the policy's name,
#: :data:`instanceha.engine.shutdown.FAILOVER`).
FAILOVER = 'failover'


class Kind(str, enum.Enum):
    """Whose a reason is, and for ours which one (see the module)."""

    RECOVERY = 'recovery'
    SERVICE_DOWN = 'service_down'
    SHUTDOWN = 'shutdown'
    MAINTENANCE = 'maintenance'
    LOCK = 'lock'
    OPERATOR = 'operator'
    NOBODY = 'nobody'


_SHUTDOWN_PREFIX = 'instanceha-shutdown'
_SHUTDOWN_RE = re.compile(
    r'^%s (?P<ts>\S+) (?P<kind>reboot|poweroff) until=(?P<until>\S+)'
    r'(?: (?P<note>.*))?$' % re.escape(_SHUTDOWN_PREFIX), re.DOTALL)
_ACTION_RE = re.compile(r'^action=(?P<action>[a-z]+)(?: (?P<note>.*))?$',
                        re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Frozen(marker_mod.NovaClockTimes):
    """What the disabled_reason of a host frozen by its shutdown says.

    Also the record of an announced host under failover (``action``
    ``failover``), written before its agent is answered: a copy that
    starts before the host is proven off still knows it announced its
    shutdown (never power-cycled, not powered on afterwards). Such a host
    is in scope: it is recovered, not frozen.

    Its times are on Nova's clock (``clock=nova``, after the action), like
    a recovery marker's (see :mod:`instanceha.engine.marker`): a copy
    that did not hear the announcement judges ``until`` on them.
    """

    since: datetime.datetime
    kind: str
    #: When it is handled as failed if it has not come back.
    until: datetime.datetime
    note: str = ''
    #: FAILOVER for a failover record; None: a freeze (written by every
    #: version before the element existed).
    action: str | None = None
    #: ``since`` and ``until`` are on Nova's clock; False: on the clock
    #: of the copy that wrote them (an earlier version's record).
    nova_clock: bool = False

    def render(self) -> str:
        text = '%s %s %s until=%s' % (
            _SHUTDOWN_PREFIX, marker_mod.format_ts(self.since), self.kind,
            marker_mod.format_ts(self.until))
        if self.action:
            text += ' action=%s' % self.action
        if self.nova_clock:
            # After the action: an earlier version reads it as the note.
            text += ' ' + marker_mod.NOVA_CLOCK_FIELD
        if self.note:
            text += ' ' + ' '.join(self.note.split())
        return text[:marker_mod.MAX_LENGTH]

    @property
    def failover(self) -> bool:
        return self.action == FAILOVER

    @classmethod
    def decode(cls, text: str) -> 'Frozen | None':
        """The record in ``text`` (stripped); None if not one (see read)."""
        m = _SHUTDOWN_RE.match(text)
        if not m:
            return None
        since, until = marker_mod.parse_ts(m.group('ts')), marker_mod.parse_ts(
            m.group('until'))
        if since is None or until is None:
            return None
        note, action = m.group('note') or '', None
        am = _ACTION_RE.match(note)
        if am:
            action, note = am.group('action'), am.group('note') or ''
        head, _, rest = note.partition(' ')
        nova_clock = head == marker_mod.NOVA_CLOCK_FIELD
        if nova_clock:
            note = rest
        return cls(since=since, kind=m.group('kind'), until=until,
                   note=note, action=action, nova_clock=nova_clock)


_MAINTENANCE_PREFIX = 'instanceha-maintenance'
_MAINTENANCE_RE = re.compile(
    r'^%s (?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(?: (?P<note>.*))?$'
    % re.escape(_MAINTENANCE_PREFIX), re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Maintenance:
    """A host an operator put in maintenance (``maintenance start``).

    Never a recovery marker (that needs ``instanceha:<state>``): the
    engine never resumes it as a recovery.
    """

    #: When the maintenance started.
    since: datetime.datetime
    note: str = ''

    def render(self) -> str:
        text = '%s %s' % (_MAINTENANCE_PREFIX,
                          marker_mod.format_ts(self.since))
        if self.note:
            text = '%s %s' % (text, ' '.join(self.note.split()))
        return text[:marker_mod.MAX_LENGTH]

    @property
    def drain(self) -> bool:
        """Started by the shutdown policy migrate (its note says so)."""
        return self.note.startswith(DRAIN_NOTE)

    @classmethod
    def decode(cls, text: str) -> 'Maintenance | None':
        """The maintenance in ``text`` (stripped); None if not one."""
        m = _MAINTENANCE_RE.match(text)
        if not m:
            return None
        since = marker_mod.parse_ts(m.group('ts'))
        if since is None:
            return None
        return cls(since=since, note=m.group('note') or '')


_LOCK_TEXT = 'instanceha: evacuating from %s'
_LOCK_RE = re.compile(r'^instanceha: evacuating from (?P<host>\S+)'
                      r'(?: \(was (?P<was>[A-Z_]+)\))?$')


@dataclasses.dataclass(frozen=True)
class Lock:
    """The lock reason of an instance we evacuate, read after a restart.

    It says the lock is ours (we never unlock a lock we did not take) and
    what the instance's status was before (restored after its rebuild).
    """

    #: The host it is evacuated from.
    host: str
    #: Its status before (None: nothing to restore).
    was: str | None = None

    def render(self) -> str:
        text = _LOCK_TEXT % self.host
        return '%s (was %s)' % (text, self.was) if self.was else text

    @classmethod
    def decode(cls, text: str) -> 'Lock | None':
        """The lock in ``text`` (as Nova holds it); None if not one."""
        m = _LOCK_RE.match(text)
        if not m:
            return None
        return cls(host=m.group('host'), was=m.group('was'))


Value = marker_mod.Marker | Frozen | Maintenance | Lock


@dataclasses.dataclass(frozen=True)
class Reading:
    """What one reason says: whose it is and, for ours, what it holds."""

    kind: Kind
    #: The text as read (None read as '').
    text: str = ''
    #: The decoded reason of ours; None for an operator's or nobody's.
    value: Value | None = None

    @property
    def ours(self) -> bool:
        return self.value is not None

    @property
    def marker(self) -> marker_mod.Marker | None:
        """The recovery or process-failure marker, None if not one."""
        value = self.value
        return value if isinstance(value, marker_mod.Marker) else None

    @property
    def recovery(self) -> marker_mod.Marker | None:
        """A recovery's marker only (not a process failure's)."""
        return self.marker if self.kind is Kind.RECOVERY else None

    @property
    def service_down(self) -> marker_mod.Marker | None:
        """A process failure's marker only."""
        return self.marker if self.kind is Kind.SERVICE_DOWN else None

    @property
    def frozen(self) -> Frozen | None:
        return self.value if isinstance(self.value, Frozen) else None

    @property
    def maintenance(self) -> Maintenance | None:
        return self.value if isinstance(self.value, Maintenance) else None

    @property
    def lock(self) -> Lock | None:
        return self.value if isinstance(self.value, Lock) else None

    @property
    def drain(self) -> bool:
        """A maintenance the shutdown policy migrate started (a drain)."""
        return self.maintenance is not None and self.maintenance.drain

    def lock_for(self, host: str) -> Lock | None:
        """Our lock, taken for ``host``'s evacuation; None otherwise.

        A lock that is not ours is its owner's (left exactly as it is);
        one of ours for another host is that host's evacuation's.
        """
        lock = self.lock
        return lock if lock is not None and lock.host == host else None

    @property
    def prefixed(self) -> bool:
        """The text starts like ours: never someone else's disable.

        Ours, or one this version cannot read: a later version's, or the
        reservation strategy's default ``instanceha:reserved``.
        """
        return self.text.startswith(marker_mod.PREFIX)


#: The grammars of a compute service's disabled_reason, in order.
_SERVICE_GRAMMARS = (marker_mod.Marker.decode, Frozen.decode,
                     Maintenance.decode)


def _tagged(text: str, value: Value) -> Reading:
    """``value`` decoded from a service's ``text``, with its kind."""
    if isinstance(value, Frozen):
        kind = Kind.SHUTDOWN
    elif isinstance(value, Maintenance):
        kind = Kind.MAINTENANCE
    elif value.state is HostState.SERVICE_DOWN:
        kind = Kind.SERVICE_DOWN
    else:
        kind = Kind.RECOVERY
    return Reading(kind, text, value)


def read(text: str | None) -> Reading:
    """What a compute service's ``disabled_reason`` ``text`` says.

    Never a :class:`Lock` (a lock reason reads as an operator's here):
    a server's lock is read with :func:`of_lock`.
    """
    if not text:
        return Reading(Kind.NOBODY, text or '')
    stripped = text.strip()
    for decode in _SERVICE_GRAMMARS:
        value = decode(stripped)
        if value is not None:
            return _tagged(text, value)
    return Reading(Kind.OPERATOR, text)


def of_service(service: model.Service | None) -> Reading:
    """What ``service``'s ``disabled_reason`` says (whatever its status).

    Nova drops the reason on an enable, so an enabled service reads
    nobody's unless a caller wrote a reason with it.
    """
    return read(service.disabled_reason if service is not None else None)


def of_disabled(service: model.Service | None) -> Reading:
    """What a disabled ``service``'s reason says; nobody's if enabled."""
    if service is None or not service.disabled:
        return Reading(Kind.NOBODY)
    return read(service.disabled_reason)


def of_lock(server: model.Server | None) -> Reading:
    """Whose ``server``'s lock is: ours (:class:`Lock`), another's, none.

    Nobody's when it is not locked, or locked without a reason.
    """
    if server is None or not server.locked or not server.locked_reason:
        return Reading(Kind.NOBODY)
    value = Lock.decode(server.locked_reason)
    if value is None:
        return Reading(Kind.OPERATOR, server.locked_reason)
    return Reading(Kind.LOCK, server.locked_reason, value)
