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

"""Evacuation strategies move a fenced host's instances away (R10, R12)."""

import abc
import dataclasses

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.plugins import base


@dataclasses.dataclass
class EvacuationResult:
    #: Server ids rebuilt (or, fire-and-forget, accepted) elsewhere.
    succeeded: list[str] = dataclasses.field(default_factory=list)
    #: Server id -> why it could not be evacuated.
    failed: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.failed


class EvacuationStrategy(base.Driver):
    """Moves the eligible instances of one fenced host."""

    @abc.abstractmethod
    def evacuate(self, env: ports.Environment, host: str,
                 servers: list[model.Server],
                 target: str | None = None) -> EvacuationResult:
        """Evacuate ``servers`` off ``host`` (onto ``target`` if given)."""
