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

"""The evacuation of one fenced host: the mechanism.

For each fenced host the engine asks the configured strategy (a policy
plugin, :mod:`instanceha.plugins.evacuation.base`) for an
:class:`EvacuationJob` and then calls :meth:`EvacuationJob.step` once per
tick in a worker thread. A step checks the instances already being
rebuilt (through Nova's migration records, so the truth is in Nova and
survives a restart), restores their power state, unlocks them, and starts
up to ``budget`` new evacuations (fire-and-forget: every ready instance,
``budget`` calls at most at once, the next starting as one returns). The
strategy is consulted for policy only: the order (``priority``), which
pending instances may start now (``ready``), where each goes
(``choose_target``, from a read-only
:class:`instanceha.engine.placement.PlacementView`: the job proposes, the
strategy decides, Nova's scheduler validates), retries, time-outs and
locking.

Restart limits: an instance is retried on the same destination at
most ``[evacuation] same_target_retries`` times, then on other hosts, and
after ``retries`` retries in all it is given up (a terminal state that
marks its host FAILED). Between two attempts of one instance the job waits
``[evacuation] retry_interval`` seconds, doubled after each failure up to
``retry_max_interval``: a conflict (task_state) or a full cloud ("No
valid host") rarely clears within a second.
"""

import collections
from collections.abc import Callable
import dataclasses
import datetime
import enum
import logging
import re
import threading
import typing

from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import placement
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: Migration statuses of an evacuation that is still running.
MIGRATION_RUNNING = frozenset({'accepted', 'pre-migrating', 'migrating',
                               'running', 'queued', 'preparing'})
#: Statuses of an evacuation whose rebuild finished.
MIGRATION_DONE = frozenset({'done', 'completed'})
#: Anything else (failed, error, cancelled) is a failed attempt.

#: Seconds a job waits at most for the expected end of a rebuild before
#: it lists the records again (see :meth:`EvacuationJob._pace`).
CHECK_MAX = 10.0
#: Seconds a rebuild is expected to take before one was seen ending
#: (Nova's fake driver takes about two; a hypervisor that takes longer
#: is looked at again with :data:`LATE_LOOK_MAX`'s back-off, and taught
#: to :class:`RebuildPace` by the first rebuild seen ending).
FIRST_LOOK = 2.0
#: Rebuilds past their expected end are looked at again after 1, 2, 4
#: ... seconds, at most this many.
LATE_LOOK_MAX = 5.0
#: A time-out is looked at this long after it expires, so that the look
#: finds it expired (``>``), not a moment before.
TICK_SLACK = 0.001


class RebuildPace:
    """How long Nova takes to rebuild an instance, as seen so far.

    From its records' ``created_at`` to ``updated_at`` for the
    evacuations this service started and saw end ``done``: the average
    (when the first of several rebuilds is expected to end) and the
    longest of the recent ones (when the last is: those started together
    share their destinations and end apart); shared by every job of an
    engine, so a failure paces its listings by what the previous ones
    taught.
    """

    #: The rebuilds that count (the recent ones weigh more).
    RECENT = 20

    def __init__(self):
        #: Seconds; None until a rebuild was seen ending.
        self.rebuild_time: float | None = None
        #: The longest of the last ``RECENT`` rebuilds; None likewise.
        self.slowest: float | None = None
        self._recent: collections.deque = collections.deque(
            maxlen=self.RECENT)

    def learn(self, rec: model.Migration) -> None:
        if rec.created_at is None or rec.updated_at is None:
            return
        took = max(0.0, (rec.updated_at - rec.created_at).total_seconds())
        self._recent.append(took)
        seen = len(self._recent)
        self.rebuild_time = (took if self.rebuild_time is None else
                             self.rebuild_time + (took - self.rebuild_time)
                             / seen)
        self.slowest = max(self._recent)


LOCK_REASON = 'instanceha: evacuating from %s'
_LOCK_RE = re.compile(r'^instanceha: evacuating from (?P<host>\S+)'
                      r'(?: \(was (?P<was>[A-Z_]+)\))?$')


def lock_reason(host: str, was: str | None) -> str:
    """Our lock reason, read back after a restart.

    It says the lock is ours (we never unlock a lock we did not take) and
    what the instance's status was before (restored after its rebuild).
    """
    text = LOCK_REASON % host
    return '%s (was %s)' % (text, was) if was else text


def our_lock(server: model.Server, host: str) -> tuple[bool, str | None]:
    """(locked by us for ``host``, status before) from Nova's lock reason.

    A lock whose reason is not ours is someone else's (its owner's), and
    is left exactly as it is.
    """
    source, was = lock_of_ours(server)
    if source != host:
        return False, None
    return True, was


def lock_of_ours(server: model.Server) -> tuple[str | None, str | None]:
    """(the host it was evacuated from, status before) of a lock of ours.

    (None, None) when ``server`` is not locked by us (not locked, or
    locked with a reason that is not ours, or with none).
    """
    if not server.locked:
        return None, None
    m = _LOCK_RE.match(server.locked_reason or '')
    if not m:
        return None, None
    return m.group('host'), m.group('was')


#: Statuses an evacuated instance is given back after its rebuild.
RESTORED = frozenset({'ERROR', 'SHUTOFF'})


def restore_status(cloud: ports.CloudPort, server: model.Server,
                   want: str | None) -> str | None:
    """SHUTOFF stays SHUTOFF, ERROR goes back to ERROR after a rebuild.

    ``server`` as Nova reports it after its rebuild; ``want`` its status
    before. Nova (microversion 2.94) stops a rebuilt SHUTOFF server
    itself; a retried one was ERROR when evacuated and comes back ACTIVE.
    Returns the status restored, None when nothing was to be done.
    """
    if want == 'ERROR' and server.status != 'ERROR':
        cloud.reset_server_state(server.id, 'error')
    elif want == 'SHUTOFF' and server.status == 'ACTIVE':
        cloud.stop_server(server.id)
    else:
        return None
    return want


#: How long one reading proves a host off (see :class:`ports.PowerProof`).
PROOF_TTL = ports.PROOF_TTL


def nova_failed(exc: exceptions.CloudError) -> bool:
    """True when Nova did not answer a call (5xx, timeout, unreachable).

    Such a call may or may not have been carried out; a 4xx is a refusal:
    Nova looked at the request and did not do it.
    """
    status = getattr(exc, 'status', None)
    return status is None or status >= 500


def run_calls(env: ports.Environment, calls: list[Callable[[], object]],
              limit: int | None = None) -> list[BaseException | None]:
    """``env.executor.run_calls(calls, limit)``: a job's independent calls.

    At most ``limit`` at once (None: no bound); once one raised, none not
    yet started is started.
    """
    run = getattr(env.executor, 'run_calls', None)
    if run is None:  # an executor from before run_calls
        run = ports.Executor.run_calls.__get__(env.executor)
    return run(calls) if limit is None else run(calls, limit=limit)


class TaskState(str, enum.Enum):
    PENDING = 'pending'
    IN_FLIGHT = 'in_flight'
    DONE = 'done'
    FAILED = 'failed'


@dataclasses.dataclass
class InstanceTask:
    """One instance's evacuation, as far as this service knows it."""

    server_id: str
    name: str
    #: Status before the failure (to restore), None when unknown (resumed
    #: after an earlier failed attempt had already changed it).
    original_status: str | None
    priority: int = 0
    state: TaskState = TaskState.PENDING
    #: Evacuate calls made (accepted or refused).
    attempts: int = 0
    #: Ids of this server's migration records already accounted for: the
    #: record of a new attempt is the one not among them (time stamps of
    #: two quick attempts may be equal, ids never are).
    known: set[str] = dataclasses.field(default_factory=set)
    #: The record of the attempt being watched, once seen.
    current: str | None = None
    #: Destination host -> failed rebuilds there (restart limits).
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Host asked for in the next/current call; None lets Nova choose.
    target: str | None = None
    dest: str | None = None
    reason: str = ''
    #: Monotonic time the current attempt was accepted.
    started: float | None = None
    #: Monotonic time before which a failed instance is not tried again
    #: (retry back-off); None: may start now.
    not_before: float | None = None
    #: The fire-and-forget notion of success: Nova accepted the call.
    accepted: bool = False
    #: The running attempt was started by this job (its record's times
    #: tell how long a rebuild takes; a resumed one's do not).
    timed: bool = False
    locked_by_us: bool = False
    #: Not known whether we locked it (resumed after a restart, or a lock
    #: call Nova did not answer): unlocked only if Nova's lock reason
    #: says the lock is ours.
    verify_lock: bool = False
    #: Locked by someone else before we started: left exactly as it is.
    foreign_lock: bool = False
    #: The last evacuate call got no answer (Nova failed: 5xx, timeout,
    #: unreachable): Nova may have carried it out. Checked on Nova before
    #: the instance is evacuated again.
    unanswered: bool = False
    #: Evacuate calls Nova failed to answer (not counted as attempts:
    #: Nova's fault is not the instance's; only spaces the calls out).
    nova_errors: int = 0
    #: Found being rebuilt without a record in this job's listing (see
    #: :meth:`EvacuationJob._own_records`).
    unlisted: bool = False


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where one host's evacuation stands after a step."""

    #: The host workflow may move on (no more work it must wait for).
    complete: bool
    #: Nothing left to watch (no instance pending or in flight).
    settled: bool
    succeeded: tuple[str, ...]
    #: Server id -> why it was given up.
    failed: dict[str, str]
    in_flight: int
    #: Hosts that received (or are receiving) an instance.
    landed_on: frozenset[str]
    #: Set when evacuations were due but the host was not proven off
    #: now: what its devices said (``on``: it runs again).
    unproven: ports.PowerReading | None = None


class SharedListing:
    """The evacuation records of every host being evacuated, read once.

    The engine makes one per tick and hands it to every job it steps:
    the first job that needs records lists them (one call, all source
    hosts, since the oldest fence), the others filter that listing.
    """

    def __init__(self, cloud: ports.CloudPort, since):
        self.cloud = cloud
        #: The oldest fence time of the jobs sharing it (None: all).
        self.since = since
        self._lock = threading.Lock()
        self._result: list[model.Migration] | None = None
        self._error: Exception | None = None
        self._servers: dict[str, model.Server] | None = None

    def covers(self, since) -> bool:
        """Whether the listing holds every record newer than ``since``."""
        return self.since is None or (since is not None and
                                      since >= self.since)

    def __call__(self) -> list[model.Migration]:
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._result is None:
                try:
                    self._result = self.cloud.migrations(since=self.since)
                except exceptions.InstanceHAError as exc:
                    self._error = exc
                    raise
            return self._result

    def servers(self) -> dict[str, model.Server]:
        """Servers Nova changed since :attr:`since`, by id (one listing).

        Asked only once a record says a rebuild ended, so it is read
        after the records and shows those rebuilds' results.
        """
        with self._lock:
            if self._servers is None:
                self._servers = {s.id: s for s in
                                 self.cloud.changed_servers(self.since)}
            return self._servers


@dataclasses.dataclass(frozen=True)
class StepContext:
    env: ports.Environment
    #: The latest snapshot (to pick other targets); may be None.
    snapshot: model.Snapshot | None
    #: How many new evacuations this step may start.
    budget: int
    #: Reads the host's power (or kdump) now. Every evacuate call needs a
    #: reading made in its own step (the cloud port refuses it otherwise,
    #: see :class:`ports.PowerProof`). None: nothing is evacuated.
    prove_off: Callable[[], ports.PowerReading] | None = None
    #: Writes ``(instances given up, evacuation stopped)`` where a resumed
    #: copy reads them (the host's marker), as soon as they change.
    record: Callable[[tuple[str, ...], bool], None] | None = None
    #: What the marker recorded before a restart (short ids, see
    #: :func:`instanceha.engine.marker.short_id`): never evacuated again.
    gave_up: tuple[str, ...] = ()
    #: The marker says this host's evacuation was stopped: nothing
    #: pending is started any more.
    stopped: bool = False
    #: This tick's listing of evacuation records, shared by every job
    #: (None: the job lists its own host's).
    listing: SharedListing | None = None
    #: What must be in Nova before this step's first evacuate call (the
    #: marker that forces the host down): run first, at the same time as
    #: the step's reads (the records, the power proof), see
    #: :meth:`EvacuationJob._prepare`. Its error ends the step.
    prelude: Callable[[], None] | None = None
    #: Slots may be used again within this step. Tracked strategies:
    #: the slots of the rebuilds it sees ending (no other host shares
    #: the cap). Fire-and-forget: a call's slot the moment the call
    #: returns, so the step starts every ready instance, ``budget``
    #: calls at most running at once (no other host waits for a slot).
    reuse: bool = False


class Policy(typing.Protocol):
    """What a job asks its strategy (a plugin of ``instanceha.evacuation``).

    :class:`instanceha.plugins.evacuation.base.EvacuationStrategy`
    implements it from the ``[evacuation]`` options.
    """

    #: True: done once rebuilt; False: once Nova accepted the call.
    tracks: bool
    stop_on_failure: bool
    retries: int
    same_target_retries: int
    timeout: int
    lock_instances: bool

    def retry_delay(self, attempts: int) -> int:
        """Seconds to wait before retrying after ``attempts`` failures."""

    def priority(self, server: model.Server) -> int:
        """Restart priority of ``server`` (higher first)."""

    def ready(self, tasks: list['InstanceTask']) -> list['InstanceTask']:
        """The pending tasks that may start now, in order."""

    def choose_target(self, task: 'InstanceTask',
                      view: placement.PlacementView) -> str | None:
        """Where the next evacuate call of ``task`` asks Nova to rebuild it.

        A host (a request Nova's scheduler still validates), or None for
        Nova's scheduler to choose; see :meth:`EvacuationJob._placer`.
        """


class EvacuationJob:
    """The evacuation of one fenced host; advanced by :meth:`step`."""

    def __init__(self, strategy: Policy, host: str,
                 servers: list[model.Server], target: str | None,
                 since):
        self.strategy = strategy
        self.host = host
        self.target = target
        #: Migration records older than this are not ours.
        self.since = since
        #: The skew between our clock and Nova's when ``since`` was first
        #: used (see _records).
        self.since_skew: float | None = None
        self._servers = sorted(servers, key=lambda s: s.id)
        self.tasks: dict[str, InstanceTask] = {}
        self._classified = False
        #: Why nothing more is started (the host left our hands).
        self._stopped: str | None = None
        #: What the host's marker says was given up (short ids), stopped.
        self._recorded: tuple[tuple[str, ...], bool] = ((), False)
        #: When running rebuilds are next looked at (monotonic; None: at
        #: the next step), see :meth:`due`.
        self._next_check: float | None = None
        #: Looks in a row at rebuilds all past their expected end.
        self._late_looks = 0
        #: How long rebuilds take (the engine hands its shared one).
        self.pace = RebuildPace()
        #: Set by the engine on the first job of a failure it fenced
        #: itself (not resumed from a marker, not fenced again): no
        #: evacuation of this failure can have started, so the instances
        #: are classified from the servers listing alone (an instance
        #: being rebuilt by someone else shows its task state there) and
        #: Nova's records are first listed when rebuilds are expected to
        #: end. Records of an earlier failure of the host, which the
        #: listing at the start would show, are never this one's.
        self.new_failure = False

    # -- helpers ----------------------------------------------------------

    def _emit(self, env, event, **details):
        env.events.emit(event, self.host, **details)

    def _records(self, env, snapshot: model.Snapshot | None = None,
                 listing: 'SharedListing | None' = None
                 ) -> dict[str, list[model.Migration]]:
        out: dict[str, list[model.Migration]] = {}
        ours = self.since
        if snapshot is not None and ours is not None:
            skew = snapshot.clock_skew or 0.0
            if self.since_skew is None:
                self.since_skew = skew
            # Our clock may have been stepped since ``since`` was read from
            # it (an NTP step, a skew that changed): move it by the change,
            # so that it names the same moment of Nova's clock.
            ours += datetime.timedelta(seconds=skew - self.since_skew)
        # Nova writes created_at on its own clock.
        since = (snapshot.nova_now(ours)
                 if snapshot is not None and ours is not None else ours)
        if listing is not None and listing.covers(ours):
            found = [m for m in listing() if m.source_host == self.host]
        else:
            found = env.cloud.migrations(source_host=self.host,
                                         since=ours)
        for mig in found:
            if mig.migration_type not in ('evacuation', None):
                continue
            if (since is not None and mig.created_at is not None
                    and mig.created_at < since):
                # Made in an earlier failure of this host and updated
                # since (its host's boot completes them): not ours now.
                continue
            out.setdefault(mig.server_id, []).append(mig)
        for recs in out.values():
            recs.sort(key=lambda m: (m.created_at is not None,
                                     m.created_at, m.id), reverse=True)
        return out

    def _classify(self, env, records,
                  snapshot: model.Snapshot | None,
                  *, gave_up: tuple[str, ...] = (),
                  stopped: bool = False) -> None:
        """Build the task list from the servers and Nova's records.

        Run once, also when resuming after a restart: an instance with a
        running evacuation is watched, not evacuated again; one already
        rebuilt elsewhere is only unlocked; one the marker says was given
        up (``gave_up``, ``stopped``) is never evacuated again.
        """
        gave_up_ids = set(gave_up)
        self._recorded = (tuple(sorted(gave_up_ids)), stopped)
        for srv in self._servers:
            recs = seen = records.get(srv.id, [])
            if srv.host == self.host and not srv.task_state:
                # Listed idle on this host: a rebuild that ended (done,
                # completed) moved it away, so such a record is from an
                # earlier failure of this host (within MIGRATION_SLACK of
                # this one) and the server came back since: history, not
                # an evacuation of this failure.
                recs = [r for r in recs if r.status not in MIGRATION_DONE]
            live = [r for r in recs if r.status in MIGRATION_RUNNING] or [
                r for r in recs if r.status in MIGRATION_DONE]
            ours, was = our_lock(srv, self.host)
            if srv.locked and not ours and srv.locked_reason is None:
                # A cloud that does not report lock reasons: a lock on an
                # instance we evacuated before is taken to be ours.
                ours = bool(recs)
            task = InstanceTask(
                server_id=srv.id, name=srv.name,
                original_status=was or (srv.status if (
                    srv.status in model.EVACUABLE_STATUSES and not any(
                        r.status not in MIGRATION_RUNNING | MIGRATION_DONE
                        for r in recs)) else None),
                priority=self.strategy.priority(srv),
                attempts=len(recs),
                # Every record listed now is known: the next attempt's
                # record is the one that appears after its call.
                known={r.id for r in seen},
                locked_by_us=ours, foreign_lock=srv.locked and not ours)
            for rec in recs:
                if (rec.status not in MIGRATION_RUNNING | MIGRATION_DONE
                        and rec.dest_host):
                    task.failures[rec.dest_host] = task.failures.get(
                        rec.dest_host, 0) + 1
            task.target = self.next_target(task, snapshot, first=True)
            if marker_mod.short_id(srv.id) in gave_up_ids:
                # Given up before a restart (its marker says so), whatever
                # its records look like now (a rebuild that timed out may
                # still run, or have failed since).
                task.state = TaskState.FAILED
                task.reason = 'given up before a restart'
                task.locked_by_us = ours
                self._emit(env, events.EVACUATE_SKIPPED, server=srv.id,
                           reason=task.reason)
            elif live or srv.task_state == 'rebuilding':
                # Being rebuilt (its record may not be listed yet): watched,
                # never evacuated again; its record is picked up when listed.
                task.current = live[0].id if live else None
                task.unlisted = not live
                task.state = TaskState.IN_FLIGHT
                task.accepted = True
                task.started = env.clock.monotonic()
            elif len(recs) > self.strategy.retries:
                # Given up before a restart: Nova's records of its failed
                # attempts say so; it is never evacuated again.
                task.state = TaskState.FAILED
                task.reason = ('given up after %d failed attempt(s)'
                               % len(recs))
                task.locked_by_us = ours
            elif srv.status not in model.EVACUABLE_STATUSES:
                # Nova evacuates only ACTIVE, ERROR and SHUTOFF;
                # say so, so that nobody waits for it.
                self._emit(env, events.EVACUATE_SKIPPED, server=srv.id,
                           status=srv.status)
                continue
            elif stopped:
                # This host's evacuation stopped before a restart.
                task.state = TaskState.FAILED
                task.reason = ('not evacuated: evacuation of %s stopped '
                               'before a restart' % self.host)
                self._emit(env, events.EVACUATE_SKIPPED, server=srv.id,
                           reason=task.reason)
            self.tasks[srv.id] = task
        for server_id in sorted(set(records) - set(self.tasks)):
            # Left the host already (rebuilt elsewhere) before a restart:
            # watch it to the end so that it is unlocked.
            recs = records[server_id]
            live = [r for r in recs if r.status in MIGRATION_RUNNING] or [
                r for r in recs if r.status in MIGRATION_DONE]
            if not live or marker_mod.short_id(server_id) in gave_up_ids:
                continue  # every attempt failed, or given up: not ours
            self.tasks[server_id] = InstanceTask(
                server_id=server_id, name=server_id, original_status=None,
                state=TaskState.IN_FLIGHT, attempts=len(recs),
                known={r.id for r in recs}, current=live[0].id,
                accepted=True, locked_by_us=True,
                started=env.clock.monotonic(), verify_lock=True)
        self._classified = True

    def _unlock(self, env, task: InstanceTask) -> None:
        if not task.locked_by_us:
            return
        if task.verify_lock and not self._ours_now(env, task):
            return
        try:
            env.cloud.set_server_lock(task.server_id, False)
        except exceptions.CloudError as exc:
            if getattr(exc, 'status', None) != 404:
                raise
        task.locked_by_us = False
        self._emit(env, events.SERVER_UNLOCKED, server=task.server_id)

    def _ours_now(self, env, task: InstanceTask) -> bool:
        """Whether Nova says ``task``'s instance carries a lock of ours.

        Read only when that is not known (``verify_lock``); afterwards it
        is: ours, someone else's (left exactly as it is), or none.
        """
        try:
            server = env.cloud.get_server(task.server_id)
        except exceptions.CloudError as exc:
            if getattr(exc, 'status', None) != 404:
                raise
            server = None
        ours, was = (our_lock(server, self.host) if server is not None
                     else (False, None))
        task.locked_by_us, task.verify_lock = ours, False
        task.foreign_lock = bool(server is not None and server.locked and
                                 not ours)
        task.original_status = task.original_status or was
        return ours

    def _give_up(self, env, task: InstanceTask, reason: str) -> None:
        task.state = TaskState.FAILED
        task.reason = reason
        self._emit(env, events.EVACUATE_GAVE_UP, server=task.server_id,
                   attempts=task.attempts, reason=reason)
        self._unlock(env, task)

    def next_target(self, task: InstanceTask,
                    snapshot: model.Snapshot | None, *,
                    first: bool = False) -> str | None:
        """Where the next evacuate call of ``task`` asks Nova to rebuild it.

        The one place a destination is chosen (None lets Nova's scheduler
        choose; a host we name is still validated by Nova's scheduler,
        never forced). ``first``: the host the job was begun with (the
        reserved spare, see the reservation's ``evacuation_target``).
        After failures (restart limits): the same destination a bounded
        number of times, then the least-failed other host that is up and
        enabled.
        """
        if first:
            return self.target
        limit = self.strategy.same_target_retries
        if task.target is not None and task.failures.get(task.target,
                                                         0) <= limit:
            return task.target
        if not any(n > limit for n in task.failures.values()):
            return task.target
        if snapshot is None:
            return None
        candidates = sorted(
            (task.failures.get(s.host, 0), s.host)
            for s in snapshot.services
            if s.host != self.host and s.state == model.UP
            and not s.disabled and not s.forced_down
            and task.failures.get(s.host, 0) <= limit)
        return candidates[0][1] if candidates else None

    def _failed_attempt(self, env, task, failed_on, why, snapshot,
                        event, **details) -> None:
        """Report a failed attempt (``event``), then retry or give up.

        A retry waits ``retry_delay`` seconds (reported as ``retry_in``):
        back-off, so that a conflict or a full cloud has time to clear.
        """
        if failed_on:
            task.failures[failed_on] = task.failures.get(failed_on, 0) + 1
        if task.attempts > self.strategy.retries:
            self._emit(env, event, server=task.server_id,
                       attempt=task.attempts, **details)
            self._give_up(env, task, why)
            return
        delay = self.strategy.retry_delay(task.attempts)
        self._emit(env, event, server=task.server_id, attempt=task.attempts,
                   retry_in=delay, **details)
        task.state = TaskState.PENDING
        task.accepted = False
        task.target = self.next_target(task, snapshot)
        task.not_before = env.clock.monotonic() + delay if delay else None

    def _restore_power_state(self, env, task,
                             server: model.Server) -> str | None:
        """Restore the status ``task``'s instance had (see restore_status)."""
        want = restore_status(env.cloud, server, task.original_status)
        if want is None:
            return None
        self._emit(env, events.POWER_STATE_RESTORED, server=task.server_id,
                   status=want)
        return want

    @staticmethod
    def _record_tells_all(task: InstanceTask) -> bool:
        """Whether a ``done`` record is all there is to know of a rebuild.

        Nova marks an evacuation's record done only after the rebuild
        has set the instance on its new host, its task cleared, ACTIVE
        (microversion 2.94; see nova's ``finish_evacuation``). So an
        instance that was ACTIVE, with no lock of ours to take off, needs
        no read of the server: nothing to restore, nothing to unlock.
        Only for an attempt this job made (``timed``): its record is the
        one that appeared after the call, never an older one.
        """
        return (task.timed and task.original_status == 'ACTIVE' and
                not task.locked_by_us and not task.verify_lock)

    def _done_from_record(self, env, task: InstanceTask,
                          rec: model.Migration) -> None:
        """The server was rebuilt on ``rec.dest_host``: report it."""
        task.state = TaskState.DONE
        task.dest = rec.dest_host
        self._emit(env, events.EVACUATE_DONE, server=task.server_id,
                   dest=rec.dest_host, status='ACTIVE')

    def _done(self, env, task, server: model.Server) -> None:
        """The server was rebuilt elsewhere: restore, report, unlock."""
        restored = self._restore_power_state(env, task, server)
        task.state = TaskState.DONE
        task.dest = server.host
        # The status Nova reports (after our restore), never an assumed one.
        self._emit(env, events.EVACUATE_DONE, server=task.server_id,
                   dest=server.host, status=restored or server.status)
        self._unlock(env, task)

    # -- pacing -----------------------------------------------------------

    def due(self, now: float, budget: int) -> bool:
        """Whether a step now has anything to do.

        Something to start (a pending instance past its back-off, and a
        slot for it), an unanswered call to settle, an unlock to retry,
        or running rebuilds to look at (:meth:`_check_due`). A step that
        only waits for rebuilds is not taken: their records are listed
        when the rebuilds are expected to have ended, not every tick.
        """
        if self._check_due(now):
            return True
        for task in self.tasks.values():
            if task.state is TaskState.PENDING and budget > 0 and (
                    task.not_before is None or now >= task.not_before):
                return True
            if task.state is TaskState.PENDING and self._stopped:
                return True  # to be given up (and unlocked) now
            if (task.state in (TaskState.DONE, TaskState.FAILED) and
                    task.locked_by_us):
                return True
        return False

    def _check_due(self, now: float) -> bool:
        """Whether Nova's records are to be listed in a step now."""
        if not self._classified or any(t.unanswered
                                       for t in self.tasks.values()):
            return True
        if not any(t.state is TaskState.IN_FLIGHT
                   for t in self.tasks.values()):
            return False
        return self._next_check is None or now >= self._next_check

    def _only_the_last_ends(self, running: list[InstanceTask]) -> bool:
        """Whether only the end of the last running rebuild matters.

        No lock of ours to lift, no status to restore (an instance that
        was stopped or in error) and no instance waiting for a slot: a
        rebuild seen ending frees nothing and changes nothing; the last
        one's end moves the host on. (A rebuild Nova fails early is then
        retried at the latest one's expected end: rebuilds started
        together are expected to end together.)
        """
        if any(t.locked_by_us or t.verify_lock or
               t.original_status in RESTORED for t in running):
            return False
        return not any(t.state is TaskState.PENDING
                       for t in self.tasks.values())

    def _pace(self, now: float, looked: bool = False,
              ended: bool = False) -> None:
        """When to look at the running rebuilds next.

        At the expected end of the earliest one (the average rebuild
        time :class:`RebuildPace` learned), or of the latest when only
        that matters (:meth:`_only_the_last_ends`; the longest recent
        rebuild), at most ``CHECK_MAX`` ahead; ``FIRST_LOOK`` before one
        was seen ending. Rebuilds
        past their expected end are looked at after 1, 2, 4 ... seconds
        (at most ``LATE_LOOK_MAX``; the wait grows with each ``looked``
        that saw them still running), from 1 again whenever a look saw
        one end (``ended``): its siblings are likely close behind. So a rebuild
        is seen ending at most ``LATE_LOOK_MAX`` seconds late, with a
        few listings per failure instead of one per tick; a time-out
        (``[evacuation] timeout``) is looked at when it expires.
        """
        running = [t for t in self.tasks.values()
                   if t.state is TaskState.IN_FLIGHT and
                   t.started is not None]
        last = self._only_the_last_ends(running)
        took = self.pace.slowest if last else self.pace.rebuild_time
        if took is None:
            took = FIRST_LOOK
        ends = [t.started + took for t in running
                if t.started + took > now]
        if ended:
            self._late_looks = 0
        wait = CHECK_MAX
        if ends:
            wait = min(wait, (max(ends) if last else min(ends)) - now)
        if len(ends) < len(running):  # some are past their expected end
            wait = min(wait, 2.0 ** self._late_looks, LATE_LOOK_MAX)
            if looked:
                self._late_looks += 1
        timeout = self.strategy.timeout
        # A rebuild's time-out is seen when it expires, not a wait late.
        deadlines = [t.started + timeout + TICK_SLACK for t in running
                     if timeout and t.started + timeout + TICK_SLACK > now]
        if deadlines:
            wait = min(wait, min(deadlines) - now)
        self._next_check = now + wait

    # -- one step ---------------------------------------------------------

    def _check(self, env, task, records, snapshot,
               read: Callable[[str], model.Server]) -> None:
        recs = records.get(task.server_id, [])
        timeout = self.strategy.timeout
        overdue = (task.started is not None and timeout and
                   env.clock.monotonic() - task.started > timeout)
        if task.current is None:
            new = [r for r in recs if r.id not in task.known]
            if new:
                task.current = new[0].id
                task.known.add(new[0].id)
        rec = next((r for r in recs if r.id == task.current), None)
        if rec is None and task.unlisted:
            recs, rec = self._own_records(env, task, read)
        if rec is None or rec.status in MIGRATION_RUNNING:
            if overdue:
                self._give_up(env, task, 'rebuild did not finish within '
                              '%d s' % timeout)
            return
        if rec.status in MIGRATION_DONE:
            if task.timed:
                self.pace.learn(rec)
            if self._record_tells_all(task):
                self._done_from_record(env, task, rec)
                return
            try:
                server = read(task.server_id)
            except exceptions.CloudError as exc:
                if getattr(exc, 'status', None) != 404:
                    raise
                task.state = TaskState.DONE
                task.reason = 'deleted'
                return
            if server.task_state or server.host == self.host:
                if overdue:
                    self._give_up(env, task, 'rebuild did not settle within '
                                  '%d s' % timeout)
                return
            if task.verify_lock:
                ours, was = our_lock(server, self.host)
                task.locked_by_us = ours or (server.locked and
                                             server.locked_reason is None)
                task.original_status = task.original_status or was
                task.verify_lock = False
            self._done(env, task, server)
            return
        task.current = None
        if rec.dest_host:
            reason = 'rebuild on %s ended %s' % (rec.dest_host, rec.status)
        else:
            reason = ('rebuild ended %s before Nova chose a destination'
                      % rec.status)
        # A record without a destination ("No valid host") failed on the
        # host we asked for, if we asked for one (a full spare): it counts
        # against that host, so that the next attempts go elsewhere.
        self._failed_attempt(env, task, rec.dest_host or task.target,
                             reason, snapshot, events.EVACUATE_FAILED,
                             dest=rec.dest_host, reason=reason)

    def _own_records(self, env, task: InstanceTask,
                     read: Callable[[str], model.Server]
                     ) -> tuple[list[model.Migration],
                                model.Migration | None]:
        """A rebuild found running whose record the job's listing lacks.

        Its record may just not be listed yet; or it may be older than
        the job's listing reaches (an earlier recovery of this host whose
        marker was lost: an operator enabled the host mid-evacuation, and
        the host was found failed anew), and then that listing never
        shows it. The server's own records, listed without that bound,
        do: the newest is the running attempt's, unless that one is not
        listed yet either (an older one that ended is taken only once the
        server is no longer being rebuilt). One small listing a look,
        only for such instances; the records still decide, as for every
        other rebuild.
        """
        own = env.cloud.migrations(server_id=task.server_id)
        if task.current is None and own and own[0].id not in task.known:
            newest = own[0]
            if (newest.status in MIGRATION_RUNNING | MIGRATION_DONE or
                    not read(task.server_id).task_state):
                task.current = newest.id
                task.known.add(newest.id)
                task.attempts = max(task.attempts, 1)  # that rebuild
        return own, next((r for r in own if r.id == task.current), None)

    def _placer(self, env, snapshot: model.Snapshot | None
                ) -> Callable[[InstanceTask], str | None]:
        """Asks the strategy where each evacuate call of this step goes.

        The strategy sees a read-only :class:`placement.PlacementView`
        (never the environment) and returns a host, or None for Nova's
        scheduler; the built-in strategies keep the engine's proposal
        (``task.target``: the reserved spare, the next host after
        failures). The hosts' vCPUs are read from the cloud at most once
        per step, and only if the strategy looks at them; the calls of
        this step are counted in. A strategy that fails leaves the
        engine's proposal: placement is advice, never a reason not to
        evacuate.
        """
        read: list = []
        asked: dict[str, list[str]] = {}

        def vcpus():
            if not read:
                try:
                    read.append(env.cloud.host_vcpus())
                except exceptions.CloudError as exc:
                    LOG.warning('room on the hosts unknown (%s); '
                                'Nova\'s scheduler still checks each '
                                'target', exc)
                    read.append(None)
            return read[0]

        def choose(task: InstanceTask) -> str | None:
            moving: dict[str, list[str]] = {}
            for other in self.tasks.values():
                if other.state is TaskState.IN_FLIGHT and other.target:
                    moving.setdefault(other.target, []).append(
                        other.server_id)
            view = placement.build(
                snapshot, self.host, spare=self.target, vcpus=vcpus,
                servers=self._servers, on_the_way=moving,
                asked_since_read=asked)
            try:
                target = self.strategy.choose_target(task, view)
            except Exception:
                LOG.exception('evacuation strategy %s failed to choose a '
                              'target for %s; asking for %s',
                              getattr(self.strategy, 'name', '') or
                              type(self.strategy).__name__,
                              task.server_id, task.target or
                              'Nova\'s choice')
                return task.target
            if target is not None:
                asked.setdefault(target, []).append(task.server_id)
            return target
        return choose

    def _locks(self, task: InstanceTask) -> bool:
        """Whether ``task``'s instance is locked while it is evacuated.

        Always with ``lock_instances``; without it, only an instance whose
        status must be restored after its rebuild (ERROR, SHUTOFF): the
        lock's reason is where that status is kept, so that a service
        restarted in the middle of the rebuild still restores it.
        """
        return self.strategy.lock_instances or task.original_status not in (
            None, 'ACTIVE')

    def _start(self, env, task: InstanceTask, snapshot,
               choose: Callable[[InstanceTask], str | None] | None = None
               ) -> None:
        if (self._locks(task) and task.verify_lock and
                self._ours_now(env, task)):
            self._emit(env, events.SERVER_LOCKED, server=task.server_id,
                       confirmed='Nova carried out the unanswered call')
        if (self._locks(task) and not task.locked_by_us and
                not task.foreign_lock):
            try:
                env.cloud.set_server_lock(task.server_id, True, lock_reason(
                    self.host, task.original_status))
            except exceptions.CloudError as exc:
                if nova_failed(exc):
                    # Nova may have locked it: should the task end before
                    # a lock call is answered, it is unlocked if Nova's
                    # lock reason says the lock is ours.
                    task.locked_by_us = task.verify_lock = True
                raise
            task.locked_by_us = True
            self._emit(env, events.SERVER_LOCKED, server=task.server_id)
        if choose is not None:
            task.target = choose(task)
        task.attempts += 1
        try:
            env.cloud.evacuate(task.server_id, host=task.target)
        except exceptions.CloudError as exc:
            if nova_failed(exc):
                self._unanswered(env, task, exc)
                return
            # A refusal naming a target may be the target's fault: after
            # same_target_retries, try elsewhere.
            self._failed_attempt(env, task, task.target,
                                 'evacuate refused: %s' % exc, snapshot,
                                 events.EVACUATE_REFUSED, reason=str(exc))
            return
        task.current = None
        task.state = TaskState.IN_FLIGHT
        task.accepted = True
        task.timed = True
        task.started = env.clock.monotonic()
        self._emit(env, events.EVACUATE_REQUESTED, server=task.server_id,
                   target=task.target, attempt=task.attempts)

    def _unanswered(self, env, task: InstanceTask,
                    exc: exceptions.CloudError) -> None:
        """Nova did not answer an evacuate call: it may have done it.

        Not an attempt of the instance (Nova's fault is not its fault, and
        must never mark its host FAILED); before calling again, the next
        step asks Nova whether the call was carried out
        (:meth:`_reconcile`), so that an instance is never evacuated twice
        and never from a host it has already left.
        """
        task.attempts -= 1
        task.nova_errors += 1
        task.unanswered = True
        delay = self.strategy.retry_delay(task.nova_errors)
        task.not_before = env.clock.monotonic() + delay if delay else None
        self._emit(env, events.EVACUATE_UNANSWERED, server=task.server_id,
                   attempt=task.attempts + 1, retry_in=delay,
                   reason=str(exc))

    def _reconcile(self, env, task: InstanceTask, records) -> None:
        """Did Nova carry out the evacuate call it did not answer?

        A migration record we do not know yet, or the instance being
        rebuilt or gone from the host, says it did: the instance is then
        watched like any accepted evacuation. Otherwise it is still on the
        failed host, idle, and the call is made again.
        """
        new = [r for r in records.get(task.server_id, [])
               if r.id not in task.known]
        server = None
        if not new:
            try:
                server = env.cloud.get_server(task.server_id)
            except exceptions.CloudError as exc:
                if getattr(exc, 'status', None) != 404:
                    raise
                task.unanswered = False
                task.state = TaskState.DONE
                task.reason = 'deleted'
                return
            if not server.task_state and server.host == self.host:
                task.unanswered = False  # not carried out: call again
                return
        task.unanswered = False
        task.attempts += 1
        task.accepted = True
        task.not_before = None
        if server is not None and not server.task_state:
            # Gone from the host and settled, with no record of ours
            # listed (yet): it runs elsewhere.
            self._done(env, task, server)
            return
        task.state = TaskState.IN_FLIGHT
        task.current = None
        task.started = env.clock.monotonic()
        self._emit(env, events.EVACUATE_REQUESTED, server=task.server_id,
                   target=task.target, attempt=task.attempts,
                   confirmed='Nova carried out the unanswered call')

    def step(self, ctx: StepContext) -> Progress:
        """Check running evacuations, then start up to ``ctx.budget``.

        Fire-and-forget with ``ctx.reuse``: every ready instance, up to
        ``ctx.budget`` calls running at once.
        """
        env = ctx.env
        if env.guard is not None:
            # A job queued while this copy led may run after it stopped
            # leading: it then neither acts nor tells a story.
            env.guard.check('evacuation step of %s' % self.host)
        records = None
        budget = ctx.budget
        # A proof read in this step only: the fence's, or an earlier
        # step's, says nothing about now (someone may have powered the
        # host on since). The cloud port asks it before every evacuate.
        proof = (ports.PowerProof(self.host, ctx.prove_off, env.clock)
                 if ctx.prove_off is not None else None)
        if ctx.prelude is not None:
            self._prepare(env, ctx, proof)
        if not self._classified:
            if not self.new_failure:
                records = self._records(env, ctx.snapshot, ctx.listing)
            self._classify(env, records or {}, ctx.snapshot,
                           gave_up=ctx.gave_up, stopped=ctx.stopped)
            if self.strategy.tracks:
                # Rebuilds found running (a resumed job) count against the
                # cap the budget was computed without.
                budget -= self.in_flight
        for task in self._sorted():
            # An unlock that failed after the task ended is retried.
            if task.state in (TaskState.DONE, TaskState.FAILED):
                self._unlock(env, task)
        watching = [t for t in self._sorted()
                    if t.state is TaskState.IN_FLIGHT]
        unanswered = [t for t in self._sorted() if t.unanswered]
        now = env.clock.monotonic()
        if (watching or unanswered) and (records is not None or
                                         self._check_due(now)):
            if records is None:
                records = self._records(env, ctx.snapshot, ctx.listing)
            read = self._reader(env, ctx)
            for task in watching:
                self._check(env, task, records, ctx.snapshot, read)
            for task in unanswered:
                self._reconcile(env, task, records)
            ended = sum(1 for t in watching
                        if t.state is not TaskState.IN_FLIGHT)
            if self.strategy.tracks and ctx.reuse:
                # The slots of the rebuilds seen ending are this job's
                # again at once (the next instance does not wait for the
                # next tick): never more in flight than at the start.
                budget += ended
            self._pace(now, looked=True, ended=bool(ended))
        self._stop_if_given_up(env)
        if self._stopped is None:
            self._record(ctx)
        if self._stopped is not None:
            for task in self._sorted():
                if task.state is TaskState.PENDING:
                    task.state = TaskState.FAILED
                    task.reason = self._stopped
                    self._emit(env, events.EVACUATE_SKIPPED,
                               server=task.server_id, reason=self._stopped)
                    self._unlock(env, task)
            return self.progress()
        choose = self._placer(env, ctx.snapshot)
        batch: list[InstanceTask] = []
        # Fire-and-forget with slots reused: the budget bounds the calls
        # running at once (``_start_all``), not the calls of the step.
        streams = ctx.reuse and not self.strategy.tracks
        if proof is not None and budget > 0 and env.coordinator.is_leader():
            for task in self.strategy.ready(self._sorted()):
                if len(batch) >= budget and not streams:
                    break
                if task.not_before is not None and now < task.not_before:
                    continue  # backing off after a failed attempt
                batch.append(task)
        unproven = self._start_all(env, ctx, batch, proof, choose, budget)
        if unproven is not None:
            self._record(ctx)
            return dataclasses.replace(self.progress(), unproven=unproven)
        if batch:
            self._pace(now)  # with the rebuilds just started
        self._record(ctx)
        return self.progress()

    def _prepare(self, env, ctx: StepContext,
                 proof: ports.PowerProof | None) -> None:
        """Run ``ctx.prelude`` and warm this step's reads, all at once.

        The prelude (a marker write) and the reads the step needs before
        its first evacuate call (the records, the host's power) do not
        depend on each other: made at the same time, the first call
        waits for the slowest of them, not for their sum. The reads only
        warm caches: the power reading still counts for ``PROOF_TTL``
        from when it was made (read again should it be older, or not
        prove the host off), the records are this step's listing. The
        prelude's error ends the step (nothing is evacuated).
        """
        calls: list[Callable[[], object]] = [ctx.prelude]
        if proof is not None and ctx.budget > 0:
            # Not proven (or unreadable): the step reads again, says so.
            calls.append(proof.require)
        if (ctx.listing is not None and not self._classified and
                not self.new_failure):
            calls.append(ctx.listing)
        errors = run_calls(env, calls)
        if errors[0] is not None:
            raise errors[0]

    def _start_all(self, env, ctx: StepContext, batch: list[InstanceTask],
                   proof: ports.PowerProof | None,
                   choose: Callable[[InstanceTask], str | None],
                   limit: int) -> ports.PowerReading | None:
        """Start the evacuations of ``batch``; what a failed proof read.

        The host's power is read first (before any lock: a host found on
        keeps its instances as they are), the targets are chosen one
        after the other (each choice sees those before it), then the
        calls are made at once, ``limit`` at most at the same time, the
        next starting the moment one returns (``env.executor.run_calls``):
        a rebuild does not wait for the evacuate calls of the instances
        before it. Each call still passes the cloud port's guard
        (leadership, and the proof, read again should it be older than
        ``PROOF_TTL``); once one fails (the host not proven off, this
        copy no longer leading), no call not yet started is started.
        """
        if not batch or proof is None:
            return None
        try:
            with env.guard.proving(proof):
                proof.require()
        except ports.PowerUnproven as exc:
            return exc.reading
        for task in batch:
            task.not_before = None
            task.target = choose(task)

        def start(task: InstanceTask) -> None:
            with env.guard.proving(proof):
                self._start(env, task, ctx.snapshot)

        errors = run_calls(env, [lambda t=task: start(t) for task in batch],
                           limit=limit)
        for exc in errors:
            if exc is not None and not isinstance(exc, ports.PowerUnproven):
                raise exc
        for exc in errors:
            if isinstance(exc, ports.PowerUnproven):
                return exc.reading
        return None

    def _record(self, ctx: StepContext) -> None:
        """Write what was given up, the moment it changes (see ``record``).

        A restarted service reads it from the marker, so an instance
        given up (a rebuild that timed out included, which leaves no
        failed record) is never evacuated again, and a host whose
        evacuation stopped stays stopped.
        """
        failed = tuple(sorted(marker_mod.short_id(t.server_id)
                              for t in self.tasks.values()
                              if t.state is TaskState.FAILED))
        now = (failed, bool(failed) and (self.strategy.stop_on_failure or
                                         self._recorded[1]))
        if now == self._recorded or ctx.record is None or not failed:
            return
        ctx.record(*now)
        self._recorded = now

    def _reader(self, env, ctx: StepContext
                ) -> Callable[[str], model.Server]:
        """How a server whose rebuild ended is read.

        From the tick's one bulk listing of changed servers; alone only
        when it is missing from it.
        """
        def read(server_id: str) -> model.Server:
            if ctx.listing is not None and ctx.listing.covers(self.since):
                found = ctx.listing.servers().get(server_id)
                if found is not None:
                    return found
            return env.cloud.get_server(server_id)
        return read

    def _stop_if_given_up(self, env) -> None:
        """Once one instance is given up, evacuate nothing more.

        Rebuilds already running are left to finish (never disturbed);
        instances not yet started are reported as not evacuated, so the
        host is marked FAILED and an operator decides about them.
        """
        if not self.strategy.stop_on_failure:
            return
        given_up = sorted(t.server_id for t in self.tasks.values()
                          if t.state is TaskState.FAILED)
        if not given_up:
            return
        for task in self._sorted():
            if task.state is TaskState.PENDING:
                self._give_up(env, task, 'not evacuated: evacuation of %s '
                              'stopped after %s was given up'
                              % (self.host, given_up[0]))

    def stop(self, reason: str) -> None:
        """Start nothing more: pending instances are left where they are.

        Rebuilds already running are watched to their end (and their
        instances unlocked) by later steps.
        """
        self._stopped = reason

    def release(self, env: ports.Environment) -> None:
        """Unlock what is locked but not being rebuilt (clean shutdown).

        Instances in flight stay locked: the next start watches them to
        the end and unlocks them then.
        """
        for task in self._sorted():
            if task.state is not TaskState.IN_FLIGHT:
                self._unlock(env, task)

    # -- results ----------------------------------------------------------

    def _sorted(self) -> list[InstanceTask]:
        return [self.tasks[k] for k in sorted(self.tasks)]

    def wants_more(self) -> bool:
        """Whether some instance still waits for its evacuation call."""
        return not self._classified or any(
            t.state is TaskState.PENDING for t in self.tasks.values())

    @property
    def in_flight(self) -> int:
        return sum(1 for t in self.tasks.values()
                   if t.state is TaskState.IN_FLIGHT)

    def progress(self) -> Progress:
        tasks = self._sorted()
        open_ = [t for t in tasks if t.state in (TaskState.PENDING,
                                                 TaskState.IN_FLIGHT)]
        if self.strategy.tracks:
            ok = [t for t in tasks if t.state is TaskState.DONE]
            complete = not open_
        else:
            ok = [t for t in tasks if t.accepted or
                  t.state is TaskState.DONE]
            complete = not any(t.state is TaskState.PENDING for t in tasks)
        landed = {t.dest for t in tasks if t.dest}
        landed |= {t.target for t in tasks
                   if t.state is TaskState.IN_FLIGHT and t.target}
        return Progress(
            complete=self._classified and complete,
            settled=self._classified and not open_,
            succeeded=tuple(t.server_id for t in ok),
            failed={t.server_id: t.reason for t in tasks
                    if t.state is TaskState.FAILED},
            in_flight=self.in_flight,
            landed_on=frozenset(landed))
