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

"""Pausing instance HA: the value, the engine's hold, the stores, the CLI.

:class:`StoreContract` is run here against the file backend and by
``tests.functional.test_pause_backends`` against real redis and etcd.
"""

import dataclasses
import datetime
import json
import os
import subprocess
import sys

import fixtures
import testtools

from instanceha.adapters import pause_store
from instanceha.cmd import manage_pause
from instanceha.daemon import metrics as metrics_mod
from instanceha.engine import events
from instanceha.engine import pause as pause_mod
from instanceha.engine.states import HostState as S
from instanceha import exceptions
from tests.unit import test_recovery_fakes as fakes

T0 = fakes.T0


def a_pause(seconds=None, reason='switch upgrade', since=T0):
    until = (since + datetime.timedelta(seconds=seconds)
             if seconds is not None else None)
    return pause_mod.Pause(reason=reason, since=since, until=until,
                           by='alice@ops')


class MemorySource:
    def __init__(self):
        self.pause = None
        self.broken = False

    def current(self):
        if self.broken:
            raise exceptions.CoordinationError('backend down')
        return self.pause


class TestPauseValue(testtools.TestCase):

    def test_round_trip_and_expiry(self):
        p = a_pause(60)
        self.assertEqual(p, pause_mod.Pause.from_dict(
            json.loads(json.dumps(p.to_dict()))))
        self.assertFalse(p.expired(T0 + datetime.timedelta(seconds=59)))
        self.assertTrue(p.expired(T0 + datetime.timedelta(seconds=60)))
        self.assertFalse(a_pause().expired(T0 + datetime.timedelta(days=9)))

    def test_on_novas_clock(self):
        # Kept with clock=nova; read back the same, and judged on Nova's
        # clock: our clock 100 s ahead of Nova's ends it 100 s later by
        # our clock, not 100 s early.
        p = dataclasses.replace(a_pause(60), nova_clock=True)
        stored = p.to_dict()
        self.assertEqual('nova', stored['clock'])
        self.assertEqual(p, pause_mod.Pause.from_dict(
            json.loads(json.dumps(stored))))
        ours = T0 + datetime.timedelta(seconds=150)
        self.assertFalse(p.expired(ours, skew=100))
        self.assertTrue(p.expired(ours + datetime.timedelta(seconds=10),
                                  skew=100))
        # A record without the field (an earlier version) is on the
        # writer's clock, taken to be ours.
        self.assertNotIn('clock', a_pause(60).to_dict())
        self.assertTrue(a_pause(60).expired(ours, skew=100))

    def test_bad_records_say_what_is_wrong(self):
        self.assertIn('no "since"', str(self.assertRaises(
            ValueError, pause_mod.Pause.from_dict, {'reason': 'x'})))
        self.assertIn('bad time', str(self.assertRaises(
            ValueError, pause_mod.Pause.from_dict,
            {'reason': 'x', 'since': 'yesterday'})))


class SteppedClock:
    """A wall clock an operator (or NTP) steps; monotonic time is not."""

    def __init__(self):
        self.t = 0.0
        self.step = 0.0

    def now(self):
        return T0 + datetime.timedelta(seconds=self.t + self.step)

    def monotonic(self):
        return self.t


class TestPauseWatchClock(testtools.TestCase):
    """The pause's end on Nova's clock, whatever our wall clock does."""

    def setUp(self):
        super().setUp()
        self.source = MemorySource()
        self.source.pause = dataclasses.replace(a_pause(150),
                                                nova_clock=True)
        self.clock = SteppedClock()
        self.events = events.RecordingEventSink()
        self.watch = pause_mod.PauseWatch(self.source, self.events,
                                          self.clock)

    def test_a_step_between_polls_cuts_nothing(self):
        self.assertIsNotNone(self.watch.check(0.0, fresh=True))
        self.clock.t, self.clock.step = 20, 100  # 100 s ahead now
        self.assertIsNotNone(self.watch.check())
        self.clock.t = 149
        self.assertIsNotNone(self.watch.check())
        self.clock.t = 150
        self.assertIsNone(self.watch.check())

    def test_a_poll_after_a_step_measures_it(self):
        # A copy started after the step (no earlier reading) measures the
        # skew at its first poll: the same end.
        self.clock.t, self.clock.step = 20, 100
        self.assertIsNotNone(self.watch.check(100.0, fresh=True))
        self.clock.t = 149
        self.assertIsNotNone(self.watch.check(100.0, fresh=True))
        self.clock.t = 150
        self.assertIsNone(self.watch.check(100.0, fresh=True))
        self.assertEqual(1, len(self.events.named(events.PAUSE_EXPIRED)))

    def test_a_step_back_stretches_nothing(self):
        self.assertIsNotNone(self.watch.check(0.0, fresh=True))
        self.clock.t, self.clock.step = 20, -100
        self.assertIsNotNone(self.watch.check(-100.0, fresh=True))
        self.clock.t = 150
        self.assertIsNone(self.watch.check())


class TestEngineHold(testtools.TestCase):
    """The real engine on the fakes, with a pause source."""

    def setUp(self):
        super().setUp()
        self.rig = fakes.Rig()
        self.source = MemorySource()
        self.rig.env.pause = self.source
        self.rig.engine.pause.source = self.source
        self.rig.cloud.boot('host1', 2)

    def fenced(self):
        return [h for op, h in self.rig.fencer.calls if op == 'off']

    def named(self, event):
        return self.rig.events.named(event)

    def test_paused_failure_is_held_then_recovered_after_expiry(self):
        rig = self.rig
        self.source.pause = a_pause(60)
        rig.cloud.kill('host1')
        rig.run(50)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual([], self.fenced())
        self.assertTrue(self.named(events.RECOVERY_HELD))
        self.assertEqual(1, len(self.named(events.PAUSED)))
        rig.run(20)
        self.assertEqual(1, len(self.named(events.PAUSE_EXPIRED)))
        self.assertEqual(['host1'], self.fenced())

    def test_resume_lifts_it_at_the_next_poll(self):
        rig = self.rig
        self.source.pause = a_pause(None)
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual([], self.fenced())
        self.source.pause = None
        rig.run(2)
        self.assertEqual(1, len(self.named(events.RESUMED)))
        self.assertEqual(['host1'], self.fenced())

    def test_unreadable_backend_keeps_the_pause(self):
        rig = self.rig
        self.source.pause = a_pause(None)
        rig.run(2)
        self.source.broken = True
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual([], self.fenced())
        self.assertEqual([], self.named(events.RESUMED))

    def test_a_recovery_past_fencing_finishes(self):
        rig = self.rig
        rig.cloud.kill('host1')
        for _ in range(200):
            rig.engine.tick()
            rig.clock.t += 1
            if rig.engine.host_states().get('host1') is S.EVACUATING:
                break
        self.assertEqual(S.EVACUATING, rig.engine.host_states()['host1'])
        self.source.pause = a_pause(None, since=rig.clock.now())
        rig.run(60)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_a_host_whose_fencing_failed_is_not_fenced_again(self):
        rig = self.rig
        rig.fencer.fail['host1'] = 1
        rig.cloud.kill('host1')
        for _ in range(200):
            rig.engine.tick()
            rig.clock.t += 1
            if rig.engine.host_states().get('host1') is S.FENCE_FAILED:
                break
        self.assertEqual(['host1'], self.fenced())
        self.source.pause = a_pause(None, since=rig.clock.now())
        rig.run(120)
        self.assertEqual(['host1'], self.fenced())
        self.assertNotIn('host1', rig.engine.host_states())


class StoreContract:
    """What every backend's store must do.

    A second store object stands for a second copy of the service, or the
    same copy after a restart.
    """

    def make_store(self) -> pause_store.PauseStore:
        raise NotImplementedError

    def test_shared_durable_and_cleared(self):
        a, b = self.make_store(), self.make_store()
        self.assertIsNone(b.current())
        a.set(a_pause(600))
        self.assertEqual(a_pause(600), b.current())
        b.set(a_pause(None, reason='corosync change'))
        self.assertEqual('corosync change', self.make_store().current()
                         .reason)
        a.clear()
        self.assertIsNone(b.current())
        b.clear()  # clearing twice is fine


class TestFileStore(StoreContract, testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.url = 'file://' + self.dir

    def make_store(self):
        return pause_store.from_url(self.url, 'g1')

    def test_unreadable_record_names_the_file(self):
        path = os.path.join(self.dir, 'g1.pause.json')
        with open(path, 'w') as f:
            f.write('{not json')
        err = self.assertRaises(exceptions.CoordinationError,
                                self.make_store().current)
        self.assertIn(path, str(err))
        self.assertIn('instanceha-manage resume', str(err))

    def test_unsupported_backend_is_named(self):
        err = self.assertRaises(
            exceptions.ConfigurationError, pause_store.from_url,
            'zookeeper://u:secret@zk:2181')
        self.assertIn('zookeeper://u:***@zk:2181', str(err))
        self.assertNotIn('secret', str(err))


class TestDuration(testtools.TestCase):

    def test_durations(self):
        p = manage_pause.parse_duration
        self.assertEqual(90, p('90'))
        self.assertEqual(1800, p('30m'))
        self.assertEqual(5400, p('1h30m'))
        self.assertEqual(86400, p('1d'))
        for bad in ('', 'soon', '30x', '0', '-5m', 'm30'):
            self.assertRaises(ValueError, p, bad)


class TestCommands(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.conf = os.path.join(self.dir, 'instanceha.conf')
        with open(self.conf, 'w') as f:
            f.write('[coordination]\nbackend_url = file://%s\n' % self.dir)

    def manage(self, *args):
        """The real command, in a process of its own."""
        res = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', '--config-file',
             self.conf, *args], capture_output=True, text=True, timeout=60)
        return res.returncode, res.stdout + res.stderr

    def test_pause_needs_an_end_unless_indefinite(self):
        code, out = self.manage('pause', '--reason', 'switch upgrade')
        self.assertEqual(2, code)
        self.assertIn('--for DURATION', out)
        self.assertIsNone(pause_store.from_url('file://' + self.dir)
                          .current())

    def test_pause_status_resume(self):
        code, out = self.manage('pause', '--reason', 'switch upgrade',
                                '--for', '30m')
        self.assertEqual(0, code, out)
        code, out = self.manage('status', '--format', 'json')
        row = json.loads(out)
        self.assertTrue(row['paused'])
        self.assertEqual('switch upgrade', row['reason'])
        self.assertGreater(row['remaining'], 1700)
        code, out = self.manage('resume')
        self.assertEqual(0, code)
        self.assertIn('resumed', out)
        code, out = self.manage('status')
        self.assertIn('not paused', out)

    def test_indefinite(self):
        code, out = self.manage('pause', '--reason', 'r', '--indefinite')
        self.assertEqual(0, code, out)
        code, out = self.manage('status')
        self.assertIn('with no end', out)


class TestPauseMetrics(testtools.TestCase):

    def test_paused_gauge_and_times(self):
        source = MemorySource()
        now = [T0.timestamp() + 10]
        collector = metrics_mod.PauseCollector(source, now=lambda: now[0])

        def values():
            return {m.name: m.samples[0].value for m in collector.collect()}

        self.assertEqual({'instanceha_paused': 0}, values())
        source.pause = a_pause(60)
        got = values()
        self.assertEqual(1, got['instanceha_paused'])
        self.assertEqual(T0.timestamp() + 60,
                         got['instanceha_pause_end_timestamp_seconds'])
        now[0] += 100
        self.assertEqual(0, values()['instanceha_paused'])
        source.broken = True
        self.assertEqual({}, values())

    def test_a_pause_on_novas_clock_ends_by_novas_clock(self):
        # Our clock is 30 s ahead of Nova's: a pause Nova's clock says
        # ends at T0+60 is still in force at our T0+70.
        source = MemorySource()
        source.pause = dataclasses.replace(a_pause(60), nova_clock=True)
        now = [T0.timestamp() + 70]
        skew = [30.0]
        collector = metrics_mod.PauseCollector(
            source, now=lambda: now[0], skew=lambda: skew[0])

        def paused():
            return {m.name: m.samples[0].value
                    for m in collector.collect()}['instanceha_paused']

        self.assertEqual(1, paused())
        now[0] += 25
        self.assertEqual(0, paused())
