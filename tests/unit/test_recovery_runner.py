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

        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.engine.runner.STARTUP_HOOKS', []))
        before = signal.getsignal(signal.SIGTERM)
        killer = threading.Thread(target=stop_when_fencing, daemon=True)
        killer.start()
        code = runner.run(rig.conf, rig.drivers, cloud=rig.cloud,
                          fencer=rig.fencer, coordinator=rig.coordinator,
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
        service = runner.Service(engine=rig.engine, env=rig.env,
                                 executor=None, stop=threading.Event())
        ticks = []
        orig = rig.engine.tick

        def tick():
            ticks.append(1)
            orig()
            if len(ticks) == 5:
                service.stop.set()

        rig.engine.tick = tick
        runner.loop(service, rig.conf)
        self.assertEqual(5, len(ticks))
        self.assertEqual({}, rig.engine.host_states())
        self.assertNotIn(S.FAILED, rig.engine.host_states().values())
