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
import tempfile

import fixtures
from oslo_config import cfg
import testtools

from instanceha import conf as ha_conf
from instanceha.conf import evacuation
from instanceha import exceptions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def load(text: str) -> cfg.ConfigOpts:
    """A fresh ConfigOpts parsed from ``text`` as a config file."""
    fd, path = tempfile.mkstemp(suffix='.conf')
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    conf = cfg.ConfigOpts()
    ha_conf.parse_args(['--config-file', path], conf,
                       default_config_files=[])
    os.unlink(path)
    return conf


class TestOptions(testtools.TestCase):

    def test_seed_defaults(self):
        conf = load('')
        ha_conf.validate(conf)
        self.assertEqual((45, 30, 50, 4), (conf.poll, conf.delta,
                                           conf.threshold, conf.workers))
        self.assertFalse(conf.disabled)
        self.assertFalse(conf.leave_disabled)
        self.assertFalse(conf.force_enable)

    def test_out_of_range_is_rejected_not_clamped(self):
        conf = load('[DEFAULT]\nthreshold = 150\n')
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('[DEFAULT] threshold', str(exc))

    def test_malformed_value_names_option(self):
        conf = load('[DEFAULT]\npoll = soon\n')
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('[DEFAULT] poll', str(exc))

    def test_smart_evacuation_shorthand(self):
        self.assertEqual('fire-and-forget', evacuation.strategy_name(
            load('')))
        self.assertEqual('smart', evacuation.strategy_name(
            load('[DEFAULT]\nsmart_evacuation = true\n')))

    def test_smart_evacuation_contradiction(self):
        conf = load('[DEFAULT]\nsmart_evacuation = true\n'
                    '[evacuation]\nstrategy = fire-and-forget\n')
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('smart_evacuation', str(exc))

    def test_nova_uses_keystoneauth_options(self):
        conf = load('[nova]\nauth_type = password\nregion_name = R1\n')
        self.assertEqual('password', conf.nova.auth_type)
        self.assertEqual('R1', conf.nova.region_name)
        self.assertEqual('compute', conf.nova.service_type)


class TestSampleConfig(testtools.TestCase):

    def test_committed_sample_is_current(self):
        out = os.path.join(self.useFixture(
            fixtures.TempDir()).path, 'sample.conf')
        subprocess.run(
            [sys.executable, '-m', 'oslo_config.generator', '--config-file',
             os.path.join(ROOT, 'etc/instanceha/'
                                'instanceha-config-generator.conf'),
             '--output-file', out], check=True, cwd=ROOT)
        with open(out) as f:
            fresh = f.read()
        with open(os.path.join(ROOT, 'etc/instanceha/'
                                     'instanceha.conf.sample')) as f:
            committed = f.read()
        self.assertEqual(fresh, committed,
                         'etc/instanceha/instanceha.conf.sample is stale: '
                         'run "tox -e genconfig" and commit the result')
