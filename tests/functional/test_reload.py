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

"""SIGHUP to a real instanceha-service process.

Real nova (NovaPeer), real IPMI BMCs driven by the real ipmitool, the
file coordination backend, and an ``instanceha-service`` process whose
configuration and fencing files are edited while it runs, then sent
SIGHUP: a raised threshold releases a held mass failure; a fencing file
with a broken entry is refused and the one loaded before keeps fencing.
"""

import re
import signal

import testtools

from tests.functional import test_ha
from tests.functional.test_recovery import Cloud

wait_for = test_ha.wait_for


class TestReload(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.cloud = None

    def start(self, hosts: int = 3) -> test_ha.Copy:
        self.cloud = self.cloud or self.useFixture(Cloud(
            hosts=hosts, options={'threshold': 50}))
        copy = test_ha.Copy(self, self.cloud, 'ha')
        wait_for(copy.leading, test_ha.SHORT, 'the service to lead')
        return copy

    def log_lines(self, copy: test_ha.Copy, pattern: str) -> list[str]:
        with open(copy.log_path, errors='replace') as f:
            return re.findall('[^\n]*%s[^\n]*' % pattern, f.read())

    def test_threshold_raised_by_sighup_releases_a_mass_failure(self):
        self.cloud = self.useFixture(Cloud(hosts=4, options={
            'threshold': 50}))
        vms = self.cloud.boot('host2') + self.cloud.boot('host3')
        # Down together before the service looks: one mass failure, not
        # three single ones.
        for host in ('host2', 'host3', 'host4'):
            self.cloud.power_off(host)
        for host in ('host2', 'host3', 'host4'):
            self.cloud.nova.wait_for_service(host, 'down',
                                             client=self.cloud.client)
        copy = self.start()
        wait_for(lambda: self.log_lines(copy, 'plan_blocked'),
                 test_ha.RECOVERY_TIMEOUT, 'the threshold gate to block')
        self.assertEqual([], copy.transitions('host2', 'fencing'))
        with open(self.cloud.config_file, 'a') as f:
            f.write('[DEFAULT]\nthreshold = 80\n')
        copy.proc.send_signal(signal.SIGHUP)
        # host4 runs no instance: it counts towards the threshold but is
        # not recovered (nothing to evacuate).
        for host in ('host2', 'host3'):
            wait_for(lambda h=host: copy.transitions(h, 'fenced'),
                     test_ha.RECOVERY_TIMEOUT, '%s fenced' % host)
        for sid in vms:
            wait_for(lambda s=sid: self.cloud.evacuations(s),
                     test_ha.RECOVERY_TIMEOUT, 'an evacuation of %s' % sid)
        reloaded = self.log_lines(copy, 'config_reloaded')
        self.assertEqual(1, len(reloaded), reloaded)
        self.assertIn('[DEFAULT] threshold', reloaded[0])
        self.assertIsNone(copy.proc.poll())

    def test_bad_fencing_file_refused_the_old_one_keeps_fencing(self):
        copy = self.start()
        vm, = self.cloud.boot('host2')
        with open(self.cloud.fencing_file) as f:
            good = f.read()
        # host2's entry is gone and a broken one added: applied, this file
        # would leave host2 unfenceable.
        bad = re.sub(r'  host2:\n(    [^\n]*\n)+', '', good)
        self.assertNotIn('host2', bad)
        with open(self.cloud.fencing_file, 'w') as f:
            f.write(bad + '  host9:\n    driver: ipmi\n    address: '
                    '127.0.0.1\n')
        copy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.log_lines(copy, 'reload_refused'),
                 test_ha.SHORT, 'the new fencing file to be refused')
        refused, = self.log_lines(copy, 'reload_refused')
        self.assertIn('host host9', refused)
        self.assertIn("'username'", refused)
        self.assertIn('fencing file loaded before stays in force',
                      ''.join(self.log_lines(copy, 'refused')))

        self.cloud.power_off('host2')
        wait_for(lambda: copy.transitions('host2', 'fenced'),
                 test_ha.RECOVERY_TIMEOUT, 'host2 fenced by the old file')
        wait_for(lambda: self.cloud.evacuations(vm),
                 test_ha.RECOVERY_TIMEOUT, 'the evacuation of host2')
        self.assertIsNone(copy.proc.poll())
