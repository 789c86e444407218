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

"""The one back-off formula, and that every retry of the service uses it."""

import pathlib
import re

import testtools

import instanceha
from instanceha.engine import retry


class TestBackoff(testtools.TestCase):

    def test_doubles_from_the_first_wait_up_to_the_cap(self):
        self.assertEqual([5, 5, 10, 20, 40, 60, 60],
                         [retry.backoff(5, n, 60) for n in range(7)])

    def test_a_huge_count_does_not_overflow(self):
        self.assertEqual(300, retry.backoff(5, 10 ** 9, 300))

    def test_no_other_doubling_in_the_package(self):
        # A second formula written inline would drift from this one.
        root = pathlib.Path(instanceha.__file__).parent
        found = [str(p.relative_to(root)) for p in root.rglob('*.py')
                 if p.name != 'retry.py' and 'heartbeat' not in p.parts and
                 re.search(r'\b2 \*\* ', p.read_text())]
        self.assertEqual([], found)
