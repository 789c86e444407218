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

"""The thread boundary between the tick and the jobs, enforced.

A workflow's record changes in the tick thread only: a job (run on the
executor's threads in production, as a coroutine of the simulator, or
inline by the inline executor) returns values, and the tick applies them
when it harvests the job. Records are :class:`TickOwned`: every write to
one made inside a job (:func:`as_job`) raises :class:`WrittenByJob`,
naming the field. The scope is explicit (a context variable the job's
wrapper sets), not a guess from thread identity: the simulator and the
inline executor run jobs on the tick's own thread. A job's own calls
(``Executor.run_calls``) run in a copy of its context, so they are in
its scope too.
"""

from collections.abc import Callable
import contextvars
import functools
import typing

#: The job running in this context (its name), None in the tick.
_JOB: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    'instanceha_job', default=None)


class WrittenByJob(RuntimeError):
    """A job wrote a record the tick owns: a bug in the engine.

    Not an :class:`instanceha.exceptions.InstanceHAError`: a job's
    expected errors are retried, this one is a broken rule.
    """


def current_job() -> str | None:
    """The job running in this context, None outside every job."""
    return _JOB.get()


def as_job(name: str, fn: Callable[[], typing.Any]
           ) -> Callable[[], typing.Any]:
    """``fn`` run as the job ``name``: no record may be written in it."""
    @functools.wraps(fn)
    def job():
        token = _JOB.set(name)
        try:
            return fn()
        finally:
            _JOB.reset(token)
    return job


class TickOwned:
    """A record only the tick writes (see the module docstring).

    Its dataclasses have slots: a write to a field that does not exist
    (a name left over from a move) fails instead of adding one.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: typing.Any) -> None:
        job = _JOB.get()
        if job is not None:
            raise WrittenByJob(
                '%s.%s written by the job %s: jobs return values, the '
                'tick applies them' % (type(self).__name__, name, job))
        super().__setattr__(name, value)


def submit(env, name: str, run: Callable[[], typing.Any],
           lock: str | None):
    """Submit ``run`` to ``env.executor`` as the job ``name``.

    How every job of the engine is submitted: inside the boundary
    (:func:`as_job`), holding the coordinator's lock on ``lock`` (a
    host) while it runs, unless None.
    """
    if lock is None:
        return env.executor.submit(as_job(name, run))
    coordinator = env.coordinator

    def locked():
        with coordinator.host_lock(lock):
            return run()
    return env.executor.submit(as_job(name, locked))
