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

"""Proactive evacuation end to end: a BMC reports a failed power supply.

Real peers: nova (live migration through its scheduler, conductor and
computes, Placement), sushy-tools' Redfish emulator extended to report
hardware health (peers/redfish_emulator.py: the stock fake driver says
every system is OK), the production fencing topology and Nova adapter.
The host is emptied by live migration and never powered off; a flapping
power supply empties nothing; the rate limit holds the second host.
"""

import os

import fixtures
import testtools
import yaml

from instanceha.adapters import clock as clock_mod
from instanceha.daemon import proactive as proactive_daemon
from instanceha.engine import events as ev
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.plugins.fencing import topology
from instanceha.plugins import loader
from tests.functional import peers
from tests.functional import test_nova_cloud as helpers
from tests.functional import test_plan
from tests.unit import test_health


class Env:
    """What the proactive check uses of the service's environment."""

    def __init__(self, cloud, fencer):
        self.cloud = cloud
        self.fencer = fencer
        self.pause = None
        self.clock = clock_mod.SystemClock()
        self.events = test_health.RecordingSink()


def wire(test, device, proactive: str) -> None:
    """The cloud, fencing topology and proactive check of ``test``.

    ``device(host, password_file)`` is each host's fencing entry;
    ``proactive`` the lines of ``[proactive]`` after ``interval``.
    Sets ``cloud``, ``fencer``, ``env`` and ``check`` on ``test``.
    """
    hosts = ('host1', 'host2', 'host3')
    tmp = test.useFixture(fixtures.TempDir()).path
    secret = os.path.join(tmp, 'bmc.pw')
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), 'w') as f:
        f.write(test.bmc.password + '\n')
    fencing = os.path.join(tmp, 'fencing.yaml')
    with open(fencing, 'w') as f:
        yaml.safe_dump({'hosts': {h: device(h, secret) for h in hosts}}, f)
    test.cloud = helpers.make_cloud(
        test, test.nova_peer, extra=(
            '[fencing]\nconfig_file = %s\n[capacity]\n'
            'placement_endpoint = %s\n[proactive]\ninterval = 60\n%s' % (
                fencing, test.nova_peer.placement_endpoint, proactive)))
    conf = test.cloud.conf
    test_plan.wait_for_heartbeats(test.cloud)
    test.fencer = topology.Topology.from_conf(conf)
    test.fencer.learn_hosts(list(hosts))
    test.addCleanup(test.fencer.stop)
    test.env = Env(test.cloud, test.fencer)
    test.check = proactive_daemon.ProactiveCheck(
        conf, test.env, loader.load_deciders(conf), leading=lambda: True)


class TestProactive(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.nova_peer = self.useFixture(peers.NovaPeer(hosts=3))
        self.bmc = self.useFixture(peers.RedfishPeer(
            hosts=3, nova=self.nova_peer, power_delay=(0, 0)))
        self.servers = self.nova_peer.create_servers(2, host='host1',
                                                     name='web')
        wire(self, lambda h, secret: {
            'driver': 'redfish', 'address': self.bmc.url,
            'system_id': self.bmc.systems[h],
            'username': self.bmc.username, 'password_file': secret},
            'confirm = 2\nmax_starts = 1\nthreshold = 70\n')

    def actions(self):
        return {v.host: v.action for v in self.check.check()}

    def test_failed_power_supply_empties_the_host_without_fencing(self):
        self.bmc.set_health('host1', rollup='Critical',
                            power_supplies={'PSU 1': 'OK',
                                            'PSU 2': 'Critical'})
        self.assertEqual({'host1': 'held'}, self.actions())  # confirming
        self.assertEqual({'host1': 'evacuate'}, self.actions())
        for server in self.servers:
            peers.base.wait_until(
                lambda s=server: self.cloud.get_server(s.id).host
                not in ('host1', None), 60, interval=0.5,
                what='%s live-migrated away' % server.name)
        svc = self.cloud.read_services().service('host1')
        self.assertEqual(model.DISABLED, svc.status)
        why = reasons.read(svc.disabled_reason).maintenance
        self.assertEqual('proactive: power_supply PSU 2 Critical', why.note)
        # Never fenced: the BMC was never asked to power it off.
        self.assertEqual('On', self.bmc.power_state('host1'))
        self.assertEqual('up', svc.state)
        self.assertIn(ev.PROACTIVE_EVACUATION,
                      [e for e, h, _ in self.env.events.events
                       if h == 'host1'])
        # In maintenance now: no longer a candidate, nothing more done.
        self.assertEqual({}, self.actions())

    def test_flapping_sensor_and_rate_limit(self):
        for i in range(4):
            self.bmc.set_health('host2', power_supplies={
                'PSU 1': 'Critical' if i % 2 == 0 else 'OK'})
            self.assertNotEqual('evacuate', self.actions().get('host2'))
        self.assertEqual(model.ENABLED,
                         self.cloud.read_services().service('host2').status)
        # Two hosts failing for good: one is emptied, the rate limit
        # holds the other.
        for host in ('host2', 'host3'):
            self.bmc.set_health(host, power_supplies={'PSU 1': 'Critical'})
        self.actions()
        verdicts = {v.host: v for v in self.check.check()}
        self.assertEqual('evacuate', verdicts['host2'].action)
        self.assertEqual('held', verdicts['host3'].action)
        self.assertIn('rate limit', verdicts['host3'].why)
