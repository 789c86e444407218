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

import json
import os
import socket
import subprocess
import sys

import fixtures
import testtools


def run(*args, conf_text=None, tmp=None, conf_mode=0o600):
    cmd = list(args)
    if conf_text is not None:
        path = os.path.join(tmp, 'test.conf')
        with open(path, 'w') as f:
            f.write(conf_text)
        os.chmod(path, conf_mode)
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


def closed_port():
    """A local TCP port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class TestJsonOutputWhenSomethingFails(testtools.TestCase):
    """Every --json/--format json command prints JSON, logs on stderr."""

    COMMANDS = [
        ('instanceha.cmd.manage', 'hosts', 'list', '--json'),
        ('instanceha.cmd.manage', 'instances', 'list', '--json'),
        ('instanceha.cmd.manage', 'maintenance', 'status', 'compute-1',
         '--json'),
        ('instanceha.cmd.manage', 'hosts', 'history', 'compute-1',
         '--format', 'json'),
        ('instanceha.cmd.manage', 'instances', 'history', 'server-1',
         '--format', 'json'),
        ('instanceha.cmd.manage', 'plan', '--format', 'json'),
        ('instanceha.cmd.manage', 'status', '--format', 'json'),
        ('instanceha.cmd.manage', 'hosts', 'list', '--json', '--no-such'),
        ('instanceha.cmd.status', 'upgrade', 'check', '--json'),
    ]

    def test_unreachable_nova_and_backend(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        conf = os.path.join(tmp, 'test.conf')
        with open(conf, 'w') as f:
            f.write('[nova]\nauth_type = password\n'
                    'auth_url = http://127.0.0.1:%d/v3\nusername = admin\n'
                    'password = Not-a-Secret-1\nproject_name = admin\n'
                    'user_domain_name = Default\n'
                    'project_domain_name = Default\n'
                    '[coordination]\nbackend_url = redis://127.0.0.1:%d\n'
                    % (closed_port(), closed_port()))
        procs = [(cmd, subprocess.Popen(
            [sys.executable, '-m', cmd[0], '--config-file', conf, *cmd[1:]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for cmd in self.COMMANDS]
        errs = []
        for cmd, proc in procs:
            out, err = proc.communicate(timeout=180)
            errs.append(err)
            self.assertNotEqual(0, proc.returncode, (cmd, out, err))
            try:
                doc = json.loads(out)
            except ValueError:
                self.fail('%s: stdout is not JSON: %r (stderr %r)'
                          % (' '.join(cmd), out, err))
            if cmd[0] == 'instanceha.cmd.manage':
                self.assertEqual(proc.returncode, doc['exit_code'], cmd)
                # The same message on stderr (argparse's own for a bad
                # command line).
                self.assertIn(doc['error'] if '--no-such' not in cmd
                              else 'unrecognized arguments', err)
            else:
                self.assertEqual(2, max(c['result'] for c in doc['checks']))
            # Log lines (keystoneauth's warning) go to stderr only.
            self.assertNotIn('WARNING', out, cmd)
            self.assertNotIn('Not-a-Secret-1', out + err, cmd)
        # ... where keystoneauth's warning about the refused connection is.
        self.assertIn('WARNING keystoneauth', errs[0])


class TestTable(testtools.TestCase):

    def test_one_formatter_for_every_table(self):
        from instanceha.cmd import common

        text = common.table(('HOST', 'N', 'NOTE'),
                            [('compute-10', 3, None), ('c1', 12, 'late')],
                            right=(1,))
        self.assertEqual('HOST         N  NOTE\n'
                         'compute-10   3  -\n'
                         'c1          12  late', text)
