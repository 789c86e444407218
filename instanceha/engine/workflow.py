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

"""One host's recovery workflow: its record and the rules around it."""

import dataclasses
import datetime
import logging
import threading
import uuid

from instanceha.engine import boundary
from instanceha.engine import evacuation_job
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine.states import HostState
from instanceha import exceptions

#: One logger for the whole recovery engine, whichever module logs:
#: operators' logging configurations name it.
LOG = logging.getLogger('instanceha.engine.recovery')

S = HostState

#: Nova's and our clocks may differ a little: migration records this much
#: older than the fence time still count as ours.
MIGRATION_SLACK = datetime.timedelta(seconds=120)
#: The same for the first job of a failure this copy fenced itself: its
#: records are made after the fence, so only the error of the measured
#: skew (Nova's Date header has whole seconds) is allowed for. A wider
#: slack would take the records of an earlier failure of the host (one
#: that came back and failed again within two minutes) for this one's.
NEW_FAILURE_SLACK = datetime.timedelta(seconds=5)


#: States that hold one of the ``workers`` recovery slots.
BUSY_STATES = frozenset({S.FENCING, S.FENCED, S.EVACUATING, S.EVACUATED,
                         S.POWERING_ON, S.ENABLING})

#: Marker states a (re)started engine adopts from Nova.
RESUMABLE = frozenset({S.FENCED, S.EVACUATING, S.EVACUATED,
                       S.POWERING_ON, S.WAITING_UP, S.ENABLING,
                       S.LEFT_DISABLED, S.FAILED})

#: States whose host is read closely (``[detection]
#: nova_service_down_time`` set, see :mod:`instanceha.engine.watch`):
#: from its fencing to its hand-back, an operator's take-over is followed
#: within seconds, and a host waiting to come back is enabled within
#: seconds of its nova-compute reporting. Before its fencing a host is
#: judged by a full read before each power-off; failed and left_disabled
#: wait for an operator only.
WATCHED = frozenset({S.FENCED, S.EVACUATING, S.EVACUATED, S.POWERING_ON,
                     S.WAITING_UP, S.ENABLING})

#: States whose next step fences a host: taken only on a plan made from
#: the latest cycle's snapshot, never while Nova cannot be read.
NEEDS_FRESH_PLAN = frozenset({S.SUSPECT, S.FENCE_FAILED})

#: States whose workflow still needs the host's servers listed.
NEEDS_SERVERS = frozenset({S.SUSPECT, S.FENCING, S.FENCE_FAILED, S.FENCED,
                           S.EVACUATING})

#: Seconds before a step that raised is tried again (doubled while it
#: keeps failing, up to ``poll``).
STEP_RETRY = 5.0

#: What to look at when a host stays in waiting_up (``up_timeout``).
UP_OVERDUE_CHECK = (
    'is %(host)s powered on and booted (its BMC, console)? is its '
    'nova-compute running and reaching the message bus? Its reports must '
    'reach Nova (Updated At of openstack compute service list --long '
    '--host %(host)s moves on; it stays forced down until instanceha '
    'enables it). To take it out of instanceha\'s hands, disable it with '
    'a reason of your own')


#: Logged when a host is marked FAILED: the operator's steps.
OPERATOR_STEPS = (
    'host %(host)s is FAILED and stays disabled and forced down. To hand '
    'it back: 1) find out why the instances listed above could not be '
    'evacuated; 2) evacuate (or fix) the instances still on %(host)s; '
    '3) make sure %(host)s restarts cleanly; 4) run "instanceha-manage '
    'hosts clear %(host)s" (clears forced_down; instanceha enables it once '
    'Nova reports it up).')


class OperatorTookOver(exceptions.InstanceHAError):
    """The host was disabled with a reason that is not ours: hands off."""


def operators_reason(svc: model.Service | None) -> str | None:
    """Why ``svc`` is an operator's now (None while it is ours or free).

    A service disabled with a reason that is not our marker (no reason,
    a reason of the operator's own, maintenance) was taken by an
    operator; whatever our workflow was doing, it ends there.
    """
    if svc is None or not svc.disabled:
        return None
    reading = reasons.of_service(svc)
    if reading.marker is not None:
        return None
    if reading.frozen is not None and reading.frozen.failover:
        return None  # our record of an announced shutdown under failover
    if reading.kind is reasons.Kind.NOBODY:
        return 'disabled without a reason'
    return 'disabled with the reason "%s"' % reading.text


def new_recovery_id() -> str:
    """A fresh recovery id (a UUID: unique across copies and restarts)."""
    return str(uuid.uuid4())


def operator_action(host: str) -> str:
    """What an operator must do about a FAILED host."""
    return ('check the instances of %s listed in the log, evacuate or fix '
            'them by hand, then run "instanceha-manage hosts clear %s"'
            % (host, host))


@dataclasses.dataclass(frozen=True)
class Durable:
    """What a host's marker holds: all that a copy resuming it knows.

    The running copy's record says exactly what the latest marker it
    wrote says (see :meth:`marked_as`), and a copy that adopts that
    marker (:meth:`adopted`) holds the same: the outcome cannot depend on
    whether the service restarted in between. A change made in the tick
    (a spare claimed, a fence that found a crash dump) is what the next
    marker will say.
    """

    #: This recovery's id: in every event of it (``recovery_id``), every
    #: notification and the Nova marker (``rid=``).
    recovery: str = ''
    #: When the host was fenced, on Nova's clock, to the second (the
    #: marker's ``fenced_at``); None before its fencing.
    fenced_at: datetime.datetime | None = None
    #: The spare claimed for the host's instances.
    spare: str | None = None
    #: Fenced by its crash dump (never power-cycled while it dumps).
    kdump: bool = False
    #: ``poweroff``: the host announced its power-off and was proven off
    #: by reading its devices; it stays off (a resumed copy must not
    #: power it on either).
    shutdown: str | None = None
    #: Instances given up (marker short ids): never evacuated again.
    gave_up: tuple[str, ...] = ()
    #: The host's evacuation stopped at a give-up (``stop_host``).
    stopped: bool = False
    #: The ``disabled_reason`` of the latest marker written (or adopted)
    #: for the host: what Nova shows while it is ours. Waiting up after
    #: our power-on, Nova keeps the marker written before it.
    marked: str | None = None

    def marked_as(self, state: HostState,
                  spare: str | None) -> 'Durable':
        """The record a marker of ``state`` holds (``marked`` left out).

        A FAILED marker holds the recovery only (an operator's note);
        the others the fence, the spare named, kdump and the announced
        shutdown, and while instances are evacuated (fenced again in the
        middle included) what was given up.
        """
        if state is S.FAILED:
            return Durable(recovery=self.recovery)
        evacuating = state in (S.FENCED, S.EVACUATING)
        return dataclasses.replace(
            self, spare=spare,
            gave_up=self.gave_up if evacuating else (),
            stopped=self.stopped and evacuating)

    @classmethod
    def adopted(cls, parsed: marker_mod.Marker, reason: str,
                fenced_at: datetime.datetime | None,
                recovery: str) -> 'Durable':
        """The record of a copy resuming from ``parsed`` (``reason``).

        ``fenced_at``: the fence time on Nova's clock as the adopting
        copy takes it; ``recovery``: the id when the marker has none.
        """
        if parsed.state is S.FAILED:
            return cls(recovery=recovery, marked=reason)
        evacuating = parsed.state in (S.FENCED, S.EVACUATING)
        return cls(recovery=recovery, fenced_at=fenced_at,
                   spare=parsed.spare if evacuating else None,
                   kdump=parsed.kdump, shutdown=parsed.shutdown,
                   gave_up=parsed.gave_up if evacuating else (),
                   stopped=parsed.stopped and evacuating, marked=reason)


def fence_time(since: datetime.datetime,
               skew: float | None) -> datetime.datetime:
    """The durable fence time of a workflow whose ``since`` is ``since``.

    On Nova's clock (``skew``: measured when ``since`` was read), to the
    second, as the marker writes it.
    """
    return marker_mod.to_nova(since + MIGRATION_SLACK, skew).replace(
        microsecond=0)


class Draft:
    """A job's own copy of its workflow's durable record.

    Made by the tick when it submits the job; the job changes its copy
    (and writes its markers from it), never the record; the tick applies
    what changed when it harvests the job, whether it returned or raised
    (what it wrote into Nova is there either way). The tick does not
    look at it while the job runs.
    """

    def __init__(self, host: str, durable: Durable):
        self.host = host
        self._base = self.durable = durable
        #: The states of the markers the job wrote, in order.
        self.written: list[HostState] = []
        self._lock = threading.Lock()

    def update(self, **changes) -> None:
        """Change the job's copy (a job's concurrent calls may)."""
        with self._lock:
            self.durable = dataclasses.replace(self.durable, **changes)

    def wrote(self, state: HostState, durable: Durable) -> None:
        """The job wrote a marker of ``state`` holding ``durable``."""
        with self._lock:
            self.durable = durable
            self.written.append(state)

    def changes(self) -> dict:
        """The fields the job changed, with their new values."""
        return {f.name: getattr(self.durable, f.name)
                for f in dataclasses.fields(Durable)
                if getattr(self.durable, f.name) !=
                getattr(self._base, f.name)}


@dataclasses.dataclass(slots=True)
class StateLocal(boundary.TickOwned):
    """What one state of a workflow keeps: cleared on every transition.

    What a state hands on to the next is named at the transition
    (:meth:`instanceha.engine.tick.Plumbing._transition`'s ``keep``).
    """

    #: Fencing (and fence_failed, which keeps them), or powering on:
    #: the tries that failed so far.
    attempts: int = 0
    #: Fencing: when the first kdump message stops being awaited
    #: (monotonic; None: not awaited yet).
    kdump_deadline: float | None = None
    #: Fence_failed, powering on: why the latest try failed.
    reason: str = ''
    #: Waiting up: only a heartbeat newer than this proves the host came
    #: back (its power-on, or the waiting_up marker of a host that
    #: starts by itself, plus :data:`model.OWN_WRITE`; Nova's clock). See
    #: :meth:`instanceha.engine.steps.Steps._step_waiting_up`.
    up_after: datetime.datetime | None = None
    #: Evacuating, but the marker saying so (forced down) is not in Nova
    #: yet: the next evacuation step writes it before any evacuate call.
    unmarked: bool = False
    #: When the latest job of this state raised (clock.now()); None:
    #: none did.
    failed_at: datetime.datetime | None = None

    def kept(self, names: tuple[str, ...]) -> 'StateLocal':
        """A fresh one, but for ``names``, handed on to the next state."""
        return StateLocal(**{n: getattr(self, n) for n in names})


@dataclasses.dataclass(slots=True)
class HostWorkflow(boundary.TickOwned):
    """The engine's in-memory view of one host being recovered.

    Written in the tick only (:class:`boundary.TickOwned`): a job gets a
    :class:`Draft` of the durable part and returns its result. Two
    parts: what the marker holds (:class:`Durable`) and the current
    state's own data (:class:`StateLocal`, cleared on every
    transition); beside them what the whole recovery works with: the
    host's instances, the fence time on our clock and the evacuation
    job. Its scheduling (the running job, the retry, the errors in a
    row) is the workflow runtime's record of the host
    (:data:`instanceha.engine.tick.KIND`).
    """

    host: str
    state: HostState
    #: When the current state was entered (clock.now()).
    entered: datetime.datetime
    #: When the host was detected failed (or the marker's time).
    detected: datetime.datetime
    #: What the host's marker holds (see :class:`Durable`).
    durable: Durable = Durable()
    #: The current state's own data (see :class:`StateLocal`).
    local: StateLocal = dataclasses.field(default_factory=StateLocal)
    servers: tuple[model.Server, ...] = ()
    #: ``durable.fenced_at`` on our clock, less :data:`MIGRATION_SLACK`
    #: (exact in the copy that fenced): migration records older than
    #: this are not of this failure.
    since: datetime.datetime | None = None
    #: The skew between our clock and Nova's when ``since`` was read from
    #: our clock, or converted to it from a marker (None: unknown).
    since_skew: float | None = None
    #: Fenced by this copy a moment ago, and no evacuation job begun for
    #: it yet: nothing of this failure can have been evacuated, so its
    #: first job classifies the instances without Nova's records.
    first_job: bool = False
    job: evacuation_job.EvacuationJob | None = None
    #: Adopted from a marker (not started by this copy).
    resumed: bool = False
    #: The spare (if any) was enabled by this copy.
    spare_enabled: bool = False

    def record(self, **changes) -> None:
        """Change the durable part (see :class:`Durable`)."""
        self.durable = dataclasses.replace(self.durable, **changes)


def awaits_fence(wf: HostWorkflow, running: bool) -> bool:
    """Whether ``wf``'s host is to be fenced and no power-off is under way.

    Suspect, fence_failed, and a first fencing while a first kdump
    message is awaited (no job yet): each read of Nova judges such a host
    again like a failed host not yet started (a host back, or a gate now
    refusing, ends its workflow), and it is powered off only on a plan
    made in the same tick. A fence job under way is never called back,
    nor is a host fenced again (powered on mid-evacuation: ``since`` is
    set once it was first fenced): its recovery is under way.
    ``running``: whether a job of ``wf`` runs.
    """
    return not running and (
        wf.state in NEEDS_FRESH_PLAN or
        (wf.state is S.FENCING and wf.since is None))
