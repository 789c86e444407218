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

"""Reservation strategies find spare capacity for a failed host (R7)."""

import abc

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.plugins import base


class ReservationStrategy(base.Driver):
    """Chooses (and enables) spare capacity for one failed host."""

    @abc.abstractmethod
    def reserve(self, env: ports.Environment, failed_host: str,
                snapshot: model.Snapshot) -> str | None:
        """Enable a spare host for ``failed_host``; return its name.

        None means no spare was claimed; evacuation then lets Nova's
        scheduler choose.
        """

    def release(self, env: ports.Environment, failed_host: str,
                spare: str) -> None:
        """Give an unused spare back to the pool."""
