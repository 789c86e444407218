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

"""The pause on real redis and etcd: shared, durable, obeyed by two engines.

Each backend runs on 127.0.0.1 (started by the fixtures). Besides the
store contract, two engines (two copies of the service, on the fakes'
cloud) read the pause through the backend: the leader holds a failed host
while paused, and after it hands over (it stops being leader), the other
copy holds it too, then recovers it at the poll after ``resume``. An
unreachable backend keeps the last known pause instead of lifting it.
"""

import testtools

from instanceha.adapters import pause_store
from instanceha.engine import events
from instanceha.engine import executor
from instanceha.engine import guard
from instanceha.engine import recovery
from tests.functional import peers
from tests.unit import test_pause
from tests.unit import test_recovery_fakes as fakes


class _Backend(test_pause.StoreContract):

    def make_store(self):
        return pause_store.from_url(self.backend.url, 'g1')

    def engine(self):
        rig = fakes.Rig()
        store = self.make_store()
        rig.env.pause = store
        rig.engine.pause.source = store
        return rig

    def test_two_copies_obey_the_pause(self):
        a = self.engine()
        a.cloud.boot('host1', 2)
        self.make_store().set(test_pause.a_pause(None))
        a.cloud.kill('host1')
        a.run(20)
        self.assertEqual([], [h for op, h in a.fencer.calls if op == 'off'])
        self.assertTrue(a.events.named(events.RECOVERY_HELD))
        # The leader goes; a second copy (same cloud) takes over.
        a.coordinator.leader = False
        a.run(2)
        b2 = self.engine_on(a)
        b2.run(20)
        self.assertEqual([], [h for op, h in b2.fencer.calls if op == 'off'])
        self.assertTrue(b2.events.named(events.PAUSED))
        self.make_store().clear()
        b2.run(3)
        self.assertEqual(1, len(b2.events.named(events.RESUMED)))
        self.assertEqual(['host1'], [h for op, h in b2.fencer.calls
                                     if op == 'off'])

    def engine_on(self, leader):
        """A second engine on the first one's fake cloud and clock."""
        rig = fakes.Rig.__new__(fakes.Rig)
        rig.clock, rig.cloud = leader.clock, leader.cloud
        rig.fencer = fakes.FakeFencer(rig.cloud)
        rig.coordinator = fakes.FakeCoordinator()
        rig.events = events.RecordingEventSink()
        rig.conf, rig.drivers = leader.conf, leader.drivers
        rig.env = guard.assemble(
            cloud=rig.cloud, clock=rig.clock, fencer=rig.fencer,
            coordinator=rig.coordinator, events=rig.events,
            executor=executor.InlineExecutor(), pause=self.make_store())
        rig.engine = recovery.Engine(rig.conf, rig.drivers, rig.env)
        return rig

    def test_unreachable_backend_keeps_the_pause(self):
        rig = self.engine()
        rig.cloud.boot('host1', 2)
        self.make_store().set(test_pause.a_pause(None))
        rig.run(2)
        self.backend.stop()
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual([], [h for op, h in rig.fencer.calls if op == 'off'])
        self.assertEqual([], rig.events.named(events.RESUMED))


class RedisPauseTest(_Backend, testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.useFixture(peers.RedisPeer())


class EtcdPauseTest(_Backend, testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.useFixture(peers.EtcdPeer())
