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
    """A registered driver whose module fails to import names itself."""

    def setUp(self):
        super().setUp()
        tmp = self.useFixture(fixtures.TempDir()).path
        info = os.path.join(tmp, 'broken_ha_driver-1.0.dist-info')
        os.mkdir(info)
        with open(os.path.join(info, 'METADATA'), 'w') as f:
            f.write('Metadata-Version: 2.1\nName: broken-ha-driver\n'
                    'Version: 1.0\n')
        with open(os.path.join(info, 'entry_points.txt'), 'w') as f:
            f.write('[instanceha.gates]\n'
                    'broken = instanceha_no_such_module:Gate\n')
        self.useFixture(fixtures.MonkeyPatch('sys.path', [tmp] + sys.path))

    def test_import_error_names_driver_and_cause(self):
        exc = self.assertRaises(
            exceptions.DriverLoadError, loader.driver_class,
            'instanceha.gates', 'broken', '[gates] enabled')
        msg = str(exc)
        self.assertIn('[gates] enabled', msg)
        self.assertIn("'broken'", msg)
        self.assertIn('instanceha_no_such_module', msg)
        self.assertIn('ModuleNotFoundError', msg)

    def test_listing_shows_broken_driver(self):
        rows = dict(loader.describe('instanceha.gates'))
        self.assertIn('BROKEN', rows['broken'])
