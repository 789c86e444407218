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

"""One recovery, one id: in every event, in the marker, across restarts."""

import uuid

import testtools

from instanceha.engine import events
from instanceha.engine import reasons
from tests.unit import test_recovery_fakes as fakes


def rid_in_marker(rig, host):
    parsed = reasons.read(rig.cloud.services[host].disabled_reason).marker
    return parsed.recovery if parsed else None


class TestRecoveryId(testtools.TestCase):

    def test_every_event_of_a_recovery_carries_its_id(self):
        rig = fakes.Rig()
        vms = rig.cloud.boot('host1', 2)
        rig.cloud.boot('host2', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        seen = []
        rig.run_until(lambda: seen.append(rid_in_marker(rig, 'host1'))
                      or rig.engine.host_states() == {} and len(seen) > 5,
                      60)
        ids = rig.events.recovery_ids('host1')
        self.assertEqual(1, len(set(ids)), ids)
        rid = ids[0]
        self.assertEqual(str(uuid.UUID(rid)), rid)
        # The evacuation job's events too, one start and end per instance.
        self.assertEqual(len(vms), len(rig.events.named(
            events.EVACUATE_REQUESTED, 'host1')))
        self.assertIn(rid, seen)
        self.assertEqual({rid, None}, set(seen))
        self.assertEqual([], [i for i in rig.events.recovery_ids('host2')
                              if i])
        self.assertEqual([None], rig.events.recovery_ids(None)[:1])

    def test_a_restarted_engine_goes_on_with_the_same_id(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.max_in_flight': 1})
        vms = rig.cloud.boot('host1', 4)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run_until(lambda: any(rig.cloud.evacuations(v) for v in vms), 40)
        before = set(rig.events.recovery_ids('host1'))
        rig.restart()
        rig.run(30)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual(before, set(rig.events.recovery_ids('host1')))

    def test_the_next_failure_is_another_recovery(self):
        rig = fakes.Rig()
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual({}, rig.engine.host_states())
        first = set(rig.events.recovery_ids('host1'))
        count = len(rig.events.recovery_ids('host1'))
        rig.cloud.boot('host1', 1)
        rig.cloud.kill('host1')
        rig.run(30)
        second = set(rig.events.recovery_ids('host1')[count:])
        self.assertEqual(1, len(first))
        self.assertEqual(1, len(second))
        self.assertNotEqual(first, second)
