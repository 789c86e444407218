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

"""Detectors say which hosts look failed, and why."""

import abc
import dataclasses
import datetime
import enum

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.plugins import base


class Verdict(str, enum.Enum):
    ALIVE = 'alive'
    FAILED = 'failed'
    #: The detector cannot tell (e.g. no data yet); it has no vote.
    UNKNOWN = 'unknown'
    #: The detector cannot tell *yet* but will soon (a listener warming
    #: up after a start): no host may be judged failed meanwhile. Unlike
    #: UNKNOWN this holds the decision instead of abstaining, so a
    #: freshly restarted service never fences a host its witness would
    #: have shown alive.
    HOLD = 'hold'


@dataclasses.dataclass(frozen=True)
class Evidence:
    host: str
    verdict: Verdict
    #: Human-readable, names the detector's observation.
    reason: str
    #: Said by the witness that speaks for Nova's control plane (the nova
    #: detector). A disagreement is a partition (isolated) only when it is
    #: the control plane that says failed; the reverse is disputed.
    control_plane: bool = False
    #: FAILED because the host itself announced it is going off (the
    #: failover shutdown policy): decisive even while Nova still sees the
    #: host up, since fencing will prove it off by reading its devices.
    announced: bool = False


class Detector(base.Driver):
    """One witness of a host's health."""

    #: True for a witness that only ever reports failures (kdump speaks up
    #: only while a host dumps): its silence is not a missing vote, so
    #: ``[detection] combine = all`` does not wait for it.
    reports_failures_only: bool = False
    #: Where a detector that listens to the hosts gets its listener in
    #: ``start()``: the environment's factory, set by whoever builds the
    #: environment (UDP sockets in the service, the simulated hosts in
    #: the simulator). None: the service's UDP listeners.
    listeners: ports.ListenerFactory | None = None

    @abc.abstractmethod
    def detect(self, snapshot: model.Snapshot,
               now: datetime.datetime) -> dict[str, Evidence]:
        """Evidence for the hosts this detector has an opinion on."""

    def suspects(self, services: tuple[model.Service, ...],
                 now: datetime.datetime) -> frozenset[str] | None:
        """Hosts this witness may say failed at the next decision.

        Asked before the cloud is read, so that only those hosts' servers
        are listed; it must change nothing (no counting, no logging).
        Hosts Nova itself reports down, stale or disabled are read
        anyway. None (the default): this witness cannot say, and every
        server of the cloud is read.
        """
        return None
