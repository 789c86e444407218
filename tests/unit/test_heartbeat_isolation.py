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

"""The agent's link state machine, its probes and its host side."""

import math
import os
import socket

import fixtures
import testtools

from instanceha.heartbeat import agent as agent_mod
from instanceha.heartbeat import hostagent
from instanceha.heartbeat import isolation
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol as p

U, C, P, ISO = p.UNKNOWN, p.CONNECTED, p.PARTITIONED, p.ISOLATED


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class FakeProber:
    """Answers like the addresses the test says are reachable."""

    def __init__(self, clock, addresses=('gw',)):
        self.clock = clock
        self.addresses = list(addresses)
        self.reachable = True
        self.wanted = False
        self.latest = None
        self.stopped = False

    def want(self, wanted):
        self.wanted = wanted

    def round(self):
        self.latest = (self.clock(), self.reachable)

    def stop(self):
        self.stopped = True


class TestLinkMonitor(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.clock = Clock()
        self.prober = FakeProber(self.clock)
        self.mon = isolation.LinkMonitor(30.0, self.prober, self.clock)

    def at(self, t, heard=None, probe=False):
        self.clock.t = 1000.0 + t
        if heard is not None:
            self.mon.heard(1000.0 + heard)
        if probe:
            self.prober.round()
        return self.mon.evaluate()

    def test_unknown_until_the_service_was_heard_once(self):
        self.assertEqual(U, self.at(100, probe=True))
        self.prober.reachable = False
        self.assertEqual(U, self.at(200, probe=True))
        self.assertFalse(self.prober.wanted)

    def test_connected_then_partitioned(self):
        self.assertEqual(C, self.at(1, heard=0))
        self.assertEqual(C, self.at(30))
        self.assertFalse(self.prober.wanted)
        # Silent: the addresses are asked; an old round does not count.
        self.clock.t = 1029.0
        self.prober.round()
        self.assertEqual(C, self.at(31))
        self.assertTrue(self.prober.wanted)
        self.assertEqual(P, self.at(32, probe=True))

    def test_isolated_only_when_no_address_answers(self):
        self.at(1, heard=0)
        self.prober.reachable = False
        self.assertEqual(ISO, self.at(31, probe=True))
        self.prober.reachable = True
        self.assertEqual(P, self.at(40, probe=True))
        self.assertEqual(C, self.at(41, heard=40.5))
        self.assertFalse(self.prober.wanted)

    def test_no_address_at_all_means_isolated_when_silent(self):
        self.prober.addresses = []
        self.at(1, heard=0)
        self.assertEqual(ISO, self.at(31))

    def test_a_late_answer_dates_from_its_heartbeat(self):
        self.at(1, heard=0)
        self.prober.reachable = False
        self.at(40, probe=True)
        # The answer arrives at 41 but answers a heartbeat sent at 5.
        self.assertEqual(ISO, self.at(41, heard=5))

    def test_changes_counted_reported_until_acknowledged(self):
        self.at(1, heard=0)
        self.prober.reachable = False
        self.at(31, probe=True)
        self.assertEqual(2, self.mon.changes)
        sent = self.mon.pending(7)
        self.assertEqual([(1, U, C), (2, C, ISO)],
                         [(c.number, c.old, c.new) for c in sent])
        self.at(35)
        self.assertEqual(4.0, self.mon.pending(8)[1].age)
        self.mon.acknowledged(6)
        self.assertEqual(2, len(self.mon.pending(9)))
        self.mon.acknowledged(7)
        self.assertEqual((), self.mon.pending(10))
        self.assertIn('link to the service: connected -> isolated',
                      self.log.output)


class TestProbes(testtools.TestCase):

    def test_tcp_probe_needs_a_completed_connection(self):
        srv = socket.socket()
        srv.bind(('127.0.0.1', 0))
        srv.listen()
        port = srv.getsockname()[1]
        addr = isolation.Address.parse('tcp:127.0.0.1:%d' % port)
        self.assertTrue(isolation.probe(addr, 1.0))
        srv.close()
        self.assertFalse(isolation.probe(addr, 1.0))

    def test_ping_answers_no_answer_and_cannot_run(self):
        log = self.useFixture(fixtures.FakeLogger())
        addr = isolation.Address.parse('192.0.2.1')
        self.assertTrue(isolation.probe(addr, 1.0, ping='true'))
        self.assertFalse(isolation.probe(addr, 1.0, ping='false'))
        # ping not allowed or missing: proves nothing, never "isolated".
        self.assertTrue(isolation.probe(addr, 1.0, ping='sh -c "exit 2"'))
        self.assertTrue(isolation.probe(addr, 1.0, ping='/nonexistent'))
        self.assertIn('counts as answering', log.output)

    def test_prober_round_any_answering(self):
        calls = []

        def check(addr, timeout):
            calls.append(addr.host)
            return addr.host == 'b'

        pr = isolation.Prober([isolation.Address.parse(a) for a in 'ab'],
                              1.0, check=check, clock=lambda: 5.0)
        self.assertTrue(pr.round())
        self.assertEqual((5.0, True), pr.latest)
        self.assertEqual(['a', 'b'], sorted(calls))

    def test_address_parsing(self):
        self.assertEqual(('tcp', '::1', 22), tuple(vars(
            isolation.Address.parse('tcp:[::1]:22')).values()))
        self.assertEqual(('icmp', '192.0.2.1', 0), tuple(vars(
            isolation.Address.parse('icmp:192.0.2.1')).values()))
        for bad in ('tcp:host', 'tcp::1', 'a b', ''):
            self.assertRaises(ValueError, isolation.Address.parse, bad)

    def test_default_gateway_from_the_route_table(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'r')
        with open(path, 'w') as f:
            f.write('Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\n'
                    'eth0\t0000A8C0\t00000000\t0001\t0\t0\n'
                    'eth0\t00000000\t0102A8C0\t0003\t0\t0\n')
        self.assertEqual('192.168.2.1', isolation.default_gateway(path))
        self.assertIsNone(isolation.default_gateway(path + '.missing'))


class TestHostSide(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.clock = Clock()
        self.mon = isolation.LinkMonitor(30.0, FakeProber(self.clock),
                                         self.clock)
        self.side = hostagent.HostSide(self.mon, clock=self.clock)

    def test_policy_cached_and_reported_by_digest(self):
        pol = p.Policy(p.RESPONSE_POWEROFF, 5, ('a',))
        self.side.answered(1, 999.0, p.Answer(policy=pol), ('c', 1))
        self.assertEqual(pol, self.side.policy)
        self.side.answered(2, 999.5, p.Answer(policy_ok=True), ('c', 1))
        self.assertEqual(pol, self.side.policy)
        self.assertEqual(pol.digest(), self.side.report(3).policy_digest)
        self.assertEqual(999.5, self.mon.heard_at)

    def test_pause_ends_by_itself_or_on_resume(self):
        self.side.answered(1, 990.0, p.Answer(pause=20.0), ('c', 1))
        self.assertTrue(self.side.paused)
        self.clock.t = 1010.0
        self.assertFalse(self.side.paused)
        self.side.answered(2, 1010.0, p.Answer(pause=math.inf), ('c', 1))
        self.clock.t = 1e9
        self.assertTrue(self.side.paused)
        self.side.answered(3, 1e9, p.Answer(), ('c', 1))
        self.assertFalse(self.side.paused)

    def test_service_stopped_only_when_every_collector_said_so(self):
        self.side.stood_down(('a', 1), 2)
        self.assertFalse(self.side.service_stopped)
        self.side.stood_down(('b', 1), 2)
        self.assertTrue(self.side.service_stopped)
        self.side.answered(1, 999.0, p.Answer(), ('b', 1))
        self.assertFalse(self.side.service_stopped)


class TestAgentTakesAnswers(testtools.TestCase):
    """Only answers to this run's recent heartbeats count."""

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'k')
        with open(path, 'w') as f:
            f.write('k' * 32)
        self.key = b'k' * 32
        self.clock = Clock()
        self.mon = isolation.LinkMonitor(30.0, FakeProber(self.clock),
                                         self.clock)
        self.side = hostagent.HostSide(self.mon, clock=self.clock)
        self.agent = agent_mod.Agent('h1', keys.KeyRing(path), [], 1.0,
                                     side=self.side)

    def answer(self, seq, boot=None, host='h1'):
        return p.decode(p.encode(host, boot or self.agent.boot_id, seq, 1.0,
                                 self.key, answer=p.Answer()),
                        (self.key,), replies=True)

    def test_answer_to_a_recent_heartbeat_is_heard_once(self):
        v1, v2 = self.agent._packets()
        self.assertEqual((1, 2), (v1[4], v2[4]))
        self.agent._answer(self.answer(1), ('127.0.0.1', 7411))
        self.agent._answer(self.answer(1), ('127.0.0.1', 7411))
        self.assertEqual(1, self.agent.answers)
        self.assertIsNotNone(self.mon.heard_at)
        self.assertIn(('127.0.0.1', 7411), self.agent._v2)

    def test_answers_to_other_runs_or_unsent_heartbeats_ignored(self):
        self.agent._packets()
        self.agent._answer(self.answer(2), ('127.0.0.1', 7411))
        self.agent._answer(self.answer(1, boot=b'x' * 16),
                           ('127.0.0.1', 7411))
        self.agent._answer(self.answer(1, host='h2'), ('127.0.0.1', 7411))
        self.assertEqual(0, self.agent.answers)
        self.assertIsNone(self.mon.heard_at)
        self.assertEqual(set(), self.agent._v2)
