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

"""The reference alert rules: valid for Prometheus, and they fire as said.

Runs the real ``promtool`` (Debian's prometheus package, installed by
tools/run-tests through bindep.txt): ``check rules`` and the rule unit
tests of ``etc/prometheus/instanceha-alerts.test.yaml``. Every metric a
rule names must be one the service serves.
"""

import os
import re
import shutil
import subprocess

import testtools
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
RULES_DIR = os.path.join(HERE, '..', '..', 'etc', 'prometheus')
RULES = os.path.join(RULES_DIR, 'instanceha-alerts.yaml')
TESTS = os.path.join(RULES_DIR, 'instanceha-alerts.test.yaml')

#: Metrics the service serves (families; counters with _total).
SERVED = re.compile(r'^instanceha_(host_recovery_state|hosts|gate_blocks_'
                    r'total|leader|paused|pause_start_timestamp_seconds|'
                    r'pause_end_timestamp_seconds|ready|live|capacity_tolerance)$')


class TestAlertRules(testtools.TestCase):

    def promtool(self, *args):
        tool = shutil.which('promtool')
        if tool is None:
            self.skipTest('promtool is not installed (Debian package '
                          'prometheus; tools/run-tests installs it)')
        res = subprocess.run([tool, *args], capture_output=True, text=True,
                             timeout=120, cwd=RULES_DIR)
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)
        return res.stdout

    def test_rules_are_valid(self):
        self.assertIn('SUCCESS: 7 rules found',
                      self.promtool('check', 'rules', RULES))

    def test_rules_fire_as_their_tests_say(self):
        self.assertIn('SUCCESS', self.promtool('test', 'rules', TESTS))

    def test_rules_name_only_served_metrics(self):
        with open(RULES) as f:
            rules = yaml.safe_load(f)['groups'][0]['rules']
        names = {r['alert'] for r in rules}
        self.assertEqual({'InstanceHAHostFailed', 'InstanceHAFencingFailing',
                          'InstanceHAMassFailureBlocked',
                          'InstanceHANoLeader', 'InstanceHAPauseOverdue',
                          'InstanceHANotReady',
                          'InstanceHAFailoverCapacityLow'}, names)
        for rule in rules:
            for metric in re.findall(r'instanceha_\w+', rule['expr']):
                self.assertRegex(metric, SERVED, rule['alert'])
