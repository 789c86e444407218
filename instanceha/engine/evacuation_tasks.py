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

"""What one host's evacuation knows of each instance, and what it asks.

Plain values, shared by the job that moves a fenced host's instances
(:mod:`instanceha.engine.evacuation_job`), the modules it is built of,
and the strategies that supply its policy
(:mod:`instanceha.plugins.evacuation.base`): one instance's evacuation
as far as this service knows it (:class:`InstanceTask`), where a host's
evacuation stands after a step (:class:`Progress`), and what a job asks
its strategy (:class:`Policy`).
"""

from collections.abc import Callable
import dataclasses
import enum
import typing

from instanceha.engine import model
from instanceha.engine import placement
from instanceha.engine import ports


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
    #: Host asked for in the current (or last) call; None lets Nova
    #: choose. The next call's is decided when it is made
    #: (:func:`instanceha.engine.placement.decide`).
    target: str | None = None
    dest: str | None = None
    reason: str = ''
    #: Monotonic time the current attempt was accepted (by this copy; a
    #: resumed one: when it was found running).
    started: float | None = None
    #: Monotonic time the current attempt's ``[evacuation] timeout``
    #: counts from, when it began before this copy saw it (a rebuild
    #: found running after a restart: when Nova created its record, on
    #: Nova's clock); None: from ``started``. See :meth:`timed_from`.
    asked_at: float | None = None
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
    #: :func:`instanceha.engine.migration_records.own_records`).
    unlisted: bool = False
    #: Told when ``state`` changes: the job hands its view over again
    #: (see :class:`JobView`).
    on_change: Callable[[], None] | None = dataclasses.field(
        default=None, repr=False, compare=False)

    def timed_from(self) -> float | None:
        """Monotonic time the running attempt's time-out counts from.

        The moment Nova was asked for it, whichever copy asked: a copy
        that resumed the evacuation gives a rebuild the time left of its
        time-out, not a new one (the same outcome as without a restart).
        """
        return self.asked_at if self.asked_at is not None else self.started

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name == 'state':
            on_change = getattr(self, 'on_change', None)
            if on_change is not None:
                on_change()


@dataclasses.dataclass(frozen=True)
class JobView:
    """What the tick reads of an evacuation job, running or not.

    The job hands a new one over (one reference, replaced whole) the
    moment one of its instances changes state; the tick never reads the
    job's tasks while a step of it runs.
    """

    #: Rebuilds in flight (counted against ``max_in_flight``).
    in_flight: int = 0
    #: Some instance still waits for its evacuation call.
    wants_more: bool = True


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


class Policy(placement.Placer, typing.Protocol):
    """What a job asks its strategy (a plugin of ``instanceha.evacuation``).

    :class:`instanceha.plugins.evacuation.base.EvacuationStrategy`
    implements it from the ``[evacuation]`` options. Where an instance
    goes is asked through :func:`instanceha.engine.placement.decide`
    (:class:`instanceha.engine.placement.Placer`).
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

    def ready(self, tasks: list[InstanceTask]) -> list[InstanceTask]:
        """The pending tasks that may start now, in order."""
