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

import os
import subprocess
import sys

import fixtures
import testtools


def run(*args, conf_text=None, tmp=None):
    cmd = list(args)
    if conf_text is not None:
        path = os.path.join(tmp, 'test.conf')
        with open(path, 'w') as f:
            f.write(conf_text)
        cmd[1:1] = ['--config-file', path]
    return subprocess.run([sys.executable, '-m'] + cmd, capture_output=True,
                          text=True, timeout=60)


class TestConsoleScripts(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def test_help(self):
        for mod in ('instanceha.cmd.service', 'instanceha.cmd.manage'):
            res = run(mod, '--help')
            self.assertEqual(0, res.returncode, res.stderr)
            self.assertIn('--config-file', res.stdout)

    def test_bad_threshold_stops_service(self):
        res = run('instanceha.cmd.service', conf_text='[DEFAULT]\n'
                  'threshold = 150\n', tmp=self.tmp)
        self.assertNotEqual(0, res.returncode)
        self.assertIn('[DEFAULT] threshold', res.stderr)

    def test_unknown_driver_stops_service(self):
        res = run('instanceha.cmd.service', conf_text='[detection]\n'
                  'detectors = nvoa\n', tmp=self.tmp)
        self.assertNotEqual(0, res.returncode)
        self.assertIn('[detection] detectors', res.stderr)
        self.assertIn("'nvoa'", res.stderr)

    def test_drivers_list(self):
        res = run('instanceha.cmd.manage', 'drivers', 'list')
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('instanceha.fencing', res.stdout)
        self.assertIn('noop', res.stdout)

    def test_config_validate_reads_the_fencing_file(self):
        fencing = os.path.join(self.tmp, 'fencing.yaml')
        with open(fencing, 'w') as f:
            f.write('hosts:\n  compute-1:\n    driver: ipmi\n'
                    '    adress: 192.0.2.1\n')
        res = run('instanceha.cmd.manage', 'config', 'validate',
                  conf_text='[fencing]\nconfig_file = %s\n' % fencing,
                  tmp=self.tmp)
        self.assertEqual(2, res.returncode, res.stdout)
        self.assertIn('compute-1', res.stderr)
        self.assertIn("'adress'", res.stderr)
