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

"""Clean shutdowns announced by a real agent to the production service.

Real parts: nova (NovaPeer), IPMI BMCs driven by the real ipmitool
(IpmiBmcPeer), the production engine, environment and shutdown handler
(:mod:`instanceha.daemon.service`, ticked with its observers), and real
``instanceha-heartbeat-agent`` processes stopped with SIGTERM as systemd
stops them. What systemd's job list says is given to the agent with
``--shutdown-jobs-command`` (there is no systemd shutting down here); the
agent parses it as it parses ``systemctl list-jobs``.
"""

import json
import os

from instanceha.engine import events
from instanceha.engine import states
from tests.functional import test_heartbeat_e2e as e2e
from tests.functional import test_recovery as rec

S = states.HostState

REBOOT_JOBS = 'echo 1503 reboot.target start waiting'
POWEROFF_JOBS = 'echo 1503 poweroff.target start waiting'


class TestShutdownEndToEnd(e2e.HeartbeatCloudTest):

    def start(self, jobs, **options):
        """host1's agent announces with ``jobs``; the others never do."""
        return self.heartbeat_cloud(options, agent_extra=lambda h: [
            '--shutdown-jobs-command', jobs, '--answer-timeout', '8']
            if h == 'host1' else ['--announce', 'never'])

    def agent_log(self, host):
        with open(os.path.join(self.dir, 'agent-%s.log' % host)) as f:
            return f.read()

    def bmc_power_lines(self, cloud, host):
        """What the BMC emulator logged of power changes of ``host``."""
        with open(cloud.bmc.process.log_path, errors='replace') as f:
            return [line for line in f if ' %s: power ' % host in line]

    def test_conditional_reboot_is_frozen_and_back_in_service(self):
        cloud, vm, agents, eng = self.start(REBOOT_JOBS, **{
            'shutdown.return_timeout': 120})
        power = self.bmc_power_lines(cloud, 'host1')

        # reboot on host1: systemd stops the agent first, then the rest.
        self.assertEqual(0, self.stop(agents['host1']))
        self.assertIn('answered the reboot announcement: noted',
                      self.agent_log('host1'))
        cloud.nova.control.kill('host1')
        rec.wait_for(lambda: (cloud.service('host1').disabled_reason or '')
                     .startswith('instanceha-shutdown '), 60,
                     'host1 frozen in Nova')
        cloud.nova.wait_for_service('host1', 'down', client=cloud.client)
        cycles = eng.engine.cycles
        rec.wait_for(lambda: eng.engine.cycles >= cycles + 3, 60,
                     'three more cycles with host1 down')
        announced, = eng.record.named(events.SHUTDOWN_ANNOUNCED, 'host1')
        self.assertEqual({'kind': 'reboot', 'policy': 'conditional',
                          'origin': '[shutdown] policy',
                          'action': 'freeze'}, announced)
        self.assertEqual([S.FROZEN.value], [
            d['new'] for d in eng.record.named(events.HOST_STATE, 'host1')])
        self.assertIsNone(eng.state('host1'))
        self.assertFalse(cloud.service('host1').forced_down)
        self.assertEqual('host1', cloud.server(vm).host)
        self.assertEqual('on', cloud.bmc.power_state('host1'))
        row, = [r for r in json.loads(rec.manage(
            cloud, 'hosts', 'list', '--json')) if r['host'] == 'host1']
        self.assertEqual('frozen', row['instanceha'])
        self.assertIn('announced a reboot', row['note'])

        # Back: nova-compute starts, the agent starts (a new boot id).
        cloud.nova.control.revive('host1')
        self.agent('host1', self.collectors, key=self.host_key('host1'),
                   interval=0.3, extra=['--announce', 'never'])
        rec.wait_for(lambda: cloud.recovered('host1'), rec.RECOVERY_TIMEOUT,
                     'host1 back in service')
        rec.wait_for(lambda: eng.record.named(events.SHUTDOWN_RETURNED,
                                              'host1'), 30,
                     'the return logged')
        back, = eng.record.named(events.SHUTDOWN_RETURNED, 'host1')
        self.assertTrue(back['enabled'])
        self.assertEqual('host1', cloud.server(vm).host)
        self.assertEqual([], [e for e in eng.record.named(events.HOST_STATE,
                                                          'host1')
                              if e['new'] == S.SUSPECT.value])
        self.assertEqual(power, self.bmc_power_lines(cloud, 'host1'))

    def test_failover_poweroff_rebuilt_elsewhere_without_power_cycle(self):
        cloud, vm, agents, eng = self.start(POWEROFF_JOBS, **{
            'fence_retry_interval': 2})
        power = self.bmc_power_lines(cloud, 'host1')

        # poweroff on host1: the agent announces it, then the host (its
        # nova-compute) goes down and its BMC reads off.
        self.assertEqual(0, self.stop(agents['host1']))
        self.assertIn('answered the poweroff announcement: noted',
                      self.agent_log('host1'))
        cloud.nova.control.kill('host1')
        cloud.bmc.set_power('host1', 'off')
        rec.wait_for(lambda: cloud.server(vm).host not in (None, 'host1')
                     and cloud.server(vm).status == 'ACTIVE',
                     rec.RECOVERY_TIMEOUT, 'vm rebuilt on another host')
        rec.wait_for(lambda: eng.state('host1') is S.WAITING_UP,
                     rec.RECOVERY_TIMEOUT, 'host1 left off, waiting for it')
        announced, = eng.record.named(events.SHUTDOWN_ANNOUNCED, 'host1')
        self.assertEqual('failover', announced['action'])
        fenced = [d for d in eng.record.named(events.HOST_STATE, 'host1')
                  if d['new'] == S.FENCED.value]
        self.assertEqual((), fenced[-1]['devices'])  # read, not switched
        # Never switched: not off (it was off), not on again afterwards.
        self.assertEqual('off', cloud.bmc.power_state('host1'))
        self.assertEqual(power, self.bmc_power_lines(cloud, 'host1'))
        # What a copy resuming the recovery needs to leave it off is in
        # Nova's marker, and nothing says it was powered on.
        self.assertIn(' shutdown=poweroff', cloud.service(
            'host1').disabled_reason)
        self.assertNotIn(S.POWERING_ON.value, [
            d['new'] for d in eng.record.named(events.HOST_STATE, 'host1')])
