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

"""Each real-peer fixture starts, answers as the real thing, and stops."""

import testtools

from tests.functional import peers


class TestNovaPeer(testtools.TestCase):
    """The nova helper serves the real API and simulates host failures."""

    def setUp(self):
        super().setUp()
        self.nova = self.useFixture(peers.NovaPeer(hosts=3))

    def test_kill_evacuate_revive(self):
        nova = self.nova.client()
        services = {s.host: s.state
                    for s in nova.services.list(binary='nova-compute')}
        self.assertEqual({'host1': 'up', 'host2': 'up', 'host3': 'up'},
                         services)
        server, = self.nova.create_servers(1, host='host1')
        self.assertEqual('host1',
                         getattr(server, 'OS-EXT-SRV-ATTR:host'))

        self.nova.control.kill('host1')
        self.assertFalse(self.nova.control.computes()['host1']['running'])
        self.nova.wait_for_service('host1', 'down')
        svc = nova.services.list(host='host1', binary='nova-compute')[0]
        nova.services.force_down(svc.id, True)
        nova.servers.evacuate(server.id)
        moved = self.nova.wait_for_server(server.id, 'ACTIVE')
        self.assertNotEqual('host1', getattr(moved, 'OS-EXT-SRV-ATTR:host'))

        self.nova.control.revive('host1')
        nova.services.force_down(svc.id, False)
        self.nova.wait_for_service('host1', 'up')
        self.assertTrue(self.nova.control.computes()['host1']['running'])
