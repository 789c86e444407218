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

"""Nova failing the engine's calls: nothing twice, nothing FAILED for it."""

import fixtures
import testtools

from instanceha.engine import events
from instanceha.engine import ports
from instanceha.engine.states import HostState as S
from instanceha import exceptions
from tests.unit import test_recovery_fakes as fakes


def failing(rig, name, times, *, status=500, carry_out=False):
    """The next ``times`` calls of cloud.``name`` fail (after doing it)."""
    real = getattr(rig.cloud, name)
    left = [times]

    def call(*args, **kwargs):
        if left[0] > 0:
            left[0] -= 1
            if carry_out:
                real(*args, **kwargs)
            else:
                rig.cloud.calls.append((name,) + args)
            raise exceptions.CloudError('%s: HTTP %s from Nova' % (
                name, status), status=status)
        return real(*args, **kwargs)
    setattr(rig.cloud, name, call)
    return left


class TestNovaFaults(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())

    def test_unanswered_evacuate_that_nova_carried_out_is_not_repeated(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        failing(rig, 'evacuate', 1, status=None, carry_out=True)
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual(1, len(rig.cloud.evacuations(vm)))
        self.assertNotEqual('host1', rig.cloud.servers[vm].host)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual([], rig.events.named(events.EVACUATE_REFUSED))
        self.assertEqual(1, len(rig.events.named(
            events.EVACUATE_UNANSWERED, 'host1')))

    def test_nova_errors_never_mark_the_host_failed(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.retries': 2})
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        failing(rig, 'evacuate', 8, status=503)
        rig.cloud.kill('host1')
        rig.run(60)
        self.assertEqual(9, len(rig.cloud.evacuations(vm)))
        self.assertNotIn(S.FAILED, rig.engine.host_states().values())
        self.assertNotEqual('host1', rig.cloud.servers[vm].host)
        self.assertEqual([], rig.events.named(events.EVACUATE_GAVE_UP))

    def test_refusals_still_count(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.retries': 2})
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        failing(rig, 'evacuate', 8, status=409)
        rig.cloud.kill('host1')
        rig.run(60)
        self.assertEqual(3, len(rig.cloud.evacuations(vm)))
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())

    def test_failed_unlock_is_retried(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.lock_instances': True})
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        real = rig.cloud.set_server_lock
        fails = [2]

        def lock(server_id, locked, reason=None):
            if not locked and fails[0]:
                fails[0] -= 1
                raise exceptions.CloudError('unlock: HTTP 503', status=503)
            return real(server_id, locked, reason)
        rig.cloud.set_server_lock = lock
        rig.run(60)
        self.assertEqual(0, fails[0])
        self.assertFalse(rig.cloud.servers[vm].locked)
        self.assertEqual({}, rig.engine.host_states())

    def test_no_fencing_while_nova_cannot_be_read(self):
        rig = fakes.Rig(hosts=5, workers=1,
                        **{'evacuation.strategy': 'smart'})
        rig.cloud.boot('host1', 1)
        rig.cloud.boot('host2', 1)
        rig.run(2)
        rig.fencer.fail['host1'] = 1000
        rig.cloud.kill('host1')
        rig.cloud.kill('host2')
        for _ in range(30):
            rig.run(1)
            if rig.engine.host_states().get('host1') is S.FENCE_FAILED:
                break
        # host1's fencing failed; it is to be tried again (back-off).
        failing(rig, 'snapshot', 1000, status=503)

        def offs():
            return [c for c in rig.fencer.calls if c == ('off', 'host1')]
        before = offs()
        rig.run(120)
        self.assertEqual(before, offs())
        self.assertEqual(S.FENCE_FAILED, rig.engine.host_states()['host1'])
        held = rig.events.named(events.SNAPSHOT_FAILED)[-1]
        self.assertIn('host1', held['held'])

    def test_deleted_service_ends_the_recovery(self):
        rig = fakes.Rig()
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.fencer.unfence = lambda host: ports.FenceResult(
            host=host, level=1, devices=('ipmi',))  # it never boots
        rig.run(20)
        self.assertEqual({'host1': S.WAITING_UP}, rig.engine.host_states())
        del rig.cloud.services['host1']
        rig.run(3)
        self.assertEqual({}, rig.engine.host_states())
        self.assertIn('no longer listed', rig.events.named(
            events.HOST_STATE, 'host1')[-1]['reason'])

    def test_failing_step_backs_off_up_to_a_poll(self):
        rig = fakes.Rig(poll=15)
        rig.cloud.boot('host1', 1)
        rig.run(2)
        failing(rig, 'update_service', 5, status=503)
        rig.cloud.kill('host1')
        rig.run(120)
        errors = rig.events.named(events.STEP_ERROR, 'host1')
        self.assertEqual([5, 10, 15, 15, 15],
                         [d['retry_in'] for d in errors])
        self.assertIn('update_service: HTTP 503', errors[0]['reason'])
        self.assertEqual({}, rig.engine.host_states())
