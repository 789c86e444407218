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

"""The hosts' room as Placement counts it: the only module reading Placement.

Each compute host is linked to its resource provider by Nova (a compute
node's id is its provider's uuid, ``os-hypervisors``, compute API 2.53
and later). For each provider two reads:

* ``GET /resource_providers/{uuid}/inventories``: total, reserved,
  allocation ratio, max_unit of each class; kept ``[capacity]
  inventory_interval`` seconds (with the host links);
* ``GET /resource_providers/{uuid}/usages``: what is allocated; kept
  ``[capacity] refresh_interval`` seconds.

Cost: with N compute hosts, a reading costs N usage calls, plus N
inventory calls and one Nova listing per ``page_size`` hosts when those
are stale. At 1,000 hosts with the defaults (300 s, 1800 s): 1,000
usage calls every 5 minutes and 1,000 inventory calls every 30 minutes,
about 233 Placement calls per minute on average, made one at a time by
one thread (never two readings at once: a caller that finds one under
way waits for it and shares it). Nothing is read when nobody asks: the
periodic check (``[capacity] check_interval``), ``instanceha-manage
capacity`` and a placement strategy looking at room are the askers, and
all share the cache.

The requests go through the ``[nova]`` keystoneauth session (this module
imports no client library); errors are
:class:`~instanceha.exceptions.CloudError` naming the call, never a
credential.
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import logging
import threading
import time

from instanceha.engine import model
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: Seconds a failed reading is answered with its error, without a call.
RETRY_AFTER = 60.0

#: The resource classes read (what the failover estimate counts).
CLASSES = ('VCPU', 'MEMORY_MB', 'DISK_GB')


@dataclasses.dataclass(frozen=True)
class _Inventory:
    total: int
    reserved: int
    ratio: float
    max_unit: int | None

    @property
    def capacity(self) -> int:
        # Placement's own arithmetic; rounded down, never up.
        return int((self.total - self.reserved) * self.ratio)


def _inventories(body: dict) -> dict[str, _Inventory]:
    found = {}
    for rc, raw in (body.get('inventories') or {}).items():
        if rc not in CLASSES:
            continue
        found[rc] = _Inventory(
            total=int(raw.get('total', 0)),
            reserved=int(raw.get('reserved', 0)),
            ratio=float(raw.get('allocation_ratio', 1.0)),
            max_unit=(int(raw['max_unit']) if raw.get('max_unit')
                      is not None else None))
    return found


class PlacementReader:
    """Bounded, cached readings of the hosts' inventories and usages.

    :param session: a keystoneauth session (the Nova adapter's).
    :param providers: reads host -> resource provider uuid (Nova's
        compute nodes); a host with several nodes is left out.
    """

    def __init__(self, session, conf, providers: Callable[[], Mapping[
            str, str | None]], clock: Callable[[], float] = time.monotonic):
        self.session = session
        self.conf = conf
        self._providers = providers
        self._clock = clock
        self._lock = threading.Lock()
        #: Placement calls made so far.
        self.api_calls = 0
        self._links: dict[str, str | None] = {}
        self._links_at: float | None = None
        self._inventory: dict[str, dict[str, _Inventory]] = {}
        self._reading: dict[str, model.HostResources] | None = None
        self._read_at: float | None = None
        #: The last reading's failure, repeated without a call for a
        #: while (an evacuation step asks at every step).
        self._failure: exceptions.CloudError | None = None
        self._failed_at: float | None = None

    def _fresh(self, at: float | None, seconds: float) -> bool:
        return at is not None and self._clock() - at < seconds

    def _get(self, what: str, path: str) -> dict:
        """One counted GET to Placement; its JSON body."""
        opts = self.conf.capacity
        kwargs: dict = {'raise_exc': False,
                        'headers': {'Accept': 'application/json'}}
        if opts.placement_endpoint:
            kwargs['endpoint_override'] = opts.placement_endpoint.rstrip('/')
        kwargs['endpoint_filter'] = {
            'service_type': 'placement',
            'interface': self.conf.nova.valid_interfaces,
            'region_name': self.conf.nova.region_name}
        self.api_calls += 1
        try:
            resp = self.session.request(path, 'GET', **kwargs)
        except Exception as exc:  # keystoneauth's, without importing it
            raise exceptions.CloudError('%s: Placement unreachable: %s: %s'
                                        % (what, type(exc).__name__,
                                           str(exc)[:200])) from None
        if resp.status_code != 200:
            raise exceptions.CloudError(
                '%s: HTTP %d from Placement: %s' % (
                    what, resp.status_code, resp.text[:300]),
                request_id=resp.headers.get('openstack-request-id'),
                status=resp.status_code)
        try:
            return resp.json()
        except ValueError:
            raise exceptions.CloudError(
                '%s: Placement answered with a body that is not JSON'
                % what) from None

    def _refresh_inventories(self) -> None:
        links = dict(self._providers())
        inventory = {}
        for host, uuid in sorted(links.items()):
            if uuid is None:
                LOG.warning('capacity: %s has several compute nodes; its '
                            'room is not counted', host)
                continue
            inventory[host] = _inventories(self._get(
                'read the inventories of %s' % host,
                '/resource_providers/%s/inventories' % uuid))
        self._links, self._inventory = links, inventory
        self._links_at = self._clock()

    def _usages(self, host: str) -> dict[str, int]:
        body = self._get('read the usages of %s' % host,
                         '/resource_providers/%s/usages' % self._links[host])
        return {rc: int(v) for rc, v in (body.get('usages') or {}).items()}

    def _read(self) -> dict[str, model.HostResources]:
        if not self._fresh(self._links_at,
                           self.conf.capacity.inventory_interval):
            self._refresh_inventories()
        found = {}
        for host, inventory in sorted(self._inventory.items()):
            used = self._usages(host)
            found[host] = model.HostResources(host, {
                rc: model.Inventory(capacity=inv.capacity,
                                    used=used.get(rc, 0),
                                    max_unit=inv.max_unit)
                for rc, inv in inventory.items()})
        return found

    def read(self, max_age: float | None = None
             ) -> dict[str, model.HostResources]:
        """Host -> its room; reused while younger than ``max_age``.

        ``max_age`` None: ``[capacity] refresh_interval``.
        """
        if max_age is None:
            max_age = self.conf.capacity.refresh_interval
        with self._lock:
            if self._reading is None or not self._fresh(self._read_at,
                                                        max_age):
                if self._failure is not None and self._fresh(
                        self._failed_at, min(max_age, RETRY_AFTER)):
                    raise self._failure
                try:
                    self._reading = self._read()
                except exceptions.CloudError as exc:
                    self._failure, self._failed_at = exc, self._clock()
                    raise
                self._failure = None
                self._read_at = self._clock()
            return dict(self._reading)
