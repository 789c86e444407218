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

"""One fenced host's instances, each evacuated, watched and released.

Everything done to one instance of a fenced host: its lock (taken
before its evacuate call and given back after its rebuild, and only a
lock of ours, see :mod:`instanceha.engine.evacuation`), the call, the
rebuild's end as Nova's migration records tell it, its power state
restored, and the restart limits: after ``[evacuation] retries``
retries in all an instance is given up (a terminal state that marks its
host FAILED). Between two attempts of one instance the job waits
``[evacuation] retry_interval`` seconds, doubled after each failure up
to ``retry_max_interval``: a conflict (task_state) or a full cloud ("No
valid host") rarely clears within a second. Where each attempt goes
(not again on a host it failed on more than ``same_target_retries``
times) is :func:`instanceha.engine.placement.decide`'s.
"""

from collections.abc import Callable

from instanceha.engine import evacuation
from instanceha.engine import evacuation_tasks as tasks_mod
from instanceha.engine import events
from instanceha.engine import guard
from instanceha.engine import migration_records as records_mod
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import rebuild_pace
from instanceha import exceptions


def run_calls(env: ports.Environment, calls: list[Callable[[], object]],
              limit: int | None = None) -> list[BaseException | None]:
    """``env.executor.run_calls(calls, limit)``: a job's independent calls.

    At most ``limit`` at once (None: no bound); once one raised, none not
    yet started is started.
    """
    run = env.executor.run_calls
    return run(calls) if limit is None else run(calls, limit=limit)


def nova_failed(exc: exceptions.CloudError) -> bool:
    """True when Nova did not answer a call (5xx, timeout, unreachable).

    Such a call may or may not have been carried out; a 4xx is a refusal:
    Nova looked at the request and did not do it.
    """
    status = getattr(exc, 'status', None)
    return status is None or status >= 500


class InstanceEvacuation:
    """What is done to each instance of one fenced host, one at a time.

    Locks it, makes its evacuate call, reads its rebuild's end from
    Nova's records, restores its power state, retries or gives it up
    (restart limits, back-off) and unlocks it. The job of the host
    (:class:`instanceha.engine.evacuation_job.EvacuationJob`) decides
    which instances, when; this decides nothing of the host.
    """

    def __init__(self, strategy: tasks_mod.Policy, host: str):
        self.strategy = strategy
        self.host = host

    def _emit(self, env, event, **details):
        env.events.emit(event, self.host, **details)

    def unlock(self, env, task: tasks_mod.InstanceTask) -> None:
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

    def _ours_now(self, env, task: tasks_mod.InstanceTask) -> bool:
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
        mine = reasons.of_lock(server).lock_for(self.host)
        ours = mine is not None
        task.locked_by_us, task.verify_lock = ours, False
        task.foreign_lock = bool(server is not None and server.locked and
                                 not ours)
        task.original_status = task.original_status or (mine and mine.was)
        return ours

    def give_up(self, env, task: tasks_mod.InstanceTask, reason: str) -> None:
        task.state = tasks_mod.TaskState.FAILED
        task.reason = reason
        self._emit(env, events.EVACUATE_GAVE_UP, server=task.server_id,
                   attempts=task.attempts, reason=reason)
        self.unlock(env, task)

    def _failed_attempt(self, env, task, failed_on, why, event,
                        **details) -> None:
        """Report a failed attempt (``event``), then retry or give up.

        A retry waits ``retry_delay`` seconds (reported as ``retry_in``):
        back-off, so that a conflict or a full cloud has time to clear.
        """
        if failed_on:
            task.failures[failed_on] = task.failures.get(failed_on, 0) + 1
        if task.attempts > self.strategy.retries:
            self._emit(env, event, server=task.server_id,
                       attempt=task.attempts, **details)
            self.give_up(env, task, why)
            return
        delay = self.strategy.retry_delay(task.attempts)
        self._emit(env, event, server=task.server_id, attempt=task.attempts,
                   retry_in=delay, **details)
        task.state = tasks_mod.TaskState.PENDING
        task.accepted = False
        task.not_before = env.clock.monotonic() + delay if delay else None

    def _restore_power_state(self, env, task,
                             server: model.Server) -> str | None:
        """Restore the status ``task``'s instance had (see restore_status)."""
        want = evacuation.restore_status(env.cloud, server, task.original_status)
        if want is None:
            return None
        self._emit(env, events.POWER_STATE_RESTORED, server=task.server_id,
                   status=want)
        return want

    @staticmethod
    def _record_tells_all(task: tasks_mod.InstanceTask) -> bool:
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

    def _done_from_record(self, env, task: tasks_mod.InstanceTask,
                          rec: model.Migration) -> None:
        """The server was rebuilt on ``rec.dest_host``: report it."""
        task.state = tasks_mod.TaskState.DONE
        task.dest = rec.dest_host
        self._emit(env, events.EVACUATE_DONE, server=task.server_id,
                   dest=rec.dest_host, status='ACTIVE')

    def _done(self, env, task, server: model.Server) -> None:
        """The server was rebuilt elsewhere: restore, report, unlock."""
        restored = self._restore_power_state(env, task, server)
        task.state = tasks_mod.TaskState.DONE
        task.dest = server.host
        # The status Nova reports (after our restore), never an assumed one.
        self._emit(env, events.EVACUATE_DONE, server=task.server_id,
                   dest=server.host, status=restored or server.status)
        self.unlock(env, task)

    def check(self, env, task: tasks_mod.InstanceTask, records,
              read: Callable[[str], model.Server],
              pace: rebuild_pace.RebuildPace) -> None:
        """Read the end of ``task``'s rebuild from Nova's records."""
        recs = records.get(task.server_id, [])
        timeout = self.strategy.timeout
        begun = task.timed_from()
        overdue = (begun is not None and timeout and
                   env.clock.monotonic() - begun > timeout)
        if task.current is None:
            new = [r for r in recs if r.id not in task.known]
            if new:
                task.current = new[0].id
                task.known.add(new[0].id)
        rec = next((r for r in recs if r.id == task.current), None)
        if rec is None and task.unlisted:
            recs, rec = records_mod.own_records(env.cloud, task, read)
        if rec is None or rec.status in records_mod.MIGRATION_RUNNING:
            if overdue:
                self.give_up(env, task, 'rebuild did not finish within '
                             '%d s' % timeout)
            return
        if rec.status in records_mod.MIGRATION_DONE:
            if task.timed:
                pace.learn(rec)
            self._rebuilt(env, task, rec, read, timeout if overdue else None)
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
                             reason, events.EVACUATE_FAILED,
                             dest=rec.dest_host, reason=reason)

    def _rebuilt(self, env, task: tasks_mod.InstanceTask,
                 rec: model.Migration, read: Callable[[str], model.Server],
                 overdue: int | None) -> None:
        """``rec`` says the rebuild ended done: report it once settled.

        ``overdue``: the time-out the rebuild exceeded, else None.
        """
        if self._record_tells_all(task):
            self._done_from_record(env, task, rec)
            return
        try:
            server = read(task.server_id)
        except exceptions.CloudError as exc:
            if getattr(exc, 'status', None) != 404:
                raise
            task.state = tasks_mod.TaskState.DONE
            task.reason = 'deleted'
            return
        if server.task_state or server.host == self.host:
            if overdue:
                self.give_up(env, task, 'rebuild did not settle '
                             'within %d s' % overdue)
            return
        if task.verify_lock:
            mine = reasons.of_lock(server).lock_for(self.host)
            task.locked_by_us = mine is not None or (
                server.locked and server.locked_reason is None)
            task.original_status = task.original_status or (
                mine and mine.was)
            task.verify_lock = False
        self._done(env, task, server)

    def _locks(self, task: tasks_mod.InstanceTask) -> bool:
        """Whether ``task``'s instance is locked while it is evacuated.

        Always with ``lock_instances``; without it, only an instance whose
        status must be restored after its rebuild (ERROR, SHUTOFF): the
        lock's reason is where that status is kept, so that a service
        restarted in the middle of the rebuild still restores it.
        """
        return self.strategy.lock_instances or task.original_status not in (
            None, 'ACTIVE')

    def _moved_away(self, env, task: tasks_mod.InstanceTask) -> bool:
        """Whether a retried instance now lives on another host.

        A retry (also the first call of a copy that resumed this
        evacuation) follows attempts whose outcome Nova's records may not
        show yet: the instance may run elsewhere already, rebuilt by one
        of them or moved by someone else. Evacuated again, it would be
        taken from a host nobody fenced. So a retry reads where the
        instance is first (one call, retries only): elsewhere and at
        rest, it is done; elsewhere and still moving, it is looked at
        again at the next step.
        """
        server = env.cloud.get_server(task.server_id)
        if server.host == self.host:
            return False
        if server.task_state is None:
            self._done(env, task, server)
        else:
            task.not_before = env.clock.monotonic() + 1.0
        return True

    def start(self, env, task: tasks_mod.InstanceTask) -> None:
        """Lock ``task``'s instance if it is to be, and evacuate it."""
        if task.attempts and self._moved_away(env, task):
            return
        if (self._locks(task) and task.verify_lock and
                self._ours_now(env, task)):
            self._emit(env, events.SERVER_LOCKED, server=task.server_id,
                       confirmed='Nova carried out the unanswered call')
        if (self._locks(task) and not task.locked_by_us and
                not task.foreign_lock):
            try:
                env.cloud.set_server_lock(task.server_id, True, reasons.Lock(
                    self.host, task.original_status).render())
            except exceptions.CloudError as exc:
                if nova_failed(exc):
                    # Nova may have locked it: should the task end before
                    # a lock call is answered, it is unlocked if Nova's
                    # lock reason says the lock is ours.
                    task.locked_by_us = task.verify_lock = True
                raise
            task.locked_by_us = True
            self._emit(env, events.SERVER_LOCKED, server=task.server_id)
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
                                 'evacuate refused: %s' % exc,
                                 events.EVACUATE_REFUSED, reason=str(exc))
            return
        task.current = None
        task.state = tasks_mod.TaskState.IN_FLIGHT
        task.accepted = True
        task.timed = True
        task.started = env.clock.monotonic()
        task.asked_at = None
        self._emit(env, events.EVACUATE_REQUESTED, server=task.server_id,
                   target=task.target, attempt=task.attempts)

    def _unanswered(self, env, task: tasks_mod.InstanceTask,
                    exc: exceptions.CloudError) -> None:
        """Nova did not answer an evacuate call: it may have done it.

        Not an attempt of the instance (Nova's fault is not its fault, and
        must never mark its host FAILED); before calling again, the next
        step asks Nova whether the call was carried out
        (:meth:`reconcile`), so that an instance is never evacuated twice
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

    def reconcile(self, env, task: tasks_mod.InstanceTask, records) -> None:
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
                task.state = tasks_mod.TaskState.DONE
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
        task.state = tasks_mod.TaskState.IN_FLIGHT
        task.current = None
        task.started = env.clock.monotonic()
        task.asked_at = None
        self._emit(env, events.EVACUATE_REQUESTED, server=task.server_id,
                   target=task.target, attempt=task.attempts,
                   confirmed='Nova carried out the unanswered call')

    def start_all(self, env: ports.Environment,
                  batch: list[tasks_mod.InstanceTask],
                  proof: guard.PowerProof | None,
                  choose: Callable[[tasks_mod.InstanceTask], str | None],
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
            with guard.proving(proof):
                proof.require()
        except guard.PowerUnproven as exc:
            return exc.reading
        for task in batch:
            task.not_before = None
            task.target = choose(task)

        def start(task: tasks_mod.InstanceTask) -> None:
            with guard.proving(proof):
                self.start(env, task)

        errors = run_calls(env, [lambda t=task: start(t) for task in batch],
                           limit=limit)
        for exc in errors:
            if exc is not None and not isinstance(exc, guard.PowerUnproven):
                raise exc
        for exc in errors:
            if isinstance(exc, guard.PowerUnproven):
                return exc.reading
        return None
