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

"""Watching the compute services between two full reads of the cloud.

A full read (services, every server, every aggregate: pages that grow
with the cloud) is what the planner needs to decide about a failed host,
but while every host is healthy there is nothing to decide. So the engine
reads the nova-compute services alone -- one small call -- every
``[detection] services_interval`` seconds, and reads the full picture:

* at once, when a host shows something the last full read did not see
  (down, forced down, disabled, a heartbeat older than ``delta``, another
  disabled reason), whatever the phase of ``poll``;
* every ``poll`` seconds while anything is not plainly healthy (a host
  being recovered, a failed host held back by a gate, a disabled host);
* never while every host is healthy.

Between full reads the engine's picture gets each services read, so a
host waiting to come back is enabled as soon as Nova reports it up.

With ``[detection] nova_service_down_time`` set (Nova's own
``service_down_time``, 60 by default as Nova's; 0 leaves all of this
off), the services are read every interval only while something needs
them:

* every interval (:data:`NOW`) while a read is owed: a write of ours not
  yet read back, a host evacuated or to be powered on (a power-on waits
  for a read newer than its step), a host showing something the last
  full read did not see (that full read failed);
* every :data:`WAIT_INTERVAL` (:data:`WAIT`) while a host waits for its
  nova-compute to report (waiting_up after our power-on, a process
  failure, an announced shutdown) or is being recovered from its fencing
  to its hand-back (an operator's take-over is followed within that
  time);
* otherwise (:data:`CALM`) when a host could turn: a host that is up
  turns down for us once its heartbeat is older than ``delta``, and for
  Nova once it is older than ``service_down_time``, so the next read
  comes one interval after the earliest such moment of any host (see
  :meth:`ServiceWatch.read_done`), and at least once a ``poll``. A read
  then is as early as one every interval would have been; the reads in
  between could not have shown a failure. Hosts that wait only for an
  operator (failed, left_disabled, disabled by someone else) and down
  hosts the last full read saw do not make reads more frequent. A host
  forced down or disabled by someone else is seen at the next read.

Nova may call a host down sooner than it was told (:class:`DownTime`):
then a warning says so and the schedule follows what Nova shows.

Changes the engine makes itself (markers on hosts it is recovering) are
not news: those hosts are left out of the comparison.
"""

import datetime
import logging

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha import exceptions
from instanceha.plugins.detectors import base as det_base

LOG = logging.getLogger(__name__)

#: ``services_interval = 0`` (the default) reads every this many seconds...
AUTO_INTERVAL = 0.5
#: ...or less often on a large cloud: at most this many service records a
#: second (about 240 bytes each: ~480 KB/s, ~29 MB a minute at most).
AUTO_RECORDS_PER_SECOND = 2000
#: With ``nova_service_down_time`` set: seconds between two reads while a
#: host waits for its nova-compute to report. A host waiting to come
#: back is enabled within this, one read and one write of its report:
#: within 3 s.
WAIT_INTERVAL = 2.0
#: How much earlier than what a read proves the schedule reckons (Nova's
#: time stamps are often whole seconds; our estimate of its clock and the
#: request's own time add their share).
MARGIN = 1.0
#: What the engine needs the services for (:meth:`ServiceWatch.next_at`).
NOW, WAIT, CALM = 'now', 'wait', 'calm'


def interval(configured: float, hosts: int) -> float:
    """Seconds between two services reads for a cloud of ``hosts``."""
    if configured > 0:
        return float(configured)
    return max(AUTO_INTERVAL, hosts / float(AUTO_RECORDS_PER_SECOND))


def attention(snapshot: model.Snapshot, now: datetime.datetime,
              delta: float, skip=()) -> dict[str, tuple]:
    """Hosts whose service shows anything but plain health, and what.

    Plain health: enabled, and alive by the detector contract's rule for
    a compute service (:meth:`Detector.judge_service
    <instanceha.plugins.detectors.base.Detector.judge_service>`: up, not
    forced down, a heartbeat at most ``delta`` seconds old on Nova's
    clock), the rule the Nova detector votes by. ``skip``: hosts left
    out (the engine's own workflows).
    """
    nova_now = snapshot.nova_now(now)
    out = {}
    for svc in snapshot.services:
        if svc.host in skip:
            continue
        view = det_base.Detector.judge_service(svc, nova_now, delta)
        if view.verdict is det_base.Verdict.ALIVE and not svc.disabled:
            continue
        out[svc.host] = (svc.state, svc.status, svc.forced_down, view.stale,
                         svc.disabled_reason)
    return out


def awaits_compute(svc: model.Service) -> bool:
    """Whether a reason of ours on ``svc`` waits for its nova-compute.

    A process failure's marker (enabled again once nova-compute reports),
    an announced shutdown's freeze or drain (back once it reports): while
    Nova does not report it up. Recovery markers are the workflows' (see
    the engine); failed and left_disabled wait for an operator only, and
    so does a maintenance an operator started.
    """
    if not svc.disabled or (svc.state == model.UP and not svc.forced_down):
        return False
    reading = reasons.of_service(svc)
    return reading.drain or reading.kind in (reasons.Kind.SERVICE_DOWN,
                                             reasons.Kind.SHUTDOWN)


class DownTime(object):
    """After how long a silence Nova calls a host down, as far as known.

    ``configured``: ``[detection] nova_service_down_time``, the
    operator's word for Nova's own ``service_down_time`` (Nova calls a
    compute service down once its last heartbeat is older than that; an
    option of Nova's this service cannot read). Every services read
    checks it: a host reported up with a heartbeat ``a`` seconds old
    proves Nova waits at least ``a``; a host seen up, then down with the
    same heartbeat (nothing written in between, a heartbeat for sure,
    see :class:`ServiceWatch`) proves it waits less than its age then.
    Ages are taken on Nova's clock, from the moment the read was sent.
    Should Nova be seen calling a host down sooner than configured, a
    warning says so and the schedule follows what Nova shows: the
    longest silence it was seen to report up.
    """

    def __init__(self, configured: float):
        self.configured = float(configured)
        #: Seen up with a heartbeat this old (seconds): at least this.
        self.lo = 0.0
        #: Seen turning down with a heartbeat this old: below this.
        self.hi: float | None = None
        self._warned = False

    def up(self, age: float) -> None:
        """A host reported up with a heartbeat ``age`` seconds old."""
        if self.hi is not None and age >= self.hi:
            self.hi = None  # Nova waits longer now (its option changed)
        self.lo = max(self.lo, age)

    def down(self, host: str, age: float) -> None:
        """``host`` turned down, its last heartbeat ``age`` seconds old."""
        if age <= self.lo:
            # Nova calls down sooner than it used to (its option
            # changed): learn again from here.
            self.lo = 0.0
        self.hi = age if self.hi is None else min(self.hi, age)
        if self.too_long() and not self._warned:
            self._warned = True
            LOG.warning('[detection] nova_service_down_time is %.0f s, but '
                        'Nova reported %s down after %.1f s without a '
                        'heartbeat: set it to Nova\'s service_down_time; '
                        'the services are read by what Nova reports '
                        'meanwhile', self.configured, host, age)

    def too_long(self) -> bool:
        """Whether Nova was seen calling a host down sooner."""
        return self.hi is not None and self.hi < self.configured - MARGIN

    def earliest(self) -> float:
        """Seconds of silence after which Nova may first call a host down.

        Never more than Nova has been seen to wait: a failure is then
        read at the latest one interval after Nova reports it.
        """
        if self.too_long():
            return max(0.0, self.lo - MARGIN)
        return max(0.0, self.configured - MARGIN)


class _Beat(object):
    """What the schedule keeps of a host's record between two reads."""

    __slots__ = ('shown', 'updated_at', 'beat', 'sure', 'up')

    def __init__(self, svc: model.Service, before: '_Beat | None'):
        #: What only a write changes (a heartbeat changes none of it).
        self.shown = (svc.status, svc.forced_down, svc.disabled_reason)
        self.updated_at = svc.updated_at
        self.up = svc.state == model.UP and not svc.forced_down
        #: Its last heartbeat as far as known: Nova stamps ``updated_at``
        #: on every write too, but judges by the heartbeats alone; a
        #: record a write changed keeps the heartbeat seen before.
        self.beat = svc.updated_at
        #: ``beat`` is a heartbeat for sure: it moved while nothing
        #: else did.
        self.sure = False
        if before is None or svc.updated_at is None:
            return
        if before.shown != self.shown:
            if before.beat is not None:
                self.beat = min(before.beat, svc.updated_at)
        elif before.updated_at == svc.updated_at:
            self.beat, self.sure = before.beat, before.sure
        else:
            self.sure = True


class ServiceWatch(object):
    """When to read the services, and whether they call for a full read."""

    def __init__(self, configured: float, down_time: float = 0.0):
        self.configured = configured
        self.interval = interval(configured, 0)
        #: The next read every interval (the only schedule without
        #: ``down_time``).
        self.next_read: float | None = None
        #: What the last full read showed (None: no full read yet).
        self.seen: dict[str, tuple] | None = None
        #: The last read showed every host healthy and nothing recovering.
        self.quiet = False
        #: Scheduled by heartbeats while calm (``nova_service_down_time``
        #: set; see the module's docstring).
        self.down: DownTime | None = (DownTime(down_time) if down_time > 0
                                      else None)
        #: When the last read began (monotonic).
        self.last: float | None = None
        #: The next read while calm; None: every interval.
        self.next_calm: float | None = None
        #: The last read showed a host whose reason of ours waits for its
        #: nova-compute (:func:`awaits_compute`).
        self.waiting = False
        #: The last read showed something the last full read did not.
        self.news = False
        self._beats: dict[str, _Beat] = {}

    def next_at(self, need: str = NOW) -> float | None:
        """When the next read is due; ``need``: :data:`NOW`, ... ."""
        nxt = self.next_read
        calm = self.next_calm
        if self.down is None or nxt is None or calm is None:
            return nxt
        if need == NOW or self.news:
            return nxt
        if need == WAIT or self.waiting:
            return min(calm, max(nxt, self.last + WAIT_INTERVAL))
        return calm

    def due(self, mono: float, need: str = NOW) -> bool:
        nxt = self.next_at(need)
        return nxt is None or mono >= nxt

    def read(self, cloud: ports.CloudPort,
             mono: float) -> model.Snapshot | None:
        """The services alone (one call); None when Nova did not answer.

        A failed read is left to the next full read to report (it says
        so once a poll, and holds fencing until Nova is read again).
        The caller hands a good read to :meth:`read_done`.
        """
        self.next_read = mono + self.interval
        self.last, self.next_calm = mono, None
        try:
            return cloud.read_services()
        except exceptions.InstanceHAError as exc:
            LOG.debug('services read failed: %s', exc)
            return None

    def read_done(self, mono: float, snapshot: model.Snapshot,
                  now: datetime.datetime | None = None,
                  delta: float = 0.0, longest: float = 0.0) -> None:
        """The services were read (alone or in a full read) at ``mono``.

        With a ``down_time``: ``now``, our clock when the read ended;
        ``delta``, the age at which a heartbeat is stale; ``longest``,
        seconds after which the services are read anyway.
        """
        self.interval = interval(self.configured, len(snapshot.services))
        self.next_read = mono + self.interval
        if self.down is None or now is None:
            return
        self.last = mono
        soonest = self._soonest_turn(snapshot, now, delta)
        wait = longest if soonest is None else min(
            longest, soonest + self.interval)
        self.next_calm = mono + max(self.interval, wait)
        self.waiting = any(awaits_compute(svc)
                           for svc in snapshot.services)

    def _soonest_turn(self, snapshot: model.Snapshot,
                      now: datetime.datetime, delta: float) -> float | None:
        """Seconds from ``now`` until a host that is up could turn down.

        Stale for us once ``updated_at`` is older than ``delta`` (as
        :func:`attention` judges); down for Nova once its last heartbeat
        is older than :meth:`DownTime.earliest`. Learns what Nova shows
        on the way (:class:`DownTime`).
        """
        sent = snapshot.nova_now(snapshot.taken_at)
        nova_now = snapshot.nova_now(now)
        down = self.down
        soonest = None
        beats = {}
        for svc in snapshot.services:
            before = self._beats.get(svc.host)
            b = beats[svc.host] = _Beat(svc, before)
            if b.updated_at is None:
                continue
            if b.up:
                down.up((sent - b.updated_at).total_seconds())
            elif (svc.state == model.DOWN and before is not None and
                  before.up and b.sure and before.shown == b.shown and
                  before.updated_at == b.updated_at):
                down.down(svc.host, (sent - b.beat).total_seconds())
        limit = datetime.timedelta(seconds=down.earliest())
        stale = datetime.timedelta(seconds=delta)
        for host, b in beats.items():
            if not b.up or b.updated_at is None:
                continue
            turns = [b.beat + limit]
            if b.updated_at + stale >= nova_now:  # not stale yet
                turns.append(b.updated_at + stale)
            left = (min(turns) - nova_now).total_seconds()
            soonest = left if soonest is None else min(soonest, left)
        self._beats = beats
        return soonest
