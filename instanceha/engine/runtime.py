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

"""One runtime for every kind of workflow: what a kind declares.

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
* :class:`Stay` -- stay in the state, changing its own data (and the
  durable part), stepped again after a while;
* :class:`Wait` -- nothing to do until the world changes.

The runtime (:class:`instanceha.engine.runtime_loop.Runtime`) alone
submits jobs, harvests their results, applies every outcome, backs off
on a job's error, checks leadership before submitting and before
applying, emits the transitions' events and repeats while anything
changed (Proxmox's ``manage()``; controller-runtime's requeue-after).
So the rules a new kind must not forget are written once:

* Records are frozen values, replaced only by the runtime in the thread
  that runs :meth:`Runtime.run` (the tick). A job gets no record: it
  returns a value, and the record changes when that value is applied.
  The runtime itself refuses to be driven from inside a job.
* A state's local data (:attr:`Record.local`) is cleared on every
  transition but for what the transition hands on by name
  (:attr:`Go.keep`); the durable part is what outlives the state (what
  the workflow's marker in Nova holds).
* Nothing is submitted while this copy does not lead, and the result of
  a job that finished while it did not lead is dropped: the next leader
  resumes from Nova. Every side effect still passes the environment's
  guard at the moment it is made.
* A job that acts on instances says which (:attr:`Job.acts_on`): the
  runtime owns them for its workflow in the one registry of who owns
  each instance (:mod:`instanceha.engine.ownership`) before submitting
  it, and takes the kind's ``on_conflict`` outcome instead when another
  workflow owns one; the claims go when the result is applied.

A kind may also declare a pace, its own point of the tick, records
that outlive a lost leadership and one step per run (see :class:`Kind`).
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import enum
import types
import typing

from instanceha.engine import ownership
from instanceha import exceptions

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
    """Go to ``state``; ``durable`` replaces the durable part if given.

    ``local``: the new state's own data; ``keep``: the names of the old
    state's data handed on to it (a fence that failed keeps counting its
    attempts when it is tried again), the rest is cleared.
    """

    state: enum.Enum
    durable: typing.Any = KEEP
    local: Mapping[str, typing.Any] = dataclasses.field(
        default_factory=lambda: _EMPTY)
    emit: Emit = ()
    keep: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Job:
    """Run ``run()`` on the executor; then take ``then(view, result)``.

    ``lock``: hold the coordinator's lock on the workflow's key (a host)
    while the job runs. ``acts_on``: the instances the job acts on, as
    (instance id, the host the workflow believes it is on): the runtime
    owns them for the workflow (:mod:`.ownership`) before it submits the
    job, and takes the kind's ``on_conflict`` outcome instead when
    another workflow owns one. ``emit``: emitted when the job is
    submitted. ``wrote(durable)``: the durable part after what the job
    wrote into Nova (from the job's own copy of it, e.g. the markers it
    wrote): applied at the harvest whether the job returned or raised,
    for what it wrote is there either way; before ``then`` or the
    kind's ``on_error``.
    """

    run: Callable[[], typing.Any]
    then: Callable[[View, typing.Any], 'Outcome']
    lock: bool = True
    acts_on: tuple[tuple[str, str | None], ...] = ()
    emit: Emit = ()
    wrote: Callable[[typing.Any], typing.Any] | None = None


@dataclasses.dataclass(frozen=True)
class Retry:
    """Take the step again in ``seconds``; ``why`` is logged.

    ``count``: counted with the failed jobs in a row (:attr:`Record.errors`,
    what a back-off grows with): a step that did not fail but got
    nowhere (no proof that a host is off), as if it had.
    """

    seconds: float
    why: str
    emit: Emit = ()
    count: bool = False


@dataclasses.dataclass(frozen=True)
class Stay:
    """Stay in the state, changing its own data; no transition.

    ``local``: merged into the state's local data; ``durable`` replaces
    the durable part if given; ``after``: not stepped again before this
    many seconds (0: at the next run). What a state counts while it
    stays (the tries of a power-on, why the latest failed).
    """

    local: Mapping[str, typing.Any] = dataclasses.field(
        default_factory=lambda: _EMPTY)
    durable: typing.Any = KEEP
    after: float = 0.0
    emit: Emit = ()


@dataclasses.dataclass(frozen=True)
class Wait:
    """Nothing to do now; ``emit`` is emitted once."""

    emit: Emit = ()


Outcome = Go | Job | Retry | Stay | Wait
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
    ``chain``: each workflow is stepped once a run (no further rounds),
    and a transition takes the new state's step at once, wherever it is
    applied (a step, a job's result, :meth:`Runtime.apply`): one step of
    each host a tick, the states it passes through on the way included.
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
    chain: bool = False

    def check(self, key: str, old: enum.Enum, new: enum.Enum) -> None:
        """Refuse a transition the table does not hold."""
        if new not in self.transitions.get(old, frozenset()):
            raise exceptions.InstanceHAError(
                '%s %s: no transition from %s to %s' % (self.name, key, getattr(
                    old, 'value', old), getattr(new, 'value', new)))


def emit(event: str, **details) -> Emit:
    """One event for an outcome's ``emit`` (``host`` is the record's key)."""
    return ((event, frozen_map(details)),)


def emit_on(host: str | None, event: str, **details) -> Emit:
    """One event about ``host`` (not the record's key) for ``emit``."""
    return ((event, frozen_map(details), host),)
