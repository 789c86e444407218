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
from oslo_config import cfg
import testtools

from instanceha import exceptions
from instanceha.plugins import base
from instanceha.plugins import loader


class TestLoader(testtools.TestCase):

    def test_every_namespace_is_listable(self):
        for namespace in loader.NAMESPACES:
            rows = loader.describe(namespace)
            self.assertIsInstance(rows, list)
            for name, description in rows:
                self.assertNotIn('BROKEN', description, name)

    def test_unknown_driver_names_option_value_and_choices(self):
        exc = self.assertRaises(
            exceptions.DriverLoadError, loader.driver_class,
            'instanceha.fencing', 'ipmj', '[fencing] driver')
        msg = str(exc)
        self.assertIn('[fencing] driver', msg)
        self.assertIn("'ipmj'", msg)
        self.assertIn('noop', msg)

    def test_duplicate_names_rejected(self):
        exc = self.assertRaises(
            exceptions.ConfigurationError, loader.load,
            'instanceha.reservation', ['none', 'none'],
            '[reservation] strategy', cfg.ConfigOpts())
        self.assertIn('more than once', str(exc))

    def test_load_sets_name_and_validates(self):
        drivers = loader.load('instanceha.reservation', ['none'],
                              '[reservation] strategy', cfg.ConfigOpts())
        self.assertEqual('none', drivers[0].name)
        self.assertIsInstance(drivers[0], base.Driver)


class TestBrokenDriver(testtools.TestCase):
    """A registered driver whose module fails to import names itself.

    Runs the real command in a fresh process with an extra distribution on
    its path: entry points are cached per process, so patching sys.path
    here would test the cache, not the loader.
    """

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        info = os.path.join(self.tmp, 'broken_ha_driver-1.0.dist-info')
        os.mkdir(info)
        with open(os.path.join(info, 'METADATA'), 'w') as f:
            f.write('Metadata-Version: 2.1\nName: broken-ha-driver\n'
                    'Version: 1.0\n')
        with open(os.path.join(info, 'entry_points.txt'), 'w') as f:
            f.write('[instanceha.gates]\n'
                    'broken = instanceha_no_such_module:Gate\n')

    def manage(self, *args, conf_text=''):
        conf = os.path.join(self.tmp, 'test.conf')
        with open(conf, 'w') as f:
            f.write(conf_text)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [self.tmp] + sys.path))
        return subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', '--config-file',
             conf, *args], capture_output=True, text=True, timeout=60,
            env=env)

    def test_import_error_names_driver_and_cause(self):
        res = self.manage('config', 'validate',
                          conf_text='[gates]\nenabled = broken\n')
        self.assertEqual(2, res.returncode, res.stdout)
        self.assertIn('[gates] enabled', res.stderr)
        self.assertIn("'broken'", res.stderr)
        self.assertIn('instanceha_no_such_module', res.stderr)
        self.assertIn('ModuleNotFoundError', res.stderr)

    def test_listing_shows_broken_driver(self):
        res = self.manage('drivers', 'list')
        self.assertEqual(0, res.returncode, res.stderr)
        line, = [ln for ln in res.stdout.splitlines()
                 if ln.split()[:1] == ['broken']]
        self.assertIn('BROKEN', line)
