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

"""The fault-injecting proxy in front of a real nova, and how instanceha's
Nova adapter meets each fault it injects (a clear error naming Nova,
nothing half-done, normal service once the fault is lifted)."""

import time
import types

import requests
import testtools

from instanceha import exceptions
from tests.functional import peers
from tests.functional import test_nova_cloud


class TestFaultProxy(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.nova = self.useFixture(peers.NovaPeer(hosts=2))
        self.proxy = self.useFixture(peers.FaultProxy(self.nova.endpoint))
        behind = types.SimpleNamespace(endpoint=self.proxy.endpoint)
        self.cloud = test_nova_cloud.make_cloud(
            self, behind, extra='[nova]\ntimeout = 3\n')

    def test_forwards_counts_and_keeps_novas_clock(self):
        read = self.cloud.read_services()
        self.assertEqual(['host1', 'host2'],
                         sorted(s.host for s in read.services))
        # Nova's Date header, passed on alone: no skew on one machine
        # (beyond the header's one-second grain).
        self.assertLessEqual(abs(read.clock_skew), 1.0)
        resp = requests.get(self.proxy.endpoint + '/', timeout=30)
        self.assertEqual(1, len(resp.raw.headers.getlist('Date')))
        self.assertEqual(1, self.proxy.calls['GET /v2.1/os-services'])
        self.assertEqual([], self.proxy.injected)

    def test_status_fault_is_bounded_by_count_and_named(self):
        self.proxy.inject('status', method='GET', path='os-services',
                          status=503, count=1)
        exc = self.assertRaises(exceptions.InstanceHAError,
                                self.cloud.read_services)
        self.assertIn('503', str(exc))
        (hit,) = self.proxy.injected
        self.assertEqual(('status', 'GET /v2.1/os-services'), hit[1:])
        # Spent: the next read reaches Nova.
        self.assertEqual(2, len(self.cloud.read_services().services))

    def test_conflict_on_a_write_is_not_made(self):
        svc = self.cloud.read_services().service('host1')
        self.proxy.inject('status', method='PUT', status=409, count=1)
        self.assertRaises(exceptions.InstanceHAError,
                          self.cloud.update_service, svc,
                          status='disabled', disabled_reason='test')
        # Nova never saw the write.
        self.assertEqual('enabled',
                         self.cloud.read_services().service('host1').status)

    def test_host_matched_fault_spares_other_hosts(self):
        self.nova.create_servers(1, host='host1')
        self.nova.create_servers(1, host='host2')
        self.proxy.inject('status', host='host1', status=500, duration=60)
        self.assertRaises(exceptions.InstanceHAError,
                          self.cloud.list_servers, 'host1')
        self.assertEqual(['host2'],
                         [s.host for s in self.cloud.list_servers('host2')])

    def test_reset_and_timeout_fail_fast_and_clearly(self):
        self.proxy.inject('reset', path='os-services', count=1)
        self.assertRaises(exceptions.InstanceHAError,
                          self.cloud.read_services)
        self.proxy.inject('timeout', path='os-services', seconds=6, count=1)
        start = time.monotonic()
        self.assertRaises(exceptions.InstanceHAError,
                          self.cloud.read_services)
        # The adapter's own timeout (3 s here), not the proxy's hold.
        self.assertLess(time.monotonic() - start, 5.5)
        self.assertEqual(['reset', 'timeout'],
                         [k for _, k, _ in self.proxy.injected])

    def test_slow_answer_arrives(self):
        self.proxy.inject('slow', path='os-services', seconds=1.0, count=1)
        start = time.monotonic()
        self.assertEqual(2, len(self.cloud.read_services().services))
        self.assertGreaterEqual(time.monotonic() - start, 1.0)

    def test_links_in_answers_point_at_the_proxy(self):
        self.nova.create_servers(2, host='host1')
        resp = requests.get(
            self.proxy.endpoint + '/servers/detail?limit=1',
            headers={'X-OpenStack-Nova-API-Version': '2.94',
                     'X-Auth-Token': 'admin'}, timeout=30)
        self.assertEqual(200, resp.status_code, resp.text)
        (link,) = resp.json()['servers_links']
        self.assertTrue(link['href'].startswith(self.proxy.endpoint),
                        link['href'])
        nxt = requests.get(link['href'], headers={
            'X-OpenStack-Nova-API-Version': '2.94',
            'X-Auth-Token': 'admin'}, timeout=30)
        self.assertEqual(1, len(nxt.json()['servers']))
        self.assertEqual(2, self.proxy.calls['GET /v2.1/servers/detail'])
