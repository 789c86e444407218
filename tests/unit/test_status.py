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

"""instanceha-status upgrade check without a cloud (the real command).

Against a real nova and keystone: tests/functional/test_status.py.
"""

import json
import os
import socket
import subprocess
import sys

import fixtures
import testtools


class TestUpgradeCheckOffline(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        # A bound port nobody listens on: Nova is unreachable.
        sock = socket.socket()
        self.addCleanup(sock.close)
        sock.bind(('127.0.0.1', 0))
        self.nova = 'http://127.0.0.1:%d/v2.1' % sock.getsockname()[1]
        with open(os.path.join(self.tmp, 'bmc.pass'), 'w') as f:
            f.write('x' * 8)
        os.chmod(os.path.join(self.tmp, 'bmc.pass'), 0o600)
        self.fencing = os.path.join(self.tmp, 'fencing.yaml')
        with open(self.fencing, 'w') as f:
            f.write('hosts:\n  compute-1:\n    driver: ipmi\n'
                    '    address: 192.0.2.11\n    username: admin\n'
                    '    password_file: bmc.pass\n')

    def check(self, extra=''):
        path = os.path.join(self.tmp, 'test.conf')
        with open(path, 'w') as f:
            f.write('[nova]\nauth_type = none\nendpoint_override = %s\n'
                    '[coordination]\nbackend_url = file://%s/coord\n'
                    '[fencing]\nconfig_file = %s\n%s'
                    % (self.nova, self.tmp, self.fencing, extra))
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.status', '--config-file',
             path, 'upgrade', 'check', '--json'],
            capture_output=True, text=True, timeout=120)
        self.assertNotEqual(255, proc.returncode, proc.stdout + proc.stderr)
        checks = json.loads(proc.stdout)['checks']
        return proc.returncode, {c['check']: (c['result'], c['details'])
                                 for c in checks}

    def test_unreachable_nova_fails_the_rest_is_checked(self):
        code, results = self.check()
        self.assertEqual(2, code, results)
        self.assertEqual(0, results['Configuration'][0], results)
        self.assertEqual(2, results['Nova API'][0])
        self.assertIn('cannot connect', results['Nova API'][1])
        self.assertEqual(0, results['Coordination backend'][0], results)
        # The file is valid; its coverage needs Nova.
        self.assertEqual(1, results['Fencing'][0], results)
        self.assertIn('coverage not checked', results['Fencing'][1])
        self.assertEqual((0, 'heartbeat detector off'),
                         results['Heartbeat key'])
        # A check changes nothing: the service creates the directory.
        self.assertFalse(os.path.exists(os.path.join(self.tmp, 'coord')))

    def test_configuration_problems_are_failures(self):
        code, results = self.check(
            '[DEFAULT]\npol = 10\n[coordination]\n'
            'backend_url = nope://x\n')
        self.assertEqual(2, code)
        code_, details = results['Configuration']
        self.assertEqual(2, code_)
        self.assertIn("'nope'", details)
        self.assertIn('did you mean poll?', details)
        self.assertEqual(2, results['Coordination backend'][0])

    def test_heartbeat_key_missing(self):
        key = os.path.join(self.tmp, 'hb.key')
        code, results = self.check(
            '[detection]\ndetectors = nova,heartbeat\n'
            '[heartbeat]\nkey_file = %s\n' % key)
        self.assertEqual(2, results['Heartbeat key'][0])
        self.assertIn(key, results['Heartbeat key'][1])
        with open(key, 'w') as f:
            f.write('k' * 32)
        os.chmod(key, 0o600)
        code, results = self.check(
            '[detection]\ndetectors = nova,heartbeat\n'
            '[heartbeat]\nkey_file = %s\n' % key)
        self.assertEqual(0, results['Heartbeat key'][0], results)
