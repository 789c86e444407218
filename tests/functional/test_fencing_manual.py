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

"""Fencing by hand, as an operator runs it, against real peers.

``instanceha-manage fencing status|off|on|validate`` run as real
processes; the devices are pyghmi IPMI BMCs (driven by the real
ipmitool) and a sushy Redfish emulator, and the recovery marker is read
from the real Nova API.
"""

import datetime
import os
import subprocess
import sys

from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import states
from tests.functional import peers
from tests.functional import test_fencing
from tests.functional import test_nova_cloud as nova_helpers

WRONG = test_fencing.WRONG


class TestFencingByHand(test_fencing.IpmiTestBase):

    def setUp(self):
        super().setUp()
        self.nova = self.useFixture(peers.NovaPeer(hosts=3))
        self.redfish = self.useFixture(peers.RedfishPeer(
            hosts=3, power_delay=(0, 0)))
        self.redfish_pw = self.secret_file('redfish.pw',
                                           self.redfish.password)
        self.fencing_file({
            'host1': self.ipmi('host1'),
            # Level 1 has a wrong password; level 2 works.
            'host2': {'levels': [
                self.ipmi('host2', password_file=self.bad),
                {'driver': 'redfish', 'address': self.redfish.url,
                 'system_id': self.redfish.systems['host2'],
                 'username': self.redfish.username,
                 'password_file': self.redfish_pw}]},
            'host3.example.com': self.ipmi('host3'),
        })
        self.conf_path = os.path.join(self.tmp, 'instanceha.conf')
        with open(self.conf_path, 'w') as f:
            f.write('[fencing]\nconfig_file = %s\ndevice_timeout = 20\n'
                    'poll_interval = 0.2\n%s' % (
                        os.path.join(self.tmp, 'fencing.yaml'),
                        nova_helpers.conf_text(self.nova)))
        self.secrets = [WRONG, self.bmcs.password, self.redfish.password]

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, no_proxy='127.0.0.1', NO_PROXY='127.0.0.1')
        with test_fencing.ProcessWatcher(self.secrets) as watcher:
            proc = subprocess.run(
                [sys.executable, '-m', 'instanceha.cmd.manage',
                 '--config-file', self.conf_path, 'fencing', *args],
                cwd=test_fencing.ROOT, capture_output=True, text=True,
                timeout=180, stdin=subprocess.DEVNULL, env=env)
        self.assertEqual([], watcher.leaks)
        self.assertNoSecret(proc.stdout + proc.stderr, *self.secrets)
        return proc

    def test_status_off_on_through_the_levels(self):
        proc = self.manage('status', 'host1')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('ipmi (ipmi 127.0.0.1:%d): on'
                      % self.bmcs.ports['host1'], proc.stdout)
        self.assertIn('power: on (level 1 reports on)', proc.stdout)

        # No terminal and no --yes: refused, nothing powered off.
        proc = self.manage('off', 'host1')
        self.assertEqual(3, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('needs a confirmation; add --yes', proc.stdout)
        self.assertEqual('on', self.bmcs.power_state('host1'))

        proc = self.manage('off', 'host1', '--yes')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('host host1 powered off by fencing level 1 (ipmi)',
                      proc.stdout)
        self.assertEqual('off', self.bmcs.power_state('host1'))
        proc = self.manage('status', 'host1')
        self.assertIn('power: off (level 1 reports off)', proc.stdout)

        proc = self.manage('on', 'host1', '--yes')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('host host1 powered on by fencing level 1',
                      proc.stdout)
        self.assertEqual('on', self.bmcs.power_state('host1'))

    def test_broken_first_level_is_degraded_and_second_level_fences(self):
        proc = self.manage('validate')
        self.assertEqual(3, proc.returncode, proc.stdout + proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual('host1: OK (level 1: ipmi on)', lines[0])
        self.assertTrue(lines[1].startswith(
            'host2: DEGRADED: level 1 broken, level 2 works (level 2: '
            'redfish on): level 1 device ipmi (ipmi 127.0.0.1:%d): '
            'authentication failed' % self.bmcs.ports['host2']), lines[1])
        self.assertEqual('host3.example.com: OK (level 1: ipmi on)',
                         lines[2])

        proc = self.manage('status', 'host2')
        self.assertEqual(1, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('FAILED: authentication failed', proc.stdout)
        self.assertIn('power: on (level 2 reports on)', proc.stdout)

        proc = self.manage('off', 'host2', '--yes')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('host host2 powered off by fencing level 2 (redfish)',
                      proc.stdout)
        self.assertEqual('Off', self.redfish.power_state('host2'))
        self.assertEqual('on', self.bmcs.power_state('host2'))

        # Every level broken: FAILED, exit status 1.
        self.bmcs.set_mode('host1', 'silent')
        proc = self.manage('validate', '--host', 'host1')
        self.assertEqual(1, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('host1: FAILED: level 1 device ipmi', proc.stdout)

    def test_refused_while_instanceha_holds_the_host(self):
        cloud = nova_helpers.make_cloud(self, self.nova)
        now = datetime.datetime.now(datetime.timezone.utc).replace(
            microsecond=0)
        mark = marker.Marker(state=states.HostState.EVACUATING, when=now,
                             fenced_at=now)
        svc = cloud.snapshot().service('host3')
        cloud.update_service(svc, status=model.DISABLED, forced_down=True,
                             disabled_reason=mark.render())
        for action in ('off', 'on'):
            # The entry is host3.example.com; Nova's host is host3.
            proc = self.manage(action, 'host3', '--yes')
            self.assertEqual(3, proc.returncode, proc.stdout + proc.stderr)
            self.assertIn('refused: instanceha holds host host3 in a '
                          'recovery (state evacuating since %s)'
                          % marker.format_ts(now), proc.stdout)
        self.assertEqual('on', self.bmcs.power_state('host3'))
        # status changes nothing: it is not refused.
        proc = self.manage('status', 'host3')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)

        # Handed back to the operator (FAILED): fencing by hand is allowed.
        failed = mark.replace(state=states.HostState.FAILED)
        cloud.update_service(svc, status=model.DISABLED,
                             disabled_reason=failed.render())
        proc = self.manage('off', 'host3', '--yes')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('host3: host3 failed; powering it off', proc.stdout)
        self.assertEqual('off', self.bmcs.power_state('host3'))
