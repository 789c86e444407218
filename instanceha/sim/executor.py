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

"""A deterministic executor: jobs finish in simulated time, no threads.

A job runs to the end the moment it gets a worker slot, in job time (see
:mod:`instanceha.sim.clock`): its side effects (a BMC command) happen at
its start, and it lasts as long as it slept. Its future is completed only
when the world's clock reaches start + duration, so the engine sees a
slow fence exactly as slow as the simulated device made it. Like the
production thread pool, at most ``workers`` jobs run at once; others wait
for a slot in submission order.
"""

from collections.abc import Callable
import concurrent.futures
import heapq
import itertools

from instanceha.engine import ports
from instanceha.sim import clock as sim_clock


class SimFuture(concurrent.futures.Future):
    """A future that refuses to be waited on before it is done.

    The engine must never block on a job; in a single-threaded simulation
    a blocking wait would hang forever, so it fails loudly instead.
    """

    def result(self, timeout=None):
        if not self.done():
            raise RuntimeError('the engine waited on an unfinished job; the '
                               'engine must check futures with done() and '
                               'never block')
        return super().result(timeout)

    def exception(self, timeout=None):
        if not self.done():
            raise RuntimeError('the engine waited on an unfinished job')
        return super().exception(timeout)


class SimExecutor(ports.Executor):
    """Runs jobs in simulated time on ``workers`` simulated slots."""

    #: Even a job that never sleeps takes this long (a round trip).
    MIN_DURATION = 1.0

    def __init__(self, clock: sim_clock.SimClock, workers: int = 4,
                 on_start: Callable[[], None] | None = None):
        self.clock = clock
        self.workers = workers
        #: Called before each job runs (the simulation names the actor).
        self.on_start = on_start
        self._seq = itertools.count()
        self._queued: list[tuple[SimFuture, Callable, tuple, dict]] = []
        self._running: list = []
        self.jobs_run = 0

    def submit(self, fn: Callable, *args, **kwargs) -> SimFuture:
        fut = SimFuture()
        self._queued.append((fut, fn, args, kwargs))
        self._start_queued()
        return fut

    def _start_queued(self) -> None:
        while self._queued and len(self._running) < self.workers:
            fut, fn, args, kwargs = self._queued.pop(0)
            if not fut.set_running_or_notify_cancel():
                continue
            if self.on_start:
                self.on_start()
            start = self.clock.world_t
            self.clock.begin_job()
            result = exc = None
            try:
                result = fn(*args, **kwargs)
            except Exception as e:
                exc = e
            finally:
                spent = self.clock.end_job()
            self.jobs_run += 1
            due = start + max(spent, self.MIN_DURATION)
            heapq.heappush(self._running,
                           (due, next(self._seq), fut, result, exc))

    def next_due(self) -> float | None:
        """When the next running job finishes; None when idle."""
        return self._running[0][0] if self._running else None

    def complete_due(self) -> int:
        """Finish every job due by now, start waiting ones; return count."""
        done = 0
        while self._running and self._running[0][0] <= self.clock.world_t:
            _, _, fut, result, exc = heapq.heappop(self._running)
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            done += 1
            self._start_queued()
        return done

    def abandon(self) -> None:
        """Drop every job (the service crashed): futures never finish."""
        self._queued.clear()
        self._running.clear()

    @property
    def busy(self) -> bool:
        return bool(self._queued or self._running)
