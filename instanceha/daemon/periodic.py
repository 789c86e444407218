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

"""A check the leading copy runs every few seconds on a thread of its own.

The failover capacity check and proactive evacuation are such checks:
they never run in the engine's tick, and a round that fails is logged
and the next one tries again.
"""

import logging
import threading

LOG = logging.getLogger(__name__)


class Periodic:
    """Call :meth:`check` every ``interval`` seconds, first after ``first``.

    A subclass sets ``name`` and implements :meth:`check` and
    :meth:`interval`.
    """

    name = 'periodic'
    #: Seconds after start of the first round (at most the interval).
    first: float = 10.0

    def __init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def interval(self) -> float:
        raise NotImplementedError

    def check(self):
        raise NotImplementedError

    def _run(self) -> None:
        delay = min(self.first, self.interval())
        while not self._stop.wait(delay):
            try:
                self.check()
            except Exception:  # noqa: the next round tries again
                LOG.exception('%s: the round failed', self.name)
            delay = self.interval()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=self.name)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
