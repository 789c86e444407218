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

"""The ``reload`` timeline command: what changes live, what is refused.

Each test runs a copy of the reload-bad-fencing-file case with a
timeline of its own.
"""

import os
import shutil

import fixtures
import testtools

from instanceha.sim import runner
from instanceha.sim import world as sim_world

CASE = os.path.join(os.path.dirname(__file__), 'cases',
                    'reload-bad-fencing-file')


class TestReloadCommand(testtools.TestCase):

    def run_with(self, timeline: str) -> list[str]:
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'case')
        shutil.copytree(CASE, path)
        with open(os.path.join(path, 'timeline'), 'w') as f:
            f.write(timeline)
        return runner.run_scenario(path).lines

    def events(self, lines: list[str], event: str) -> list[str]:
        return [line for line in lines if line.split()[3] == event]

    def test_live_and_restart_needed(self):
        lines = self.run_with('10 reload threshold 70 workers 8\n')
        done, = self.events(lines, 'config_reloaded')
        self.assertIn('changed="[DEFAULT] threshold"', done)
        self.assertIn('restart_needed="[DEFAULT] workers"', done)

    def test_bad_value_refused_nothing_changes(self):
        lines = self.run_with('10 reload leave_disabled true threshold '
                              '180\n60 power-off compute-1\n')
        refused, = self.events(lines, 'reload_refused')
        self.assertIn('what="configuration files"', refused)
        self.assertIn('[DEFAULT] threshold', refused)
        self.assertEqual([], self.events(lines, 'config_reloaded'))
        # leave_disabled did not change either: compute-1 comes back.
        self.assertTrue([line for line in lines
                         if 'compute-1 host_state' in line and
                         'new=healthy old=enabling' in line])

    def test_unknown_option_refused(self):
        lines = self.run_with('10 reload nosuch.option 1\n')
        refused, = self.events(lines, 'reload_refused')
        self.assertIn('no option [nosuch] option', refused)

    def test_option_without_value_is_a_scenario_error(self):
        exc = self.assertRaises(sim_world.ScenarioError, self.run_with,
                                '10 reload threshold\n')
        self.assertIn('reload', str(exc))
