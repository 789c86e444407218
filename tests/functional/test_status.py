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

"""instanceha-status upgrade check against a real keystone and nova."""

import json
import os
import subprocess
import sys

import fixtures
import testtools

from tests.functional import peers
from tests.functional import test_nova_cloud as helpers


class TestUpgradeCheck(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.keystone = self.useFixture(peers.KeystonePeer())
        self.peer = self.useFixture(peers.NovaPeer(hosts=2,
                                                   keystone=self.keystone))
        secret = os.path.join(self.tmp, 'bmc.pass')
        with open(secret, 'w') as f:
            f.write('bmc-password\n')
        os.chmod(secret, 0o600)

    def fencing(self, hosts):
        path = os.path.join(self.tmp, 'fencing.yaml')
        with open(path, 'w') as f:
            f.write('hosts:\n')
            for n, host in enumerate(hosts, 1):
                f.write('  %s:\n    driver: ipmi\n    address: 192.0.2.%d\n'
                        '    username: admin\n    password_file: bmc.pass\n'
                        % (host, n))
        return path

    def check(self, password=None, hosts=('host1', 'host2'), extra=''):
        text = helpers.conf_text(self.peer, self.keystone, password) + (
            '[coordination]\nbackend_url = file://%s/coord\n'
            '[fencing]\nconfig_file = %s\n' % (self.tmp,
                                               self.fencing(hosts))) + extra
        path = helpers.write_conf(self, text)
        env = dict(os.environ, no_proxy='127.0.0.1', NO_PROXY='127.0.0.1')
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.status', '--config-file',
             path, 'upgrade', 'check', '--json'],
            capture_output=True, text=True, timeout=180, env=env)
        self.assertNotEqual(255, proc.returncode, proc.stdout + proc.stderr)
        results = {c['check']: (c['result'], c['details'] or '')
                   for c in json.loads(proc.stdout)['checks']}
        return proc, results

    def test_success_wrong_password_and_uncovered_host(self):
        self.peer.create_servers(1, host='host1')
        proc, results = self.check()
        self.assertEqual(0, proc.returncode, results)
        self.assertEqual({0}, {code for code, _ in results.values()},
                         results)
        self.assertIn('instanceha uses 2.94', results['Nova API'][1])
        self.assertIn('admin role', results['Nova API'][1])

        # A wrong password: Failure (2), and never the password.
        wrong = 'Wr0ng-pa55word-%d' % os.getpid()
        proc, results = self.check(password=wrong)
        self.assertEqual(2, proc.returncode, results)
        code, details = results['Nova API']
        self.assertEqual(2, code)
        self.assertIn('keystone refused the credentials', details)
        self.assertNotIn(wrong, proc.stdout + proc.stderr)

        # host1 runs an instance and has no fencing entry: Failure.
        proc, results = self.check(hosts=('host2',))
        self.assertEqual(2, proc.returncode, results)
        code, details = results['Fencing']
        self.assertEqual(2, code)
        self.assertIn('host1 (1 instance(s))', details)
        self.assertNotIn('host2 (', details)

        # The heartbeat detector on without its key: Failure naming it.
        proc, results = self.check(extra=(
            '[detection]\ndetectors = nova,heartbeat\n'
            '[heartbeat]\nkey_file = %s/none.key\n' % self.tmp))
        code, details = results['Heartbeat key']
        self.assertEqual(2, code, details)
        self.assertIn('none.key', details)
