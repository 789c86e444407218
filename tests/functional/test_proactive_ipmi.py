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

"""Proactive evacuation end to end through IPMI: the SEL and chassis bits.

Real peers: nova (live migration through its scheduler, conductor and
computes), the IPMI BMC emulator (pyghmi, extended in
peers/ipmi_bmc.py with the chassis fault bits and a System Event Log,
which pyghmi's BMC does not implement) read by the real ipmitool, the
production fencing topology and Nova adapter. A power supply failure
logged in the SEL empties its host by live migration, never fencing it;
the event's deassertion or a cleared log ends the condition; a cooling
fault in the chassis status is one too.
"""

import testtools

from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.ops import history
from tests.functional import peers
from tests.functional import test_proactive

#: IPMI sensor types and event offsets (IPMI v2.0 tables 42-3 and 42-1).
POWER_SUPPLY, FAILURE_DETECTED = 0x08, 0x01
MEMORY, ECC_LIMIT = 0x0c, 0x05


class TestProactiveIpmi(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.nova_peer = self.useFixture(peers.NovaPeer(hosts=3))
        self.bmc = self.useFixture(peers.IpmiBmcPeer(
            hosts=3, nova=self.nova_peer))
        self.servers = self.nova_peer.create_servers(2, host='host1',
                                                     name='db')
        test_proactive.wire(self, lambda h, secret: {
            'driver': 'ipmi', 'address': '127.0.0.1',
            'port': self.bmc.ports[h], 'username': self.bmc.username,
            'password_file': secret},
            'confirm = 1\nmax_starts = 3\nthreshold = 70\nrules = '
            'power_supply:Critical=evacuate,thermal:Critical=evacuate,'
            '*:Warning=warn\n')

    def verdicts(self):
        return {v.host: v for v in self.check.check()}

    def test_sel_power_supply_failure_empties_the_host_unfenced(self):
        self.bmc.add_sel_event('host2', MEMORY, ECC_LIMIT, sensor_number=3)
        self.bmc.add_sel_event('host1', POWER_SUPPLY, FAILURE_DETECTED,
                               sensor_number=2)
        verdicts = self.verdicts()
        self.assertEqual('evacuate', verdicts['host1'].action)
        self.assertEqual('warn', verdicts['host2'].action)
        self.assertEqual(('memory Memory #0x03: Correctable ECC logging '
                          'limit reached Warning',),
                         verdicts['host2'].conditions)
        for server in self.servers:
            peers.base.wait_until(
                lambda s=server: self.cloud.get_server(s.id).host
                not in ('host1', None), 60, interval=0.5,
                what='%s live-migrated away' % server.name)
        svc = self.cloud.read_services().service('host1')
        self.assertEqual(model.DISABLED, svc.status)
        self.assertEqual(
            'proactive: power_supply Power Supply #0x02: Failure detected '
            'Critical', reasons.read(svc.disabled_reason).maintenance.note)
        # hosts history shows the host emptied, and why, from Nova alone.
        [emptied] = history.host_history(self.cloud, 'host1')
        self.assertEqual(('emptied', 'maintenance'),
                         (emptied.kind, emptied.state))
        self.assertTrue(emptied.note.startswith('proactive: power_supply'))
        self.assertEqual(sorted(s.id for s in self.servers),
                         sorted(m.server for m in emptied.instances))
        # Never fenced: the BMC never saw a power change.
        self.assertEqual('on', self.bmc.power_state('host1'))
        self.assertEqual(1, len(self.bmc.power_history('host1')))

    def test_deasserted_or_cleared_events_and_chassis_faults(self):
        self.bmc.add_sel_event('host3', POWER_SUPPLY, FAILURE_DETECTED)
        self.bmc.add_sel_event('host3', POWER_SUPPLY, FAILURE_DETECTED,
                               deassert=True)
        self.assertNotIn('host3', self.verdicts())
        self.bmc.add_sel_event('host3', POWER_SUPPLY, FAILURE_DETECTED)
        self.bmc.clear_sel('host3')
        self.assertNotIn('host3', self.verdicts())
        self.bmc.set_faults('host3', 'cooling_fault')
        verdict = self.verdicts()['host3']
        self.assertEqual('evacuate', verdict.action)
        self.assertEqual(('thermal Cooling/Fan Fault Critical',),
                         verdict.conditions)
