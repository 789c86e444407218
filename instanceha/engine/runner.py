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

"""The tick loop: call ``Engine.tick()`` until told to stop.

This is the part of running the service that is engine: tick every
``tick_interval`` seconds, report each tick to whoever observes the loop
(health, for readiness and metrics), keep going when a tick fails, and
shut the engine down cleanly at the end. Building the engine's
environment from the real world (Nova, fencing devices, the coordination
backend) is not engine and lives in :mod:`instanceha.daemon.service`.
"""

from collections.abc import Iterable
import logging
import threading
import typing

from instanceha import exceptions

LOG = logging.getLogger(__name__)


class TickObserver(typing.Protocol):
    """Told about every tick (see :class:`instanceha.daemon.health.Monitor`)."""

    def tick_started(self) -> None:
        """A tick is about to run."""

    def tick_finished(self, engine, error: str | None = None) -> None:
        """A tick ended; ``error`` says why it raised, if it did."""


def tick_once(engine, observers: Iterable[TickObserver] = ()) -> None:
    """One tick, reported to ``observers``; never raises for a bad tick."""
    observers = list(observers)
    _tell(observers, 'tick_started')
    error = None
    try:
        engine.tick()
    except exceptions.InstanceHAError as exc:
        error = '%s: %s' % (type(exc).__name__, exc)
        LOG.error('engine tick failed: %s', exc)
    except Exception as exc:
        error = '%s: %s' % (type(exc).__name__, exc)
        LOG.exception('engine tick failed unexpectedly')
    _tell(observers, 'tick_finished', engine, error)


def _tell(observers: list, what: str, *args) -> None:
    """Observing the loop must never stop it."""
    for obs in observers:
        try:
            getattr(obs, what)(*args)
        except Exception:  # noqa: an observer's bug is logged, not fatal
            LOG.exception('tick observer %s failed in %s',
                          type(obs).__name__, what)


def loop(engine, stop: threading.Event, *, interval: float,
         shutdown_timeout: float,
         observers: Iterable[TickObserver] = (),
         wake: threading.Event | None = None) -> None:
    """Tick until ``stop`` is set; then shut the engine down.

    Stopping is clean: no new work is started, running jobs get
    ``shutdown_timeout`` seconds, nothing is marked FAILED, and the next
    start resumes from the markers in Nova.

    :param wake: set when a job finishes (the executor's ``finished``):
        the next tick then comes at once, so a host goes from one step
        to the next (fenced, marked, evacuating) without waiting a tick.
    """
    observers = list(observers)
    hint = getattr(engine, 'wait_hint', None)
    while not stop.is_set():
        tick_once(engine, observers)
        # Wake up for the next read of the compute services too: a failed
        # host is noticed within that interval, not within a tick.
        timeout = (min(interval, hint()) or 0.05) if hint else interval
        if wake is None:
            stop.wait(timeout)
        else:
            wake.wait(timeout)
            wake.clear()
    LOG.info('stopping: letting running steps finish (at most %d s)',
             shutdown_timeout)
    engine.shutdown(shutdown_timeout)
