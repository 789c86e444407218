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

"""Nova's migration records of an evacuation, and what they tell.

The truth about an evacuation is in Nova, not in this service: its
migration records say which rebuilds run, ended or failed, so a copy
that restarts in the middle of a recovery reads where each instance
stands from them (:func:`classify`) and never evacuates an instance
twice. Listed once per tick for every host being evacuated
(:class:`SharedListing`), filtered per host (:func:`evacuation_records`).
"""

from collections.abc import Callable
import functools
import threading

from instanceha.engine import evacuation_tasks as tasks_mod
from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha import exceptions

#: Migration statuses of an evacuation that is still running.
MIGRATION_RUNNING = frozenset({'accepted', 'pre-migrating', 'migrating',
                               'running', 'queued', 'preparing'})
#: Statuses of an evacuation whose rebuild finished.
MIGRATION_DONE = frozenset({'done', 'completed'})
#: Anything else (failed, error, cancelled) is a failed attempt.


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


def evacuation_records(cloud: ports.CloudPort, host: str, since,
                       snapshot: model.Snapshot | None = None,
                       listing: SharedListing | None = None
                       ) -> dict[str, list[model.Migration]]:
    """``host``'s evacuation records newer than ``since``, by server.

    ``since`` on our clock (None: every record); each server's records
    newest first. From ``listing`` when it covers ``since``, else listed
    for ``host`` alone.
    """
    out: dict[str, list[model.Migration]] = {}
    # Nova writes created_at on its own clock.
    nova_since = (snapshot.nova_now(since)
                  if snapshot is not None and since is not None else since)
    if listing is not None and listing.covers(since):
        found = [m for m in listing() if m.source_host == host]
    else:
        found = cloud.migrations(source_host=host, since=since)
    for mig in found:
        if mig.migration_type not in ('evacuation', None):
            continue
        if (nova_since is not None and mig.created_at is not None
                and mig.created_at < nova_since):
            # Made in an earlier failure of this host and updated
            # since (its host's boot completes them): not ours now.
            continue
        out.setdefault(mig.server_id, []).append(mig)
    for recs in out.values():
        recs.sort(key=lambda m: (m.created_at is not None,
                                 m.created_at, m.id), reverse=True)
    return out


def _live(recs: list[model.Migration]) -> list[model.Migration]:
    """The records of a rebuild that runs, else of one that ended done."""
    return [r for r in recs if r.status in MIGRATION_RUNNING] or [
        r for r in recs if r.status in MIGRATION_DONE]


def _status_before(srv: model.Server, recs: list[model.Migration],
                   was: str | None,
                   attempted: Callable[[model.Server], bool] | None
                   ) -> str | None:
    """The status ``srv`` had before this failure's first evacuation.

    What our lock reason recorded (``was``) if it holds one; else its
    status now, unless an attempt of this failure may have changed it:
    a failed rebuild leaves ERROR behind, so after a failed record, or
    an ``evacuate`` action of this failure that Nova does not list a
    record of yet (``attempted``), nothing is known (None: nothing to
    restore). An instance whose status had to be restored (ERROR,
    SHUTOFF) carries our lock from before its first attempt, with that
    status in its reason.
    """
    if was:
        return was
    if srv.status not in model.EVACUABLE_STATUSES or any(
            r.status not in MIGRATION_RUNNING | MIGRATION_DONE for r in recs):
        return None
    if srv.status == 'ERROR' and attempted is not None and attempted(srv):
        return None
    return srv.status


def _task_of(srv: model.Server, host: str, recs: list[model.Migration],
             seen: list[model.Migration], policy: tasks_mod.Policy,
             attempted: Callable[[model.Server], bool] | None = None
             ) -> tasks_mod.InstanceTask:
    """``srv``'s task as its records and its lock say, still pending."""
    mine = reasons.of_lock(srv).lock_for(host)
    ours, was = mine is not None, mine and mine.was
    if srv.locked and not ours and srv.locked_reason is None:
        # A cloud that does not report lock reasons: a lock on an
        # instance we evacuated before is taken to be ours.
        ours = bool(recs)
    task = tasks_mod.InstanceTask(
        server_id=srv.id, name=srv.name,
        original_status=_status_before(srv, recs, was, attempted),
        priority=policy.priority(srv),
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
    return task


def asked_at(env: ports.Environment, rec: model.Migration | None,
             nova_now) -> float | None:
    """When the rebuild of ``rec`` was asked for, on our monotonic clock.

    Nova creates an evacuation's record in the evacuate call, on its
    own clock; ``nova_now`` is Nova's time now. So a copy that finds
    the rebuild running (after a restart, or a new leader) knows how
    much of its ``[evacuation] timeout`` is left, whatever its own clock
    says. None when either is unknown (the time-out then counts from
    now, as a record not listed yet gives nothing else).
    """
    if rec is None or rec.created_at is None or nova_now is None:
        return None
    age = max(0.0, (nova_now - rec.created_at).total_seconds())
    return env.clock.monotonic() - age


def _settle(env: ports.Environment, host: str, srv: model.Server,
            task: tasks_mod.InstanceTask, recs: list[model.Migration],
            policy: tasks_mod.Policy, gave_up: frozenset[str],
            stopped: bool, nova_now=None) -> bool:
    """Set the state ``srv``'s records give its task; False: not ours.

    An instance Nova cannot evacuate is reported and left out.
    """
    live = _live(recs)
    if marker_mod.short_id(srv.id) in gave_up:
        # Given up before a restart (its marker says so), whatever
        # its records look like now (a rebuild that timed out may
        # still run, or have failed since).
        task.state = tasks_mod.TaskState.FAILED
        task.reason = 'given up before a restart'
        env.events.emit(events.EVACUATE_SKIPPED, host, server=srv.id,
                        reason=task.reason)
    elif live or srv.task_state == 'rebuilding':
        # Being rebuilt (its record may not be listed yet): watched,
        # never evacuated again; its record is picked up when listed.
        task.current = live[0].id if live else None
        task.unlisted = not live
        task.state = tasks_mod.TaskState.IN_FLIGHT
        task.accepted = True
        task.started = env.clock.monotonic()
        task.asked_at = asked_at(env, live[0] if live else None, nova_now)
    elif len(recs) > policy.retries:
        # Given up before a restart: Nova's records of its failed
        # attempts say so; it is never evacuated again.
        task.state = tasks_mod.TaskState.FAILED
        task.reason = ('given up after %d failed attempt(s)'
                       % len(recs))
    elif srv.status not in model.EVACUABLE_STATUSES:
        # Nova evacuates only ACTIVE, ERROR and SHUTOFF;
        # say so, so that nobody waits for it.
        env.events.emit(events.EVACUATE_SKIPPED, host, server=srv.id,
                        status=srv.status)
        return False
    elif stopped:
        # This host's evacuation stopped before a restart.
        task.state = tasks_mod.TaskState.FAILED
        task.reason = ('not evacuated: evacuation of %s stopped '
                       'before a restart' % host)
        env.events.emit(events.EVACUATE_SKIPPED, host, server=srv.id,
                        reason=task.reason)
    return True


def _back_off(env: ports.Environment, task: tasks_mod.InstanceTask,
              recs: list[model.Migration], policy: tasks_mod.Policy,
              nova_now) -> None:
    """A resumed retry waits out what is left of its back-off.

    A copy that saw an attempt fail waits ``retry_delay`` before the
    next; a copy that resumes the evacuation re-derives that wait from
    the failed record's last update, on Nova's clock (``nova_now``:
    Nova's time now), so that a restart does not cut it short.
    """
    if (nova_now is None or task.state is not tasks_mod.TaskState.PENDING
            or not recs):
        return
    last = recs[0]
    if (last.status in MIGRATION_RUNNING | MIGRATION_DONE
            or last.updated_at is None):
        return
    left = (policy.retry_delay(task.attempts)
            - (nova_now - last.updated_at).total_seconds())
    if left > 0:
        task.not_before = env.clock.monotonic() + left


def classify(env: ports.Environment, host: str,
             servers: list[model.Server],
             records: dict[str, list[model.Migration]],
             policy: tasks_mod.Policy, target: str | None, *,
             gave_up: frozenset[str] = frozenset(),
             stopped: bool = False, nova_now=None,
             tried_since=None) -> dict[str, tasks_mod.InstanceTask]:
    """The task list of ``host``'s evacuation, from servers and records.

    Run once, also when resuming after a restart: an instance with a
    running evacuation is watched, not evacuated again; one already
    rebuilt elsewhere is only unlocked; one the marker says was given
    up (``gave_up``: short ids, ``stopped``) is never evacuated again.
    ``target``: the host each task starts out with (the reserved spare
    its instances are to be rebuilt on, or None): what a rebuild found
    running is taken to have asked for; the first call's own target is
    decided when it is made (:func:`instanceha.engine.placement.decide`).
    ``nova_now``: Nova's time now, to resume a retry's back-off and a
    running rebuild's time-out;
    ``tried_since``: when an evacuation of this failure may have been
    asked for first, on Nova's clock (None: none can have been, the
    failure is one this copy fenced itself).
    """
    tasks: dict[str, tasks_mod.InstanceTask] = {}
    attempted = tried_since and functools.partial(
        evacuated_since, env.cloud, since=tried_since)
    for srv in servers:
        recs = seen = records.get(srv.id, [])
        if srv.host == host and not srv.task_state:
            # Listed idle on this host: a rebuild that ended (done,
            # completed) moved it away, so such a record is from an
            # earlier failure of this host (within MIGRATION_SLACK of
            # this one) and the server came back since: history, not
            # an evacuation of this failure.
            recs = [r for r in recs if r.status not in MIGRATION_DONE]
        task = _task_of(srv, host, recs, seen, policy, attempted)
        task.target = target
        if _settle(env, host, srv, task, recs, policy, gave_up, stopped,
                   nova_now):
            _back_off(env, task, recs, policy, nova_now)
            tasks[srv.id] = task
    for server_id in sorted(set(records) - set(tasks)):
        # Left the host already (rebuilt elsewhere) before a restart:
        # watch it to the end so that it is unlocked.
        recs = records[server_id]
        live = _live(recs)
        if not live or marker_mod.short_id(server_id) in gave_up:
            continue  # every attempt failed, or given up: not ours
        tasks[server_id] = tasks_mod.InstanceTask(
            server_id=server_id, name=server_id, original_status=None,
            state=tasks_mod.TaskState.IN_FLIGHT, attempts=len(recs),
            known={r.id for r in recs}, current=live[0].id,
            accepted=True, locked_by_us=True,
            started=env.clock.monotonic(),
            asked_at=asked_at(env, live[0], nova_now), verify_lock=True)
    return tasks


def evacuated_since(cloud: ports.CloudPort, server: model.Server,
                    since) -> bool:
    """Whether Nova recorded an evacuation of ``server`` since ``since``.

    Nova records the ``evacuate`` instance action in the call itself, so
    it shows an attempt whose migration record is not listed yet.
    ``since`` on Nova's clock. A server deleted meanwhile: False.
    """
    try:
        actions = cloud.server_actions(server.id)
    except exceptions.CloudError as exc:
        if getattr(exc, 'status', None) == 404:
            return False
        raise
    return any(a.action == 'evacuate' and a.start_time is not None
               and a.start_time >= since for a in actions)


def own_records(cloud: ports.CloudPort, task: tasks_mod.InstanceTask,
                read: Callable[[str], model.Server]
                ) -> tuple[list[model.Migration], model.Migration | None]:
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
    own = cloud.migrations(server_id=task.server_id)
    if task.current is None and own and own[0].id not in task.known:
        newest = own[0]
        if (newest.status in MIGRATION_RUNNING | MIGRATION_DONE or
                not read(task.server_id).task_state):
            task.current = newest.id
            task.known.add(newest.id)
            task.attempts = max(task.attempts, 1)  # that rebuild
    return own, next((r for r in own if r.id == task.current), None)
