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

"""The engine's picture of the cloud: plain, immutable values.

A :class:`Snapshot` is everything one cycle knows about the cloud. The
Nova adapter builds it from a fixed number of bulk API calls; the simulator
builds it from its model. Decision code reads only these values, never a
client library's objects, so it runs the same everywhere.
"""

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses
import datetime
import functools

UP = 'up'
DOWN = 'down'
ENABLED = 'enabled'
DISABLED = 'disabled'

#: Instance statuses Nova accepts for evacuation.
EVACUABLE_STATUSES = frozenset({'ACTIVE', 'ERROR', 'SHUTOFF'})

#: Seconds after one of our writes to a compute service (or a time of
#: ours taken on Nova's clock) within which the service's ``updated_at``
#: proves no report of nova-compute: Nova stamps the service on every
#: write, ours too (the servicegroup's own ``last_seen_up`` is not in the
#: API), and our times are on Nova's clock only as well as the skew
#: measured from its ``Date`` header (whole seconds; under one second it
#: is taken as none), while a marker keeps whole seconds.
OWN_WRITE = 5.0


@dataclasses.dataclass(frozen=True)
class Service:
    """A nova-compute service, i.e. one compute host."""

    id: str
    host: str
    state: str
    status: str
    forced_down: bool = False
    #: Last heartbeat, timezone-aware UTC; None when missing or malformed.
    updated_at: datetime.datetime | None = None
    #: The heartbeat as Nova sent it, kept to report a malformed one.
    updated_at_raw: str | None = None
    disabled_reason: str | None = None
    zone: str | None = None

    @property
    def disabled(self) -> bool:
        return self.status == DISABLED

    def reported_after(self, when: datetime.datetime) -> bool:
        """Whether nova-compute reported after ``when`` (Nova's clock).

        ``updated_at`` newer than ``when`` plus :data:`OWN_WRITE`: Nova
        keeps stamping the service with nova-compute's reports while it is
        forced down (its ``state`` then says down whatever the reports),
        but stamps it on every write as well.
        """
        return self.updated_at is not None and (
            self.updated_at - when).total_seconds() > OWN_WRITE


@dataclasses.dataclass(frozen=True)
class Flavor:
    name: str
    extra_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Virtual CPUs the flavor asks for (None: Nova did not say); what a
    #: placement strategy counts a host's room in.
    vcpus: int | None = None
    #: Memory, root disk, ephemeral disk (GiB) and swap (MiB) it asks for
    #: (None: Nova did not say); what the failover capacity counts.
    ram_mb: int | None = None
    disk_gb: int | None = None
    ephemeral_gb: int | None = None
    swap_mb: int | None = None


@dataclasses.dataclass(frozen=True)
class Server:
    id: str
    name: str
    host: str | None
    status: str
    flavor: Flavor
    #: None for a server booted from a volume.
    image_id: str | None = None
    task_state: str | None = None
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    locked: bool = False
    project_id: str | None = None
    #: Why it is locked, as Nova reports it (instanceha's own locks say
    #: so, and what the instance's status was before its evacuation).
    locked_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class Image:
    id: str
    name: str = ''
    tags: tuple[str, ...] = ()
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Aggregate:
    id: str
    name: str
    hosts: frozenset[str]
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    availability_zone: str | None = None


@dataclasses.dataclass(frozen=True)
class HostVcpus:
    """A host's vCPUs as the cloud's placement service counts them."""

    #: What may be allocated (allocation ratio and reserved applied).
    capacity: int
    #: What the instances there (and evacuations scheduled to it) hold.
    used: int

    @property
    def free(self) -> int:
        return self.capacity - self.used


@dataclasses.dataclass(frozen=True)
class Inventory:
    """One resource class of a host, as Placement counts it.

    ``capacity`` is what may be allocated: (total - reserved) times the
    allocation ratio, rounded down as Placement does.
    """

    capacity: int
    used: int
    #: The most one allocation may take (None: no limit said).
    max_unit: int | None = None

    @property
    def free(self) -> int:
        return self.capacity - self.used


@dataclasses.dataclass(frozen=True)
class HostResources:
    """A compute host's resources as the cloud's Placement reports them.

    ``resources`` maps a resource class (``VCPU``, ``MEMORY_MB``,
    ``DISK_GB``) to its :class:`Inventory`; a class the host has no
    inventory of is absent.
    """

    host: str
    resources: Mapping[str, Inventory]

    def vcpus(self) -> HostVcpus | None:
        """Its vCPUs as a placement strategy counts them (None: none)."""
        found = self.resources.get('VCPU')
        if found is None:
            return None
        return HostVcpus(capacity=found.capacity, used=found.used)


@dataclasses.dataclass(frozen=True)
class HardwareCondition:
    """One hardware condition a host's management controller reported."""

    #: ``system``, ``memory``, ``power_supply`` or ``thermal``.
    kind: str
    #: ``Warning`` or ``Critical`` (Redfish's words).
    health: str
    #: Which part, as the controller names it (e.g. ``PSU 2``).
    part: str

    def describe(self) -> str:
        return '%s %s %s' % (self.kind, self.part, self.health)


@dataclasses.dataclass(frozen=True)
class Migration:
    """One of Nova's migration records (evacuations are type evacuation)."""

    id: str
    server_id: str
    source_host: str | None
    dest_host: str | None
    status: str
    migration_type: str = 'evacuation'
    created_at: datetime.datetime | None = None
    updated_at: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True)
class InstanceAction:
    """One of Nova's instance actions (``os-instance-actions``).

    ``user_id`` is None for an action no user asked for: Nova's compute
    service records its power-state sync's stop of a guest that died
    under it without a user (an admin context without a user).
    """

    action: str
    request_id: str | None = None
    user_id: str | None = None
    start_time: datetime.datetime | None = None
    #: 'Error' when one of the action's events failed.
    message: str | None = None


#: Which hosts' servers a snapshot lists: names, or a function of the
#: services the snapshot read.
HostSelector = (Iterable[str] |
                Callable[[tuple[Service, ...]], Iterable[str]])


def select_hosts(hosts: HostSelector,
                 services: tuple[Service, ...]) -> frozenset[str]:
    """The host names a :data:`HostSelector` stands for."""
    if callable(hosts):
        hosts = hosts(services)
    return frozenset(hosts)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What one cycle knows about the cloud, taken at ``taken_at``."""

    taken_at: datetime.datetime
    services: tuple[Service, ...] = ()
    servers: tuple[Server, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    #: Only the images the enabled filters asked for, keyed by id.
    images: Mapping[str, Image] = dataclasses.field(default_factory=dict)
    #: Recent evacuation records, when the cycle asked for them.
    migrations: tuple[Migration, ...] = ()
    #: Seconds our clock is ahead of Nova's (negative: behind), measured
    #: from Nova's ``Date`` header when the services were listed; None
    #: when unknown. Time stamps Nova writes (a service's ``updated_at``)
    #: are judged against Nova's clock, never ours: see :meth:`nova_now`.
    clock_skew: float | None = None
    #: The hosts whose servers were listed; None: every server of the
    #: cloud was listed. A host outside it may have servers nobody read
    #: (see :meth:`servers_known`).
    servers_read: frozenset[str] | None = None

    def servers_known(self, host: str) -> bool:
        """Whether :meth:`servers_on` tells all about ``host``."""
        return self.servers_read is None or host in self.servers_read

    def nova_now(self, now: datetime.datetime) -> datetime.datetime:
        """``now`` (our clock) as Nova's clock reads it at that moment."""
        if not self.clock_skew:
            return now
        return now - datetime.timedelta(seconds=self.clock_skew)

    @functools.cached_property
    def _services_by_host(self) -> dict[str, Service]:
        return {s.host: s for s in self.services}

    @functools.cached_property
    def _servers_by_host(self) -> dict[str, tuple[Server, ...]]:
        out: dict[str, list[Server]] = {}
        for srv in self.servers:
            if srv.host:
                out.setdefault(srv.host, []).append(srv)
        return {h: tuple(v) for h, v in out.items()}

    @functools.cached_property
    def _aggregates_by_host(self) -> dict[str, tuple[Aggregate, ...]]:
        out: dict[str, list[Aggregate]] = {}
        for agg in self.aggregates:
            for host in agg.hosts:
                out.setdefault(host, []).append(agg)
        return {h: tuple(v) for h, v in out.items()}

    def service(self, host: str) -> Service | None:
        return self._services_by_host.get(host)

    def servers_on(self, host: str) -> tuple[Server, ...]:
        return self._servers_by_host.get(host, ())

    def aggregates_of(self, host: str) -> tuple[Aggregate, ...]:
        return self._aggregates_by_host.get(host, ())

    def zone_of(self, host: str) -> str | None:
        """The host's availability zone: its service's, else an aggregate's."""
        svc = self.service(host)
        if svc is not None and svc.zone:
            return svc.zone
        for agg in self.aggregates_of(host):
            if agg.availability_zone:
                return agg.availability_zone
        return None
