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

"""Would these instances fit there? A bin-packing estimate, never optimistic.

What an instance asks for (:func:`need_of`) is read from its flavor the
way Nova asks Placement for it: ``VCPU`` (its vCPUs), ``MEMORY_MB`` (its
memory), ``DISK_GB`` (root disk unless it boots from a volume, plus
ephemeral disk, plus swap rounded up to whole GiB). Where a host's room
(:class:`instanceha.engine.model.HostResources`) comes from: Placement's
capacity ((total - reserved) x allocation ratio), minus its usage, and
no single allocation above ``max_unit``.

:func:`pack` places the instances largest first (by vCPUs, then memory,
then disk), each on the host with the most free vCPUs that takes it
whole in every class: worst fit decreasing. The answer is a witness:
every instance it says fits has a host named, and the hosts' room
suffices for all of them together, so "fits" is never a guess. An
instance it cannot place may still fit under a cleverer packing (bin
packing is NP-hard), so "does not fit" errs on the safe side. What it
cannot count never fits: a flavor whose size Nova did not say, a
flavor asking for resources other than those three (dedicated CPUs,
devices, custom classes), a host without a reading. Nova's scheduler
filters beyond room (affinity, aggregates' extra specs, images'
properties) are not modelled: they can only refuse more.
"""

import bisect
from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses

from instanceha.engine import model

VCPU = 'VCPU'
MEMORY_MB = 'MEMORY_MB'
DISK_GB = 'DISK_GB'
#: The resource classes counted, in the order instances are sorted by.
CLASSES = (VCPU, MEMORY_MB, DISK_GB)

#: Flavor extra specs that ask Placement for something not counted here.
_NOT_COUNTED_SPECS = ('pci_passthrough:alias', 'accel:device_profile')


@dataclasses.dataclass(frozen=True)
class Need:
    """What one instance asks for, per resource class."""

    server_id: str
    name: str
    #: Its host now (the failed host it is evacuated from).
    host: str | None
    #: Resource class -> amount; None: the size is not known.
    amounts: Mapping[str, int | None]
    #: Why it cannot be counted at all (None: it can).
    uncounted: str | None = None

    def key(self) -> tuple:
        """Largest first, then by id: the order instances are placed in."""
        return tuple(-(self.amounts.get(c) or 0) for c in CLASSES) + (
            self.server_id,)

    def describe(self) -> str:
        return ', '.join('%s %s' % (c, self.amounts.get(c))
                         for c in CLASSES)


def _uncounted(flavor: model.Flavor) -> str | None:
    """Why a flavor asks Placement for more than the counted classes."""
    specs = flavor.extra_specs or {}
    if specs.get('hw:cpu_policy') == 'dedicated':
        return 'its flavor asks for dedicated CPUs (PCPU), not counted'
    for key in sorted(specs):
        if key.startswith('resources') and ':' in key:
            rc = key.split(':', 1)[1]
            if rc not in CLASSES and specs[key] not in ('0', ''):
                return 'its flavor asks for %s, not counted' % rc
        if key in _NOT_COUNTED_SPECS:
            return 'its flavor asks for devices (%s), not counted' % key
    return None


def _disk(server: model.Server) -> int | None:
    flavor = server.flavor
    root = 0 if server.image_id is None else flavor.disk_gb
    if root is None or flavor.ephemeral_gb is None or flavor.swap_mb is None:
        return None
    return root + flavor.ephemeral_gb + -(-flavor.swap_mb // 1024)


def need_of(server: model.Server) -> Need:
    """What ``server`` asks Placement for, as Nova derives it from its flavor.

    Boot from volume (no image): the root disk is not on the host.
    """
    flavor = server.flavor
    amounts = {VCPU: flavor.vcpus, MEMORY_MB: flavor.ram_mb,
               DISK_GB: _disk(server)}
    specs = flavor.extra_specs or {}
    for rc in CLASSES:  # a flavor may override a class (resources:VCPU=2)
        override = specs.get('resources:%s' % rc)
        if override is not None and override.isdigit():
            amounts[rc] = int(override)
    uncounted = _uncounted(flavor)
    if uncounted is None and flavor.vcpus is None:
        uncounted = 'its flavor\'s size is not known'
    return Need(server.id, server.name, server.host, amounts, uncounted)


@dataclasses.dataclass
class Bin:
    """One host's room while instances are placed on it."""

    host: str
    free: dict[str, int]
    max_unit: dict[str, int | None]

    @classmethod
    def of(cls, room: model.HostResources) -> 'Bin':
        return cls(room.host,
                   {c: inv.free for c, inv in room.resources.items()},
                   {c: inv.max_unit for c, inv in room.resources.items()})

    def refusal(self, need: Need) -> str | None:
        """Why ``need`` does not fit here now (None: it does)."""
        for rc, amount in need.amounts.items():
            if rc not in self.free:
                if amount:
                    return 'no %s inventory' % rc
                continue
            if amount is None:
                return '%s asked for is not known' % rc
            limit = self.max_unit.get(rc)
            if limit is not None and amount > limit:
                return '%s %d above its max_unit %d' % (rc, amount, limit)
            if amount > self.free[rc]:
                return '%s %d > %d free' % (rc, amount, self.free[rc])
        return None

    def take(self, need: Need) -> None:
        for rc, amount in need.amounts.items():
            if rc in self.free and amount:
                self.free[rc] -= amount


@dataclasses.dataclass(frozen=True)
class Unplaced:
    """An instance that would find no room, and why."""

    need: Need
    why: str


@dataclasses.dataclass(frozen=True)
class Packing:
    """Where each instance would go; those that fit nowhere."""

    placed: Mapping[str, str]
    unplaced: tuple[Unplaced, ...]

    @property
    def fits(self) -> bool:
        return not self.unplaced


def _why_not(need: Need, start: Iterable[Bin]) -> str:
    """Why nothing took ``need``: too big for any host, or room used up."""
    whys = {b.host: b.refusal(need) for b in start}
    if not whys:
        return 'no host can take it (none left with a reading)'
    if all(whys.values()):
        best = sorted(whys.items())[0]
        return ('too large for every remaining host (%s; e.g. %s: %s)'
                % (need.describe(), best[0], best[1]))
    return ('the room left is used by the instances placed before it '
            '(%s); fragmented over the remaining hosts' % need.describe())


def _key(room: model.HostResources) -> tuple:
    """Most free vCPUs first, then by name (deterministic)."""
    vcpu = room.resources.get(VCPU)
    return (-(vcpu.free if vcpu is not None else 0), room.host)


class Pool:
    """Hosts' room, sorted once, to pack many sets of instances on.

    Each :meth:`pack` works on its own copy of what it touches: a host is
    copied when an instance is tried on it (worst fit tries the roomiest
    first), so checking the loss of each of a thousand hosts does not
    copy a thousand hosts a thousand times.
    """

    def __init__(self, rooms: Iterable[model.HostResources]):
        self.rooms = {r.host: r for r in rooms}
        self.order = sorted(_key(r) for r in self.rooms.values())

    def pack(self, needs: Iterable[Need], without: frozenset[str] = (
            frozenset()), extra: Iterable[model.HostResources] = ()
             ) -> Packing:
        """Place ``needs`` on the pool less ``without``, plus ``extra``."""
        rooms = dict(self.rooms)
        order = [k for k in self.order if k[1] not in without]
        for room in extra:
            if room.host not in rooms or room.host in without:
                bisect.insort(order, _key(room))
            rooms[room.host] = room
        bins: dict[str, Bin] = {}
        placed: dict[str, str] = {}
        unplaced: list[Unplaced] = []
        for need in sorted(needs, key=Need.key):
            if need.uncounted:
                unplaced.append(Unplaced(need, need.uncounted))
                continue
            for pos, (_, host) in enumerate(order):
                found = bins.get(host) or bins.setdefault(
                    host, Bin.of(rooms[host]))
                if found.refusal(need) is None:
                    found.take(need)
                    placed[need.server_id] = host
                    del order[pos]
                    bisect.insort(order, (-found.free.get(VCPU, 0), host))
                    break
            else:
                unplaced.append(Unplaced(need, _why_not(
                    need, (Bin.of(rooms[h]) for _, h in order))))
        return Packing(placed, tuple(unplaced))


def pack(needs: Iterable[Need],
         rooms: Iterable[model.HostResources]) -> Packing:
    """Place ``needs`` on ``rooms``: worst fit, largest first.

    See the module docstring for why a placement found is a proof and a
    failure only an estimate.
    """
    return Pool(rooms).pack(needs)
