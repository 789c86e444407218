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

"""The workflow runtime's loop: step, submit, harvest, apply.

The kinds are declared with the tables of :mod:`instanceha.engine.runtime`
(its module doc says what they promise); :class:`Runtime` runs them, in
the tick thread only: every method that changes a record refuses to run
inside a job (:mod:`instanceha.engine.boundary`), so that no worker can
start, step or end a workflow behind the tick's back.
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import enum
import logging
import typing

from instanceha.engine import boundary
from instanceha.engine import ownership
from instanceha.engine import ports
from instanceha.engine import retry
from instanceha.engine.runtime import frozen_map
from instanceha.engine.runtime import Go
from instanceha.engine.runtime import Job
from instanceha.engine.runtime import KEEP
from instanceha.engine.runtime import Kind
from instanceha.engine.runtime import Outcome
from instanceha.engine.runtime import Record
from instanceha.engine.runtime import Retry
from instanceha.engine.runtime import Stay
from instanceha.engine.runtime import View
from instanceha.engine.runtime import Wait
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: Rounds of one :meth:`Runtime.run` while outcomes keep changing records:
#: a bound, so that a step table that loops cannot hang the tick (also
#: the longest chain of transitions of a ``chain`` kind in one step).
MAX_ROUNDS = 8


def _in_tick(what: str) -> None:
    """Refuse ``what`` inside a job: records change in the tick only."""
    job = boundary.current_job()
    if job is not None:
        raise boundary.WrittenByJob(
            'the workflow runtime was asked to %s by the job %s: jobs '
            'return values, the tick applies them' % (what, job))


class Runtime:
    """Runs the workflows of every registered kind; see the module doc."""

    def __init__(self, env: ports.Environment,
                 leading: Callable[[], bool]):
        self.env = env
        self._leading = leading
        self._kinds: dict[str, Kind] = {}
        self._records: dict[tuple[str, str], Record] = {}
        #: Running jobs: (kind, key) -> (future, job). Never a record.
        self._jobs: dict[tuple[str, str], tuple] = {}
        #: Who owns each instance (consulted before a job acts on one).
        self.owners = ownership.Owners()
        #: When each workflow's step last started a job (see Kind.pace).
        self._stepped: dict[tuple[str, str], float] = {}

    # --- declaring and starting -------------------------------------------

    def register(self, kind: Kind) -> None:
        """Declare ``kind`` (its tables are checked here)."""
        for state in kind.steps:
            if state not in kind.transitions and state not in kind.final:
                raise exceptions.InstanceHAError('%s: state %s has a step '
                                                 'but no row' % (kind.name, state))
        self._kinds[kind.name] = kind

    def start(self, kind: str, key: str, state: enum.Enum,
              durable: typing.Any = None, local: Mapping | None = None, *,
              replace: bool = False, errors: int = 0) -> Record:
        """Begin a workflow (tick thread); a running one is kept.

        ``replace``: replaced instead (its running job's result is never
        applied); ``errors``: failed jobs in a row, of one taken over.
        """
        _in_tick('start %s %s' % (kind, key))
        if (kind, key) in self._records and not replace:
            return self._records[(kind, key)]
        self._jobs.pop((kind, key), None)
        rec = Record(kind=kind, key=key, state=state, durable=durable,
                     local=frozen_map(local), errors=errors,
                     entered=self.env.clock.monotonic())
        self._records[(kind, key)] = rec
        return rec

    def apply(self, kind: str, key: str, outcome: Outcome,
              world: typing.Any = None) -> bool:
        """Apply an outcome decided outside the workflow's steps.

        What a poll decides of a workflow (a host no longer failed) or an
        operator's hand-back: checked against the kind's table like any
        step's, in the tick thread, never while the workflow's job runs
        (its result would land on a state it was not made for). Whether
        anything changed.
        """
        _in_tick('move %s %s' % (kind, key))
        if (kind, key) in self._jobs:
            raise exceptions.InstanceHAError(
                '%s %s: its job runs; its result comes first' % (kind, key))
        rec = self._records.get((kind, key))
        if rec is None:
            return False
        return self._apply(rec, outcome, world)

    def get(self, kind: str, key: str) -> Record | None:
        return self._records.get((kind, key))

    def records(self, kind: str) -> list[Record]:
        """The workflows of ``kind``, sorted by key."""
        return [self._records[k] for k in sorted(self._records)
                if k[0] == kind]

    def running(self, kind: str, key: str) -> bool:
        """Whether a job of that workflow runs (not what it does)."""
        return (kind, key) in self._jobs

    def busy(self) -> bool:
        return bool(self._jobs)

    def futures(self) -> list:
        """The running jobs' futures (a stopping service waits for them)."""
        return [fut for fut, _ in self._jobs.values()]

    def finished(self, kinds: typing.Iterable[str] | None = None
                 ) -> frozenset[tuple[str, str]]:
        """The jobs (of ``kinds``) finished now: ``only`` of :meth:`run`.

        Taken before the caller reads the world: every result it then
        applies is older than the read its steps act on.
        """
        return frozenset(k for k, (fut, _) in self._jobs.items()
                         if fut.done() and (kinds is None or k[0] in kinds))

    def forget(self, kind: str | None = None) -> None:
        """Drop the records (of ``kind``) whose job is not running.

        A copy that stopped leading: what it knew may be stale, and Nova
        holds what the next leader resumes from.
        """
        _in_tick('forget %s' % (kind or 'every workflow'))
        for k in list(self._records):
            if (kind is None or k[0] == kind) and k not in self._jobs:
                self._drop(k)

    # --- the tick ----------------------------------------------------------

    def run(self, world: typing.Any = None,
            kinds: typing.Iterable[str] | None = None,
            only: frozenset[tuple[str, str]] | None = None) -> None:
        """Harvest, step and apply until nothing changes (tick thread).

        ``kinds``: only the workflows of these kinds (default: all but
        those ``named_only``). ``only``: apply the results of these jobs
        alone (see :meth:`finished`); the others wait for a later run.
        A ``chain`` kind takes one round: each of its workflows is
        stepped once (its transitions' steps at once, see :class:`Kind`).
        """
        _in_tick('run')
        wanted, ready = self._wanted(kinds), self._ready()
        for _ in range(MAX_ROUNDS):
            changed = self._harvest(world, wanted, ready, only)
            now = self.env.clock.monotonic()
            for k in self._ordered(self._records):
                if k[0] in wanted:
                    changed |= self._step(k, world, now)
            wanted -= {n for n in wanted
                       if n in self._kinds and self._kinds[n].chain}
            if not changed:
                return

    def _step(self, k: tuple[str, str], world, now: float,
              depth: int = 0) -> bool:
        """Take the step of ``k``'s state, if it is due; whether it changed."""
        rec = self._records.get(k)
        if rec is None or k in self._jobs or now < rec.retry_at:
            return False
        step = self._kinds[k[0]].steps.get(rec.state)
        if step is None or self._pacing(k, now):
            return False
        return self._apply(rec, step(View(rec, world, now)), world, depth)

    def harvest(self, world: typing.Any = None,
                kinds: typing.Iterable[str] | None = None,
                only: frozenset[tuple[str, str]] | None = None) -> None:
        """Apply finished jobs' results, step nothing (see :meth:`run`)."""
        _in_tick('harvest')
        self._harvest(world, self._wanted(kinds), self._ready(), only)

    def _ready(self) -> set:
        """Jobs ended before this run: futures, not ids (ids are reused)."""
        return {fut for fut, _ in self._jobs.values() if fut.done()}

    def _wanted(self, kinds: typing.Iterable[str] | None) -> set:
        if kinds is None:
            return {n for n, k in self._kinds.items() if not k.named_only}
        return set(kinds)

    def _pacing(self, k: tuple[str, str], now: float) -> bool:
        """Whether ``k`` waits out its kind's pace (:attr:`Kind.pace`)."""
        pace, last = self._kinds[k[0]].pace, self._stepped.get(k)
        return pace is not None and last is not None and now - last < pace()

    def drop_results(self) -> None:
        """Forget finished jobs unapplied (a copy no longer leading).

        What they wrote into Nova (:attr:`Job.wrote`) is applied still,
        to the records that outlive a lost leadership.
        """
        _in_tick('drop results')
        for k, (fut, job) in list(self._jobs.items()):
            if fut.done():
                del self._jobs[k]
                self._wrote(k, job)
                self._lost(k)

    def _lost(self, k: tuple[str, str]) -> None:
        """A result dropped unled: the record too, unless it survives."""
        if self._kinds[k[0]].survives_leadership:
            self._release(k)
        else:
            self._drop(k)

    def _ordered(self, keys) -> list[tuple[str, str]]:
        """``keys`` by kind, then in each kind's order, then by key."""
        def rank(k):
            kind, rec = self._kinds.get(k[0]), self._records.get(k)
            if kind is None or kind.order is None or rec is None:
                return (k[0], 0, k[1])
            return (k[0], kind.order(rec), k[1])
        return sorted(keys, key=rank)

    def _harvest(self, world, wanted: set, ready: set,
                 only: frozenset | None = None) -> bool:
        changed = False
        for k in self._ordered(self._jobs):
            fut, job = self._jobs[k]
            if (k[0] not in wanted or not fut.done() or
                    (only is not None and k not in only)):
                continue
            if self._kinds[k[0]].settle and fut not in ready:
                continue  # ended during this run: applied at the next
            del self._jobs[k]
            self._release(k)
            self._wrote(k, job)
            if k not in self._records:
                continue
            if not self._leading():
                self._lost(k)
                continue
            outcome = self._result(k, fut, job, world)
            if k in self._records:  # (not ended by what it did)
                self._apply(self._records[k], outcome, world)
            changed = True
        return changed

    def _wrote(self, k: tuple[str, str], job: Job) -> None:
        """Apply what a finished job wrote into Nova (:attr:`Job.wrote`)."""
        rec = self._records.get(k)
        if rec is not None and job.wrote is not None:
            self._records[k] = dataclasses.replace(
                rec, durable=job.wrote(rec.durable))

    def _result(self, k: tuple[str, str], fut, job: Job, world) -> Outcome:
        """The outcome of a finished job: ``then`` or the kind's error."""
        view = View(self._records[k], world, self.env.clock.monotonic())
        exc = fut.exception()
        if exc is not None:
            return self._on_error(view, exc)
        rec = dataclasses.replace(view.record, errors=0)
        self._records[k] = rec
        return job.then(dataclasses.replace(view, record=rec), fut.result())

    def _on_error(self, view: View, exc: BaseException) -> Outcome:
        kind = self._kinds[view.record.kind]
        rec = dataclasses.replace(view.record, errors=view.record.errors + 1)
        self._records[(kind.name, rec.key)] = rec
        if kind.on_error is not None:
            return kind.on_error(dataclasses.replace(view, record=rec), exc)
        wait = retry.backoff(kind.backoff, rec.errors, kind.max_backoff)
        if not isinstance(exc, exceptions.InstanceHAError):
            LOG.error('%s %s: unexpected error in state %s', kind.name,
                      view.record.key, view.record.state, exc_info=exc)
        return Retry(wait, '%s: %s' % (type(exc).__name__, exc))

    def _apply(self, rec: Record, outcome: Outcome, world=None,
               depth: int = 0) -> bool:
        """Apply one outcome to ``rec``; whether anything changed."""
        k = (rec.kind, rec.key)
        if isinstance(outcome, Job):
            return self._start_job(rec, outcome, world, depth)
        self._say(rec, outcome.emit)
        if isinstance(outcome, Wait):
            return False
        if isinstance(outcome, (Retry, Stay)):
            self._stay(rec, outcome)
            return False
        changed = self._go(rec, outcome)
        if self._kinds[rec.kind].chain and depth < MAX_ROUNDS and \
                k in self._records:
            self._step(k, world, self.env.clock.monotonic(), depth + 1)
        return changed

    def _start_job(self, rec: Record, job: Job, world, depth: int) -> bool:
        k = (rec.kind, rec.key)
        if self._kinds[rec.kind].pace is not None:
            self._stepped[k] = self.env.clock.monotonic()
        if not self._leading():
            return False  # taken again on a later tick
        refused = self._own(rec, job)
        if refused is not None:
            return self._apply(rec, refused, world, depth)
        self._say(rec, job.emit)
        self._jobs[k] = (self._submit(rec, job), job)
        return True

    def _stay(self, rec: Record, outcome: Retry | Stay) -> None:
        """Step ``rec`` again later, its own data changed (a Stay's)."""
        now = self.env.clock.monotonic()
        if isinstance(outcome, Retry):
            LOG.debug('%s %s: step again in %.1fs: %s', rec.kind, rec.key,
                      outcome.seconds, outcome.why)
            self._records[(rec.kind, rec.key)] = dataclasses.replace(
                rec, retry_at=now + outcome.seconds,
                errors=rec.errors + 1 if outcome.count else rec.errors)
            return
        local = dict(rec.local)
        local.update(outcome.local)
        self._records[(rec.kind, rec.key)] = dataclasses.replace(
            rec, local=frozen_map(local), retry_at=now + outcome.after,
            durable=rec.durable if outcome.durable is KEEP
            else outcome.durable)

    def _say(self, rec: Record, emits) -> None:
        for event, details, *host in emits:
            self.env.events.emit(event, host[0] if host else rec.key,
                                 **details)

    def _own(self, rec: Record, job: Job) -> Outcome | None:
        """Own the job's instances; the kind's outcome if one is held."""
        if not job.acts_on:
            return None
        kind = self._kinds[rec.kind]
        if kind.owner is None:
            raise exceptions.InstanceHAError(
                '%s: a job acts on instances, but the kind declares no '
                'owner' % kind.name)
        refused = self.owners.claim_all(kind.owner, rec.key, job.acts_on)
        if refused is None:
            return None
        instance, rule, holder = refused
        LOG.info('%s %s: instance %s is %s\'s (%s): %s', rec.kind, rec.key,
                 instance, holder.owner.value, holder.key, rule.value)
        if kind.on_conflict is not None:
            view = View(rec, None, self.env.clock.monotonic())
            return kind.on_conflict(view, rule, holder)
        return Retry(kind.backoff, 'instance %s is owned by %s %s' % (
            instance, holder.owner.value, holder.key))

    def _release(self, k: tuple[str, str]) -> None:
        owner = self._kinds[k[0]].owner if k[0] in self._kinds else None
        if owner is not None:
            self.owners.release(owner, k[1])

    def _drop(self, k: tuple[str, str]) -> None:
        self._records.pop(k, None)
        self._release(k)

    def _go(self, rec: Record, go: Go) -> bool:
        kind = self._kinds[rec.kind]
        kind.check(rec.key, rec.state, go.state)
        k = (rec.kind, rec.key)
        if go.state in kind.final:
            self._drop(k)
            return True
        durable = rec.durable if go.durable is KEEP else go.durable
        local = {n: rec.local[n] for n in go.keep if n in rec.local}
        local.update(go.local)
        self._records[k] = Record(
            kind=rec.kind, key=rec.key, state=go.state, durable=durable,
            local=frozen_map(local), entered=self.env.clock.monotonic())
        return True

    def _submit(self, rec: Record, job: Job):
        return boundary.submit(self.env, '%s %s' % (rec.kind, rec.key),
                               job.run, lock=rec.key if job.lock else None)
