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

"""The listener's answers to agents and what it keeps for the service."""

import math

import fixtures
import testtools

from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol as p

KEY = b'k' * 32
T0 = 1_800_000_000.0
POLICY = p.Policy(p.RESPONSE_POWEROFF, 60, ('i-1', 'i-2'))


class Agent:
    """An agent's packets, without its socket."""

    def __init__(self, host='h1', clock=None):
        self.host, self.clock = host, clock
        self.boot = p.new_boot_id()
        self.seq = 0

    def beat(self, report=None, version=2):
        self.seq += 1
        if version == 2 and report is None:
            report = p.Report(state=p.CONNECTED)
        return p.encode(self.host, self.boot, self.seq, self.clock.wall, KEY,
                        report=report)


class Clock:
    mono = 100.0
    wall = T0

    def advance(self, seconds):
        self.mono += seconds
        self.wall += seconds


class TestAnswers(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.clock = Clock()
        self.lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], (KEY,), max_clock_skew=15,
            clock=lambda: self.clock.mono, wall=lambda: self.clock.wall)
        self.sent = []
        self.leading = True
        self.pause = None
        self.lst.answerer = lambda host: (p.Answer(
            policy=POLICY, pause=self.pause) if self.leading else None)
        #: Leadership proven for this long at each answer (the lease).
        self.proven = 15.0
        self.lst.leadership = lambda: self.proven if self.leading else 0.0
        self.agent = Agent(clock=self.clock)

    def send(self, data):
        self.sent.clear()
        self.assertIsNotNone(self.lst.handle(data, '127.0.0.1',
                                             self.sent.append))
        return [p.decode(d, (KEY,), replies=True) for d in self.sent]

    def test_leader_answers_each_heartbeat_with_its_sequence(self):
        for _ in range(3):
            answers = self.send(self.agent.beat())
            self.assertEqual([(self.agent.boot, self.agent.seq)],
                             [(a.boot_id, a.sequence) for a in answers])
            self.assertEqual(POLICY.digest(),
                             answers[0].answer.policy.digest())
        self.assertEqual(self.clock.mono, self.lst.last_answer('h1'))
        self.assertEqual(3, self.lst.stats()['answers'])

    def test_reporting_names_the_agents_that_take_answers(self):
        # The leader reads the instances of these hosts for their policy.
        self.send(self.agent.beat(version=1))
        self.assertEqual(set(), self.lst.reporting())
        self.send(self.agent.beat())
        old = Agent('h2', clock=self.clock)
        self.send(old.beat(version=1))
        self.assertEqual({'h1'}, self.lst.reporting())

    def test_follower_answers_nothing(self):
        self.leading = False
        self.assertEqual([], self.send(self.agent.beat()))
        self.assertIsNone(self.lst.last_answer('h1'))
        self.assertIsNone(self.lst.leading_since)

    def test_current_policy_is_not_sent_again(self):
        got = self.send(self.agent.beat(p.Report(
            policy_digest=POLICY.digest())))[0].answer
        self.assertEqual((None, True), (got.policy, got.policy_ok))
        got = self.send(self.agent.beat(p.Report(
            policy_digest=b'old-one!')))[0].answer
        self.assertEqual(POLICY, got.policy)

    def test_version_1_probed_a_few_times_per_agent_run(self):
        answered = [bool(self.send(self.agent.beat(version=1)))
                    for _ in range(p.PROBES + 3)]
        self.assertEqual([True] * p.PROBES + [False] * 3, answered)
        again = Agent(clock=self.clock)
        self.clock.advance(1)
        self.assertTrue(self.send(again.beat(version=1)))

    def test_pause_is_told_and_releases_the_watchdog_view(self):
        armed = p.Report(state=p.CONNECTED, watchdog=p.WD_ARMED,
                         deadline=60.0)
        self.send(self.agent.beat(armed))
        self.assertTrue(self.lst.watchdog('h1').current)
        self.pause = math.inf
        self.clock.advance(1)
        self.assertEqual(math.inf, self.send(
            self.agent.beat(armed))[0].answer.pause)
        # Told to release: the armed report it answered is no proof.
        self.assertFalse(self.lst.watchdog('h1').current)
        self.pause = None
        self.clock.advance(1)
        self.send(self.agent.beat(armed))
        self.assertTrue(self.lst.watchdog('h1').current)

    def test_watchdog_counted_only_from_last_answer_plus_deadline(self):
        self.clock.advance(5)
        self.send(self.agent.beat(p.Report(watchdog=p.WD_ARMED,
                                           deadline=60.0)))
        view = self.lst.watchdog('h1')
        self.assertEqual((True, 105.0 + 60.0), (view.current, view.reset_by))
        # A deadline shorter than the service accepts is not counted on.
        self.assertFalse(self.lst.watchdog('h1', min_deadline=61).current)

    def test_watchdog_not_current_when_releasing_or_not_leading(self):
        self.send(self.agent.beat(p.Report(watchdog=p.WD_RELEASING,
                                           deadline=60.0)))
        self.assertFalse(self.lst.watchdog('h1').current)
        self.send(self.agent.beat(p.Report(watchdog=p.WD_ARMED,
                                           deadline=60.0)))
        self.assertTrue(self.lst.watchdog('h1').current)
        self.leading = False
        self.clock.advance(1)
        self.send(self.agent.beat(p.Report(watchdog=p.WD_ARMED,
                                           deadline=60.0)))
        self.assertFalse(self.lst.watchdog('h1').current)
        # Leading again: only heartbeats heard from then on count.
        self.leading = True
        self.clock.advance(1)
        self.send(self.agent.beat(p.Report(watchdog=p.WD_ARMED,
                                           deadline=60.0)))
        view = self.lst.watchdog('h1')
        self.assertEqual(self.clock.mono, self.lst.leading_since)
        self.assertTrue(view.current)

    def test_a_gap_in_the_proof_of_leadership_forgets_earlier_answers(self):
        # h1 answered, then silent. This copy's lease lapses and comes
        # back while no heartbeat reaches it: another copy may have led
        # and answered h1 meanwhile, which h1's watchdog then counts
        # from. Nothing seen here says so but the proof's gap.
        armed = p.Report(watchdog=p.WD_ARMED, deadline=60.0)
        self.send(self.agent.beat(armed))
        self.assertTrue(self.lst.watchdog('h1').current)
        self.clock.advance(self.proven + 1)
        self.assertFalse(self.lst.watchdog('h1').current)
        # Leading again, seen at another host's heartbeat: a new term.
        self.send(Agent(host='h2', clock=self.clock).beat(armed))
        self.assertFalse(self.lst.watchdog('h1').current)
        self.assertTrue(self.lst.watchdog('h2').current)

    def test_answers_whose_proofs_overlap_keep_the_count(self):
        armed = p.Report(watchdog=p.WD_ARMED, deadline=60.0)
        self.send(self.agent.beat(armed))
        other = Agent(host='h2', clock=self.clock)
        for _ in range(10):  # 50 s of h2's heartbeats, h1 silent
            self.clock.advance(5)
            self.send(other.beat())
        view = self.lst.watchdog('h1')
        self.assertTrue(view.current)
        self.assertEqual(100.0 + 60.0, view.reset_by)

    def test_no_leadership_proof_counts_no_watchdog(self):
        self.lst.leadership = None
        self.send(self.agent.beat(p.Report(watchdog=p.WD_ARMED,
                                           deadline=60.0)))
        self.assertFalse(self.lst.watchdog('h1').current)

    def test_no_watchdog_view_without_one(self):
        self.send(self.agent.beat())
        self.assertIsNone(self.lst.watchdog('h1'))
        self.assertIsNone(self.lst.watchdog('nobody'))

    def test_link_changes_logged_and_counted_once(self):
        change = p.Change(1, p.CONNECTED, p.ISOLATED, 40.0)
        report = p.Report(state=p.CONNECTED, changes=2, pending=(
            change, p.Change(2, p.ISOLATED, p.CONNECTED, 1.0)))
        self.send(self.agent.beat(report))
        self.send(self.agent.beat(report))
        self.assertEqual({p.ISOLATED: 1, p.CONNECTED: 1},
                         self.lst.stats()['link_changes'])
        self.assertEqual(1, self.log.output.count('from connected to '
                                                  'isolated'))

    def test_stand_down_tells_every_reporting_host(self):
        self.send(self.agent.beat())
        other = Agent('h2', self.clock)
        self.send(other.beat(version=1))
        self.sent.clear()
        self.lst.stand_down()
        got = [p.decode(d, (KEY,), replies=True) for d in self.sent]
        self.assertEqual([('h1', True)], [(a.host, a.answer.standdown)
                                          for a in got])
        self.assertIsNone(self.lst.leading_since)
