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

"""Simulated time.

The clock only moves when the simulation moves it, so a run is exactly
reproducible and an hour of outage takes milliseconds. A job of the
simulated executor that sleeps (a driver polling a BMC, waiting out a
timeout) hands control back and is resumed when the simulation reaches
its wake-up time (see :mod:`instanceha.sim.executor`).
"""

from collections.abc import Callable
import datetime
import threading

from instanceha.engine import ports

#: Simulated time zero. Any fixed instant works; this one reads well.
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


#: The simulated executor's job running in this thread, if any.
current_job = threading.local()
current_job.job = None


class SimClock(ports.Clock):
    """A :class:`ports.Clock` moved by the simulation, never by the wall."""

    def __init__(self, start: datetime.datetime = EPOCH):
        self.start = start
        self._t = 0.0
        #: Called instead of moving time directly when someone sleeps
        #: outside a job, so the simulation can let the world move too.
        self.on_sleep: Callable[[float], None] | None = None

    @property
    def t(self) -> float:
        """Seconds since ``start``."""
        return self._t

    world_t = t

    def advance_to(self, t: float) -> None:
        if t < self._t:
            raise ValueError('simulated time cannot go back (%s < %s)'
                             % (t, self._t))
        self._t = t

    def at(self, t: float) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=t)

    def now(self) -> datetime.datetime:
        return self.at(self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError('cannot sleep %s seconds' % seconds)
        job = getattr(current_job, 'job', None)
        if job is not None:
            job.sleep(seconds)
        elif self.on_sleep is not None:
            self.on_sleep(seconds)
        else:
            self._t += seconds


class ServiceClock(ports.Clock):
    """The clock of the machines instanceha runs on, as the engine sees it.

    The simulated clock, with its wall time shifted by ``skew()`` seconds
    from Nova's (the timeline's ``clock skew``); monotonic time and sleep
    are the simulation's own.
    """

    def __init__(self, clock: SimClock, skew: Callable[[], float]):
        self._clock = clock
        self._skew = skew

    def now(self) -> datetime.datetime:
        return self._clock.now() + datetime.timedelta(seconds=self._skew())

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)
