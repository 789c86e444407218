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

from collections.abc import Callable
import concurrent.futures
import dataclasses
import datetime
import logging
import uuid

from instanceha.engine import evacuation_job
from instanceha.engine import evacuation_tasks
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


@dataclasses.dataclass
class HostWorkflow:
    """The engine's in-memory view of one host being recovered."""

    host: str
    state: HostState
    #: When the current state was entered (clock.now()).
    entered: datetime.datetime
    #: When the host was detected failed (or the marker's time).
    detected: datetime.datetime
    servers: tuple[model.Server, ...] = ()
    future: concurrent.futures.Future | None = None
    #: Applied in the tick thread to the job's result.
    on_done: Callable | None = None
    #: Evacuations the running job may start (counted against the cap).
    budget: int = 0
    #: Its rebuilds in flight when the running job's step began, if that
    #: step may use their slots again (0 otherwise).
    step_in_flight: int = 0
    attempts: int = 0
    retry_at: float = 0.0
    kdump: bool = False
    #: ``poweroff``: the host announced its power-off and was proven off
    #: by reading its devices; it stays off (in the marker: a resumed
    #: copy must not power it on either).
    shutdown: str | None = None
    kdump_deadline: float | None = None
    fence_level: int | None = None
    spare: str | None = None
    since: datetime.datetime | None = None
    #: Fenced by this copy a moment ago, and no evacuation job begun for
    #: it yet: nothing of this failure can have been evacuated, so its
    #: first job classifies the instances without Nova's records.
    first_job: bool = False
    job: evacuation_job.EvacuationJob | None = None
    progress: evacuation_tasks.Progress | None = None
    resumed: bool = False
    reason: str = ''
    #: Only a heartbeat newer than this proves the host came back (its
    #: power-on, or the waiting_up marker of a host that starts by itself,
    #: plus :data:`model.OWN_WRITE`; Nova's clock). See
    #: :meth:`instanceha.engine.steps.Steps._step_waiting_up`.
    up_after: datetime.datetime | None = None
    #: The ``disabled_reason`` of the latest marker this copy wrote (or
    #: adopted) for the host: what Nova shows while it is ours. Waiting
    #: up after our power-on, Nova keeps the marker written before it.
    marked: str | None = None
    #: Steps in a row that raised (their retry backs off).
    step_errors: int = 0
    #: This recovery's id: in every event of it (``recovery_id``), every
    #: notification and the Nova marker (``rid=``), so a resumed copy
    #: goes on with the same one.
    recovery: str = ''
    #: The spare (if any) was enabled by this copy.
    spare_enabled: bool = False
    #: Evacuating, but the marker saying so (forced down) is not in Nova
    #: yet: the next evacuation step writes it before any evacuate call.
    unmarked: bool = False
    #: Instances given up (marker short ids): never evacuated again, also
    #: by a copy that resumes (they are in the marker).
    gave_up: tuple[str, ...] = ()
    #: The host's evacuation stopped at a give-up (``stop_host``).
    stopped: bool = False
    #: When its latest step raised (clock.now()); None: never.
    failed_at: datetime.datetime | None = None
    #: The skew between our clock and Nova's when ``since`` was read from
    #: our clock, or converted to it from a marker (None: unknown).
    since_skew: float | None = None


def awaits_fence(wf: HostWorkflow) -> bool:
    """Whether ``wf``'s host is to be fenced and no power-off is under way.

    Suspect, fence_failed, and a first fencing while a first kdump
    message is awaited (no job yet): each read of Nova judges such a host
    again like a failed host not yet started (a host back, or a gate now
    refusing, ends its workflow), and it is powered off only on a plan
    made in the same tick. A fence job under way is never called back,
    nor is a host fenced again (powered on mid-evacuation: ``since`` is
    set once it was first fenced): its recovery is under way.
    """
    return wf.future is None and (
        wf.state in NEEDS_FRESH_PLAN or
        (wf.state is S.FENCING and wf.since is None))
