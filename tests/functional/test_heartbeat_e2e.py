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

"""The service end to end with heartbeats and fence_kdump.

Real parts: nova (NovaPeer), IPMI BMCs driven by the real ipmitool
(IpmiBmcPeer), the production engine and environment
(:mod:`instanceha.daemon.service`, via the recovery tests' fixtures), the
real ``instanceha-heartbeat-agent`` processes and the real
``fence_kdump_send`` from fence-agents. The detectors are started like
``service.run`` starts them.
"""

import os
import signal
import socket
import subprocess
import typing

import fixtures
import testtools

from instanceha.engine import events
from instanceha.engine import plan as plan_mod
from instanceha.engine import states
from tests.functional.peers import base as peer_base
from tests.functional import test_heartbeat
from tests.functional import test_kdump
from tests.functional import test_recovery as rec

S = states.HostState


def free_udp_port() -> int:
    return peer_base.free_port(socket.SOCK_DGRAM)


class StartedEngine(rec.EngineRunner):
    """EngineRunner, plus the detectors' listeners (as service.run does)."""

    def _setUp(self):
        super()._setUp()
        for drv in self.drivers.detectors:
            drv.start()
            self.addCleanup(drv.stop)

    def decision(self, host):
        plan = self.engine.plan
        return plan.decision(host) if plan is not None else None


class HeartbeatCloudTest(test_heartbeat.HeartbeatFixture):
    """Real nova and BMCs with one heartbeat agent per host.

    The set-up the heartbeat, shutdown and process-failure tests share:
    three hosts, one instance on host1, every host's agent beating to
    the service's listener on a free loopback port (``self.collectors``).
    """

    def heartbeat_cloud(self, options: typing.Optional[dict] = None,
                        agent_extra: typing.Optional[typing.Callable] = None,
                        engine: bool = True,
                        fencing: typing.Optional[dict] = None) -> tuple:
        """Start it all: ``(cloud, vm, agents, engine)``.

        ``options``: more instanceha.conf options (``group.name``: value).
        ``agent_extra``: host -> extra agent arguments, for every agent.
        ``engine``: start the engine in this process (a StartedEngine,
        waited for until it heard every agent); otherwise ``None`` is
        returned for it and the test starts its own service.
        ``fencing``: host -> its fencing file entry instead of its BMC.
        """
        port = free_udp_port()
        self.collectors = [('127.0.0.1', port)]
        cloud = self.useFixture(rec.Cloud(hosts=3, options=dict({
            'detection.detectors': ['nova', 'heartbeat'],
            'heartbeat.key_file': self.key,
            'heartbeat.listen_addresses': ['127.0.0.1'],
            'heartbeat.port': port,
            'heartbeat.timeout': 3,
        }, **(options or {})), fencing=fencing))
        vm, = cloud.boot('host1')
        agents = {h: self.agent(h, self.collectors, key=self.host_key(h),
                                interval=0.3,
                                extra=agent_extra(h) if agent_extra else ())
                  for h in cloud.nova.hosts}
        if not engine:
            return cloud, vm, agents, None
        eng = self.useFixture(StartedEngine(cloud.config_file))
        hb = eng.drivers.detectors[1]
        rec.wait_for(lambda: all(hb.listener.record(h)
                                 for h in cloud.nova.hosts),
                     30, 'every agent heard by the service')
        return cloud, vm, agents, eng


class TestHeartbeatEndToEnd(HeartbeatCloudTest):

    def test_isolated_host_not_fenced_until_its_agent_stops(self):
        cloud, vm, agents, eng = self.heartbeat_cloud()

        # host1 is cut off from the control plane; its agent still beats.
        cloud.nova.control.kill('host1')
        cloud.nova.wait_for_service('host1', 'down', client=cloud.client)
        rec.wait_for(lambda: eng.decision('host1') is not None and
                     eng.decision('host1').decision is
                     plan_mod.Decision.ISOLATED, 60, 'host1 isolated')
        self.assertIn('isolated from the control plane',
                      eng.decision('host1').line())
        cycles = eng.engine.cycles
        rec.wait_for(lambda: eng.engine.cycles >= cycles + 3, 60,
                     'three more cycles')
        self.assertIsNone(eng.state('host1'))
        self.assertEqual([], eng.record.named(events.HOST_STATE, 'host1'))
        self.assertEqual('on', cloud.bmc.power_state('host1'))
        self.assertFalse(cloud.service('host1').forced_down)
        self.assertEqual('host1', cloud.server(vm).host)

        # Now the host dies for real: its agent stops too.
        self.stop(agents['host1'])
        rec.wait_for(lambda: cloud.service('host1').forced_down,
                     rec.RECOVERY_TIMEOUT, 'host1 fenced and forced down')
        rec.wait_for(lambda: cloud.server(vm).host != 'host1',
                     rec.RECOVERY_TIMEOUT, 'vm evacuated')
        news = [d['new'] for d in eng.record.named(events.HOST_STATE,
                                                   'host1')]
        self.assertEqual(['suspect', 'fencing', 'fenced'], news[:3])
        fenced = eng.record.named(events.HOST_STATE, 'host1')[2]
        self.assertFalse(fenced.get('kdump'))


class TestHeartbeatServiceProcess(HeartbeatCloudTest):
    """The real instanceha-service process, which starts the listener."""

    def service(self, cloud):
        path = os.path.join(cloud.dir, 'service.log')
        proc = rec.start_service(self, cloud)

        def read():
            with open(path, errors='replace') as f:
                return f.read()
        return proc, read

    def test_agent_and_service_on_loopback(self):
        cloud, vm, agents, _ = self.heartbeat_cloud(options={
            'health.port': 0,
            'debug': True,  # the plan lines are logged at debug level
        }, engine=False)
        proc, log = self.service(cloud)
        rec.wait_for(lambda: 'heartbeat-listener listening on '
                     '[%s]:%d' % self.collectors[0] in log(), 60,
                     'the service listening for heartbeats')
        cloud.nova.control.kill('host1')
        cloud.nova.wait_for_service('host1', 'down', client=cloud.client)
        rec.wait_for(lambda: 'host host1: Nova reports its compute service '
                     'down but its heartbeat' in log(), 60,
                     'host1 reported isolated')
        # Several polls (2 s each) later it is still untouched.
        mark = len(log())
        rec.wait_for(lambda: log()[mark:].count('plan: host1 isolated') >= 3, 60,
                     'three more plans with host1 isolated')
        self.assertEqual('on', cloud.bmc.power_state('host1'))
        self.assertFalse(cloud.service('host1').forced_down)
        # A process failure: disabled with our marker (nothing scheduled
        # there), never fenced (doc/process-failure.md).
        self.assertEqual('disabled', cloud.service('host1').status)
        self.assertTrue(cloud.service('host1').disabled_reason.startswith(
            'instanceha:service_down'))
        self.assertEqual('host1', cloud.server(vm).host)

        self.stop(agents['host1'])
        rec.wait_for(lambda: cloud.service('host1').forced_down,
                     rec.RECOVERY_TIMEOUT, 'host1 fenced once its agent '
                     'stopped')
        rec.wait_for(lambda: cloud.server(vm).host != 'host1',
                     rec.RECOVERY_TIMEOUT, 'vm evacuated')
        self.assertIsNone(proc.poll())
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(0, proc.wait(60))


class TestKdumpEndToEnd(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.sender = test_kdump.find_sender()
        if self.sender is None:
            self.skipTest('fence_kdump_send not found (Debian package '
                          'fence-agents)')
        self.useFixture(fixtures.FakeLogger())

    def test_dumping_host_is_not_power_cycled(self):
        port = free_udp_port()
        cloud = self.useFixture(rec.Cloud(hosts=3, options={
            'detection.detectors': ['nova', 'kdump'],
            'kdump.check_kdump': True,
            'kdump.listen_addresses': ['127.0.0.1'],
            'kdump.port': port,
            'kdump.address_map': ['127.0.0.1=host1'],
            'kdump.reverse_dns': False,
            'kdump.kdump_timeout': 60,
            'kdump.message_timeout': 4,
        }))
        vm, = cloud.boot('host1')
        eng = self.useFixture(StartedEngine(cloud.config_file))
        # host1 panics: nova-compute stops, the BMC still says on, and the
        # kdump kernel announces itself every second until stopped.
        cloud.nova.control.kill('host1')
        log = open(os.path.join(cloud.dir, 'fence_kdump_send.log'), 'wb')
        self.addCleanup(log.close)
        sender = subprocess.Popen(
            [self.sender, '-p', str(port), '-c', '0', '-i', '1',
             '127.0.0.1'], stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: sender.poll() is None and (
            sender.kill(), sender.wait(10)))

        rec.wait_for(lambda: S.FENCED.value in [
            d['new'] for d in eng.record.named(events.HOST_STATE, 'host1')],
            rec.RECOVERY_TIMEOUT, 'host1 fenced')
        fenced = [d for d in eng.record.named(events.HOST_STATE, 'host1')
                  if d['new'] == S.FENCED.value][0]
        self.assertTrue(fenced.get('kdump'), fenced)
        self.assertEqual('on', cloud.bmc.power_state('host1'))
        rec.wait_for(lambda: cloud.server(vm).host != 'host1' and
                     eng.state('host1') is S.EVACUATED,
                     rec.RECOVERY_TIMEOUT, 'vm evacuated')
        # Still dumping: the recovery waits, the host is not touched.
        cycles = eng.engine.cycles
        rec.wait_for(lambda: eng.engine.cycles >= cycles + 2, 60,
                     'two more cycles')
        self.assertIs(S.EVACUATED, eng.state('host1'))
        self.assertEqual('on', cloud.bmc.power_state('host1'))

        # The dump is written; the host reboots by itself.
        sender.terminate()
        sender.wait(10)
        rec.wait_for(lambda: eng.state('host1') is S.WAITING_UP,
                     rec.RECOVERY_TIMEOUT, 'waiting for host1 to come up')
        cloud.nova.control.revive('host1')
        rec.wait_for(lambda: cloud.recovered('host1'),
                     rec.RECOVERY_TIMEOUT, 'host1 back in service')
        news = [d['new'] for d in eng.record.named(events.HOST_STATE,
                                                   'host1')]
        self.assertNotIn(S.POWERING_ON.value, news)
        self.assertEqual('on', cloud.bmc.power_state('host1'))
