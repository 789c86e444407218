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

"""instanceha-manage import rh-instanceha, through the real command.

The inputs in rh_instanceha/ were written for these tests from Red Hat
InstanceHA's documented formats. That devices of an imported file answer
``fencing validate`` is checked against BMC emulators in
tests/functional/test_import_rh.py.
"""

import os
import stat
import subprocess
import sys

import fixtures
import testtools

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'rh_instanceha')
SECRETS = ('ipmi-Pa55-compute-1', 'redfish-Pa55-compute-2',
           'bmh-T0ken-compute-3', 'keystone-Pa55-admin')


def manage(*args):
    return subprocess.run([sys.executable, '-m', 'instanceha.cmd.manage',
                           *args], capture_output=True, text=True,
                          timeout=120)


def import_rh(out, config=None, fencing=None, clouds=True,
              allow_unconverted=True):
    args = ['import', 'rh-instanceha',
            '--config', config or os.path.join(SAMPLES, 'config.yaml'),
            '--fencing', fencing or os.path.join(SAMPLES, 'fencing.yaml'),
            '--out', out] + (['--allow-unconverted'] if allow_unconverted
                             else [])
    if clouds:
        args += ['--clouds', os.path.join(SAMPLES, 'clouds.yaml'),
                 '--secure', os.path.join(SAMPLES, 'secure.yaml')]
    return manage(*args)


class TestImportRhInstanceHA(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.out = os.path.join(self.tmp, 'out')

    def mode(self, *parts):
        return stat.S_IMODE(os.stat(os.path.join(self.out, *parts)).st_mode)

    def read(self, *parts):
        with open(os.path.join(self.out, *parts)) as f:
            return f.read()

    def test_import_writes_valid_files_and_reports(self):
        # DELAY 10 cannot be converted: nothing is written unless the
        # operator accepts that.
        res = import_rh(self.out, allow_unconverted=False)
        self.assertEqual(2, res.returncode, res.stderr)
        self.assertIn('1 option(s) not converted: DELAY', res.stderr)
        self.assertIn('--allow-unconverted', res.stderr)
        self.assertIn('NOT CONVERTED (behaviour that is lost):\n  DELAY: '
                      'Red Hat InstanceHA waited 10 s', res.stdout)
        self.assertFalse(os.path.exists(self.out))

        res = import_rh(self.out)
        self.assertEqual(0, res.returncode, res.stderr)
        for secret in SECRETS:
            self.assertNotIn(secret, res.stdout + res.stderr)
            self.assertNotIn(secret, self.read('instanceha.conf'))
            self.assertNotIn(secret, self.read('fencing.yaml'))
        # Secrets: where they belong, readable by the owner only.
        self.assertEqual(0o600, self.mode('secrets.conf'))
        self.assertIn('password = keystone-Pa55-admin',
                      self.read('secrets.conf'))
        self.assertEqual(0o700, self.mode('secrets'))
        self.assertEqual('ipmi-Pa55-compute-1\n', self.read(
            'secrets', 'compute-1.example.com.password'))
        self.assertEqual(0o600, self.mode(
            'secrets', 'compute-1.example.com.password'))
        self.assertEqual('bmh-T0ken-compute-3\n', self.read(
            'secrets', 'compute-3.example.com.token'))
        # The report, option by option.
        out = res.stdout
        self.assertTrue(out.startswith('mapped:\n'), out)
        self.assertIn('  POLL: [DEFAULT] poll = 15', out)
        self.assertIn('POLL: 5 is outside 15-600', out)
        self.assertIn('SMART_EVACUATION: [DEFAULT] smart_evacuation = true',
                      out)
        self.assertIn('EVACUABLE_TAG: [tagging] evacuable_tag = ha-enabled',
                      out)
        self.assertIn('[detection] detectors = nova,kdump', out)
        self.assertIn('[reservation] strategy = reserved-hosts', out)
        self.assertIn('[tagging] all_when_none_tagged = true', out)
        self.assertIn('host compute-2.example.com: driver redfish', out)
        self.assertIn('\nchanged meaning:\n', out)
        self.assertIn('\nNOT CONVERTED (behaviour that is lost):\n  DELAY: ',
                      out)
        self.assertIn('\ndone another way (nothing to convert):\n'
                      '  HASH_INTERVAL: ', out)
        conf = self.read('instanceha.conf')
        self.assertIn('config_file = %s' % os.path.join(
            self.out, 'fencing.yaml'), conf)
        fencing = self.read('fencing.yaml')
        self.assertIn('address: https://192.0.2.22:8443', fencing)
        self.assertIn('system_id: System.Embedded.1', fencing)

        # What the service would start with: config validate, strictly
        # (no unknown option, no unsafe secret).
        res = manage('--config-file', os.path.join(self.out,
                                                   'instanceha.conf'),
                     '--config-file', os.path.join(self.out, 'secrets.conf'),
                     'config', 'validate', '--strict')
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('with 3 host(s)', res.stdout)

        # A second run never overwrites.
        before = self.read('secrets.conf')
        res = import_rh(self.out)
        self.assertEqual(2, res.returncode)
        self.assertIn('already exist', res.stderr)
        self.assertEqual(before, self.read('secrets.conf'))

    def test_without_clouds_the_nova_section_is_left_to_write(self):
        res = import_rh(self.out, clouds=False)
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('left for you to do:\n  clouds.yaml: not given',
                      res.stdout)
        self.assertNotIn('[nova]', self.read('instanceha.conf'))

    def test_unusable_inputs_are_named_and_nothing_written(self):
        bad = os.path.join(self.tmp, 'fencing.yaml')
        with open(bad, 'w') as f:
            f.write('hosts:\n  compute-1: {}\n')
        res = import_rh(self.out, fencing=bad)
        self.assertEqual(2, res.returncode)
        self.assertIn('fencing file %s' % bad, res.stderr)
        self.assertIn('FencingConfig', res.stderr)
        self.assertFalse(os.path.exists(self.out))
        missing = os.path.join(self.tmp, 'nope.yaml')
        res = import_rh(self.out, config=missing)
        self.assertEqual(2, res.returncode)
        self.assertIn(missing, res.stderr)
