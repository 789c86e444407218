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

"""The watchdog's safety argument, checked against adversarial histories.

The real agent side (Agent packets and answers, HostSide, LinkMonitor,
Watchdog) and the real service side (HeartbeatListener.handle and its
watchdog view) exchange real signed datagrams through a world the test
controls: heartbeats or answers lost (one way or both), the leader
changing (a copy stops leading, a fresh copy takes over), the pause set
and lifted, the agent's wall clock stepped, the agent killed. Only the
device is simulated: it resets the host ``timeout`` after its last feed
while armed, at that exact moment.

The invariant (doc/host-side.md): whenever the leading copy's view of the
host's watchdog is current and its clock has passed ``reset_by``, the
host has already reset. Each side keeps its own monotonic clock, with an
arbitrary offset from the world's true time.
"""

import fixtures
import hypothesis
from hypothesis import strategies as st
import testtools

from instanceha.heartbeat import agent as agent_mod
from instanceha.heartbeat import hostagent
from instanceha.heartbeat import isolation
from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol as p
from instanceha.heartbeat import watchdog

KEY = b'k' * 32
HOST = 'compute-1'
T, D = 10.0, 30.0
AGENT_OFFSET, SERVICE_OFFSET = 1000.0, 55555.0


class Ring:
    keys = (KEY,)

    def reload(self):
        pass


class Device:
    """Resets the host ``timeout`` after the last feed while armed."""

    timeout = T
    path = 'sim'

    def __init__(self, world):
        self.world = world
        self.armed = False
        self.last_feed = None

    def arm(self):
        self.armed = True
        self.feed()

    def feed(self):
        self.last_feed = self.world.now

    def disarm(self):
        self.armed = False

    def abandon(self):
        pass  # no magic: keeps counting down

    def due(self):
        return self.last_feed + T if self.armed else None


class World:

    def __init__(self):
        self.now = 0.0          # true time
        self.wall_step = 0.0    # the agent's wall clock error
        self.reset_at = None
        self.killed = False
        self.leading = True
        self.paused = False
        self.dev = Device(self)
        prober = isolation.Prober([], 1.0)
        prober.want = lambda wanted: None
        agent_clock = self.agent_clock
        self.side = hostagent.HostSide(
            isolation.LinkMonitor(5.0, prober, agent_clock),
            watchdog=watchdog.Watchdog(self.dev, D, grace=1e9,
                                       clock=agent_clock),
            clock=agent_clock)
        self.agent = agent_mod.Agent(
            HOST, Ring(), [], 1.0, side=self.side, clock=agent_clock,
            wall=lambda: 1.8e9 + self.now + self.wall_step)
        self.policy = p.Policy(p.RESPONSE_NONE, 0, ('vm-1',))
        self.new_copy()

    def agent_clock(self):
        return self.now + AGENT_OFFSET

    def service_clock(self):
        return self.now + SERVICE_OFFSET

    def new_copy(self):
        """A fresh service copy takes over (the old one is gone)."""
        self.lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], (KEY,), max_clock_skew=15,
            clock=self.service_clock, wall=lambda: 1.8e9 + self.now)
        self.lst.answerer = lambda host: (p.Answer(
            policy=self.policy, pause=600.0 if self.paused else None)
            if self.leading else None)
        self.lst.leadership = lambda: 1e9 if self.leading else 0.0

    def advance(self, dt):
        target = self.now + dt
        due = self.dev.due()
        if self.reset_at is None and due is not None and due <= target:
            self.reset_at = due
        self.now = target

    @property
    def host_up(self):
        return self.reset_at is None and not self.killed

    def beat(self, lose_up, lose_down):
        if not self.host_up:
            return
        _v1, v2 = self.agent._packets()
        answers = []
        if not lose_up:
            self.lst.handle(v2, '127.0.0.1', answers.append)
        for data in answers:
            if not lose_down:
                self.agent._answer(p.decode(data, (KEY,), replies=True),
                                   ('127.0.0.1', 7411))
        self.side.tick()

    def check(self, test):
        view = self.lst.watchdog(HOST)
        if view is None or not view.current:
            return
        if self.service_clock() >= view.reset_by:
            test.assertIsNotNone(self.reset_at, 'counted reset, still up')
            test.assertLessEqual(self.reset_at + SERVICE_OFFSET,
                                 view.reset_by)


step = st.tuples(
    st.floats(0.05, 8.0),                       # time to the next beat
    st.sampled_from(['ok'] * 6 + ['lose_up', 'lose_down', 'lose_both',
                                  'leader_off', 'leader_on', 'new_copy',
                                  'pause', 'resume', 'wall_step', 'kill']),
)


class TestSafety(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())

    def run_history(self, history):
        w = World()
        for dt, what in history:
            w.advance(dt)
            w.check(self)
            if what == 'leader_off':
                w.leading = False
            elif what == 'leader_on':
                w.leading = True
            elif what == 'new_copy':
                w.new_copy()
            elif what == 'pause':
                w.paused = True
            elif what == 'resume':
                w.paused = False
            elif what == 'wall_step':
                w.wall_step = -w.wall_step or 20.0
            elif what == 'kill':
                w.killed = True
            w.beat(what in ('lose_up', 'lose_both'),
                   what in ('lose_down', 'lose_both'))
            w.check(self)
        # Long silence at the end: everything due has happened.
        for _ in range(20):
            w.advance(5.0)
            w.check(self)
        return w

    @hypothesis.settings(max_examples=200, deadline=None, database=None)
    @hypothesis.given(st.lists(step, min_size=5, max_size=80))
    def test_no_host_counted_reset_before_it_reset(self, history):
        self.run_history(history)

    def test_cut_off_host_is_counted_only_after_it_reset(self):
        w = self.run_history([(1.0, 'ok')] * 5)
        self.assertIsNotNone(w.reset_at)  # silence at the end: it reset
        view = w.lst.watchdog(HOST)
        self.assertTrue(view.current)

    def test_answers_lost_one_way_reset_the_host(self):
        w = self.run_history([(1.0, 'ok')] * 3 + [(1.0, 'lose_down')] * 40)
        self.assertIsNotNone(w.reset_at)

    def test_new_copy_counts_nothing_it_did_not_answer(self):
        w = self.run_history([(1.0, 'ok')] * 3 + [(1.0, 'kill'),
                                                  (1.0, 'new_copy')])
        self.assertIsNone(w.lst.watchdog(HOST))

    def test_pause_released_nothing_resets(self):
        w = self.run_history([(1.0, 'ok')] * 3 + [(1.0, 'pause')] * 3
                             + [(1.0, 'lose_both')] * 30)
        self.assertIsNone(w.reset_at)
        self.assertFalse(w.lst.watchdog(HOST).current)
