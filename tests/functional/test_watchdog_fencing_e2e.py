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

"""The ``watchdog`` fencing level end to end: a host with no BMC at all.

The service's wiring (``instanceha.service.build``), real Nova
(NovaPeer), real agents. host1's fencing file entry is its watchdog
level alone; its agent beats through a UDP relay the test cuts (the
host's link to the service fails; the service keeps leading for the
others). Its watchdog is the stand-in device (WatchdogPeer): the test
machines have no watchdog device and cannot load softdog, and a real one
would reset the machine running the tests. The stand-in "resets the
host" when not fed in time: it kills host1's agent, and the test stops
host1's nova-compute with the cut, as a host cut off from the control
plane looks to Nova.
"""

import socket
import time

from instanceha.engine import events
from instanceha.engine import ports
from tests.functional import peers
from tests.functional import test_heartbeat_e2e as e2e
from tests.functional import test_heartbeat_hostside as hostside
from tests.functional import test_recovery as rec

#: The stand-in device's timeout, the agent's deadline, the margin.
TIMEOUT, DEADLINE, MARGIN = 2.0, 8.0, 2.0
WATCHDOG_ONLY = {'host1': {'driver': 'watchdog', 'name': 'watchdog'}}
OPTIONS = {'heartbeat.watchdog_min_deadline': int(DEADLINE),
           'heartbeat.watchdog_margin': int(MARGIN)}


class Timed(ports.EventSink):
    """The engine's host state changes, with when they happened."""

    def __init__(self):
        self.changes: list[tuple[float, float, str, str]] = []

    def emit(self, event, host=None, **details):
        if event == events.HOST_STATE:
            self.changes.append((time.monotonic(), time.time(), host,
                                 details.get('new')))

    def first(self, host, new):
        for mono, wall, h, state in self.changes:
            if h == host and state == new:
                return mono, wall
        return None


class TestWatchdogFencing(e2e.HeartbeatCloudTest):

    def agent(self, host, collectors, key=None, interval=0.05, extra=()):
        if host != 'host1':
            return super().agent(host, collectors, key, interval, extra)
        # host1 reaches the service through a path the test can cut.
        self.relay = hostside.Relay(collectors[0])
        self.addCleanup(self.relay.close)
        return super().agent(host, [self.relay.address], key, interval,
                             extra)

    def start(self, host1_extra):
        cloud, vm, agents, eng = self.heartbeat_cloud(
            options=OPTIONS, fencing=WATCHDOG_ONLY,
            agent_extra=lambda h: host1_extra if h == 'host1' else [])
        timed = eng.service.events.add(Timed())
        return cloud, vm, agents, eng, timed

    def cut(self, cloud):
        """host1 loses its link to the service and to Nova, and runs on."""
        self.relay.connected = False
        cloud.nova.control.kill('host1')
        return time.monotonic()

    def test_cut_off_host_recovered_only_after_its_watchdog_reset(self):
        dog = self.useFixture(peers.WatchdogPeer(TIMEOUT))
        cloud, vm, agents, eng, timed = self.start([
            '--watchdog-device', dog.path,
            '--watchdog-timeout', str(TIMEOUT),
            '--watchdog-deadline', str(DEADLINE)])
        dog.host_pids(agents['host1'].pid)
        listener = eng.drivers.detectors[1].listener
        rec.wait_for(lambda: 'armed' in dog.events(), 60, 'host1 armed')
        rec.wait_for(lambda: listener.watchdog('host1') is not None and
                     listener.watchdog('host1').current, 60,
                     'armed announced to the leader')

        cut = self.cut(cloud)
        rec.wait_for(lambda: cloud.server(vm).host not in ('host1', None)
                     and cloud.server(vm).status == 'ACTIVE',
                     rec.RECOVERY_TIMEOUT, 'vm ACTIVE elsewhere')

        # The stand-in reset the host (its agent killed) ...
        self.assertIn('reset', dog.events())
        reset_wall = dog.event_times('reset')[0]
        # ... before the service counted it fenced, and the service
        # counted it only from its last answer + deadline + margin.
        fenced_mono, fenced_wall = timed.first('host1', 'fenced')
        view = listener.watchdog('host1')
        self.assertTrue(view.current)
        self.assertLess(view.last_answer, cut + 0.5)
        self.assertGreaterEqual(fenced_mono, view.reset_by + MARGIN)
        self.assertGreater(fenced_wall, reset_wall)
        self.assertGreaterEqual(fenced_mono - cut, DEADLINE + MARGIN - 0.5)
        # The earlier attempts were refused with the time left, never
        # proven: nothing was evacuated before.
        self.assertTrue(all(state != 'fenced' or mono >= fenced_mono
                            for mono, _, h, state in timed.changes
                            if h == 'host1'))
        self.assertEqual([(vm, 'host1')], [
            (m.instance_uuid, m.source_compute)
            for m in cloud.evacuations(vm)])

    def test_partitioned_host_without_a_watchdog_is_never_recovered(self):
        gateway = socket.socket()
        gateway.bind(('127.0.0.1', 0))
        gateway.listen(16)
        self.addCleanup(gateway.close)
        cloud, vm, agents, eng, timed = self.start([
            '--isolation-timeout', '1', '--probe-interval', '0.2',
            '--isolation-address', 'tcp:127.0.0.1:%d'
            % gateway.getsockname()[1]])
        listener = eng.drivers.detectors[1].listener
        self.cut(cloud)
        # Failed to the service, fencing tried and refused, again and
        # again, well past any deadline: its instance stays where it is.
        rec.wait_for(lambda: timed.first('host1', 'fence_failed'), 60,
                     'a refused fence')
        time.sleep(2 * (DEADLINE + MARGIN))
        self.assertIsNone(timed.first('host1', 'fenced'))
        self.assertIsNone(listener.watchdog('host1'))
        self.assertFalse(cloud.service('host1').forced_down)
        self.assertEqual('host1', cloud.server(vm).host)
        self.assertEqual([], cloud.evacuations(vm))
