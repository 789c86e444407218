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

"""The service loop: ticks the engine, stops cleanly on SIGTERM."""

import os
import signal
import threading

import fixtures
import testtools

from instanceha.daemon import reloading
from instanceha.daemon import service as service_mod
from instanceha.engine import events
from instanceha.engine import runner
from instanceha.engine.states import HostState as S
from tests.unit import test_recovery_fakes as fakes


class TestRunner(testtools.TestCase):

    def test_sigterm_mid_recovery_exits_zero_and_marks_nothing_failed(self):
        rig = fakes.Rig(tick_interval=0.05)
        rig.cloud.boot('host1', 3)
        rig.cloud.kill('host1')
        rig.clock.t = 100  # its last heartbeat is 100 s old
        record = events.RecordingEventSink()
        fence_started = threading.Event()
        release = threading.Event()
        orig_fence = rig.fencer.fence

        def slow_fence(host):
            fence_started.set()
            release.wait(10)
            return orig_fence(host)

        rig.fencer.fence = slow_fence

        def stop_when_fencing():
            fence_started.wait(10)
            os.kill(os.getpid(), signal.SIGTERM)
            release.set()

        before = signal.getsignal(signal.SIGTERM)
        killer = threading.Thread(target=stop_when_fencing, daemon=True)
        killer.start()
        code = service_mod.run(rig.conf, rig.drivers, with_health=False,
                               cloud=rig.cloud,
                               fencer=rig.fencer,
                               coordinator=rig.coordinator,
                               event_sink=record, clock=rig.clock)
        killer.join(10)
        self.assertTrue(fence_started.is_set())
        self.assertEqual(0, code)
        self.assertTrue(record.named(events.SHUTDOWN))
        reason = rig.cloud.services['host1'].disabled_reason or ''
        self.assertNotIn('FAILED', reason)
        self.assertEqual([], [c for c in rig.cloud.calls
                              if c[0] == 'evacuate'])
        # SIGTERM handling is given back for the rest of the process.
        self.assertIs(before, signal.getsignal(signal.SIGTERM))

    def test_loop_ticks_until_stopped(self):
        rig = fakes.Rig(tick_interval=0.05)
        rig.cloud.boot('host1', 1)
        stop = threading.Event()
        ticks = []
        orig = rig.engine.tick

        def tick():
            ticks.append(1)
            orig()
            if len(ticks) == 5:
                stop.set()

        rig.engine.tick = tick
        runner.loop(rig.engine, stop, interval=0.01, shutdown_timeout=1)
        self.assertEqual(5, len(ticks))
        self.assertEqual({}, rig.engine.host_states())
        self.assertNotIn(S.FAILED, rig.engine.host_states().values())

    def test_loop_reports_each_tick_and_survives_a_failing_one(self):
        rig = fakes.Rig(tick_interval=0.05)
        stop = threading.Event()
        seen = []

        class Observer:
            def tick_started(self):
                seen.append('start')

            def tick_finished(self, engine, error=None):
                seen.append(error)
                if len(seen) >= 4:
                    stop.set()

        class Broken:
            def tick_started(self):
                raise RuntimeError('observer bug')

            def tick_finished(self, engine, error=None):
                raise RuntimeError('observer bug')

        calls = []

        def tick():
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError('boom')

        rig.engine.tick = tick
        runner.loop(rig.engine, stop, interval=0.01, shutdown_timeout=1,
                    observers=[Broken(), Observer()])
        self.assertEqual(['start', 'RuntimeError: boom', 'start', None],
                         seen)
        self.assertEqual(2, len(calls))


class TestFanOut(testtools.TestCase):

    def test_every_reader_gets_every_event_even_if_one_fails(self):
        first, last = events.RecordingEventSink(), events.RecordingEventSink()

        class Broken:
            def emit(self, event, host=None, **details):
                raise RuntimeError('reader down')

        fan = events.FanOutEventSink(first)
        fan.add(Broken())
        fan.add(last)
        fan.emit(events.LEADER)
        fan.emit(events.HOST_STATE, 'h1', old='suspect', new='fencing')
        self.assertEqual(first.lines(), last.lines())
        self.assertEqual(['leader', 'host_state h1 new=fencing old=suspect'],
                         last.lines())


class TestServiceWiring(testtools.TestCase):

    def test_build_gives_the_engine_a_fan_out_that_logs_first(self):
        rig = fakes.Rig()
        record = events.RecordingEventSink()
        service = service_mod.build(rig.conf, rig.drivers, cloud=rig.cloud,
                                    fencer=rig.fencer,
                                    coordinator=rig.coordinator,
                                    event_sink=record, clock=rig.clock)
        self.assertIs(service.events, service.env.events)
        self.assertEqual([record], service.events.sinks)
        later = service.events.add(events.RecordingEventSink())
        service.env.events.emit(events.LEADER)
        self.assertEqual(['leader'], later.lines())
        self.assertEqual(['leader'], record.lines())
        service.executor.shutdown(wait=False)


class TestReload(testtools.TestCase):
    """SIGHUP: mutable options change live, others say they cannot."""

    def test_threshold_changes_live_workers_needs_a_restart(self):
        from oslo_config import cfg

        from instanceha import conf as ha_conf

        path = self.useFixture(fixtures.TempDir()).join('instanceha.conf')
        with open(path, 'w') as f:
            f.write('[DEFAULT]\nthreshold = 50\nworkers = 4\n')
        conf = cfg.ConfigOpts()
        ha_conf.parse_args(['--config-file', path], conf,
                           default_config_files=[])
        reloader = reloading.Reloader(conf)
        with open(path, 'w') as f:
            f.write('[DEFAULT]\nthreshold = 80\nworkers = 8\n')
        log = self.useFixture(fixtures.FakeLogger(level='INFO'))
        reloader.tick_started()  # nothing asked yet
        self.assertEqual(50, conf.threshold)
        reloader.request()
        reloader.tick_started()
        self.assertEqual(80, conf.threshold)
        self.assertEqual(4, conf.workers)
        self.assertIn('threshold', log.output)
        self.assertIn('workers', log.output)
        self.assertIn('immutable', log.output)
