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

"""Reservation strategies find spare capacity for a failed host."""

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

        The spare claimed for it (:meth:`claim`, or :meth:`adopt` after a
        restart) if there is one: enabled now if it still is not.

        None means no spare was claimed; evacuation then lets Nova's
        scheduler choose. Runs in a worker thread, possibly beside another
        host's call: two failed hosts must never get the same spare.
        """

    def claim(self, failed_host: str,
              snapshot: model.Snapshot) -> str | None:
        """Choose the spare :meth:`reserve` will enable, changing nothing.

        The engine writes the claim into the host's marker before the
        spare is enabled, so a copy that resumes in between enables the
        same spare. None: nothing to claim (or no two-step support).
        """
        return None

    def spares_for(self, failed_host: str,
                   snapshot: model.Snapshot) -> list[str]:
        """The spares :meth:`reserve` could enable for it, changing nothing.

        Read by the failover capacity estimate (it counts one of them per
        failed host, the smallest). The default: none.
        """
        return []

    def release(self, env: ports.Environment, failed_host: str,
                spare: str, snapshot: model.Snapshot) -> None:
        """Give a spare nothing landed on back to the pool."""

    def adopt(self, failed_host: str, spare: str) -> None:
        """Remember a claim read back from Nova after a restart."""

    def forget(self, spare: str) -> None:
        """Drop a claim that stays in service (something landed on it)."""

    def claimed(self) -> frozenset[str]:
        """The spares claimed now (their servers are read with a host's).

        A spare is given back only while nothing landed on it: the engine
        lists its servers in every read while it is claimed.
        """
        return frozenset()

    #: The failed host's instances are to be rebuilt on its spare
    #: (:func:`instanceha.engine.placement.decide` asks for it first).
    rebuild_on_spare: bool = False
