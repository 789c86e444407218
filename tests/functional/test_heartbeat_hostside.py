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

"""The host's side: the real agent process and the real listener.

The agent runs as ``instanceha-heartbeat-agent`` (a separate process);
the listener is the service's, bound to loopback, answering as the
leading copy does while the test says it leads. Isolation addresses are
real TCP listeners on loopback the test closes to cut the "network".
"""

import math
import os
import select
import socket
import threading
import time

from instanceha.heartbeat import protocol as p
from tests.functional import test_heartbeat as base

wait_for = base.wait_for


class Leader:
    """The answers of a leading copy; ``leading = False`` silences it."""

    def __init__(self):
        self.leading = True
        self.policy = p.Policy()
        self.pause = None

    def __call__(self, host):
        if not self.leading:
            return None
        return p.Answer(policy=self.policy, pause=self.pause)


class HostSideFixture(base.HeartbeatFixture):

    def setUp(self):
        super().setUp()
        self.leader = Leader()
        self.lst = self.listener()
        self.lst.answerer = self.leader
        # A leader without a lease proves its leadership without end.
        self.lst.leadership = lambda: (math.inf if self.leader.leading
                                       else 0.0)

    def gateway(self):
        """A loopback 'isolation address': open until closed."""
        srv = socket.socket()
        srv.bind(('127.0.0.1', 0))
        srv.listen(64)
        self.addCleanup(srv.close)
        return srv, 'tcp:127.0.0.1:%d' % srv.getsockname()[1]

    def state(self, host='compute-1'):
        rec = self.lst.record(host)
        return rec.report.state if rec is not None and rec.report else None

    def host_agent(self, *extra, host='compute-1', addresses=()):
        args = ['--isolation-timeout', '1', '--probe-interval', '0.2']
        for addr in addresses:
            args += ['--isolation-address', addr]
        return self.agent(host, self.lst.addresses, extra=args + list(extra))


class TestIsolationDetection(HostSideFixture):

    def test_connected_partitioned_isolated_and_back(self):
        srv, gw = self.gateway()
        self.host_agent(addresses=[gw])
        wait_for(lambda: self.state() == p.CONNECTED, what='connected')
        self.assertEqual(2, self.lst.record('compute-1').version)
        # The service stops answering (heartbeats still arrive: answers
        # lost one way); the gateway answers: partitioned.
        self.leader.leading = False
        wait_for(lambda: self.state() == p.PARTITIONED, what='partitioned')
        srv.close()
        wait_for(lambda: self.state() == p.ISOLATED, what='isolated')
        self.leader.leading = True
        wait_for(lambda: self.state() == p.CONNECTED, what='back')
        wait_for(lambda: self.lst.stats().get('link_changes') == {
            p.CONNECTED: 2, p.PARTITIONED: 1, p.ISOLATED: 1},
            what='each change reported once')
        self.assertIn('from partitioned to isolated', self.log.output)

    def test_never_heard_the_service_judges_nothing(self):
        self.leader.leading = False
        self.host_agent(addresses=['tcp:127.0.0.1:1'])
        wait_for(lambda: self.lst.record('compute-1'), what='heartbeats')
        # Still version 1 (nobody answered) and no judgement at all.
        self.assertEqual(1, self.lst.record('compute-1').version)
        self.leader.leading = True
        wait_for(lambda: self.state() == p.CONNECTED, what='connected')

    def test_old_service_never_answering_keeps_version_1(self):
        self.lst.answerer = None
        proc = self.host_agent()
        wait_for(lambda: self.lst.accepted >= 40, what='heartbeats')
        self.assertEqual(1, self.lst.record('compute-1').version)
        self.assertIsNone(proc.poll())


G1 = '11111111-2222-3333-4444-000000000001'
G2 = '11111111-2222-3333-4444-000000000002'


class TestIsolationResponse(HostSideFixture):
    """The response applied by the agent through a real libvirtd."""

    def setUp(self):
        super().setUp()
        from tests.functional import peers
        self.lv = self.useFixture(peers.LibvirtPeer())
        self.lv.add_guest('protected', G1)
        self.lv.add_guest('opted-out', G2)

    def cut_off(self, response, gateway_too=True, wait=0):
        srv, gw = self.gateway()
        self.leader.policy = p.Policy(response, wait, (G1,))
        self.host_agent('--libvirt-uri', self.lv.uri, addresses=[gw])
        wait_for(lambda: self.state() == p.CONNECTED, what='connected')
        # The policy reached the agent: its heartbeats name its digest.
        wait_for(lambda: self.lst.record('compute-1').report.policy_digest
                 == self.leader.policy.digest(), what='policy cached')
        self.leader.leading = False
        if gateway_too:
            srv.close()
            wait_for(lambda: self.state() == p.ISOLATED, what='isolated')
        else:
            wait_for(lambda: self.state() == p.PARTITIONED,
                     what='partitioned')

    def test_poweroff_reaches_protected_guests_only(self):
        self.cut_off(p.RESPONSE_POWEROFF)
        wait_for(lambda: self.lv.state('protected') == 'shut off',
                 what='protected guest powered off')
        self.assertEqual('running', self.lv.state('opted-out'))
        # The isolation ends: nothing is started again by the agent.
        self.leader.leading = True
        wait_for(lambda: self.state() == p.CONNECTED, what='back')
        self.assertEqual('shut off', self.lv.state('protected'))

    def test_shutdown_response(self):
        self.cut_off(p.RESPONSE_SHUTDOWN, wait=5)
        wait_for(lambda: self.lv.state('protected') == 'shut off',
                 what='protected guest shut down')
        self.assertEqual('running', self.lv.state('opted-out'))

    def test_partitioned_host_keeps_its_guests(self):
        self.cut_off(p.RESPONSE_POWEROFF, gateway_too=False)
        # Several probe rounds later, still partitioned and untouched.
        seq = self.lst.record('compute-1').sequence
        wait_for(lambda: self.lst.record('compute-1').sequence > seq + 40,
                 what='more heartbeats')
        self.assertEqual(p.PARTITIONED, self.state())
        self.assertEqual('running', self.lv.state('protected'))

    def test_no_response_while_paused(self):
        self.leader.pause = 3600.0
        self.cut_off(p.RESPONSE_POWEROFF)
        seq = self.lst.record('compute-1').sequence
        wait_for(lambda: self.lst.record('compute-1').sequence > seq + 20,
                 what='more heartbeats')
        self.assertEqual('running', self.lv.state('protected'))
        with open(os.path.join(self.dir, 'agent-compute-1.log')) as f:
            self.assertIn('instance HA is paused: no isolation response',
                          f.read())


class Relay:
    """A UDP path between the agent and the listener the test can cut.

    Cutting it cuts both ways while the listener keeps leading: the
    service side still believes what it last heard, as it would when the
    host's link fails.
    """

    def __init__(self, target):
        self.target = target
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(('127.0.0.1', 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.bind(('127.0.0.1', 0))
        self.connected = True
        self.agent = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return self.front.getsockname()

    def _run(self):
        while not self._stop.is_set():
            ready, _, _ = select.select([self.front, self.back], [], [], 0.1)
            for sock in ready:
                try:
                    data, sender = sock.recvfrom(70000)
                except OSError:
                    continue
                if not self.connected:
                    continue
                if sock is self.front:
                    self.agent = sender
                    self.back.sendto(data, self.target)
                elif self.agent is not None:
                    self.front.sendto(data, self.agent)

    def close(self):
        self._stop.set()
        self.thread.join(5)
        self.front.close()
        self.back.close()


class TestWatchdog(HostSideFixture):
    """The agent's watchdog on the stand-in device (see WatchdogPeer)."""

    TIMEOUT = 1.0
    DEADLINE = 3.0

    def setUp(self):
        super().setUp()
        from tests.functional import peers
        self.dog = self.useFixture(peers.WatchdogPeer(self.TIMEOUT))
        self.relay = Relay(self.lst.addresses[0])
        self.addCleanup(self.relay.close)
        self.leader.policy = p.Policy(p.RESPONSE_NONE, 0, (G1,))

    def start(self, *extra):
        args = ['--isolation-timeout', '1', '--probe-interval', '0.2',
                '--watchdog-device', self.dog.path,
                '--watchdog-timeout', str(self.TIMEOUT),
                '--watchdog-deadline', str(self.DEADLINE), *extra]
        proc = self.agent('compute-1', [self.relay.address], extra=args)
        self.dog.host_pids(proc.pid)
        return proc

    def report(self):
        rec = self.lst.record('compute-1')
        return rec.report if rec is not None else None

    def armed(self):
        wait_for(lambda: 'armed' in self.dog.events(), what='armed')
        wait_for(lambda: self.lst.watchdog('compute-1') is not None
                 and self.lst.watchdog('compute-1').current,
                 what='armed announced')

    def test_cut_off_host_resets_within_the_announced_deadline(self):
        proc = self.start()
        self.armed()
        self.assertEqual(self.DEADLINE, self.report().deadline)
        self.relay.connected = False
        cut = time.time()
        wait_for(lambda: 'reset' in self.dog.events(), what='reset')
        view = self.lst.watchdog('compute-1')
        reset_by = time.time() - (self.lst.now() - view.reset_by)
        reset = self.dog.event_times('reset')[0]
        # The service may count the host reset from reset_by (+ its
        # margin) on: the stand-in reset it before, give or take the
        # stand-in's own polling (50 ms): what the margin is for.
        self.assertTrue(view.current)
        self.assertLessEqual(reset, reset_by + 0.1)
        self.assertGreater(reset - cut, self.TIMEOUT)
        self.assertEqual(-9, proc.wait(5))

    def test_idle_host_releases_after_the_grace(self):
        self.start('--watchdog-grace', '0.5')
        self.armed()
        self.leader.policy = p.Policy()
        wait_for(lambda: self.dog.events()[-1:] == ['disarmed'],
                 what='released')
        wait_for(lambda: self.report().watchdog == p.WD_IDLE, what='idle')
        self.assertFalse(self.lst.watchdog('compute-1').current)
        # Still alive well after the device's timeout: no reset.
        seq = self.lst.record('compute-1').sequence
        wait_for(lambda: self.lst.record('compute-1').sequence > seq + 40,
                 what='more heartbeats')
        self.assertNotIn('reset', self.dog.events())

    def test_pause_releases_and_resume_rearms(self):
        self.start()
        self.armed()
        self.leader.pause = 600.0
        wait_for(lambda: self.dog.events()[-1:] == ['disarmed'],
                 what='released for the pause')
        wait_for(lambda: self.report().watchdog == p.WD_PAUSED,
                 what='paused reported')
        # Cut off during the pause: nothing resets.
        self.relay.connected = False
        time.sleep(self.DEADLINE + self.TIMEOUT)
        self.assertNotIn('reset', self.dog.events())
        self.relay.connected = True
        self.leader.pause = None
        wait_for(lambda: self.dog.events().count('armed') == 2,
                 what='re-armed at the resume')
        wait_for(lambda: self.lst.watchdog('compute-1').current,
                 what='armed announced again')

    def test_clean_stop_releases_once_acknowledged(self):
        proc = self.start()
        self.armed()
        self.assertEqual(0, self.stop(proc))
        self.assertEqual(['armed', 'disarmed'], self.dog.events())
        self.assertEqual(p.WD_RELEASING, self.report().watchdog)
        self.assertFalse(self.lst.watchdog('compute-1').current)

    def test_clean_stop_unacknowledged_leaves_it_armed(self):
        proc = self.start('--answer-timeout', '0.5')
        self.armed()
        self.relay.connected = False
        self.assertEqual(0, self.stop(proc))
        wait_for(lambda: 'reset' in self.dog.events(), what='reset')
        self.assertEqual(['armed', 'closed', 'reset'], self.dog.events())

    def test_killed_agent_does_not_disarm(self):
        proc = self.start()
        self.armed()
        proc.kill()
        wait_for(lambda: 'reset' in self.dog.events(), what='reset')
        self.assertEqual(['armed', 'closed', 'reset'], self.dog.events())

    def test_every_copy_stopping_cleanly_resets_nobody(self):
        self.start()
        self.armed()
        self.leader.leading = False
        self.lst.stand_down()
        wait_for(lambda: self.dog.events()[-1:] == ['disarmed'],
                 what='released: the service stopped')
        wait_for(lambda: self.report().watchdog == p.WD_STANDDOWN,
                 what='standdown reported')
        time.sleep(self.DEADLINE + self.TIMEOUT)
        self.assertNotIn('reset', self.dog.events())
        # The service is back: it arms again.
        self.leader.leading = True
        wait_for(lambda: self.dog.events().count('armed') == 2,
                 what='re-armed')
