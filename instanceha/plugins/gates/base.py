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

"""Gates allow or block the plan as a whole or per host (R5, R6, R19)."""

import abc
import dataclasses

from instanceha.engine import model
from instanceha.plugins import base


@dataclasses.dataclass(frozen=True)
class GateVerdict:
    #: Set when the whole plan is blocked: why.
    block_all: str | None = None
    #: Hosts blocked individually, with why.
    blocked_hosts: dict[str, str] = dataclasses.field(default_factory=dict)


class Gate(base.Driver):
    """A safety check on the set of hosts about to be recovered."""

    @abc.abstractmethod
    def check(self, failed: frozenset[str], eligible: frozenset[str],
              recovering: frozenset[str],
              snapshot: model.Snapshot) -> GateVerdict:
        """Judge the hosts about to be recovered.

        :param failed: eligible hosts detected failed in this cycle and not
            yet being recovered.
        :param eligible: every host the filters kept.
        :param recovering: hosts already being fenced, evacuated or brought
            back, which still count as failed until they are healthy.
        """
