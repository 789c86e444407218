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

"""The sweep of our locks an earlier copy left (engine.locks).

On the unit rig (the simulator's Nova): which locks come off, which
never do, when the locked servers are listed and what it costs.
"""

import dataclasses

import testtools

from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import workflow
from tests.unit import test_recovery_fakes as fakes


def our_reason(host, was):
    return reasons.Lock(host, was).render()


def lock(rig, server_id, reason, task_state=None):
    srv = rig.cloud.world.servers[server_id]
    srv.locked, srv.locked_reason = True, reason
    srv.task_state = task_state


def take_host(rig, host):
    """An operator disables ``host`` with a reason of their own."""
    svc = rig.cloud.services[host]
    rig.cloud.services[host] = dataclasses.replace(
        svc, status=model.DISABLED, disabled_reason='replacing a DIMM')


def listings(rig) -> int:
    """How many times the locked servers were listed."""
    return rig.engine._locks.sweeps


def swept(rig) -> list[str]:
    """Servers the sweep unlocked (the job's unlocks say no ``found``)."""
    return [d['server'] for d in rig.events.named(events.SERVER_UNLOCKED)
            if 'found' in d]


def host1_evacuating(until: str):
    """A rig whose host1 failed; its one instance locked and evacuated.

    Smart evacuation, 30 s rebuilds; run until the instance's ``until``
    attribute (``locked``, ``task_state``) is set.
    """
    rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                       'evacuation.lock_instances': True})
    vm, = rig.cloud.boot('host1', 1)
    rig.cloud.world.timing.rebuild_time = 30.0
    rig.run(2)
    rig.cloud.kill('host1')
    rig.run_until(lambda: getattr(rig.cloud.servers[vm], until), 20)
    return rig, vm


class TestLockSweep(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.rig = fakes.Rig()
        self.ours, self.was_off, self.users, self.bare, self.alike = (
            self.rig.cloud.boot('host2', 5))

    def test_ours_at_rest_unlocked_at_start_others_never(self):
        rig = self.rig
        lock(rig, self.ours, our_reason('host1', None))
        lock(rig, self.was_off, our_reason('host1', 'SHUTOFF'))
        lock(rig, self.users, 'owner: keep it')
        lock(rig, self.bare, None)
        lock(rig, self.alike, our_reason('host1', None) + ' by hand')
        rig.run(30)
        self.assertEqual(sorted([self.ours, self.was_off]), sorted(swept(rig)))
        servers = rig.cloud.servers
        self.assertFalse(servers[self.ours].locked)
        # Its lock reason said SHUTOFF: restored before it is unlocked.
        self.assertEqual(('SHUTOFF', False), (servers[self.was_off].status,
                                              servers[self.was_off].locked))
        for other in (self.users, self.bare, self.alike):
            self.assertTrue(servers[other].locked, other)
        self.assertEqual('owner: keep it',
                         servers[self.users].locked_reason)
        # One listing at start-up, none while every host is healthy.
        self.assertEqual(1, listings(rig))

    def test_never_while_rebuilding_then_unlocked(self):
        # host1 fails, its instance is locked and evacuated (a 30 s
        # rebuild); an operator takes host1 and the service restarts
        # before it saw that: nothing is adopted, the lock is ours.
        rig, vm = host1_evacuating('task_state')
        take_host(rig, 'host1')
        rig.restart()
        before = listings(rig)
        rig.run(10)
        self.assertEqual('rebuilding', rig.cloud.servers[vm].task_state)
        self.assertTrue(rig.cloud.servers[vm].locked)
        self.assertEqual([], swept(rig))
        self.assertTrue(rig.run_until(
            lambda: not rig.cloud.servers[vm].locked, 40))
        self.assertIsNone(rig.cloud.servers[vm].task_state)
        self.assertEqual([vm], swept(rig))
        # Listed again every poll (1 s here) while it was being rebuilt,
        # then no more.
        n = listings(rig)
        self.assertGreater(n - before, 10)
        rig.run(10)
        self.assertEqual(n, listings(rig))

    def test_not_as_detect_only(self):
        rig = fakes.Rig(disabled=True)
        vm, = rig.cloud.boot('host2', 1)
        lock(rig, vm, our_reason('host1', None))
        rig.run(10)
        self.assertTrue(rig.cloud.servers[vm].locked)
        self.assertEqual(0, listings(rig))

    def test_only_as_leader_and_again_when_leadership_is_gained(self):
        rig = self.rig
        rig.coordinator.leader = False
        lock(rig, self.ours, our_reason('host1', None))
        rig.run(5)
        self.assertTrue(rig.cloud.servers[self.ours].locked)
        self.assertEqual(0, listings(rig))
        rig.coordinator.leader = True
        rig.run(2)
        self.assertFalse(rig.cloud.servers[self.ours].locked)
        rig.coordinator.leader = False
        rig.run(2)
        lock(rig, self.was_off, our_reason('host1', None))
        rig.coordinator.leader = True
        rig.run(2)
        self.assertFalse(rig.cloud.servers[self.was_off].locked)
        self.assertEqual(2, listings(rig))

    def test_listing_fails_tried_again_next_poll(self):
        rig = self.rig
        lock(rig, self.ours, our_reason('host1', None))
        real = rig.cloud.locked_servers
        failures = []

        def failing():
            if not failures:
                failures.append(rig.clock.t)
                raise fakes.exceptions.CloudError('HTTP 503', status=503)
            return real()
        rig.cloud.locked_servers = failing
        rig.run(1)
        self.assertTrue(rig.cloud.servers[self.ours].locked)
        rig.run(2)
        self.assertFalse(rig.cloud.servers[self.ours].locked)

    def test_host_in_our_hands_left_to_its_workflow(self):
        # host1 fails and its instance is being evacuated: our lock on it
        # is its workflow's to take off, never the sweep's, whatever asks
        # for a sweep meanwhile.
        rig, vm = host1_evacuating('locked')
        self.assertIn('host1', rig.engine.host_states())
        rig.engine._locks.want('test')
        rig.run(3)
        self.assertTrue(rig.cloud.servers[vm].locked)
        rig.run_until(lambda: not rig.cloud.servers[vm].locked, 60)
        self.assertFalse(rig.cloud.servers[vm].locked)
        self.assertEqual([], swept(rig))

    def test_operator_takes_adopted_host_before_its_job(self):
        # A restarted copy adopts host1 (its marker) and an operator takes
        # host1 before its evacuation job began: no job watches the
        # rebuild, the sweep does.
        rig, vm = host1_evacuating('task_state')
        rig.restart()
        wf = workflow.HostWorkflow(host='host1', state=workflow.S.EVACUATING,
                                   entered=rig.clock.now(),
                                   detected=rig.clock.now(), resumed=True)
        rig.engine._workflows['host1'] = wf
        rig.engine._leader_since = rig.clock.monotonic()
        take_host(rig, 'host1')
        rig.engine._hand_over(wf, 'disabled by an operator')
        rig.run_until(lambda: not rig.cloud.servers[vm].locked, 60)
        self.assertFalse(rig.cloud.servers[vm].locked)
        self.assertEqual([vm], swept(rig))
