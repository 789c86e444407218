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

"""One runtime for every kind of workflow.

A workflow kind is declared as tables: its states and the transitions
between them, and for each state a *step*: a plain function of a
read-only :class:`View` (the workflow's record and what the caller of
:meth:`Runtime.run` shows of the world) that returns an outcome:

* :class:`Go` -- go to a state, with the changes to the durable record,
  the new state's local data and the events to emit;
* :class:`Job` -- run slow work (a Nova write, a fencing call) on the
  executor and continue with its result: ``then(view, result)`` is one
  more step, taken in the tick thread when the job has finished;
* :class:`Retry` -- take the step again in N seconds, saying why;
* :class:`Wait` -- nothing to do until the world changes.

The runtime alone submits jobs, harvests their results, applies every
outcome, backs off on a job's error, checks leadership before submitting
and before applying, emits the transitions' events and repeats while
anything changed (Proxmox's ``manage()``; controller-runtime's
requeue-after). So the rules a new kind must not forget are written once:

* Records are frozen values, replaced only by the runtime in the thread
  that runs :meth:`Runtime.run` (the tick). A job gets no record: it
  returns a value, and the record changes when that value is applied.
* A state's local data (:attr:`Record.local`) is cleared on every
  transition; the durable part is what outlives the state (what the
  workflow's marker in Nova holds).
* Nothing is submitted while this copy does not lead, and the result of
  a job that finished while it did not lead is dropped: the next leader
  resumes from Nova. Every side effect still passes the environment's
  guard at the moment it is made.
* A job that acts on instances says which (:attr:`Job.acts_on`): the
  runtime owns them for its workflow in the one registry of who owns
  each instance (:mod:`instanceha.engine.ownership`) before submitting
  it, and takes the kind's ``on_conflict`` outcome instead when another
  workflow owns one; the claims go when the result is applied.

A kind may also declare a pace, its own point of the tick and records
that outlive a lost leadership (see :class:`Kind`).
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import enum
import logging
import types
import typing

from instanceha.engine import boundary
from instanceha.engine import ownership
from instanceha.engine import ports
from instanceha.engine import retry
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: Rounds of one :meth:`Runtime.run` while outcomes keep changing records:
#: a bound, so that a step table that loops cannot hang the tick.
MAX_ROUNDS = 8

_EMPTY: Mapping[str, typing.Any] = types.MappingProxyType({})

#: "Keep the durable part as it is" (a transition that changes nothing
#: of what outlives the state).
KEEP = object()


def frozen_map(values: Mapping | None) -> Mapping:
    """A read-only copy of ``values`` (state-local data, event details)."""
    return types.MappingProxyType(dict(values or {}))


@dataclasses.dataclass(frozen=True)
class Record:
    """One workflow's record; replaced, never changed, by the runtime.

    ``durable``: what outlives a state (a frozen value of the kind's
    choosing: what its marker in Nova holds). ``local``: the current
    state's data, cleared on every transition. ``entered``: the
    monotonic time the state was entered; ``retry_at``: not stepped
    before this monotonic time; ``errors``: jobs failed in a row.
    """

    kind: str
    key: str
    state: enum.Enum
    durable: typing.Any = None
    local: Mapping[str, typing.Any] = dataclasses.field(
        default_factory=lambda: _EMPTY)
    entered: float = 0.0
    retry_at: float = 0.0
    errors: int = 0


@dataclasses.dataclass(frozen=True)
class View:
    """What a step may look at: its record and the caller's world."""

    record: Record
    world: typing.Any
    now: float


#: Events of an outcome: (event, details), about the record's key, or
#: (event, details, host) (see :func:`emit` and :func:`emit_on`).
Emit = tuple[tuple, ...]


@dataclasses.dataclass(frozen=True)
class Go:
    """Go to ``state``; ``durable`` replaces the durable part if given."""

    state: enum.Enum
    durable: typing.Any = KEEP
    local: Mapping[str, typing.Any] = dataclasses.field(
        default_factory=lambda: _EMPTY)
    emit: Emit = ()


@dataclasses.dataclass(frozen=True)
class Job:
    """Run ``run()`` on the executor; then take ``then(view, result)``.

    ``lock``: hold the coordinator's lock on the workflow's key (a host)
    while the job runs. ``acts_on``: the instances the job acts on, as
    (instance id, the host the workflow believes it is on): the runtime
    owns them for the workflow (:mod:`.ownership`) before it submits the
    job, and takes the kind's ``on_conflict`` outcome instead when
    another workflow owns one. ``emit``: emitted when the job is
    submitted.
    """

    run: Callable[[], typing.Any]
    then: Callable[[View, typing.Any], 'Outcome']
    lock: bool = True
    acts_on: tuple[tuple[str, str | None], ...] = ()
    emit: Emit = ()


@dataclasses.dataclass(frozen=True)
class Retry:
    """Take the step again in ``seconds``; ``why`` is logged."""

    seconds: float
    why: str
    emit: Emit = ()


@dataclasses.dataclass(frozen=True)
class Wait:
    """Nothing to do now; ``emit`` is emitted once."""

    emit: Emit = ()


Outcome = Go | Job | Retry | Wait
Step = Callable[[View], Outcome]


@dataclasses.dataclass(frozen=True)
class Kind:
    """A workflow kind, declared as tables.

    ``transitions``: the states each state may go to. ``steps``: the
    step of each state that acts (a state without one only waits for the
    world, e.g. for an operator). ``final``: entering one ends the
    workflow (its record is dropped). ``on_error(view, exc)``: the
    outcome when a job raised (default: back off, up to ``max_backoff``).
    ``order(record)``: the rank its workflows are stepped and their
    results applied in (default: all equal, by key), e.g. the order in
    which one poll decided them. ``owner``: who its jobs act on
    instances as (required for a job with ``acts_on``);
    ``on_conflict(view, rule, holder)``: the outcome when another
    workflow owns one of them (default: wait ``backoff`` seconds).
    ``settle``: a result is applied at the next run, not the one that saw
    its job end (the next steps see a world read after its write).
    ``pace()``: seconds from a step that started a job to the next step.
    ``named_only``: run only when ``kinds`` names it.
    ``survives_leadership``: a lost leadership drops a finished job's
    result, not the record (nothing in Nova would rebuild it).
    """

    name: str
    transitions: Mapping[enum.Enum, frozenset]
    steps: Mapping[enum.Enum, Step]
    final: frozenset = frozenset()
    on_error: Callable[[View, BaseException], Outcome] | None = None
    backoff: float = 5.0
    max_backoff: float = 60.0
    order: Callable[[Record], int] | None = None
    owner: ownership.Owner | None = None
    on_conflict: Callable[[View, ownership.Rule, ownership.Claim],
                          'Outcome'] | None = None
    settle: bool = False
    pace: Callable[[], float] | None = None
    named_only: bool = False
    survives_leadership: bool = False

    def check(self, key: str, old: enum.Enum, new: enum.Enum) -> None:
        """Refuse a transition the table does not hold."""
        if new not in self.transitions.get(old, frozenset()):
            raise exceptions.InstanceHAError(
                '%s %s: no transition from %s to %s' % (self.name, key, getattr(
                    old, 'value', old), getattr(new, 'value', new)))


class Runtime:
    """Runs the workflows of every registered kind; see the module doc."""

    def __init__(self, env: ports.Environment,
                 leading: Callable[[], bool]):
        self.env = env
        self._leading = leading
        self._kinds: dict[str, Kind] = {}
        self._records: dict[tuple[str, str], Record] = {}
        #: Running jobs: (kind, key) -> (future, then). Never a record.
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
        if (kind, key) in self._records and not replace:
            return self._records[(kind, key)]
        self._jobs.pop((kind, key), None)
        rec = Record(kind=kind, key=key, state=state, durable=durable,
                     local=frozen_map(local), errors=errors,
                     entered=self.env.clock.monotonic())
        self._records[(kind, key)] = rec
        return rec

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
        """
        wanted, ready = self._wanted(kinds), self._ready()
        for _ in range(MAX_ROUNDS):
            changed = self._harvest(world, wanted, ready, only)
            now = self.env.clock.monotonic()
            for k in self._ordered(self._records):
                rec = self._records.get(k)
                if (rec is None or k[0] not in wanted or k in self._jobs
                        or now < rec.retry_at):
                    continue
                step = self._kinds[k[0]].steps.get(rec.state)
                if step is None or self._pacing(k, now):
                    continue
                changed |= self._apply(rec, step(View(rec, world, now)))
            if not changed:
                return

    def harvest(self, world: typing.Any = None,
                kinds: typing.Iterable[str] | None = None,
                only: frozenset[tuple[str, str]] | None = None) -> None:
        """Apply finished jobs' results, step nothing (see :meth:`run`)."""
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
        """Forget finished jobs unapplied (a copy no longer leading)."""
        for k, (fut, _) in list(self._jobs.items()):
            if fut.done():
                del self._jobs[k]
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
            fut, then = self._jobs[k]
            if (k[0] not in wanted or not fut.done() or
                    (only is not None and k not in only)):
                continue
            if self._kinds[k[0]].settle and fut not in ready:
                continue  # ended during this run: applied at the next
            del self._jobs[k]
            self._release(k)
            rec = self._records.get(k)
            if rec is None:
                continue
            if not self._leading():
                self._lost(k)
                continue
            view = View(rec, world, self.env.clock.monotonic())
            exc = fut.exception()
            if exc is not None:
                outcome = self._on_error(view, exc)
            else:
                rec = dataclasses.replace(rec, errors=0)
                self._records[k] = rec
                outcome = then(dataclasses.replace(view, record=rec),
                               fut.result())
            self._apply(self._records[k], outcome)
            changed = True
        return changed

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

    def _apply(self, rec: Record, outcome: Outcome) -> bool:
        """Apply one outcome to ``rec``; whether anything changed."""
        k = (rec.kind, rec.key)
        if isinstance(outcome, Job):
            if self._kinds[rec.kind].pace is not None:
                self._stepped[k] = self.env.clock.monotonic()
            if not self._leading():
                return False  # taken again on a later tick
            refused = self._own(rec, outcome)
            if refused is not None:
                return self._apply(rec, refused)
            self._say(rec, outcome.emit)
            self._jobs[k] = (self._submit(rec, outcome), outcome.then)
            return True
        self._say(rec, outcome.emit)
        if isinstance(outcome, Wait):
            return False
        if isinstance(outcome, Retry):
            self._records[k] = dataclasses.replace(
                rec, retry_at=self.env.clock.monotonic() + outcome.seconds)
            LOG.debug('%s %s: step again in %.1fs: %s', rec.kind, rec.key,
                      outcome.seconds, outcome.why)
            return False
        return self._go(rec, outcome)

    def _say(self, rec: Record, emits: Emit) -> None:
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
        self._records[k] = Record(
            kind=rec.kind, key=rec.key, state=go.state, durable=durable,
            local=frozen_map(go.local), entered=self.env.clock.monotonic())
        return True

    def _submit(self, rec: Record, job: Job):
        return boundary.submit(self.env, '%s %s' % (rec.kind, rec.key),
                               job.run, lock=rec.key if job.lock else None)


def emit(event: str, **details) -> Emit:
    """One event for an outcome's ``emit`` (``host`` is the record's key)."""
    return ((event, frozen_map(details)),)


def emit_on(host: str | None, event: str, **details) -> Emit:
    """One event about ``host`` (not the record's key) for ``emit``."""
    return ((event, frozen_map(details), host),)
