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

"""The packing estimate and the failover capacity, on plain values.

Adversarial shapes: room fragmented over hosts, allocation ratios and
reserved (as Placement's capacity), max_unit, sizes not known, a domain
larger than what is left, spares. Every number is computed by hand in
the test's comment.
"""

import datetime

import testtools

from instanceha.engine import capacity
from instanceha.engine import model
from instanceha.engine import packing

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def svc(host, zone=None, state='up', status='enabled', forced=False,
        reason=None):
    return model.Service(id='svc-' + host, host=host, state=state,
                         status=status, forced_down=forced, zone=zone,
                         disabled_reason=reason)


def srv(sid, host, vcpus=1, ram=512, disk=1, image='img', specs=None):
    return model.Server(id=sid, name=sid, host=host, status='ACTIVE',
                        image_id=image, flavor=model.Flavor(
                            'f', extra_specs=specs or {}, vcpus=vcpus,
                            ram_mb=ram, disk_gb=disk, ephemeral_gb=0,
                            swap_mb=0))


def inv(total, used=0, ratio=1.0, reserved=0, max_unit=None):
    """Placement's arithmetic: capacity = (total - reserved) x ratio."""
    return model.Inventory(capacity=int((total - reserved) * ratio),
                           used=used, max_unit=max_unit)


def room(host, vcpus, ram=100000, disk=100000, used_vcpus=0, **kw):
    return model.HostResources(host, {
        'VCPU': inv(vcpus, used_vcpus, **kw), 'MEMORY_MB': inv(ram),
        'DISK_GB': inv(disk)})


def facts(services, servers, rooms, aggregates=(), spares=None):
    snap = model.Snapshot(taken_at=T0, services=tuple(services),
                          servers=tuple(servers),
                          aggregates=tuple(aggregates))
    evacuable = {}
    for s in servers:
        evacuable.setdefault(s.host, []).append(s)
    return capacity.Facts(
        snapshot=snap, rooms={r.host: r for r in rooms},
        evacuable={h: tuple(v) for h, v in evacuable.items()},
        spares=spares or {})


class TestNeed(testtools.TestCase):

    def test_flavor_as_nova_asks_placement(self):
        server = model.Server('a', 'a', 'h', 'ACTIVE', model.Flavor(
            'f', vcpus=2, ram_mb=2048, disk_gb=20, ephemeral_gb=5,
            swap_mb=1500), image_id='img')
        need = packing.need_of(server)
        # 20 root + 5 ephemeral + 1500 MiB swap rounded up to 2 GiB.
        self.assertEqual({'VCPU': 2, 'MEMORY_MB': 2048, 'DISK_GB': 27},
                         dict(need.amounts))
        self.assertIsNone(need.uncounted)

    def test_boot_from_volume_has_no_root_disk_here(self):
        need = packing.need_of(srv('a', 'h', disk=40, image=None))
        self.assertEqual(0, need.amounts['DISK_GB'])

    def test_uncounted_resources_never_fit(self):
        for specs in ({'hw:cpu_policy': 'dedicated'},
                      {'resources:VGPU': '1'},
                      {'pci_passthrough:alias': 'gpu:1'}):
            need = packing.need_of(srv('a', 'h', specs=specs))
            self.assertIsNotNone(need.uncounted, specs)
            out = packing.pack([need], [room('x', 100)])
            self.assertFalse(out.fits)

    def test_unknown_size_never_fits(self):
        server = model.Server('a', 'a', 'h', 'ACTIVE', model.Flavor('f'))
        out = packing.pack([packing.need_of(server)], [room('x', 100)])
        self.assertEqual('its flavor\'s size is not known',
                         out.unplaced[0].why)

    def test_unknown_memory_does_not_fit_where_memory_is_counted(self):
        server = model.Server('a', 'a', 'h', 'ACTIVE', model.Flavor(
            'f', vcpus=1), image_id=None)
        self.assertFalse(packing.pack([packing.need_of(server)],
                                      [room('x', 100)]).fits)
        # A cloud that counts vCPUs only (the simulator) takes it.
        only_vcpus = model.HostResources('x', {'VCPU': inv(4)})
        self.assertTrue(packing.pack([packing.need_of(server)],
                                     [only_vcpus]).fits)


class TestPack(testtools.TestCase):

    def test_fragmentation_is_not_a_fit(self):
        # 4 free vCPUs in total, 2 on each host: one 4-vCPU instance
        # does not fit although the sum would say it does.
        out = packing.pack([packing.need_of(srv('big', 'h', vcpus=4))],
                           [room('a', 2), room('b', 2)])
        self.assertFalse(out.fits)
        self.assertIn('too large for every remaining host',
                      out.unplaced[0].why)

    def test_room_used_by_earlier_instances(self):
        # 3+3 free; instances 2, 2, 2: worst fit puts 2 on a, 2 on b,
        # the third fits nowhere (1+1 left): room used, not too large.
        needs = [packing.need_of(srv('s%d' % i, 'h', vcpus=2))
                 for i in range(3)]
        out = packing.pack(needs, [room('a', 3), room('b', 3)])
        self.assertEqual(1, len(out.unplaced))
        self.assertIn('used by the instances placed before it',
                      out.unplaced[0].why)

    def test_allocation_ratio_and_reserved(self):
        # 8 cores, 2 reserved, ratio 2.0: (8 - 2) x 2 = 12 vCPUs, 10
        # used: 2 free. A 2-vCPU instance fits, a 3-vCPU one does not.
        host = room('a', 8, used_vcpus=10, ratio=2.0, reserved=2)
        self.assertEqual(12, host.resources['VCPU'].capacity)
        self.assertTrue(packing.pack(
            [packing.need_of(srv('x', 'h', vcpus=2))], [host]).fits)
        self.assertFalse(packing.pack(
            [packing.need_of(srv('x', 'h', vcpus=3))], [host]).fits)

    def test_max_unit(self):
        # Ratio 16 gives 64 vCPUs of room, but one allocation may take at
        # most the host's 4 cores.
        host = room('a', 4, ratio=16.0, max_unit=4)
        self.assertFalse(packing.pack(
            [packing.need_of(srv('x', 'h', vcpus=5))], [host]).fits)

    def test_memory_limits_too(self):
        host = room('a', 64, ram=1024)
        needs = [packing.need_of(srv('s%d' % i, 'h', ram=512))
                 for i in range(3)]
        self.assertEqual(1, len(packing.pack(needs, [host]).unplaced))

    def test_a_fit_is_a_witness(self):
        needs = [packing.need_of(srv('s%d' % i, 'h', vcpus=v))
                 for i, v in enumerate((3, 1, 2, 2))]
        out = packing.pack(needs, [room('a', 4), room('b', 4)])
        self.assertTrue(out.fits)
        used = {}
        for n in needs:
            used[out.placed[n.server_id]] = used.get(
                out.placed[n.server_id], 0) + n.amounts['VCPU']
        self.assertEqual({'a': 4, 'b': 4}, used)


class TestCapacity(testtools.TestCase):

    def test_n_plus_one_and_the_largest_host(self):
        # h1 runs 6 vCPUs, h2 2, h3 2. Free: h1 2, h2 6, h3 2.
        # Lose h1: 6 vCPUs (three 2s) onto h2 (6) + h3 (2): fits.
        # Lose h2: 2 onto h1 2 + h3 2: fits. Lose h3: fits.
        # Lose h1+h2: 8 onto h3's 2: no. Tolerance 1, exact.
        servers = ([srv('a%d' % i, 'h1', vcpus=2) for i in range(3)] +
                   [srv('b', 'h2', vcpus=2), srv('c', 'h3', vcpus=2)])
        f = facts([svc('h1'), svc('h2'), svc('h3')], servers,
                  [room('h1', 8, used_vcpus=6), room('h2', 8, used_vcpus=2),
                   room('h3', 4, used_vcpus=2)])
        cloud = capacity.assess(f).domains[0]
        self.assertEqual('cloud', cloud.domain.name)
        self.assertEqual((), cloud.unabsorbed)
        self.assertEqual((1, True), (cloud.tolerance, cloud.exact))
        self.assertFalse(cloud.whole.absorbed)

    def test_a_host_that_cannot_be_absorbed_says_why(self):
        servers = [srv('a', 'h1', vcpus=4), srv('b', 'h2', vcpus=1)]
        f = facts([svc('h1'), svc('h2')], servers,
                  [room('h1', 4, used_vcpus=4), room('h2', 4, used_vcpus=2)])
        report = capacity.assess(f)
        cloud = report.domains[0]
        self.assertEqual(0, cloud.tolerance)
        self.assertEqual(('h1',), cloud.unabsorbed[0].failed)
        self.assertIn('VCPU 4 > 2 free', cloud.unabsorbed[0].as_dict()[
            'unplaced'][0]['why'])
        self.assertEqual((cloud,), report.short_of(1))

    def test_a_domain_larger_than_what_is_left(self):
        # Zone az1 holds 3 of 4 hosts; losing it leaves h4 (4 free) for
        # 6 vCPUs. Each single host is absorbed.
        services = [svc('h1', 'az1'), svc('h2', 'az1'), svc('h3', 'az1'),
                    svc('h4', 'az2')]
        servers = [srv('s%d' % i, 'h%d' % i, vcpus=2) for i in (1, 2, 3)]
        rooms = [room('h%d' % i, 4, used_vcpus=2) for i in (1, 2, 3)]
        rooms.append(room('h4', 4))
        report = capacity.assess(facts(services, servers, rooms))
        zone = {d.domain.name: d for d in report.domains}['zone az1']
        self.assertEqual((), zone.unabsorbed)
        self.assertFalse(zone.whole.absorbed)
        # (Two of the three fit on h4; one does not.)
        self.assertEqual(1, len(zone.whole.packing.unplaced))
        # Two of az1 lost: 4 vCPUs onto one az1 host (2) + h4 (4): fits.
        self.assertEqual((2, True), (zone.tolerance, zone.exact))

    def test_spares_count_smallest_first(self):
        # h1 (4 vCPUs of instances) has nowhere to go but a spare; two
        # spares, 2 and 8 free: the smaller is counted, so no.
        services = [svc('h1'), svc('h2'),
                    svc('s1', status='disabled', reason='instanceha:reserved'),
                    svc('s2', status='disabled', reason='instanceha:reserved')]
        servers = [srv('a', 'h1', vcpus=4)]
        rooms = [room('h1', 4, used_vcpus=4), room('h2', 2, used_vcpus=2),
                 room('s1', 2), room('s2', 8)]
        report = capacity.assess(facts(
            services, servers, rooms, spares={'h1': ('s1', 's2')}))
        self.assertEqual(0, report.domains[0].tolerance)
        self.assertEqual(('s1',), report.domains[0].unabsorbed[0].spares)
        # Only the big spare: absorbed.
        report = capacity.assess(facts(
            services, servers, rooms, spares={'h1': ('s2',)}))
        # (Both lost: h2 runs nothing, h1 goes to s2.)
        self.assertEqual(2, report.domains[0].tolerance)

    def test_hosts_that_do_not_receive(self):
        # h2 is down, h3 forced down, h4 has no reading, s is disabled:
        # none takes h1's instance.
        services = [svc('h1'), svc('h2', state='down'),
                    svc('h3', forced=True), svc('h4'),
                    svc('s', status='disabled')]
        rooms = [room('h1', 4, used_vcpus=1), room('h2', 4), room('h3', 4),
                 room('s', 4)]
        report = capacity.assess(facts(services, [srv('a', 'h1')], rooms))
        self.assertEqual(('h4',), report.unread)
        self.assertIn('h1', [u.failed[0]
                             for u in report.domains[0].unabsorbed])

    def test_many_hosts_tolerance_is_a_lower_bound(self):
        hosts = ['h%02d' % i for i in range(20)]
        services = [svc(h) for h in hosts]
        servers = [srv('s' + h, h, vcpus=1) for h in hosts]
        rooms = [room(h, 2, used_vcpus=1) for h in hosts]
        cloud = capacity.assess(facts(services, servers, rooms)).domains[0]
        # C(20, 2) = 190 sets > MAX_SETS: the heaviest pair only.
        self.assertEqual((1, False), (cloud.tolerance, cloud.exact))

    def test_aggregates_are_domains(self):
        agg = model.Aggregate('1', 'rack1', frozenset({'h1', 'h2'}))
        services = [svc('h1'), svc('h2'), svc('h3')]
        names = [d.name for d in capacity.domains(
            model.Snapshot(T0, tuple(services), aggregates=(agg,)),
            ['h1', 'h2', 'h3'])]
        self.assertEqual(['cloud', 'aggregate rack1'], names)
