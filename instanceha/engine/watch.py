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

"""Watching the compute services between two full reads of the cloud.

A full read (services, every server, every aggregate: pages that grow
with the cloud) is what the planner needs to decide about a failed host,
but while every host is healthy there is nothing to decide. So the engine
reads the nova-compute services alone -- one small call -- every
``[detection] services_interval`` seconds, and reads the full picture:

* at once, when a host shows something the last full read did not see
  (down, forced down, disabled, a heartbeat older than ``delta``, another
  disabled reason), whatever the phase of ``poll``;
* every ``poll`` seconds while anything is not plainly healthy (a host
  being recovered, a failed host held back by a gate, a disabled host);
* never while every host is healthy.

Between full reads the engine's picture gets each services read, so a
host waiting to come back is enabled as soon as Nova reports it up.

Changes the engine makes itself (markers on hosts it is recovering) are
not news: those hosts are left out of the comparison.
"""

import datetime
import logging

from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: ``services_interval = 0`` (the default) reads every this many seconds...
AUTO_INTERVAL = 0.5
#: ...or less often on a large cloud: at most this many service records a
#: second (about 240 bytes each: ~480 KB/s, ~29 MB a minute at most).
AUTO_RECORDS_PER_SECOND = 2000


def interval(configured: float, hosts: int) -> float:
    """Seconds between two services reads for a cloud of ``hosts``."""
    if configured > 0:
        return float(configured)
    return max(AUTO_INTERVAL, hosts / float(AUTO_RECORDS_PER_SECOND))


def attention(snapshot: model.Snapshot, now: datetime.datetime,
              delta: float, skip=()) -> dict[str, tuple]:
    """Hosts whose service shows anything but plain health, and what.

    Plain health: up, enabled, not forced down, a heartbeat at most
    ``delta`` seconds old on Nova's clock. ``skip``: hosts left out (the
    engine's own workflows).
    """
    nova_now = snapshot.nova_now(now)
    out = {}
    for svc in snapshot.services:
        if svc.host in skip:
            continue
        stale = (svc.updated_at is None or
                 (nova_now - svc.updated_at).total_seconds() > delta)
        if (svc.state == model.UP and not svc.forced_down and
                not svc.disabled and not stale):
            continue
        out[svc.host] = (svc.state, svc.status, svc.forced_down, stale,
                         svc.disabled_reason)
    return out


class ServiceWatch(object):
    """When to read the services, and whether they call for a full read."""

    def __init__(self, configured: float):
        self.configured = configured
        self.interval = interval(configured, 0)
        self.next_read: float | None = None
        #: What the last full read showed (None: no full read yet).
        self.seen: dict[str, tuple] | None = None
        #: The last read showed every host healthy and nothing recovering.
        self.quiet = False

    def due(self, mono: float) -> bool:
        return self.next_read is None or mono >= self.next_read

    def read(self, cloud: ports.CloudPort,
             mono: float) -> model.Snapshot | None:
        """The services alone (one call); None when Nova did not answer.

        A failed read is left to the next full read to report (it says
        so once a poll, and holds fencing until Nova is read again).
        """
        self.next_read = mono + self.interval
        try:
            snap = cloud.read_services()
        except exceptions.InstanceHAError as exc:
            LOG.debug('services read failed: %s', exc)
            return None
        self.read_done(mono, len(snap.services))
        return snap

    def read_done(self, mono: float, hosts: int) -> None:
        """The services were read (alone or in a full read) at ``mono``."""
        self.interval = interval(self.configured, hosts)
        self.next_read = mono + self.interval
