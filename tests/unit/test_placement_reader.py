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

"""The Placement reader's cache and bounds (the calls counted).

Placement's answers themselves are checked against the real Placement in
tests/functional/test_capacity.py; here a stand-in session answers with
the same bodies so that the cache's timing can be driven by a clock.
"""

import testtools

from instanceha.adapters import placement
from instanceha import exceptions
from tests import conf_fixture


class Response:
    def __init__(self, status, body):
        self.status_code = status
        self._body = body
        self.headers = {}
        self.text = str(body)

    def json(self):
        return self._body


class Session:
    """Answers like Placement; counts the paths asked."""

    def __init__(self):
        self.paths = []
        self.down = False

    def request(self, path, method, **kwargs):
        self.paths.append(path)
        if self.down:
            raise ConnectionError('refused')
        if path.endswith('/inventories'):
            return Response(200, {'inventories': {'VCPU': {
                'total': 8, 'reserved': 2, 'allocation_ratio': 4.0,
                'max_unit': 8}, 'CUSTOM_X': {'total': 1}}})
        return Response(200, {'usages': {'VCPU': 5}})


class TestReader(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = self.useFixture(conf_fixture.ConfFixture()).conf
        self.now = 0.0
        self.session = Session()
        self.nodes = {'h1': 'u1', 'h2': 'u2', 'ironic': None}
        self.reader = placement.PlacementReader(
            self.session, self.conf, lambda: self.nodes,
            clock=lambda: self.now)

    def test_reading_and_its_arithmetic(self):
        found = self.reader.read()
        self.assertEqual(['h1', 'h2'], sorted(found))  # ironic: 2 nodes
        vcpu = found['h1'].resources['VCPU']
        # (8 - 2) x 4 = 24; other classes than the counted ones dropped.
        self.assertEqual((24, 5, 8), (vcpu.capacity, vcpu.used,
                                      vcpu.max_unit))
        self.assertEqual(['VCPU'], list(found['h1'].resources))

    def test_calls_are_bounded_by_the_intervals(self):
        self.reader.read()
        self.assertEqual(4, self.reader.api_calls)  # 2 inventories, 2 usages
        self.now = 299
        self.reader.read()
        self.assertEqual(4, self.reader.api_calls)
        self.now = 301  # usages again, inventories kept (1800 s)
        self.reader.read()
        self.assertEqual(6, self.reader.api_calls)
        self.now = 1801
        self.reader.read()
        self.assertEqual(10, self.reader.api_calls)

    def test_a_failure_is_repeated_without_calls_for_a_while(self):
        self.session.down = True
        self.assertRaises(exceptions.CloudError, self.reader.read)
        calls = len(self.session.paths)
        self.now = 59
        self.assertRaises(exceptions.CloudError, self.reader.read)
        self.assertEqual(calls, len(self.session.paths))
        self.now = 61
        self.session.down = False
        self.assertIn('h1', self.reader.read())
