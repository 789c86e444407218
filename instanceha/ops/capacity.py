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

"""The facts of the failover capacity, gathered as the recovery sees them.

The estimate itself is :mod:`instanceha.engine.capacity` (pure); this
module reads what it is made of through the ports and the configured
drivers: the snapshot (every server listed), the hosts' room
(``CloudPort.host_resources``, Placement), the instances each host's
recovery would evacuate (the configured filters, the evacuable
statuses) and the spares the reservation strategy would enable. Used by
``instanceha-manage capacity``, ``instanceha-manage plan`` and the
service's periodic check.
"""

from collections.abc import Sequence

from instanceha.engine import capacity
from instanceha.engine import decide
from instanceha.engine import model
from instanceha.engine import ports


def evacuable(filters, host: str, snapshot: model.Snapshot
              ) -> tuple[model.Server, ...]:
    """What the recovery of ``host`` would evacuate (its filters applied)."""
    if decide.host_reasons(filters, host, snapshot):
        return ()
    kept, _ = decide.eligible_servers(filters, host, snapshot)
    return tuple(s for s in kept if s.status in model.EVACUABLE_STATUSES)


def gather(cloud: ports.CloudPort, filters: Sequence, reservation,
           snapshot: model.Snapshot | None = None) -> capacity.Facts:
    """The facts, read now (``snapshot``: one with every server listed).

    A cloud that cannot say the hosts' room gives no room at all: the
    estimate then absorbs nothing (never a guess).
    """
    if snapshot is None:
        snapshot = cloud.snapshot(images=any(
            f.needs_images for f in filters))
    rooms = cloud.host_resources() or {}
    hosts = [s.host for s in snapshot.services]
    spares = {}
    if reservation is not None:
        spares = {h: tuple(reservation.spares_for(h, snapshot))
                  for h in hosts}
    return capacity.Facts(
        snapshot=snapshot, rooms=dict(rooms),
        evacuable={h: evacuable(filters, h, snapshot) for h in hosts},
        spares=spares)


def assess(cloud: ports.CloudPort, filters: Sequence, reservation,
           snapshot: model.Snapshot | None = None) -> capacity.Report:
    """The failover capacity of the cloud, read now."""
    return capacity.assess(gather(cloud, filters, reservation, snapshot))
