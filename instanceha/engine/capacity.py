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

"""Failover capacity: could the cloud absorb the loss of a host, a domain?

A pure function of facts (:class:`Facts`): the snapshot (services,
servers, aggregates), each host's room as Placement reports it, the
instances the recovery would evacuate from each host (its filters
applied) and the spares the reservation strategy would enable.

For a set of hosts that fail together, their evacuable instances are
packed (:func:`instanceha.engine.packing.pack`) onto the hosts that
remain: enabled, up, not forced down, with a Placement reading, plus one
spare per failed host where the reservation strategy would enable one
(the spares with the least room are counted, never the best). The
checks, per failure domain (the whole cloud, each availability zone,
each host aggregate):

* every single member lost in turn (N+1 holds for the domain when each
  is absorbed);
* ``tolerance``: the largest k such that every set of k members lost
  together is absorbed; sets are all tried while there are at most
  :data:`MAX_SETS` of a size, beyond that the heaviest k members only,
  and ``exact`` says whether the number is proven both ways (a set that
  failed was found) or only a lower bound;
* the whole domain lost at once.

Members are the enabled compute hosts (a host an operator disabled is
not recovered, spares included). Nothing here calls anything.
"""

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import functools
import itertools
import math

from instanceha.engine import model
from instanceha.engine import packing

#: Most sets of one size tried per domain before the heaviest only.
MAX_SETS = 64

#: How the estimate decides, for the reports.
METHOD = ('worst fit decreasing over VCPU, MEMORY_MB and DISK_GB from '
          'Placement (capacity = (total - reserved) x allocation ratio, '
          'minus usage, within max_unit); a fit found is a proof, a miss '
          'an estimate; spares counted smallest first; scheduler filters '
          'beyond room not modelled')


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the estimate is made of."""

    snapshot: model.Snapshot
    #: Host -> its room; a host missing has no reading (takes nothing).
    rooms: Mapping[str, model.HostResources]
    #: Host -> the instances its recovery would evacuate.
    evacuable: Mapping[str, tuple[model.Server, ...]]
    #: Failed host -> the spares that would be enabled for it.
    spares: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict)

    @property
    def members(self) -> tuple[str, ...]:
        """The hosts whose loss is recovered: enabled compute hosts."""
        return tuple(sorted(s.host for s in self.snapshot.services
                            if not s.disabled))

    def receives(self, host: str) -> bool:
        """Whether Nova's scheduler would send instances there now."""
        svc = self.snapshot.service(host)
        return (svc is not None and not svc.disabled and not svc.forced_down
                and svc.state == model.UP and host in self.rooms)

    @functools.cached_property
    def pool(self) -> packing.Pool:
        """The hosts that receive, sorted once for every loss checked."""
        return packing.Pool(self.rooms[h] for h in sorted(self.rooms)
                            if self.receives(h))

    def weight(self, host: str) -> tuple:
        """What the host's instances ask for, heaviest first."""
        needs = [packing.need_of(s) for s in self.evacuable.get(host, ())]
        return tuple(-sum(n.amounts.get(c) or 0 for n in needs)
                     for c in packing.CLASSES) + (host,)


@dataclasses.dataclass(frozen=True)
class Loss:
    """Whether the instances of ``failed`` fit on what remains."""

    failed: tuple[str, ...]
    instances: int
    packing: packing.Packing
    spares: tuple[str, ...] = ()

    @property
    def absorbed(self) -> bool:
        return self.packing.fits

    def as_dict(self) -> dict:
        return {
            'failed': list(self.failed), 'instances': self.instances,
            'absorbed': self.absorbed, 'spares': list(self.spares),
            'unplaced': [{'server': u.need.server_id, 'name': u.need.name,
                          'host': u.need.host, 'why': u.why}
                         for u in self.packing.unplaced]}


@dataclasses.dataclass(frozen=True)
class Domain:
    """A failure domain: its name and members."""

    name: str
    hosts: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DomainCapacity:
    """What the domain's members' loss would do."""

    domain: Domain
    #: Single members whose loss is not absorbed.
    unabsorbed: tuple[Loss, ...]
    #: Largest k with every k-set absorbed (proven).
    tolerance: int
    #: True: a (tolerance+1)-set that is not absorbed was found (or every
    #: member is tolerated); False: tolerance is a lower bound.
    exact: bool
    whole: Loss

    @property
    def n_plus(self) -> int:
        return self.tolerance

    def as_dict(self) -> dict:
        return {
            'domain': self.domain.name, 'hosts': list(self.domain.hosts),
            'n_plus': self.tolerance, 'exact': self.exact,
            'each_host_absorbed': not self.unabsorbed,
            'unabsorbed_hosts': [u.as_dict() for u in self.unabsorbed],
            'whole_domain': self.whole.as_dict()}


@dataclasses.dataclass(frozen=True)
class Report:
    """The failover capacity of the cloud."""

    domains: tuple[DomainCapacity, ...]
    #: Enabled hosts without a Placement reading (they take nothing).
    unread: tuple[str, ...]
    method: str = METHOD

    def short_of(self, minimum: int) -> tuple[DomainCapacity, ...]:
        """The domains that tolerate fewer than ``minimum`` lost hosts."""
        return tuple(d for d in self.domains
                     if d.tolerance < min(minimum, len(d.domain.hosts)))

    def as_dict(self) -> dict:
        return {'method': self.method, 'hosts_without_reading':
                list(self.unread),
                'domains': [d.as_dict() for d in self.domains]}


def domains(snapshot: model.Snapshot, members: Sequence[str]
            ) -> tuple[Domain, ...]:
    """The cloud, each availability zone, each aggregate (by members).

    A domain with exactly the members of one listed before is that one
    (an availability zone is an aggregate in Nova; a cloud of one zone
    is that zone).
    """
    kept = set(members)
    zones: dict[str, set[str]] = {}
    for host in kept:
        zone = snapshot.zone_of(host)
        if zone:
            zones.setdefault(zone, set()).add(host)
    named = [('cloud', kept)] + [('zone %s' % z, zones[z])
                                 for z in sorted(zones)]
    named += [('aggregate %s' % a.name, a.hosts & kept) for a in sorted(
        snapshot.aggregates, key=lambda a: a.name)]
    found: list[Domain] = []
    seen: set[frozenset[str]] = set()
    for name, hosts in named:
        hosts = frozenset(hosts)
        if hosts and hosts not in seen:
            seen.add(hosts)
            found.append(Domain(name, tuple(sorted(hosts))))
    return tuple(found)


def _spares(facts: Facts, failed: frozenset[str]) -> tuple[str, ...]:
    """One spare per failed host, the ones with the least room first."""
    usable = {s for h in failed for s in facts.spares.get(h, ())
              if s not in failed and s in facts.rooms}

    def room(spare: str) -> tuple:
        res = facts.rooms[spare].resources
        return tuple(res[c].free if c in res else 0
                     for c in packing.CLASSES) + (spare,)
    return tuple(sorted(usable, key=room)[:len(failed)])


def loss(facts: Facts, failed: Sequence[str]) -> Loss:
    """Pack the evacuable instances of ``failed`` onto what remains."""
    gone = frozenset(failed)
    spares = _spares(facts, gone)
    needs = [packing.need_of(s) for h in sorted(gone)
             for s in facts.evacuable.get(h, ())]
    return Loss(tuple(sorted(gone)), len(needs), facts.pool.pack(
        needs, without=gone, extra=[facts.rooms[s] for s in spares]), spares)


def _sets(hosts: Sequence[str], k: int,
          weight: Callable[[str], tuple]) -> tuple[list, bool]:
    """The k-sets to try and whether they are all of them."""
    if math.comb(len(hosts), k) <= MAX_SETS:
        return list(itertools.combinations(hosts, k)), True
    return [tuple(sorted(hosts, key=weight)[:k])], False


def _tolerance(facts: Facts, hosts: Sequence[str],
               singles_ok: bool) -> tuple[int, bool]:
    """Largest k with every k-set absorbed; whether it is exact."""
    if not singles_ok:
        return 0, True
    for k in range(2, len(hosts) + 1):
        sets, every = _sets(hosts, k, facts.weight)
        if any(not loss(facts, s).absorbed for s in sets):
            return k - 1, True
        if not every:
            return k - 1, False
    return len(hosts), True


def domain_capacity(facts: Facts, domain: Domain,
                    singles: Mapping[str, Loss]) -> DomainCapacity:
    """The checks of one domain (``singles``: each member's loss)."""
    unabsorbed = tuple(singles[h] for h in domain.hosts
                       if not singles[h].absorbed)
    tolerance, exact = _tolerance(facts, domain.hosts, not unabsorbed)
    return DomainCapacity(domain, unabsorbed, tolerance, exact,
                          loss(facts, domain.hosts))


def assess(facts: Facts) -> Report:
    """The failover capacity of every failure domain of the cloud."""
    members = facts.members
    singles = {h: loss(facts, (h,)) for h in members}
    return Report(
        tuple(domain_capacity(facts, d, singles)
              for d in domains(facts.snapshot, members)),
        tuple(h for h in members if h not in facts.rooms))


def host_loss(facts: Facts, failing: Sequence[str]) -> Loss:
    """What the recovery of ``failing`` now would find no room for."""
    return loss(facts, failing)
