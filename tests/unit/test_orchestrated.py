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

"""Where the orchestrated strategy reads a restart priority from.

Server metadata is writable by the instance's owner: it must not steer
the order unless an operator allows it.
"""

import testtools

from instanceha.engine import model
from instanceha.plugins.evacuation import orchestrated
from tests.unit import test_recovery_fakes as fakes

KEY = 'instanceha:priority'


def server(flavor_prio=None, meta_prio=None):
    specs = {KEY: flavor_prio} if flavor_prio is not None else {}
    meta = {KEY: meta_prio} if meta_prio is not None else {}
    return model.Server(id='s', name='s', host='h', status='ACTIVE',
                        flavor=model.Flavor('f', extra_specs=specs),
                        metadata=meta)


class TestPrioritySources(testtools.TestCase):

    def strategy(self, **overrides):
        return orchestrated.OrchestratedEvacuation(
            fakes.make_conf(**{'evacuation.' + k: v
                               for k, v in overrides.items()}))

    def test_default_reads_the_flavor_only(self):
        s = self.strategy()
        self.assertEqual(10, s.priority(server(flavor_prio='10')))
        # A tenant's own metadata does not move its instance first.
        self.assertEqual(0, s.priority(server(meta_prio='100')))
        self.assertEqual(3, s.priority(server('3', '100')))

    def test_server_metadata_only_when_allowed_first_match_wins(self):
        s = self.strategy(priority_sources=['server', 'flavor'])
        self.assertEqual(100, s.priority(server('3', '100')))
        self.assertEqual(3, s.priority(server(flavor_prio='3')))
        s = self.strategy(priority_sources=['flavor', 'server'])
        self.assertEqual(3, s.priority(server('3', '100')))
        self.assertEqual(100, s.priority(server(meta_prio='100')))

    def test_malformed_value_is_the_default(self):
        self.assertEqual(0, self.strategy().priority(server('high')))

    def test_unknown_source_is_refused(self):
        conf = fakes.make_conf()
        self.assertRaises(ValueError, conf.set_override, 'priority_sources',
                          ['image'], group='evacuation')
