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

"""Failover capacity against the real Placement nova's scheduler writes.

The cloud (hosts of different sizes, allocation ratios, reserved, a
spare, two racks) is shaped through the fake computes' inventories, the
way nova.conf would shape real ones; every expected number below is
computed by hand from that shape, not by the code under test:

======  =====  ======  =====  ========  ==================  =========
host    rack   cores   ratio  reserved  VCPU capacity       instances
======  =====  ======  =====  ========  ==================  =========
h1      rack1  8       1.0    0         8                   c4 c2 c2
h2      rack1  4       2.0    1         (4 - 1) x 2 = 6     c4 c2
h3      rack2  4       1.0    0         4                   c2
h4      rack2  8       1.0    0         8                   c6
spare   rack2  4       1.0    0         4 (disabled spare)  -
======  =====  ======  =====  ========  ==================  =========

Free vCPUs: h1 0, h2 0, h3 2, h4 2, spare 4 (when enabled for a loss).

* h1 lost: c4 -> spare, c2 -> h3, c2 -> h4: absorbed.
* h2 lost: c4 -> spare, c2 -> h3: absorbed.
* h3 lost: c2 -> h4: absorbed.
* h4 lost: c6 fits nowhere (4, 2 free): NOT absorbed, too large.
* cloud: N+0. rack1: every single loss absorbed; both lost: 14 vCPUs for
  8 free: N+1, the whole rack not absorbed. rack2: N+0; the whole rack:
  c6 nowhere, c2 on the spare.
"""

import json
import subprocess
import sys

import testtools

from instanceha.engine import capacity
from instanceha.engine import placement
from instanceha.ops import capacity as ops_capacity
from instanceha.plugins.evacuation import spread
from instanceha.plugins import loader
from tests.functional import peers
from tests.functional import test_nova_cloud as helpers

SHAPES = {
    'h1': {'vcpus': 8},
    'h2': {'vcpus': 4, 'cpu_allocation_ratio': 2.0, 'reserved_vcpus': 1},
    'h3': {'vcpus': 4},
    'h4': {'vcpus': 8},
    'spare': {'vcpus': 4},
}
for _shape in SHAPES.values():
    _shape.setdefault('cpu_allocation_ratio', 1.0)
    _shape.update(memory_mb=16384, ram_allocation_ratio=1.0,
                  reserved_memory_mb=0, disk_allocation_ratio=1.0)

SEED = {'h1': ['c4', 'c2', 'c2'], 'h2': ['c4', 'c2'], 'h3': ['c2'],
        'h4': ['c6']}


class TestCapacity(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.peer = self.useFixture(peers.NovaPeer(
            hosts=list(SHAPES), shapes=SHAPES))
        nova = self.peer.client()
        flavors = {name: self.peer.create_flavor(name, vcpus=int(name[1:]),
                                                 ram=512, disk=1)
                   for name in ('c2', 'c4', 'c6')}
        self.peer.create_aggregate('rack1', hosts=['h1', 'h2'])
        self.peer.create_aggregate('rack2', hosts=['h3', 'h4', 'spare'])
        for host, names in SEED.items():
            for name in names:
                # Named HOST-FLAVOR-0 (create_servers counts from 0).
                self.peer.create_servers(1, host=host, flavor=flavors[name],
                                         name='%s-%s' % (host, name))
        spare = nova.services.list(host='spare', binary='nova-compute')[0]
        nova.services.disable_log_reason(spare.id, 'instanceha:reserved')
        self.conf_extra = (
            '[capacity]\nplacement_endpoint = %s\n'
            '[reservation]\nstrategy = reserved-hosts\n'
            % self.peer.placement_endpoint)
        self.cloud = helpers.make_cloud(self, self.peer,
                                        extra=self.conf_extra)

    def test_reading_applies_ratio_and_reserved(self):
        rooms = self.cloud.host_resources()
        self.assertEqual(sorted(SHAPES), sorted(rooms))
        vcpu = {h: (r.resources['VCPU'].capacity, r.resources['VCPU'].used,
                    r.resources['VCPU'].max_unit) for h, r in rooms.items()}
        self.assertEqual({'h1': (8, 8, 8), 'h2': (6, 6, 4), 'h3': (4, 2, 4),
                          'h4': (8, 6, 8), 'spare': (4, 0, 4)}, vcpu)
        self.assertEqual((16384, 1536), (
            rooms['h1'].resources['MEMORY_MB'].capacity,
            rooms['h1'].resources['MEMORY_MB'].used))
        # Reused while fresh: no second reading.
        calls = self.cloud.placement.api_calls
        self.cloud.host_resources()
        self.assertEqual(calls, self.cloud.placement.api_calls)
        # 5 inventories + 5 usages.
        self.assertEqual(10, calls)

    def test_capacity_matches_the_hand_computation(self):
        filters = loader.load_deciders(self.cloud.conf).filters
        reservation = loader.load('instanceha.reservation',
                                  ['reserved-hosts'], 'test',
                                  self.cloud.conf)[0]
        report = ops_capacity.assess(self.cloud, filters, reservation)
        by_name = {d.domain.name: d for d in report.domains}
        self.assertEqual(['cloud', 'aggregate rack1', 'aggregate rack2'],
                         list(by_name))
        self.assertEqual({'cloud': (0, True), 'aggregate rack1': (1, True),
                          'aggregate rack2': (0, True)},
                         {n: (d.tolerance, d.exact)
                          for n, d in by_name.items()})
        cloud = by_name['cloud']
        self.assertEqual([('h4',)], [u.failed for u in cloud.unabsorbed])
        why = cloud.unabsorbed[0].packing.unplaced[0]
        self.assertEqual('h4-c6-0', why.need.name)
        self.assertIn('too large for every remaining host', why.why)
        self.assertFalse(by_name['aggregate rack1'].whole.absorbed)
        rack2 = by_name['aggregate rack2'].whole
        self.assertEqual((['h4-c6-0'], ('spare',)), (
            [u.need.name for u in rack2.packing.unplaced], rack2.spares))
        self.assertEqual((), report.unread)

    def test_a_strategy_ranks_on_placements_numbers(self):
        # As a recovery reads the cloud: only the failed host's servers.
        snap = self.cloud.snapshot(hosts=['h1'])
        view = placement.build(snap, 'h1', vcpus=self.cloud.host_resources)
        self.assertEqual({'h2': 0, 'h3': 2, 'h4': 2, 'spare': 4},
                         {h: r.free_vcpus for h, r in view.hosts.items()})

        class Pack(spread.SpreadEvacuation):
            """The issue's out-of-tree pack: fullest host that fits."""
            name = 'pack'

            def rank(self, request, candidates, view):
                known = [c for c in candidates if c.free_vcpus is not None]
                return sorted(known, key=lambda c: (c.free_vcpus, c.host))

        c2 = next(s for s in snap.servers_on('h1') if s.flavor.vcpus == 2)
        before = placement.abstentions().get('pack', 0)
        request = placement.request(
            c2.id, c2.name, original_status='ACTIVE', priority=0,
            attempts=0, failures={}, same_target_retries=1, target=None)
        # The spare is disabled (not a candidate); h3 and h4 have 2 free.
        self.assertEqual('h3', placement.decide(
            request, view, Pack(self.cloud.conf)))
        self.assertEqual(before, placement.abstentions().get('pack', 0))

    def test_manage_capacity_json_always_parses(self):
        path = helpers.write_conf(self, helpers.conf_text(
            self.peer, extra=self.conf_extra + '[capacity]\n'
            'minimum_tolerance = 1\n'))
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', 'capacity',
             '--json', '--config-file', path],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(0, proc.returncode, proc.stderr)
        body = json.loads(proc.stdout)
        self.assertFalse(body['minimum_met'])
        self.assertEqual([0, 1, 0], [d['n_plus'] for d in body['domains']])
        self.assertEqual(capacity.METHOD, body['method'])
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', 'capacity',
             '--config-file', path],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertIn('h4: 1 of 1 instances without room', proc.stdout)
        self.assertIn('NOT met in cloud, aggregate rack2', proc.stdout)
