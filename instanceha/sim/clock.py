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
reproducible and an hour of outage takes milliseconds. Work running as an
executor job gets its own "job time": a driver sleeping inside a job
(polling a BMC, waiting out a timeout) makes that job last longer in
simulated time without moving the world's clock, which is how a job's
duration is measured without threads.
"""

from collections.abc import Callable
import datetime

from instanceha.engine import ports

#: Simulated time zero. Any fixed instant works; this one reads well.
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


class SimClock(ports.Clock):
    """A :class:`ports.Clock` moved by the simulation, never by the wall."""

    def __init__(self, start: datetime.datetime = EPOCH):
        self.start = start
        self._t = 0.0
        #: Seconds slept by the job running now; None outside jobs.
        self._job: float | None = None
        #: Called instead of moving time directly when someone sleeps
        #: outside a job, so the simulation can let the world move too.
        self.on_sleep: Callable[[float], None] | None = None

    @property
    def t(self) -> float:
        """Seconds since ``start`` as seen by the caller (job time in jobs)."""
        return self._t + (self._job or 0.0)

    @property
    def world_t(self) -> float:
        """Seconds since ``start`` for the world, ignoring job time."""
        return self._t

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
        if self._job is not None:
            self._job += seconds
        elif self.on_sleep is not None:
            self.on_sleep(seconds)
        else:
            self._t += seconds

    def begin_job(self) -> None:
        if self._job is not None:
            raise RuntimeError('a simulated job started inside another')
        self._job = 0.0

    def end_job(self) -> float:
        """Leave job time; return how long the job slept."""
        spent, self._job = self._job or 0.0, None
        return spent
