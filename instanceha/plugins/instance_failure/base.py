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

"""Crashed instances: the detector and strategy interfaces.

Two driver kinds, each in its own namespace and chosen in
``[instance_failure]``:

* a detector (``instanceha.instance_detectors``) says which instances
  look stopped (cheap, from the snapshot) and, from Nova's instance
  actions, whether one stopped without anyone asking;
* a strategy (``instanceha.instance_recovery``) says what to do about a
  crash given the instance's counters: restart it in place, relocate it,
  or give up (the error state only an operator clears).

The engine (:mod:`instanceha.engine.instance_failure`) does the rest:
counters kept in Nova, limits per cycle, the leadership guard, events.
"""

import abc
import dataclasses
import enum

from instanceha.engine import model
from instanceha.plugins import base


class Step(str, enum.Enum):
    RESTART = 'restart'
    RELOCATE = 'relocate'
    ERROR = 'error'

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Counters:
    """How often a crashed instance was restarted and relocated.

    Both are reset only after a successful start (the instance ran
    ``stable_time`` seconds after instanceha started it).
    """

    restarts: int = 0
    relocations: int = 0


class InstanceDetector(base.Driver):
    """Recognises an instance that stopped without anyone asking."""

    @abc.abstractmethod
    def suspect(self, server: model.Server) -> bool:
        """Worth reading its actions (from the snapshot alone)."""

    @abc.abstractmethod
    def crashed(self, server: model.Server,
                actions: list[model.InstanceAction]
                ) -> model.InstanceAction | None:
        """The action that stopped it without a user, else None.

        :param actions: newest first.
        """


class RecoveryStrategy(base.Driver):
    """Chooses the next step for a crashed instance."""

    @abc.abstractmethod
    def next_step(self, counters: Counters) -> Step:
        """What to do about a crash with these counters."""
