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
pending instances may start now (``ready``), retries, time-outs and
locking, and how to rank the hosts an instance may go to
(:func:`instanceha.engine.placement.decide` applies the rules every
strategy shares and asks it; Nova's scheduler validates the target).
What is done to each instance, the restart limits included, is
:mod:`instanceha.engine.instance_evacuation`.
"""

from collections.abc import Callable
import dataclasses
import datetime
import logging
import threading

from instanceha.engine import evacuation_tasks as tasks_mod
from instanceha.engine import events
from instanceha.engine import guard
from instanceha.engine import instance_evacuation
from instanceha.engine import marker as marker_mod
from instanceha.engine import migration_records as records_mod
from instanceha.engine import model
from instanceha.engine import placement
from instanceha.engine import ports
from instanceha.engine import rebuild_pace
from instanceha import exceptions

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StepContext:
    env: ports.Environment
    #: The latest snapshot (to pick other targets); may be None.
    snapshot: model.Snapshot | None
    #: How many new evacuations this step may start.
    budget: int
    #: Reads the host's power (or kdump) now. Every evacuate call needs a
    #: reading made in its own step (the cloud port refuses it otherwise,
    #: see :class:`guard.PowerProof`). None: nothing is evacuated.
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
    listing: records_mod.SharedListing | None = None
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


class EvacuationJob:
    """The evacuation of one fenced host; advanced by :meth:`step`."""

    def __init__(self, strategy: tasks_mod.Policy, host: str,
                 servers: list[model.Server], spare: str | None,
                 since):
        self.strategy = strategy
        self.host = host
        #: The reserved spare the host's instances are to be rebuilt on
        #: (``[reservation] evacuate_to_spare``), else None.
        self.spare = spare
        #: Migration records older than this are not ours.
        self.since = since
        #: The skew between our clock and Nova's when ``since`` was first
        #: used (see :meth:`_records`).
        self.since_skew: float | None = None
        self._servers = sorted(servers, key=lambda s: s.id)
        self.tasks: dict[str, tasks_mod.InstanceTask] = {}
        #: What is done to each instance (lock, call, watch, unlock).
        self.instances = instance_evacuation.InstanceEvacuation(
            strategy, host)
        self._classified = False
        #: What the tick reads of this job (see
        #: :class:`instanceha.engine.evacuation_tasks.JobView`).
        self.view = tasks_mod.JobView()
        self._viewing = threading.Lock()
        #: Why nothing more is started (the host left our hands).
        self._stopped: str | None = None
        #: What the host's marker says was given up (short ids), stopped.
        self._recorded: tuple[tuple[str, ...], bool] = ((), False)
        #: When running rebuilds are next looked at, see :meth:`due`.
        self.looks = rebuild_pace.LookSchedule()
        #: How long rebuilds take (the engine hands its shared one).
        self.pace = rebuild_pace.RebuildPace()
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
                 listing: records_mod.SharedListing | None = None
                 ) -> dict[str, list[model.Migration]]:
        """This host's evacuation records since it was fenced."""
        return records_mod.evacuation_records(
            env.cloud, self.host, self._since(snapshot), snapshot, listing)

    def _since(self, snapshot: model.Snapshot | None):
        """:attr:`since` on our clock now."""
        ours = self.since
        if snapshot is not None and ours is not None:
            skew = snapshot.clock_skew or 0.0
            if self.since_skew is None:
                self.since_skew = skew
            # Our clock may have been stepped since ``since`` was read from
            # it (an NTP step, a skew that changed): move it by the change,
            # so that it names the same moment of Nova's clock.
            ours += datetime.timedelta(seconds=skew - self.since_skew)
        return ours

    def _classify(self, env, records, *, gave_up: tuple[str, ...] = (),
                  stopped: bool = False,
                  snapshot: model.Snapshot | None = None) -> None:
        """Build the task list (see :func:`migration_records.classify`)."""
        self._recorded = (tuple(sorted(set(gave_up))), stopped)
        now, since = env.clock.now(), self._since(snapshot)
        if snapshot is not None:  # both on Nova's clock
            now, since = snapshot.nova_now(now), since and snapshot.nova_now(
                since)
        self.tasks = records_mod.classify(
            env, self.host, self._servers, records, self.strategy,
            self.spare, gave_up=frozenset(gave_up), stopped=stopped,
            nova_now=now, tried_since=None if self.new_failure else since)
        self._classified = True
        for task in self.tasks.values():
            task.on_change = self._publish
        self._publish()

    def _publish(self) -> None:
        """Hand the tick a new view (the job's own threads).

        Made and handed over under a lock: the job's concurrent calls
        each change their instance's state, the last view is the newest.
        """
        with self._viewing:
            self.view = tasks_mod.JobView(in_flight=self.in_flight,
                                          wants_more=self.wants_more())

    # -- pacing -----------------------------------------------------------

    def due(self, now: float, budget: int) -> bool:
        """Whether a step now has anything to do (see :class:`LookSchedule`).

        A step that only waits for rebuilds is not taken: their records
        are listed when the rebuilds are expected to have ended.
        """
        return self.looks.due(now, budget, list(self.tasks.values()),
                              self._classified, bool(self._stopped))

    def _check_due(self, now: float) -> bool:
        return self.looks.check_due(now, list(self.tasks.values()),
                                    self._classified)

    def _pace(self, now: float, looked: bool = False,
              ended: bool = False) -> None:
        self.looks.plan(now, list(self.tasks.values()), self.pace,
                        self.strategy.timeout, looked=looked, ended=ended)

    def _request(self, task: tasks_mod.InstanceTask
                 ) -> placement.PlacementRequest:
        """What the placement decision is shown of ``task``: a copy."""
        return placement.request(
            task.server_id, task.name, original_status=task.original_status,
            priority=task.priority, attempts=task.attempts,
            failures=task.failures,
            same_target_retries=self.strategy.same_target_retries,
            target=task.target)

    def _placer(self, env, snapshot: model.Snapshot | None
                ) -> Callable[[tasks_mod.InstanceTask], str | None]:
        """Where each evacuate call of this step goes.

        Decided by :func:`placement.decide` from a read-only
        :class:`placement.PlacementView` of this step's snapshot (never
        the environment): a host, or None for Nova's scheduler. The
        hosts' vCPUs are read from the cloud at most once per step, and
        only if the strategy looks at them; the calls of this step are
        counted in.
        """
        read: list = []
        asked: dict[str, list[str]] = {}

        def vcpus():
            if not read:
                try:
                    read.append(env.cloud.host_resources()
                                or env.cloud.host_vcpus())
                except exceptions.CloudError as exc:
                    LOG.warning('room on the hosts unknown (%s); '
                                'Nova\'s scheduler still checks each '
                                'target', exc)
                    read.append(None)
            return read[0]

        def choose(task: tasks_mod.InstanceTask) -> str | None:
            moving: dict[str, list[str]] = {}
            for other in self.tasks.values():
                if (other.state is tasks_mod.TaskState.IN_FLIGHT and
                        other.target):
                    moving.setdefault(other.target, []).append(
                        other.server_id)
            view = placement.build(
                snapshot, self.host, spare=self.spare, vcpus=vcpus,
                servers=self._servers, on_the_way=moving,
                asked_since_read=asked)
            target = placement.decide(self._request(task), view,
                                      self.strategy)
            if target is not None:
                asked.setdefault(target, []).append(task.server_id)
            return target
        return choose

    def step(self, ctx: StepContext) -> tasks_mod.Progress:
        """Check running evacuations, then start up to ``ctx.budget``.

        Fire-and-forget with ``ctx.reuse``: every ready instance, up to
        ``ctx.budget`` calls running at once.
        """
        env = ctx.env
        # A job queued while this copy led may run after it stopped
        # leading: it then neither acts nor tells a story.
        env.guard.check('evacuation step of %s' % self.host)
        records = None
        budget = ctx.budget
        # A proof read in this step only: the fence's, or an earlier
        # step's, says nothing about now (someone may have powered the
        # host on since). The cloud port asks it before every evacuate.
        proof = (guard.PowerProof(self.host, ctx.prove_off, env.clock)
                 if ctx.prove_off is not None else None)
        if ctx.prelude is not None:
            self._prepare(env, ctx, proof)
        if not self._classified:
            if not self.new_failure:
                records = self._records(env, ctx.snapshot, ctx.listing)
            self._classify(env, records or {}, gave_up=ctx.gave_up,
                           stopped=ctx.stopped, snapshot=ctx.snapshot)
            if self.strategy.tracks:
                # Rebuilds found running (a resumed job) count against the
                # cap the budget was computed without.
                budget -= self.in_flight
        for task in self._sorted():
            # An unlock that failed after the task ended is retried.
            if task.state in (tasks_mod.TaskState.DONE,
                              tasks_mod.TaskState.FAILED):
                self.instances.unlock(env, task)
        now = env.clock.monotonic()
        budget += self._look(ctx, records, now)
        self._stop_if_given_up(env)
        if self._stopped is None:
            self._record(ctx)
        if self._stopped is not None:
            self._skip_pending(env)
            return self.progress()
        batch = self._batch(ctx, proof, budget, now)
        unproven = self.instances.start_all(
            env, batch, proof, self._placer(env, ctx.snapshot), budget)
        if unproven is not None:
            self._record(ctx)
            return dataclasses.replace(self.progress(), unproven=unproven)
        if batch:
            self._pace(now)  # with the rebuilds just started
        self._record(ctx)
        return self.progress()

    def _look(self, ctx: StepContext, records, now: float) -> int:
        """Look at the running rebuilds and unanswered calls, if due.

        ``records``: this step's, if already listed. Returns the slots
        freed for this step (see ``ctx.reuse``).
        """
        env = ctx.env
        watching = [t for t in self._sorted()
                    if t.state is tasks_mod.TaskState.IN_FLIGHT]
        unanswered = [t for t in self._sorted() if t.unanswered]
        if not (watching or unanswered) or (records is None and
                                            not self._check_due(now)):
            return 0
        if records is None:
            records = self._records(env, ctx.snapshot, ctx.listing)
        read = self._reader(env, ctx)
        for task in watching:
            self.instances.check(env, task, records, read, self.pace)
        for task in unanswered:
            self.instances.reconcile(env, task, records)
        ended = sum(1 for t in watching
                    if t.state is not tasks_mod.TaskState.IN_FLIGHT)
        self._pace(now, looked=True, ended=bool(ended))
        if self.strategy.tracks and ctx.reuse:
            # The slots of the rebuilds seen ending are this job's
            # again at once (the next instance does not wait for the
            # next tick): never more in flight than at the start.
            return ended
        return 0

    def _skip_pending(self, env) -> None:
        """The evacuation stopped: report every pending instance skipped."""
        for task in self._sorted():
            if task.state is tasks_mod.TaskState.PENDING:
                task.state = tasks_mod.TaskState.FAILED
                task.reason = self._stopped
                self._emit(env, events.EVACUATE_SKIPPED,
                           server=task.server_id, reason=self._stopped)
                self.instances.unlock(env, task)

    def _batch(self, ctx: StepContext, proof: guard.PowerProof | None,
               budget: int, now: float) -> list[tasks_mod.InstanceTask]:
        """The instances whose evacuate calls this step makes, in order."""
        batch: list[tasks_mod.InstanceTask] = []
        # Fire-and-forget with slots reused: the budget bounds the calls
        # running at once (``start_all``), not the calls of the step.
        streams = ctx.reuse and not self.strategy.tracks
        if (proof is None or budget <= 0 or
                not ctx.env.coordinator.is_leader()):
            return batch
        for task in self.strategy.ready(self._sorted()):
            if len(batch) >= budget and not streams:
                break
            if task.not_before is not None and now < task.not_before:
                continue  # backing off after a failed attempt
            batch.append(task)
        return batch

    def _prepare(self, env, ctx: StepContext,
                 proof: guard.PowerProof | None) -> None:
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
        errors = instance_evacuation.run_calls(env, calls)
        if errors[0] is not None:
            raise errors[0]

    def _record(self, ctx: StepContext) -> None:
        """Write what was given up, the moment it changes (see ``record``).

        A restarted service reads it from the marker, so an instance
        given up (a rebuild that timed out included, which leaves no
        failed record) is never evacuated again, and a host whose
        evacuation stopped stays stopped.
        """
        failed = tuple(sorted(marker_mod.short_id(t.server_id)
                              for t in self.tasks.values()
                              if t.state is tasks_mod.TaskState.FAILED))
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
                          if t.state is tasks_mod.TaskState.FAILED)
        if not given_up:
            return
        for task in self._sorted():
            if task.state is tasks_mod.TaskState.PENDING:
                self.instances.give_up(
                    env, task, 'not evacuated: evacuation of %s stopped '
                    'after %s was given up' % (self.host, given_up[0]))

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
            if task.state is not tasks_mod.TaskState.IN_FLIGHT:
                self.instances.unlock(env, task)

    # -- results ----------------------------------------------------------

    def _sorted(self) -> list[tasks_mod.InstanceTask]:
        return [self.tasks[k] for k in sorted(self.tasks)]

    def wants_more(self) -> bool:
        """Whether some instance still waits for its evacuation call."""
        return not self._classified or any(
            t.state is tasks_mod.TaskState.PENDING for t in self.tasks.values())

    @property
    def in_flight(self) -> int:
        return sum(1 for t in self.tasks.values()
                   if t.state is tasks_mod.TaskState.IN_FLIGHT)

    def progress(self) -> tasks_mod.Progress:
        tasks = self._sorted()
        open_ = [t for t in tasks if t.state in (tasks_mod.TaskState.PENDING,
                                                 tasks_mod.TaskState.IN_FLIGHT)]
        if self.strategy.tracks:
            ok = [t for t in tasks if t.state is tasks_mod.TaskState.DONE]
            complete = not open_
        else:
            ok = [t for t in tasks if t.accepted or
                  t.state is tasks_mod.TaskState.DONE]
            complete = not any(t.state is tasks_mod.TaskState.PENDING for t in tasks)
        landed = {t.dest for t in tasks if t.dest}
        landed |= {t.target for t in tasks
                   if t.state is tasks_mod.TaskState.IN_FLIGHT and t.target}
        return tasks_mod.Progress(
            complete=self._classified and complete,
            settled=self._classified and not open_,
            succeeded=tuple(t.server_id for t in ok),
            failed={t.server_id: t.reason for t in tasks
                    if t.state is tasks_mod.TaskState.FAILED},
            in_flight=self.in_flight,
            landed_on=frozenset(landed))
