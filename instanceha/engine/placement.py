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

"""Where each evacuated instance goes: one decision, from a read-only view.

:func:`decide` is the one place a destination is chosen. It owns the two
rules every strategy shares -- an instance is not asked on a host it
failed on more than ``[evacuation] same_target_retries`` times (the
retry-elsewhere rule, :meth:`PlacementRequest.allows`), and the reserved
spare the operator wants instances rebuilt on comes first -- and asks
the strategy only for policy: to rank the hosts that may take the
instance (:meth:`Placer.rank`), from a :class:`PlacementView`, never
from the environment. The view cannot call Nova, fence, or change
anything, and the request is frozen, so a strategy is a pure policy that
the simulator and tests can drive with plain values (Proxmox
ha-manager's ``select_service_node`` is the model).

The target chosen is a request, not an order: it is passed to Nova's
evacuate (compute API 2.94), whose scheduler still checks it (room,
enabled, up, the instance's filters) and refuses it otherwise; it is
never forced. ``None`` lets Nova's scheduler choose.

A strategy that places but ranks none of the candidates abstains: it
is logged and counted (:func:`abstentions`, a metric), and Nova's
scheduler chooses.

Capacity is counted in vCPUs. Where the cloud says (Placement's
capacity and usage, :meth:`CloudPort.host_resources`; the simulator's
model), ``total_vcpus`` and
``used_vcpus`` are its numbers, the use including what this evacuation
asked for since they were read (and never less than what Nova lists
there plus this evacuation's instances on their way), so a strategy sees
its own earlier choices. Where it does not, ``total_vcpus`` and
``free_vcpus`` are None and ``used_vcpus`` counts the instances Nova
listed on the host plus this evacuation's instances on their way there --
None too when this cycle did not list that host's servers.
"""

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import functools
import logging
import threading
import types
import typing

from instanceha.engine import model

LOG = logging.getLogger(__name__)

#: What the cloud reports of a host's room: its vCPUs, or Placement's
#: whole reading.
Counted = model.HostVcpus | model.HostResources

#: How close a host is to the failed host's failure domain.
SAME_AGGREGATE = 0
SAME_ZONE = 1
ELSEWHERE = 2


@dataclasses.dataclass(frozen=True)
class HostRoom:
    """One other compute host, as a placement policy needs it."""

    host: str
    #: Nova's scheduler would consider it: up, enabled, not forced down.
    eligible: bool
    #: vCPUs free for new instances; None when the cloud does not say.
    free_vcpus: int | None
    #: vCPUs in use there, with those this evacuation sent (None: unknown).
    used_vcpus: int | None
    #: Instances Nova lists there plus those on their way (None: its
    #: servers were not listed in this cycle).
    instances: int | None
    zone: str | None
    #: Names of the host aggregates it belongs to.
    aggregates: frozenset[str]
    #: SAME_AGGREGATE, SAME_ZONE or ELSEWHERE, seen from the failed host.
    closeness: int

    #: vCPUs that may be allocated there (None: the cloud does not say).
    total_vcpus: int | None = None
    #: Placement's reading of the host by resource class (``VCPU``,
    #: ``MEMORY_MB``, ``DISK_GB``: capacity, used, max_unit); empty when
    #: the cloud does not say. ``used`` is as Placement counted it, without
    #: what this evacuation asked for since.
    resources: Mapping[str, model.Inventory] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))

    @property
    def load(self) -> float | None:
        """Share of its vCPUs in use (0..1).

        The used vCPUs when the total is unknown; None when nothing is.
        """
        if self.used_vcpus is None:
            return None
        if self.total_vcpus is None:
            return float(self.used_vcpus)
        if self.total_vcpus <= 0:
            return 1.0
        return self.used_vcpus / self.total_vcpus


@dataclasses.dataclass(frozen=True)
class PlacementView:
    """The other hosts of the cloud, from one failed host's point of view.

    Read-only: mappings are proxies and every value is frozen. Built from
    a snapshot by :func:`build`; what it derives (``hosts``, ``needs``,
    the failed host's domains) is computed on first use, so a strategy
    that never looks (one that does not place, see :func:`decide`) costs
    nothing, and the free-room read is made at most once per job step.
    """

    #: The fenced host whose instances are being placed.
    failed_host: str
    #: The spare the reservation strategy enabled for the failed host's
    #: instances to be rebuilt on (``[reservation] evacuate_to_spare``),
    #: else None. A spare enabled only as room is an ordinary host here.
    spare: str | None = None
    snapshot: model.Snapshot | None = dataclasses.field(
        default=None, repr=False, compare=False)
    #: host -> its vCPUs (or Placement's reading) as the cloud reports
    #: them, or a callable reading them (once) when needed.
    vcpus: Mapping[str, Counted] | Callable[
        [], Mapping[str, Counted] | None] | None = dataclasses.field(
            default=None, repr=False, compare=False)
    servers: tuple[model.Server, ...] = dataclasses.field(
        default=(), repr=False, compare=False)
    on_the_way: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)
    asked_since_read: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def _flavors(self) -> Mapping[str, model.Flavor]:
        """Server id -> the flavor of each of the failed host's instances."""
        found = {}
        if self.snapshot is not None:
            found = {s.id: s.flavor
                     for s in self.snapshot.servers_on(self.failed_host)}
        found.update({s.id: s.flavor for s in self.servers})
        return found

    @functools.cached_property
    def needs(self) -> Mapping[str, int | None]:
        """Server id -> vCPUs its flavor asks for (None: unknown)."""
        return types.MappingProxyType(
            {i: f.vcpus for i, f in self._flavors.items()})

    @functools.cached_property
    def failed_aggregates(self) -> frozenset[str]:
        """Names of the failed host's aggregates."""
        if self.snapshot is None:
            return frozenset()
        return frozenset(a.name for a in self.snapshot.aggregates_of(
            self.failed_host))

    @functools.cached_property
    def failed_zone(self) -> str | None:
        """The failed host's availability zone."""
        if self.snapshot is None:
            return None
        return self.snapshot.zone_of(self.failed_host)

    @functools.cached_property
    def hosts(self) -> Mapping[str, HostRoom]:
        """Every other compute host by name (eligible or not)."""
        snapshot = self.snapshot
        if snapshot is None:
            return types.MappingProxyType({})
        read = self.vcpus() if callable(self.vcpus) else self.vcpus
        need = self.needs
        hosts = {}
        for svc in snapshot.services:
            if svc.host == self.failed_host:
                continue
            asked = sum(need.get(i) or 0
                        for i in self.asked_since_read.get(svc.host, ()))
            coming = self.on_the_way.get(svc.host, ())
            counted, resources = _reading((read or {}).get(svc.host))
            listed = (snapshot.servers_on(svc.host)
                      if snapshot.servers_known(svc.host) else None)
            # Ours: what Nova lists there and what this evacuation sent
            # (the cloud's count may not include a call not yet scheduled).
            ours = None if listed is None else sum(
                s.flavor.vcpus or 0 for s in listed) + sum(
                    need.get(i) or 0 for i in coming)
            if counted is not None:
                total = counted.capacity
                used = max(counted.used + asked, ours or 0)
                room = total - used
            else:
                total = room = None
                used = ours
            mine = frozenset(a.name for a in snapshot.aggregates_of(svc.host))
            its_zone = snapshot.zone_of(svc.host)
            if mine & self.failed_aggregates:
                closeness = SAME_AGGREGATE
            elif self.failed_zone is not None and its_zone == self.failed_zone:
                closeness = SAME_ZONE
            else:
                closeness = ELSEWHERE
            # The spare was enabled for this evacuation, maybe after the
            # snapshot was taken: its "disabled" there is stale.
            enabled = not svc.disabled or svc.host == self.spare
            hosts[svc.host] = HostRoom(
                host=svc.host,
                eligible=(svc.state == model.UP and enabled
                          and not svc.forced_down),
                free_vcpus=room, used_vcpus=used, total_vcpus=total,
                instances=None if listed is None else len(listed) + len(
                    coming),
                zone=its_zone, aggregates=mine, closeness=closeness,
                resources=resources)
        return types.MappingProxyType(hosts)

    def need(self, server_id: str) -> int:
        """vCPUs the server asks for (0 when unknown)."""
        return self.needs.get(server_id) or 0

    def fits(self, host: str, server_id: str) -> bool:
        """Nova could take it there: eligible, and room if room is known."""
        room = self.hosts.get(host)
        if room is None or not room.eligible:
            return False
        memory = room.resources.get('MEMORY_MB')
        flavor = self._flavors.get(server_id)
        wanted = flavor.ram_mb if flavor is not None else None
        if memory is not None and wanted and memory.free < wanted:
            return False
        return room.free_vcpus is None or room.free_vcpus >= self.need(
            server_id)

    def candidates(self, server_id: str,
                   exclude: Iterable[str] = ()) -> list[HostRoom]:
        """The eligible hosts with room for the server, by name."""
        skip = set(exclude)
        return [self.hosts[h] for h in sorted(self.hosts)
                if h not in skip and self.fits(h, server_id)]


def _reading(counted: Counted | None
             ) -> tuple[model.HostVcpus | None, Mapping[str, model.Inventory]]:
    """A host's vCPUs and its classes from what the cloud reported."""
    if isinstance(counted, model.HostResources):
        return counted.vcpus(), types.MappingProxyType(
            dict(counted.resources))
    return counted, types.MappingProxyType({})


def build(snapshot: model.Snapshot | None, failed_host: str, *,
          spare: str | None = None,
          vcpus: Mapping[str, Counted] | Callable[
              [], Mapping[str, Counted] | None] | None = None,
          servers: Iterable[model.Server] = (),
          on_the_way: Mapping[str, Iterable[str]] | None = None,
          asked_since_read: Mapping[str, Iterable[str]] | None = None
          ) -> PlacementView:
    """The view of ``snapshot`` for placing ``failed_host``'s instances.

    :param vcpus: host -> its vCPUs as the cloud reports them
        (``HostVcpus``, or Placement's whole reading, ``HostResources``),
        or a callable reading them when first needed; None (or a host
        missing from it) when the cloud does not say.
    :param servers: the failed host's instances (for their flavors'
        vCPUs; an instance the snapshot lists there is found anyway).
    :param on_the_way: host -> server ids this evacuation sent there that
        Nova does not list there yet (counted as used where the cloud's
        own count is unknown).
    :param asked_since_read: host -> server ids asked for there after
        ``vcpus`` was read (counted as used).
    """
    def frozen(groups):
        return types.MappingProxyType(
            {h: tuple(ids) for h, ids in (groups or {}).items()})
    return PlacementView(
        failed_host=failed_host, spare=spare, snapshot=snapshot,
        vcpus=vcpus, servers=tuple(servers), on_the_way=frozen(on_the_way),
        asked_since_read=frozen(asked_since_read))


@dataclasses.dataclass(frozen=True)
class PlacementRequest:
    """One instance to place, as its evacuation stands: read-only.

    What a strategy is shown of an instance (its ``rank`` and its
    ``choose_target`` are given this, never the job's own task).
    """

    server_id: str
    name: str
    #: Its status when the host failed (None: unknown).
    original_status: str | None
    priority: int
    #: Evacuate calls made so far.
    attempts: int
    #: Destination host -> failed rebuilds there.
    failures: Mapping[str, int]
    #: Tries on one host before another is asked (``[evacuation]
    #: same_target_retries``).
    same_target_retries: int
    #: The host the previous call asked for; in what :func:`decide`
    #: hands ``choose_target``, the host it decided on (None: Nova's
    #: scheduler chooses).
    target: str | None = None

    def allows(self, host: str) -> bool:
        """The retry-elsewhere rule: not a host it failed on too often."""
        return self.failures.get(host, 0) <= self.same_target_retries


def request(server_id: str, name: str, *, original_status: str | None,
            priority: int, attempts: int, failures: Mapping[str, int],
            same_target_retries: int, target: str | None
            ) -> PlacementRequest:
    """A :class:`PlacementRequest` holding a copy of ``failures``."""
    return PlacementRequest(
        server_id=server_id, name=name, original_status=original_status,
        priority=priority, attempts=attempts,
        failures=types.MappingProxyType(dict(failures)),
        same_target_retries=same_target_retries, target=target)


class Placer(typing.Protocol):
    """What :func:`decide` asks of an evacuation strategy: policy only."""

    #: Its entry-point name (for the log; may be empty).
    name: str
    #: True: the strategy ranks the hosts itself (:meth:`rank`), looking
    #: at their room; False: the engine's proposal stands (the spare,
    #: the host asked before, or after failures on it another one), and
    #: Nova's scheduler judges room.
    places: bool

    def rank(self, request: PlacementRequest,
             candidates: tuple[HostRoom, ...],
             view: PlacementView) -> Sequence[HostRoom]:
        """``candidates`` best first; empty: let Nova's scheduler choose.

        The candidates are the eligible hosts with room for the instance
        that the retry-elsewhere rule allows, by name.
        """

    def choose_target(self, request: PlacementRequest,
                      view: PlacementView) -> str | None:
        """The last word on the decision, ``request.target``.

        The default keeps it; kept for strategies written before
        :meth:`rank` (see doc/driver-authors.md).
        """


def _elsewhere(request: PlacementRequest,
               view: PlacementView) -> str | None:
    """After failures: the least-failed other host that is up, enabled.

    Read from the snapshot's services (not the hosts' room: a strategy
    that does not place never costs a read of it).
    """
    if view.snapshot is None:
        return None
    candidates = sorted(
        (request.failures.get(s.host, 0), s.host)
        for s in view.snapshot.services
        if s.host != view.failed_host and s.state == model.UP
        and not s.disabled and not s.forced_down and request.allows(s.host))
    return candidates[0][1] if candidates else None


def proposal(request: PlacementRequest, view: PlacementView) -> str | None:
    """The engine's own choice, for a strategy that does not place.

    The reserved spare while the retry-elsewhere rule allows it; else the
    host asked before while it allows that (None, Nova's scheduler,
    included, until the scheduler's choices failed too often on one
    host); else the least-failed other host that is up and enabled.
    """
    if view.spare is not None and request.allows(view.spare):
        return view.spare
    previous = request.target
    if previous is not None and request.allows(previous):
        return previous
    if all(request.allows(host) for host in request.failures):
        return previous
    return _elsewhere(request, view)


def _ranked(request: PlacementRequest, view: PlacementView,
            strategy: Placer) -> str | None:
    """The spare while it has room, else the strategy's best candidate."""
    spare = view.spare
    if (spare is not None and request.allows(spare)
            and view.fits(spare, request.server_id)):
        return spare
    found = tuple(room for room in view.candidates(request.server_id)
                  if request.allows(room.host))
    if not found:
        return None  # nowhere known to fit: Nova's scheduler decides
    ranked = strategy.rank(request, found, view)
    if not ranked:
        _abstained(strategy, request, found)
        return None
    return ranked[0].host


_abstentions: dict[str, int] = {}
_abstentions_lock = threading.Lock()


def _abstained(strategy: Placer, request: PlacementRequest,
               found: tuple[HostRoom, ...]) -> None:
    """A strategy chose none of the candidates: said and counted.

    Nova's scheduler then chooses; an operator should know the policy
    they configured did not decide (see :func:`abstentions`).
    """
    name = strategy.name or type(strategy).__name__
    known = sum(room.load is not None for room in found)
    LOG.warning('evacuation strategy %s chose none of %d candidate host(s) '
                'for %s (their load known on %d); Nova\'s scheduler chooses',
                name, len(found), request.server_id, known)
    with _abstentions_lock:
        _abstentions[name] = _abstentions.get(name, 0) + 1


def abstentions() -> dict[str, int]:
    """Strategy name -> times it chose no candidate, in this process."""
    with _abstentions_lock:
        return dict(_abstentions)


def decide(request: PlacementRequest, view: PlacementView,
           strategy: Placer) -> str | None:
    """Where the next evacuate call of ``request`` asks Nova to rebuild it.

    The one placement decision. The retry-elsewhere rule
    (:meth:`PlacementRequest.allows`) and the reserved spare first are
    applied here, for every strategy; a strategy that places
    (``strategy.places``) ranks the hosts the rule leaves, and a spare
    without room is passed over for them; then ``choose_target`` has
    the last word (its default keeps the decision). A strategy that
    fails leaves the engine's :func:`proposal`: placement is advice,
    never a reason not to evacuate.
    """
    fallback = proposal(request, view)
    try:
        chosen = (_ranked(request, view, strategy) if strategy.places
                  else fallback)
        return strategy.choose_target(
            dataclasses.replace(request, target=chosen), view)
    except Exception:
        LOG.exception('evacuation strategy %s failed to choose a target '
                      'for %s; asking for %s',
                      strategy.name or type(strategy).__name__,
                      request.server_id,
                      fallback or 'Nova\'s choice')
        return fallback
