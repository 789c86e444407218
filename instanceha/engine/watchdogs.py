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

"""What the service knows of the hosts' watchdogs: the port a level reads.

The ``watchdog`` fencing level counts a silent host off once its own
watchdog has provably reset it (doc/host-side.md). What it reads comes
from the heartbeat listener, behind :class:`WatchdogWatch`; like the
other ports it builds on nothing above the engine.
"""

import abc
import dataclasses


@dataclasses.dataclass(frozen=True)
class WatchdogWait:
    """What this copy may count on one host's watchdog, read now."""

    #: The host announced an armed watchdog this copy may count on: its
    #: latest heartbeat said armed, with a deadline long enough, and this
    #: copy answered it while leading without a gap since.
    counted: bool
    #: Seconds from now until the host has reset for sure (the last
    #: answer this copy sent it plus its deadline; <= 0: passed); None
    #: when not counted.
    left: float | None
    #: What was announced, or why it is not counted (for the log).
    detail: str


class WatchdogWatch(abc.ABC):
    """What the heartbeat listener knows of the hosts' watchdogs.

    The ``watchdog`` fencing level reads it: a host counts as reset once
    ``left`` (plus a safety margin) has passed.
    """

    @abc.abstractmethod
    def watchdog_wait(self, host: str, min_deadline: float) -> WatchdogWait:
        """The host's watchdog as this copy may count on it now."""
