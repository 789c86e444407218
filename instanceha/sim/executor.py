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

"""A deterministic executor: jobs run in simulated time, one at a time.

A job (a fence, a Nova update, an evacuation step) is ordinary blocking
code, run as a coroutine: a greenlet when the ``greenlet`` package is
installed, else a thread used as one (exactly one thread runs at any
moment, control is handed over explicitly). A job runs from its
submission until it sleeps on the simulated clock (a driver polling a
BMC, waiting out a timeout); it is resumed when the simulation reaches its
wake-up time, after the world has caught up with everything that happens
meanwhile (a timeline command, a BMC finishing its power change, a poll
of the engine). So every side effect of a job happens at the simulated
moment it would happen in production, and every run is identical either
way. Like the production pool, at most ``workers`` jobs run at once;
others wait in submission order.
"""

from collections.abc import Callable
import concurrent.futures
import itertools
import threading

from instanceha.engine import ports
from instanceha.sim import clock as sim_clock

try:
    import greenlet
except ImportError:  # optional: threads do the same, more slowly
    greenlet = None


class Abandoned(BaseException):
    """Raised inside a job whose service crashed: unwind, finish nothing.

    A BaseException so that no ``except Exception`` in driver or engine
    code mistakes it for a failure to handle.
    """


class SimFuture(concurrent.futures.Future):
    """A future that refuses to be waited on before it is done.

    The engine must never block on a job; in a simulation a blocking wait
    would hang forever, so it fails loudly instead.
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


class _Job:
    def __init__(self, executor: 'SimExecutor', seq: int, fut: SimFuture,
                 fn: Callable, args: tuple, kwargs: dict):
        self.executor = executor
        self.seq = seq
        self.fut = fut
        self.call = (fn, args, kwargs)
        self.wake: float | None = None
        self.done = False
        self.abandoned = False
        if executor.greenlets:
            self._green = greenlet.greenlet(self._run)
        else:
            self._go = threading.Event()
            self._back = threading.Event()
            self._thread = threading.Thread(target=self._thread_main,
                                            daemon=True,
                                            name='sim-job-%d' % seq)

    # --- inside the job ---------------------------------------------------

    def _run(self) -> None:
        fn, args, kwargs = self.call
        try:
            if self.abandoned:
                raise Abandoned()
            result = fn(*args, **kwargs)
        except Abandoned:
            pass
        except BaseException as exc:  # handed to the engine
            self.fut.set_exception(exc)
        else:
            self.fut.set_result(result)
        finally:
            self.done = True

    def _thread_main(self) -> None:
        self._go.wait()
        self._go.clear()
        sim_clock.current_job.job = self
        try:
            self._run()
        finally:
            self._back.set()

    def sleep(self, seconds: float) -> None:
        """Give control back until the world reaches now + seconds."""
        self.wake = self.executor.clock.world_t + seconds
        if self.executor.greenlets:
            self._green.parent.switch()
        else:
            self._back.set()
            self._go.wait()
            self._go.clear()
        self.wake = None
        if self.abandoned:
            raise Abandoned()

    # --- in the simulation's own flow ------------------------------------

    def resume(self) -> None:
        if self.executor.on_start:
            self.executor.on_start()
        if self.executor.greenlets:
            before = getattr(sim_clock.current_job, 'job', None)
            sim_clock.current_job.job = self
            try:
                self._green.switch()
            finally:
                sim_clock.current_job.job = before
            return
        self._back.clear()
        if not self._thread.is_alive() and not self.done:
            self._thread.start()
        self._go.set()
        self._back.wait()


class SimExecutor(ports.Executor):
    """Runs jobs in simulated time on ``workers`` simulated slots."""

    def __init__(self, clock: sim_clock.SimClock, workers: int = 4,
                 on_start: Callable[[], None] | None = None,
                 greenlets: bool | None = None):
        self.clock = clock
        self.workers = workers
        #: Run jobs as greenlets (default: when installed) or threads.
        self.greenlets = (greenlet is not None if greenlets is None
                          else greenlets)
        #: Called before a job runs or resumes (the simulation names the
        #: copy of the service acting).
        self.on_start = on_start
        self._seq = itertools.count()
        self._queued: list[_Job] = []
        self._running: list[_Job] = []
        self.jobs_run = 0

    def submit(self, fn: Callable, *args, **kwargs) -> SimFuture:
        fut = SimFuture()
        fut.set_running_or_notify_cancel()
        self._queued.append(_Job(self, next(self._seq), fut, fn, args,
                                 kwargs))
        if getattr(sim_clock.current_job, 'job', None) is None:
            self._start_queued()
        return fut

    def _start_queued(self) -> None:
        while self._queued and len(self._running) < self.workers:
            job = self._queued.pop(0)
            self._running.append(job)
            self.jobs_run += 1
            job.resume()
            self._reap()

    def _reap(self) -> None:
        self._running = [j for j in self._running if not j.done]

    def next_due(self) -> float | None:
        """When the next sleeping job wakes up; None when idle."""
        wakes = [j.wake for j in self._running if j.wake is not None]
        return min(wakes) if wakes else None

    def complete_due(self) -> int:
        """Resume every job due by now (in wake-up order); count them."""
        resumed = 0
        while True:
            due = [j for j in self._running if j.wake is not None
                   and j.wake <= self.clock.world_t]
            if not due:
                break
            job = min(due, key=lambda j: (j.wake, j.seq))
            job.resume()
            resumed += 1
            self._reap()
            self._start_queued()
        self._start_queued()
        return resumed

    def abandon(self) -> None:
        """The service crashed: unwind its jobs; their futures never end."""
        self._queued.clear()
        for job in list(self._running):
            job.abandoned = True
            job.resume()
        self._running.clear()

    @property
    def busy(self) -> bool:
        return bool(self._queued or self._running)
