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

import dataclasses
import datetime
import os

import fixtures
import testtools

from instanceha.cmd import manage_plan
from instanceha.engine import plan as plan_mod
from tests import conf_fixture

D = plan_mod.Decision
NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)


class TestAnnotateFencing(testtools.TestCase):
    """The dry run says when a host to recover cannot be fenced (R9)."""

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.plan = plan_mod.Plan(NOW, decisions=(
            plan_mod.HostDecision('compute-1', D.RECOVER, ('nova: down',)),
            plan_mod.HostDecision('compute-2', D.RECOVER, ('nova: down',)),
            plan_mod.HostDecision('compute-3', D.HEALTHY, ('nova: up',)),
        ))

    def conf(self, fencing_text):
        path = os.path.join(self.tmp, 'fencing.yaml')
        if fencing_text is not None:
            with open(path, 'w') as f:
                f.write(fencing_text)
        return self.useFixture(conf_fixture.ConfFixture(fencing={
            'config_file': path, 'allow_noop': True})).conf

    def test_unfenceable_host_is_flagged(self):
        conf = self.conf('hosts:\n  compute-1:\n    driver: noop\n')
        plan = manage_plan.annotate_fencing(self.plan, conf)
        self.assertEqual(('nova: down',), plan.decision('compute-1').reasons)
        why = plan.decision('compute-2').reasons[-1]
        self.assertIn('cannot be fenced', why)
        self.assertIn('will not be evacuated', why)
        self.assertEqual(('nova: up',), plan.decision('compute-3').reasons)

    def test_missing_fencing_file_is_reported_not_fatal(self):
        plan = manage_plan.annotate_fencing(self.plan, self.conf(None))
        for host in ('compute-1', 'compute-2'):
            self.assertIn('fencing file unusable',
                          plan.decision(host).reasons[-1])


class TestAnnotateCapacity(testtools.TestCase):
    """The dry run says which instances of a failing host find no room."""

    def setUp(self):
        super().setUp()
        from instanceha.engine import model

        def server(sid, host, vcpus):
            return model.Server(sid, sid, host, 'ACTIVE', model.Flavor(
                'f', vcpus=vcpus), image_id=None)

        services = tuple(model.Service('s-' + h, h, 'up' if h != 'c1'
                                       else 'down', 'enabled')
                         for h in ('c1', 'c2'))
        self.snapshot = model.Snapshot(NOW, services, (
            server('big', 'c1', 4), server('small', 'c1', 1)))
        rooms = {'c2': model.HostResources('c2', {
            'VCPU': model.Inventory(capacity=4, used=2)})}

        class Cloud:
            def host_resources(self):
                return rooms

        self.cloud = Cloud()
        self.drivers = type('Drivers', (), {'filters': []})()
        self.conf = self.useFixture(conf_fixture.ConfFixture()).conf
        self.plan = plan_mod.Plan(NOW, decisions=(
            plan_mod.HostDecision('c1', D.RECOVER, ('nova: down',)),
            plan_mod.HostDecision('c2', D.HEALTHY, ('nova: up',))))

    def test_instances_without_room_are_named(self):
        plan = manage_plan.annotate_capacity(
            self.plan, self.cloud, self.drivers, self.conf, self.snapshot)
        why = plan.decision('c1').reasons[-1]
        # c2 has 2 vCPUs free: the 1-vCPU instance fits, the 4 does not.
        self.assertTrue(why.startswith('would find no room: big (big): '
                                       'too large'), why)
        self.assertNotIn('small', why)
        self.assertEqual(('nova: up',), plan.decision('c2').reasons)

    def test_all_fit_says_nothing(self):
        self.snapshot = dataclasses.replace(
            self.snapshot, servers=self.snapshot.servers[1:])
        plan = manage_plan.annotate_capacity(
            self.plan, self.cloud, self.drivers, self.conf, self.snapshot)
        self.assertEqual(('nova: down',), plan.decision('c1').reasons)
