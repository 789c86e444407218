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

"""R15 on a real Nova: a host cut off from Nova but still beating is
isolated and not failed; once its agent stops too, it is failed.

Real parts: the nova helper (NovaPeer: nova's API, conductor, scheduler
and fake-virt computes), the real ``instanceha-heartbeat-agent``
processes, the heartbeat detector with its UDP listener, the ``nova``
detector and the decide engine's ``make_plan``. "Killing" host1 stops
its nova-compute service in the helper: Nova sees it down, while its
agent (a separate process) keeps beating, which is exactly a compute
host isolated from the control plane.
"""

import datetime
import os
import types

from instanceha import conf as ha_conf
from instanceha.engine import decide
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.plugins.detectors import heartbeat as hb_det
from instanceha.plugins.detectors import nova as nova_det
from tests import conf_fixture
from tests.functional import test_heartbeat

HOSTS = ['host1', 'host2', 'host3']


def now():
    return datetime.datetime.now(datetime.timezone.utc)


class TestHeartbeatWithNova(test_heartbeat.HeartbeatFixture):

    def setUp(self):
        super().setUp()
        os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'true')
        from tests.functional.peers import nova_peer
        self.nova = self.useFixture(nova_peer.NovaPeer(hosts=HOSTS))
        self.client = self.nova.client()
        self.server = self.nova.create_servers(host='host1',
                                               client=self.client)[0]
        self.conf = self.useFixture(conf_fixture.ConfFixture(heartbeat={
            'key_file': self.key, 'port': 0,
            'listen_addresses': ['127.0.0.1'], 'timeout': 2})).conf
        self.conf.set_override('detectors', ['nova', 'heartbeat'],
                               group='detection')
        self.conf.set_override('delta', 30)
        ha_conf.validate(self.conf)
        self.hb = hb_det.HeartbeatDetector(self.conf)
        self.hb.validate()
        self.hb.start()
        self.addCleanup(self.hb.stop)
        self.cloud = None
        self.drivers = types.SimpleNamespace(
            detectors=[nova_det.NovaDetector(self.conf), self.hb],
            filters=[], gates=[])

    def snapshot(self) -> model.Snapshot:
        """Nova as the engine sees it, through the service's own adapter."""
        if self.cloud is None:
            from instanceha.adapters import nova as cloud_nova
            self.conf.set_override('auth_type', 'none', group='nova')
            self.conf.set_override('endpoint_override', self.nova.endpoint,
                                   group='nova')
            self.cloud = cloud_nova.NovaCloud(self.conf)
        return self.cloud.snapshot()

    def plan(self):
        snap = self.snapshot()
        return {d.host: d for d in decide.make_plan(
            snap, self.drivers, self.conf, now()).decisions}

    def test_isolated_host_is_not_failed_until_its_agent_stops(self):
        addr = self.hb.listener.addresses
        agents = {h: self.agent(h, addr, key=self.host_key(h),
                                interval=0.2) for h in HOSTS}
        test_heartbeat.wait_for(
            lambda: all(self.hb.listener.record(h) for h in HOSTS),
            what='every agent heard')
        # Wait out the listener's first interval (documented UNKNOWN).
        test_heartbeat.wait_for(
            lambda: self.hb.listener.now() - self.hb.listener.started_at
            > 2, what='first interval over')
        plan = self.plan()
        self.assertEqual({plan_mod.Decision.HEALTHY},
                         {d.decision for d in plan.values()})

        # host1 loses the control plane; its agent keeps beating.
        self.nova.control.kill('host1')
        self.nova.wait_for_service('host1', 'down', client=self.client)
        plan = self.plan()
        self.assertEqual(plan_mod.Decision.ISOLATED,
                         plan['host1'].decision, plan['host1'].line())
        line = plan['host1'].line()
        self.assertIn('nova: state down', line)
        self.assertIn('isolated from the control plane', line)
        self.assertIn('host host1: Nova reports its compute service down',
                      self.log.output)
        self.assertEqual(plan_mod.Decision.HEALTHY,
                         plan['host2'].decision)

        # Now the host itself dies: its agent stops too.
        self.stop(agents['host1'])
        test_heartbeat.wait_for(
            lambda: self.hb.listener.age('host1') > 2.5, what='stale')
        plan = self.plan()
        self.assertEqual(plan_mod.Decision.RECOVER,
                         plan['host1'].decision, plan['host1'].line())
        self.assertIn('heartbeat: last heartbeat', plan['host1'].line())
        self.assertEqual([self.server.id],
                         [s.id for s in plan['host1'].servers])
        self.assertEqual(plan_mod.Decision.HEALTHY,
                         plan['host2'].decision)
