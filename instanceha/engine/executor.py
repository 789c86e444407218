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

"""Executors: where the engine's slow jobs (fencing, Nova calls) run.

The engine submits a job and looks at its future on later ticks, so a
BMC that takes a minute to answer never stalls detection of other hosts.
"""

from collections.abc import Callable
import concurrent.futures
import contextvars
import threading

from instanceha.engine import ports


class ThreadPoolExecutor(ports.Executor):
    """Production: a pool of threads ([DEFAULT] workers of them)."""

    def __init__(self, workers: int):
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='instanceha-worker')
        #: A job's own calls run here, never in the jobs' pool (a job
        #: waiting there for its calls could wait for itself).
        self._calls = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix='instanceha-call')
        #: Set whenever a job finishes: the service loop ticks at once
        #: instead of waiting for its interval.
        self.finished = threading.Event()

    def run_calls(self, calls: list[Callable[[], object]],
                  limit: int | None = None
                  ) -> list[BaseException | None]:
        """Run a job's independent calls at once; wait for every one.

        At most ``limit`` run at the same time (None: all of them, as
        far as the ``workers`` threads go): the next starts the moment
        one returns. Once a call raised, no call not yet started is
        started (it gets None); those running are waited for. A pool
        shut down meanwhile starts no more either (the call it refused
        gets the error). Each runs
        in a copy of the job's context, so what the job set there (the
        power proof its evacuate calls need, the leadership guard's
        deadline) holds for every call.
        """
        out: list[BaseException | None] = [None] * len(calls)
        width = len(calls) if limit is None else max(1, limit)
        waiting = iter(enumerate(calls))
        running: dict[concurrent.futures.Future, int] = {}
        failed = False
        while True:
            while not failed and len(running) < width:
                nxt = next(waiting, None)
                if nxt is None:
                    break
                i, call = nxt
                try:
                    running[self._calls.submit(
                        contextvars.copy_context().run, call)] = i
                except RuntimeError as exc:  # shut down: start no more
                    out[i], failed = exc, True
            if not running:
                return out
            done, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                out[i] = fut.exception()
                failed = failed or out[i] is not None

    def submit(self, fn: Callable, *args, **kwargs
               ) -> concurrent.futures.Future:
        fut = self._pool.submit(fn, *args, **kwargs)
        fut.add_done_callback(lambda _: self.finished.set())
        return fut

    def shutdown(self, wait: bool = True) -> None:
        """Stop accepting jobs; with wait, let running ones finish."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
        self._calls.shutdown(wait=wait)


class InlineExecutor(ports.Executor):
    """Runs each job at once in the caller (unit tests, dry runs).

    The future is already done when submit returns, so a workflow
    advances one step per tick exactly as with a pool, deterministically.
    """

    def submit(self, fn: Callable, *args, **kwargs
               ) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the engine via the future
            fut.set_exception(exc)
        return fut
