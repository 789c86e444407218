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

"""The watchdog fencing level, its chain reading and the power proof.

The level reads a real heartbeat listener's view through the heartbeat
detector (the engine's WatchdogWatch); the listener hears real signed
heartbeats of an armed agent and answers them as the leader.
"""

import fixtures
import testtools

from instanceha.engine import guard
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol as p
from instanceha.plugins.detectors import heartbeat
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import devices
from instanceha.plugins.fencing import topology
from instanceha.plugins.fencing import watchdog
from instanceha.sim import clock as sim_clock
from tests import conf_fixture
from tests.unit import test_heartbeat_answers as answers

KEY = answers.KEY
FILE = '''hosts:
  h1:
    levels:
    - {driver: watchdog, name: wd}
'''


class Fixture(fixtures.Fixture):
    """A leading listener, an armed agent h1, a topology reading them."""

    def __init__(self, tmp, **heartbeat):
        self.tmp = tmp
        self.heartbeat = dict({'watchdog_min_deadline': 60,
                               'watchdog_margin': 15}, **heartbeat)

    def _setUp(self):
        self.clock = answers.Clock()
        self.sim = sim_clock.SimClock()
        # A driver's sleep moves both clocks, as time does.
        self.sim.on_sleep = self.pass_time
        self.lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], (KEY,), max_clock_skew=15,
            clock=lambda: self.clock.mono, wall=lambda: self.clock.wall)
        self.leading = True
        self.lst.answerer = lambda host: (p.Answer() if self.leading
                                          else None)
        self.lst.leadership = lambda: 15.0 if self.leading else 0.0
        self.agent = answers.Agent(clock=self.clock)
        path = self.tmp + '/fencing.yaml'
        with open(path, 'w') as f:
            f.write(FILE)
        self.conf = conf_fixture.make_conf(
            fencing={'config_file': path, 'poll_interval': 0.05,
                     'device_timeout': 30},
            detection={'detectors': ['nova', 'heartbeat']},
            heartbeat=self.heartbeat)
        self.det = heartbeat.HeartbeatDetector(self.conf, listener=self.lst)
        self.topo = topology.Topology.from_conf(
            self.conf, clock=self.sim,
            devices=devices.DeviceFactory(self.sim, self.det))

    def beat(self, watchdog=p.WD_ARMED, deadline=60.0):
        self.lst.handle(self.agent.beat(p.Report(
            watchdog=watchdog, deadline=deadline)), '127.0.0.1',
            lambda data: None)

    def pass_time(self, seconds):
        self.clock.advance(seconds)
        self.sim.advance_to(self.sim.t + seconds)


class TestWatchdogLevel(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        self.f = self.useFixture(Fixture(
            self.useFixture(fixtures.TempDir()).path))

    def silent(self, seconds, step=5.0):
        """The host says nothing; other hosts keep the leadership proven."""
        other = answers.Agent(host='h2', clock=self.f.clock)
        while seconds > 0:
            self.f.pass_time(min(step, seconds))
            seconds -= step
            self.f.lst.handle(other.beat(), '127.0.0.1', lambda data: None)

    def test_off_only_after_deadline_and_margin(self):
        self.f.beat()
        self.silent(20)
        # 55 s left: more than the device may take; fails at once.
        started = self.f.sim.monotonic()
        exc = self.assertRaises(exceptions.FencingError, self.f.topo.fence,
                                'h1')
        self.assertIn('counted reset in 55 s', str(exc))
        self.assertEqual(started, self.f.sim.monotonic())
        self.silent(50)
        reading = self.f.topo.power_state('h1')
        self.assertFalse(reading.off)
        self.assertIn('counted reset in 5 s', reading.detail)
        self.silent(5)
        reading = self.f.topo.power_state('h1')
        self.assertTrue(reading.off)
        self.assertLessEqual(reading.wait_left, 0)
        self.assertEqual(1, self.f.topo.fence('h1').level)

    def test_fence_waits_for_a_deadline_within_its_time(self):
        self.f.beat()
        self.silent(70)
        # 5 s left: the device's time-out (30 s) covers them.
        started = self.f.sim.monotonic()
        self.assertEqual(1, self.f.topo.fence('h1').level)
        self.assertGreaterEqual(self.f.sim.monotonic() - started, 5.0)

    def test_never_announced_armed_never_off(self):
        self.f.beat(watchdog=p.WD_OFF)
        self.silent(600)
        reading = self.f.topo.power_state('h1')
        self.assertFalse(reading.off)
        self.assertIn('never announced an armed watchdog', reading.detail)

    def test_deadline_shorter_than_counted_never_off(self):
        self.f.beat(deadline=30.0)
        self.silent(600)
        self.assertFalse(self.f.topo.power_state('h1').off)

    def test_a_host_heard_again_is_no_longer_off(self):
        self.f.beat()
        self.silent(80)
        self.assertTrue(self.f.topo.power_state('h1').off)
        self.f.beat()  # back (or never gone): answered, deadline moves
        self.assertFalse(self.f.topo.power_state('h1').off)

    def test_a_restarted_listener_waits_again(self):
        self.f.beat()
        self.silent(80)
        self.assertTrue(self.f.topo.power_state('h1').off)
        # The service restarts: its new listener heard nothing yet.
        self.f.det.listener = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], (KEY,), max_clock_skew=15,
            clock=lambda: self.f.clock.mono,
            wall=lambda: self.f.clock.wall)
        self.assertFalse(self.f.topo.power_state('h1').off)

    def test_power_on_changes_nothing(self):
        self.assertEqual(1, self.f.topo.unfence('h1').level)

    def test_validation(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        for group, detectors, want in (
                ({'watchdog_min_deadline': 0}, ['nova', 'heartbeat'],
                 'watchdog_min_deadline is 0'),
                ({}, ['nova'], 'needs the heartbeat detector')):
            path = tmp + '/f.yaml'
            with open(path, 'w') as f:
                f.write(FILE)
            conf = conf_fixture.make_conf(
                fencing={'config_file': path},
                detection={'detectors': detectors},
                heartbeat=dict({'watchdog_min_deadline': 60}, **group))
            exc = self.assertRaises(exceptions.ConfigurationError,
                                    config.load, conf, strict=True)
            self.assertIn(want, str(exc))

    def test_properties_are_described(self):
        props = watchdog.WatchdogFencing.get_properties()
        self.assertEqual({'margin', 'min_deadline'}, set(props))


class TestProofRefusesAPendingDeadline(testtools.TestCase):

    def test_off_with_a_deadline_ahead_is_no_proof(self):
        clock = sim_clock.SimClock()
        proof = guard.PowerProof('h1', lambda: ports.PowerReading(
            host='h1', off=True, wait_left=0.5), clock)
        self.assertRaises(guard.PowerUnproven, proof.require)
        proof = guard.PowerProof('h1', lambda: ports.PowerReading(
            host='h1', off=True, wait_left=0.0), clock)
        proof.require()
