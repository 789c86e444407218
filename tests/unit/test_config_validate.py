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

"""config validate runs the service's start-up checks, and says so.

Through the real commands in fresh processes: what ``config validate``
refuses the service refuses, with the same words; what it accepts passes
the service's checks. No network is involved in either.
"""

import importlib.util
import os

import fixtures
import testtools

from tests.unit import test_cmd

#: A [nova] section keystoneauth accepts without reaching anything.
NOVA = ('[nova]\nauth_type = password\nauth_url = http://192.0.2.1:5000/v3\n'
        'username = admin\npassword = %s\nproject_name = admin\n'
        'user_domain_name = Default\nproject_domain_name = Default\n')
PASSWORD = 'S3cret-never-printed'


class TestConfigValidate(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.secret = self.write('bmc.pass', 'bmc-password\n', mode=0o600)
        self.fencing = self.write('fencing.yaml', (
            'hosts:\n  compute-1:\n    driver: ipmi\n'
            '    address: 192.0.2.11\n    username: admin\n'
            '    password_file: bmc.pass\n'))

    def write(self, name, text, mode=0o600):
        path = os.path.join(self.tmp, name)
        with open(path, 'w') as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def conf(self, extra='', nova=True):
        text = (NOVA % PASSWORD if nova else '') + (
            '[coordination]\nbackend_url = file://%s/coord\n'
            '[fencing]\nconfig_file = %s\n' % (self.tmp, self.fencing))
        return text + extra

    def validate(self, conf_text, *args, conf_mode=0o600):
        res = test_cmd.run('instanceha.cmd.manage', 'config', 'validate',
                           *args, conf_text=conf_text, tmp=self.tmp,
                           conf_mode=conf_mode)
        self.assertNotIn(PASSWORD, res.stdout + res.stderr)
        return res

    def test_good_configuration_is_ok(self):
        res = self.validate(self.conf())
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('configuration OK', res.stdout)
        self.assertIn('with 1 host(s)', res.stdout)
        self.assertNotIn('instanceha-manage:', res.stderr)

    def test_missing_nova_auth_fails_like_the_service(self):
        text = self.conf(nova=False)
        res = self.validate(text)
        self.assertEqual(2, res.returncode, res.stdout)
        self.assertIn('[nova] auth_type is not set', res.stderr)
        service = test_cmd.run('instanceha.cmd.service', conf_text=text,
                               tmp=self.tmp)
        self.assertEqual(2, service.returncode, service.stderr)
        self.assertIn('[nova] auth_type is not set', service.stderr)

    def test_zookeeper_without_kazoo(self):
        if importlib.util.find_spec('kazoo') is not None:
            self.skipTest('kazoo is installed here')
        text = self.conf('[coordination]\nbackend_url = '
                         'zookeeper://192.0.2.1:2181\n')
        res = self.validate(text)
        self.assertEqual(2, res.returncode, res.stdout)
        self.assertIn('[coordination] backend_url', res.stderr)
        self.assertIn('kazoo', res.stderr)
        # No pause can be kept there: config validate says so as start-up
        # does.
        self.assertIn('this service cannot be paused', res.stderr)
        service = test_cmd.run('instanceha.cmd.service', conf_text=text,
                               tmp=self.tmp)
        self.assertEqual(2, service.returncode)
        self.assertIn('kazoo', service.stderr)
        self.assertIn('this service cannot be paused', service.stderr)

    def test_unknown_scheme_named(self):
        res = self.validate(self.conf(
            '[coordination]\nbackend_url = zookeper://192.0.2.1:2181\n'))
        self.assertEqual(2, res.returncode)
        self.assertIn("unknown backend 'zookeper'", res.stderr)

    def test_every_error_is_reported_at_once(self):
        res = self.validate(self.conf(
            '[coordination]\nbackend_url = nope://x\n'
            '[gates]\nenabled = thresold\n', nova=False))
        self.assertEqual(2, res.returncode)
        for culprit in ('[nova] auth_type', "'nope'", 'thresold'):
            self.assertIn(culprit, res.stderr)

    def test_unknown_option_and_group_did_you_mean(self):
        res = self.validate(self.conf(
            '[DEFAULT]\npol = 10\n[fencng]\nconfig_file = x\n'
            '[nova]\nregion_nme = RegionOne\n'))
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('unknown option [DEFAULT] pol', res.stderr)
        self.assertIn('did you mean poll?', res.stderr)
        self.assertIn('unknown group [fencng]', res.stderr)
        self.assertIn('did you mean [fencing]?', res.stderr)
        self.assertIn('did you mean region_name?', res.stderr)
        self.assertIn('configuration OK (3 warning(s))', res.stdout)
        strict = self.validate(self.conf('[DEFAULT]\npol = 10\n'),
                               '--strict')
        self.assertEqual(2, strict.returncode)
        self.assertIn('error: ', strict.stderr)
        self.assertIn('pol', strict.stderr)

    def test_known_options_are_not_reported(self):
        # Our options, oslo.log's, keystoneauth's: nothing to say.
        res = self.validate(self.conf(
            '[DEFAULT]\ndebug = true\nlog_file = %s/x.log\npoll = 10\n'
            '[nova]\nregion_name = RegionOne\ntimeout = 30\n' % self.tmp))
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertNotIn('instanceha-manage:', res.stderr)

    def test_option_in_the_wrong_group(self):
        res = self.validate(self.conf('[DEFAULT]\nbackend_url = x\n'))
        self.assertIn('unknown option [DEFAULT] backend_url', res.stderr)
        self.assertIn('it belongs in [coordination]', res.stderr)

    def test_inline_fencing_secret_is_a_warning(self):
        self.write('fencing.yaml', (
            'hosts:\n  compute-1:\n    driver: ipmi\n'
            '    address: 192.0.2.11\n    username: admin\n'
            '    password: %s\n' % PASSWORD))
        res = self.validate(self.conf())
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('warning:', res.stderr)
        self.assertIn("'password'", res.stderr)
        self.assertIn("'password_file'", res.stderr)
        self.assertIn('compute-1', res.stderr)

    def test_every_secret_is_checked_the_same_way(self):
        # [nova] password in a config file others can read.
        res = self.validate(self.conf(), conf_mode=0o644)
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn('setting [nova] password) is readable by group or '
                      'others (mode 0644)', res.stderr)
        self.assertEqual(2, self.validate(self.conf(), '--strict',
                                          conf_mode=0o644).returncode)
        # The heartbeat key, once the heartbeat detector reads it.
        key = self.write('hb.key', 'k' * 32 + '\n', mode=0o644)
        heartbeat = ('[detection]\ndetectors = nova,heartbeat\n'
                     '[heartbeat]\nkey_file = %s\n' % key)
        res = self.validate(self.conf(heartbeat), '--strict')
        self.assertEqual(2, res.returncode, res.stderr)
        self.assertIn('%s (secret file of [heartbeat] key_file) is readable'
                      % key, res.stderr)
        os.chmod(key, 0o600)
        res = self.validate(self.conf(heartbeat), '--strict')
        self.assertEqual(0, res.returncode, res.stderr)

    def test_group_names_in_any_case_as_oslo_config_reads_them(self):
        res = self.validate(self.conf('[Coordination]\nlease_time = 20\n'
                                      '[DEFAULT]\npoll = 30\n'),
                            '--strict')
        self.assertEqual(0, res.returncode, res.stderr)
        res = self.validate(self.conf('[Coordination]\nlease_tme = 20\n'))
        self.assertIn('unknown option [Coordination] lease_tme', res.stderr)

    def test_secret_file_readable_by_others_is_a_warning(self):
        os.chmod(self.secret, 0o644)
        res = self.validate(self.conf())
        self.assertEqual(0, res.returncode, res.stderr)
        self.assertIn(self.secret, res.stderr)
        self.assertIn('0644', res.stderr)
        self.assertEqual(2, self.validate(self.conf(), '--strict')
                         .returncode)
