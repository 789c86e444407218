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

"""When the job of a fenced host looks at the rebuilds it started.

Nova's migration records tell whether a rebuild ended; listing them
every tick costs a call per tick for the whole of a recovery. A job
lists them when the rebuilds are expected to have ended instead: by how
long Nova took for the rebuilds seen so far (:class:`RebuildPace`,
shared by every job of an engine), looked at again with a short back-off
while some run late, and exactly when a time-out expires
(:class:`LookSchedule`).
"""

import collections
from collections.abc import Iterable

from instanceha.engine import evacuation
from instanceha.engine import evacuation_tasks as tasks_mod
from instanceha.engine import model

#: it lists the records again (see :meth:`LookSchedule.plan`).
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


class LookSchedule:
    """When one job next lists Nova's records of its running rebuilds."""

    def __init__(self):
        #: When running rebuilds are next looked at (monotonic; None: at
        #: the next step), see :meth:`due`.
        self.next_check: float | None = None
        #: Looks in a row at rebuilds all past their expected end.
        self.late_looks = 0

    def due(self, now: float, budget: int, tasks: list[tasks_mod.InstanceTask],
            classified: bool, stopped: bool) -> bool:
        """Whether a step now has anything to do.

        Something to start (a pending instance past its back-off, and a
        slot for it), an unanswered call to settle, an unlock to retry,
        or running rebuilds to look at (:meth:`check_due`). A step that
        only waits for rebuilds is not taken: their records are listed
        when the rebuilds are expected to have ended, not every tick.
        """
        if self.check_due(now, tasks, classified):
            return True
        for task in tasks:
            if task.state is tasks_mod.TaskState.PENDING and budget > 0 and (
                    task.not_before is None or now >= task.not_before):
                return True
            if task.state is tasks_mod.TaskState.PENDING and stopped:
                return True  # to be given up (and unlocked) now
            if (task.state in (tasks_mod.TaskState.DONE,
                               tasks_mod.TaskState.FAILED) and
                    task.locked_by_us):
                return True
        return False

    def check_due(self, now: float, tasks: list[tasks_mod.InstanceTask],
                  classified: bool) -> bool:
        """Whether Nova's records are to be listed in a step now."""
        if not classified or any(t.unanswered for t in tasks):
            return True
        if not any(t.state is tasks_mod.TaskState.IN_FLIGHT for t in tasks):
            return False
        return self.next_check is None or now >= self.next_check

    @staticmethod
    def only_the_last_ends(tasks: Iterable[tasks_mod.InstanceTask],
                           running: list[tasks_mod.InstanceTask]) -> bool:
        """Whether only the end of the last running rebuild matters.

        No lock of ours to lift, no status to restore (an instance that
        was stopped or in error) and no instance waiting for a slot: a
        rebuild seen ending frees nothing and changes nothing; the last
        one's end moves the host on. (A rebuild Nova fails early is then
        retried at the latest one's expected end: rebuilds started
        together are expected to end together.)
        """
        if any(t.locked_by_us or t.verify_lock or
               t.original_status in evacuation.RESTORED for t in running):
            return False
        return not any(t.state is tasks_mod.TaskState.PENDING for t in tasks)

    def plan(self, now: float, tasks: list[tasks_mod.InstanceTask],
             pace: RebuildPace, timeout: int, looked: bool = False,
             ended: bool = False) -> None:
        """When to look at the running rebuilds next.

        At the expected end of the earliest one (the average rebuild
        time ``pace`` learned), or of the latest when only that matters
        (:meth:`only_the_last_ends`; the longest recent rebuild), at
        most ``CHECK_MAX`` ahead; ``FIRST_LOOK`` before one was seen
        ending. Rebuilds past their expected end are looked at after 1,
        2, 4 ... seconds (at most ``LATE_LOOK_MAX``; the wait grows with
        each ``looked`` that saw them still running), from 1 again
        whenever a look saw one end (``ended``): its siblings are likely
        close behind. So a rebuild is seen ending at most
        ``LATE_LOOK_MAX`` seconds late, with a few listings per failure
        instead of one per tick; a time-out (``timeout``, ``[evacuation]
        timeout``) is looked at when it expires.
        """
        running = [t for t in tasks
                   if t.state is tasks_mod.TaskState.IN_FLIGHT and
                   t.started is not None]
        last = self.only_the_last_ends(tasks, running)
        took = pace.slowest if last else pace.rebuild_time
        if took is None:
            took = FIRST_LOOK
        ends = [t.started + took for t in running
                if t.started + took > now]
        if ended:
            self.late_looks = 0
        wait = CHECK_MAX
        if ends:
            wait = min(wait, (max(ends) if last else min(ends)) - now)
        if len(ends) < len(running):  # some are past their expected end
            wait = min(wait, 2.0 ** self.late_looks, LATE_LOOK_MAX)
            if looked:
                self.late_looks += 1
        # A rebuild's time-out is seen when it expires, not a wait late.
        deadlines = [t.timed_from() + timeout + TICK_SLACK for t in running
                     if timeout and
                     t.timed_from() + timeout + TICK_SLACK > now]
        if deadlines:
            wait = min(wait, min(deadlines) - now)
        self.next_check = now + wait
