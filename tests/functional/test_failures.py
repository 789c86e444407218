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

"""Process and instance failures on a real Nova.

Real parts: nova (NovaPeer: API, conductor, scheduler, placement and
fake-virt computes), IPMI BMCs driven by the real ipmitool, the real
``instanceha-heartbeat-agent`` processes, the production engine and
environment (the recovery tests' fixtures) and the real
``instanceha-manage``.

A dead nova-compute on a living host: the helper stops host1's compute
service object (its heartbeats to Nova stop, its instances stay), while
host1's heartbeat agent, a separate process, keeps beating.

A crashed guest: the fake virt driver cannot crash by itself, so the
helper does what the hypervisor does when qemu dies: the driver's record
of the instance says shut down, and the compute manager is handed the
hypervisor's "stopped" lifecycle event. Nova's own power-state sync then
stops the instance in an admin context without a user, recording an
instance action ``stop`` whose ``user_id`` is null: exactly what
instanceha looks for, and what a user's stop never looks like.
"""

import time

from instanceha.engine import events
from instanceha.engine import instance_record as irec
from tests.functional import test_heartbeat_e2e as e2e
from tests.functional import test_recovery as rec


class TestProcessFailure(e2e.HeartbeatCloudTest):

    def kill_compute(self, cloud, host, why='with the service_down marker',
                     eng=None):
        """Kill ``host``'s nova-compute; wait until we disabled it.

        With ``eng``, also until the engine applied that write (its
        ``process_failure`` event): the write is a job, and its result is
        applied in a tick after Nova already shows it.
        """
        before = (len(eng.record.named(events.PROCESS_FAILURE, host))
                  if eng is not None else 0)
        cloud.nova.control.kill(host)
        rec.wait_for(lambda: (cloud.service(host).disabled_reason or
                              '').startswith('instanceha:service_down'),
                     60, '%s disabled %s' % (host, why))
        if eng is not None:
            rec.wait_for(lambda: len(eng.record.named(
                events.PROCESS_FAILURE, host)) > before, 10,
                'the disable of %s applied' % host)

    def test_dead_nova_compute_disabled_never_fenced_enabled_again(self):
        cloud, vm, _agents, eng = self.heartbeat_cloud(options={
            'instance_failure.enabled': False,
        })

        # nova-compute dies on host1; the host and its agent live on.
        self.kill_compute(cloud, 'host1', eng=eng)
        svc = cloud.service('host1')
        self.assertEqual('disabled', svc.status)
        self.assertFalse(svc.forced_down)
        self.assertEqual(1, len(eng.record.named(events.PROCESS_FAILURE,
                                                 'host1')))
        cycles = eng.engine.cycles
        rec.wait_for(lambda: eng.engine.cycles >= cycles + 3, 60,
                     'three more cycles')
        # Never fenced, never evacuated.
        self.assertEqual([], eng.record.named(events.HOST_STATE, 'host1'))
        self.assertEqual('on', cloud.bmc.power_state('host1'))
        self.assertEqual('host1', cloud.server(vm).host)
        self.assertEqual('ACTIVE', cloud.server(vm).status)

        # nova-compute comes back: enabled again, the marker gone.
        cloud.nova.control.revive('host1')
        rec.wait_for(lambda: cloud.service('host1').status == 'enabled',
                     60, 'host1 enabled again')
        self.assertIsNone(cloud.service('host1').disabled_reason)
        # The event follows Nova's answer to the enable: it may come a
        # moment after the test sees the service enabled.
        rec.wait_for(lambda: eng.record.named(events.PROCESS_RECOVERED,
                                              'host1'), 10,
                     'the recovery logged')
        self.assertEqual(1, len(eng.record.named(events.PROCESS_RECOVERED,
                                                 'host1')))
        self.assertEqual([], eng.record.named(events.HOST_STATE, 'host1'))

    def test_operator_enable_during_the_outage_wins(self):
        """Nova clears the marker on an enable: the outage is theirs now."""
        cloud, vm, _agents, eng = self.heartbeat_cloud(options={
            'instance_failure.enabled': False,
        })
        self.kill_compute(cloud, 'host1', eng=eng)

        # An operator wants it in service while nova-compute is down.
        cloud.client.services.enable(cloud.service('host1').id)
        self.assertIsNone(cloud.service('host1').disabled_reason)
        cycles = eng.engine.cycles
        rec.wait_for(lambda: eng.engine.cycles >= cycles + 3, 60,
                     'three more cycles')
        self.assertEqual('enabled', cloud.service('host1').status)
        self.assertEqual(1, len(eng.record.named(events.PROCESS_FAILURE,
                                                 'host1')))
        held = eng.record.named(events.PROCESS_FAILURE_HELD)
        self.assertIn('host1', held[-1]['hosts'])

        # Back, then a new outage: that one is ours again.
        cloud.nova.control.revive('host1')
        cloud.nova.wait_for_service('host1', 'up', client=cloud.client)
        cycles = eng.engine.cycles
        rec.wait_for(lambda: eng.engine.cycles >= cycles + 2, 60,
                     'two cycles with host1 up')
        self.kill_compute(cloud, 'host1', 'again for the new outage',
                          eng=eng)
        self.assertEqual(2, len(eng.record.named(events.PROCESS_FAILURE,
                                                 'host1')))
        self.assertEqual([], eng.record.named(events.HOST_STATE, 'host1'))
        self.assertEqual('host1', cloud.server(vm).host)


class TestInstanceFailure(rec.RecoveryTestBase):

    def actions(self, cloud, server_id):
        """Nova's instance actions, oldest first: (action, user_id)."""
        found = cloud.client.instance_action.list(server_id)
        found = sorted(found, key=lambda a: a.start_time)
        return [(a.action, a.user_id) for a in found]

    def crash(self, cloud, server_id):
        host = cloud.server(server_id).host
        cloud.nova.control.crash(server_id)
        cloud.nova.wait_for_server(server_id, 'SHUTOFF', client=cloud.client)
        return host

    def active_again(self, cloud, server_id, stops):
        """Wait until instanceha started it after crash number ``stops``."""
        rec.wait_for(lambda: cloud.server(server_id).status == 'ACTIVE'
                     and self.actions(cloud, server_id).count(
                         ('stop', None)) == stops, rec.RECOVERY_TIMEOUT,
                     'instance running again after crash %d' % stops)

    def test_restart_then_relocate_then_error_user_stop_left_alone(self):
        cloud = self.cloud(options={
            'instance_failure.max_restart': 1,
            'instance_failure.max_relocate': 1,
            'instance_failure.stable_time': 600,
        })
        vm, = cloud.boot('host1', name='crashy')
        mine, = cloud.boot('host2', name='users')
        eng = self.engine(cloud)
        rec.wait_for(lambda: eng.engine.cycles >= 1, 30, 'first cycle')

        # A user's own stop is never undone.
        cloud.stop_server(mine)
        action, user = self.actions(cloud, mine)[-1]
        self.assertEqual('stop', action)
        self.assertIsNotNone(user)

        # Crash 1: restarted in place, within two polls.
        self.assertEqual('host1', self.crash(cloud, vm))
        self.assertIn(('stop', None), self.actions(cloud, vm))
        self.active_again(cloud, vm, 1)
        self.assertEqual('host1', cloud.server(vm).host)
        crashed = eng.record.named(events.INSTANCE_CRASHED)
        self.assertEqual(['restart'], [c['next'] for c in crashed])

        # Crash 2: max_restart reached: relocated by the scheduler.
        self.crash(cloud, vm)
        self.active_again(cloud, vm, 2)
        self.assertNotEqual('host1', cloud.server(vm).host)
        moved = [a for a, _u in self.actions(cloud, vm)]
        self.assertIn('migrate', moved)
        self.assertIn('confirmResize', moved)

        # Crash 3: both limits reached: the error state. (Its events are
        # emitted when the tick applies the job's result, which may come
        # a tick after Nova shows the state the job wrote.)
        self.crash(cloud, vm)
        rec.wait_for(lambda: cloud.server(vm).status == 'ERROR',
                     rec.RECOVERY_TIMEOUT, 'error state')
        rec.wait_for(
            lambda: len(eng.record.named(events.INSTANCE_CRASHED)) >= 3,
            30, 'the third crash said')
        meta = cloud.client.servers.get(vm).metadata
        self.assertIn('instances clear crashy-host1', meta[irec.ERROR_KEY])
        self.assertEqual(
            ['restart', 'relocate', 'error'],
            [c['next'] for c in eng.record.named(events.INSTANCE_CRASHED)])
        starts = [a for a, u in self.actions(cloud, vm) if a == 'start']
        self.assertEqual(2, len(starts))  # one restart, one after the move

        # Nothing more is tried, and the user's instance stayed stopped.
        # (The instance loop reads every poll even while no full read
        # happens: four polls of 2 s.)
        time.sleep(4 * 2 + 1)
        self.assertEqual('ERROR', cloud.server(vm).status)
        self.assertEqual('SHUTOFF', cloud.server(mine).status)
        self.assertEqual([], [c for c in eng.record.named(
            events.INSTANCE_CRASHED) if c['server'] == 'users-host2'])

        # Only an operator clears it.
        out = rec.manage(cloud, 'instances', 'clear', vm)
        self.assertIn('counters removed', out)
        server = cloud.client.servers.get(vm)
        self.assertEqual('SHUTOFF', server.status)
        self.assertNotIn(irec.ERROR_KEY, server.metadata)
        self.assertNotIn(irec.KEY, server.metadata)
