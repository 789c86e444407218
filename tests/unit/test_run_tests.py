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

"""tools/run-tests is a good citizen on the machine it runs on."""

import os
import re

import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class TestRunTests(testtools.TestCase):

    def setUp(self):
        super().setUp()
        with open(os.path.join(ROOT, 'tools', 'run-tests')) as f:
            self.script = [line for line in f.read().splitlines()
                           if not line.lstrip().startswith('#')]

    def test_never_stops_or_kills_the_machines_services(self):
        # The functional tests start private redis, etcd and rabbitmq on
        # free ports (tests/functional/peers); the system's stay up.
        for line in self.script:
            self.assertIsNone(
                re.search(r'\b(systemctl|service|pkill|killall|kill)\b',
                          line), line)

    def test_a_file_in_place_of_the_virtualenv_is_moved_aside(self):
        text = '\n'.join(self.script)
        self.assertIn('[ ! -d "$VENV" ]', text)
        self.assertIn('mv "$VENV" "$VENV.stray"', text)
