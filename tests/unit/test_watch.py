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

"""The services watch: cheap reads in steady state, detection off-poll."""

import datetime
import os
import shutil
import threading
import time

import fixtures
import testtools

from instanceha.engine import executor
from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import runner as engine_runner
from instanceha.engine import states
from instanceha.engine import watch
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario
from tests.unit import test_call_budget

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
CASE = os.path.join(os.path.dirname(__file__), '..', 'scenarios', 'cases',
                    'r04-service-down')


def svc(host, age=5.0, **kw):
    return model.Service(id=host, host=host, state=kw.pop('state', 'up'),
                         status=kw.pop('status', 'enabled'),
                         updated_at=NOW - datetime.timedelta(seconds=age),
                         **kw)


class TestAttention(testtools.TestCase):

    def test_only_hosts_not_plainly_healthy(self):
        snap = model.Snapshot(taken_at=NOW, services=(
            svc('ok'), svc('down', state='down'), svc('stale', age=31),
            svc('off', status='disabled', disabled_reason='maintenance'),
            svc('forced', forced_down=True)))
        seen = watch.attention(snap, NOW, 30)
        self.assertEqual(['down', 'forced', 'off', 'stale'], sorted(seen))
        self.assertTrue(seen['stale'][3])

    def test_skips_hosts_and_judges_by_novas_clock(self):
        # Our clock 20 s ahead of Nova's: a 45 s old heartbeat by our
        # clock is 25 s old by Nova's, within delta.
        snap = model.Snapshot(taken_at=NOW, services=(
            svc('a', age=45), svc('b', state='down')), clock_skew=20)
        self.assertEqual({}, watch.attention(snap, NOW, 30, skip={'b'}))

    def test_interval(self):
        self.assertEqual(0.5, watch.interval(0, 100))
        self.assertEqual(2.5, watch.interval(0, 5000))
        self.assertEqual(7.0, watch.interval(7, 5000))


def snap_at(*services, skew=None, at=NOW):
    return model.Snapshot(taken_at=at, services=services, clock_skew=skew)


class TestDownTime(testtools.TestCase):
    """What Nova's answers prove about its service_down_time."""

    def test_configured_less_a_margin(self):
        down = watch.DownTime(60)
        self.assertEqual(60 - watch.MARGIN, down.earliest())
        down.up(70)  # Nova waits longer: the operator's word still holds
        self.assertEqual(60 - watch.MARGIN, down.earliest())

    def test_nova_calling_down_sooner_warns_and_wins(self):
        down = watch.DownTime(60)
        down.up(12)
        with self.assertLogs('instanceha.engine.watch', 'WARNING') as log:
            down.down('a', 31)
            down.down('b', 30)  # once
        self.assertEqual(1, len(log.output))
        self.assertIn('nova_service_down_time is 60 s', log.output[0])
        self.assertIn('reported a down after 31.0 s', log.output[0])
        # The longest silence Nova was seen to report up, less the margin.
        self.assertEqual(12 - watch.MARGIN, down.earliest())

    def test_within_the_margin_is_no_proof(self):
        down = watch.DownTime(60)
        down.down('a', 59.5)  # whole-second stamps, our estimate of its clock
        self.assertFalse(down.too_long())
        self.assertEqual(60 - watch.MARGIN, down.earliest())

    def test_nova_waiting_longer_again_forgets_it(self):
        down = watch.DownTime(60)
        down.up(40)
        down.down('a', 30)  # sooner than seen up: learned again from here
        self.assertEqual(0, down.lo)
        self.assertEqual(0, down.earliest())
        down.up(45)
        self.assertFalse(down.too_long())
        self.assertEqual(60 - watch.MARGIN, down.earliest())


class TestSchedule(testtools.TestCase):
    """When the services are read (nova_service_down_time set or not)."""

    def watched(self, *services, configured=0.0, down_time=60.0,
                delta=30.0, longest=45.0):
        w = watch.ServiceWatch(configured, down_time)
        w.read_done(100.0, snap_at(*services), NOW, delta, longest)
        return w

    def test_off_by_default_every_interval(self):
        w = self.watched(svc('a', age=4), down_time=0)
        for need in (watch.NOW, watch.WAIT, watch.CALM):
            self.assertEqual(100.5, w.next_at(need))
        self.assertIsNone(w.down)

    def test_calm_read_when_the_oldest_heartbeat_could_turn(self):
        # Nova calls a host down after 10 s; the oldest heartbeat is 4 s
        # old: it could turn in 6 s (less the margin), read an interval
        # after.
        w = self.watched(svc('a', age=4), svc('b', age=1), down_time=10)
        self.assertEqual(105.5, w.next_at(watch.CALM))
        self.assertFalse(w.due(105.4, watch.CALM))
        self.assertTrue(w.due(105.5, watch.CALM))

    def test_needs(self):
        w = self.watched(svc('a', age=1))
        self.assertEqual(100.5, w.next_at(watch.NOW))
        self.assertEqual(100 + watch.WAIT_INTERVAL, w.next_at(watch.WAIT))
        self.assertEqual(129.5, w.next_at(watch.CALM))  # delta: 29 s left
        w.news = True  # not yet judged by a full read
        self.assertEqual(100.5, w.next_at(watch.CALM))

    def test_delta_when_shorter(self):
        w = self.watched(svc('a', age=4), down_time=60, delta=8)
        self.assertEqual(104.5, w.next_at(watch.CALM))

    def test_a_stale_host_is_not_read_every_interval(self):
        # Stale already (the full read judged it): its next turn is
        # Nova's down, 59 - 35 s later.
        w = self.watched(svc('a', age=35), down_time=60, delta=30,
                         longest=600)
        self.assertEqual(124.5, w.next_at(watch.CALM))

    def test_at_least_once_a_poll_at_most_every_interval(self):
        w = self.watched(svc('a', age=0), down_time=600, delta=600,
                         longest=45)
        self.assertEqual(145, w.next_at(watch.CALM))
        w = self.watched(svc('a', age=20), down_time=10)  # overdue
        self.assertEqual(100.5, w.next_at(watch.CALM))
        w = self.watched(svc('a', state='down'), down_time=10)  # none up
        self.assertEqual(145, w.next_at(watch.CALM))

    def test_hosts_waiting_for_an_operator_keep_it_calm(self):
        # Failed, left disabled, disabled by an operator, down for long.
        left = marker.Marker(state=states.HostState.LEFT_DISABLED,
                             when=NOW).render()
        failed = marker.Marker(state=states.HostState.FAILED,
                               when=NOW).render()
        w = self.watched(
            svc('a', age=1),
            svc('b', age=90, state='down', status='disabled',
                forced_down=True, disabled_reason=left),
            svc('c', age=900, state='down', status='disabled',
                forced_down=True, disabled_reason=failed),
            svc('d', age=9000, state='down', status='disabled',
                disabled_reason='disk swap'),
            svc('m', age=9000, state='down', status='disabled',
                disabled_reason='instanceha-maintenance '
                                '2026-01-01T12:00:00Z new disks'),
            svc('e', age=90000, state='down'))
        self.assertFalse(w.waiting)
        self.assertEqual(129.5, w.next_at(watch.CALM))

    def test_hosts_waiting_for_their_compute(self):
        down = marker.Marker(state=states.HostState.SERVICE_DOWN,
                             when=NOW).render()
        frozen = reasons.Frozen(
            since=NOW, kind='reboot',
            until=NOW + datetime.timedelta(minutes=10)).render()
        drained = ('instanceha-maintenance 2026-01-01T12:00:00Z %s reboot '
                   'announced' % reasons.DRAIN_NOTE)
        for reason in (down, frozen, drained):
            w = self.watched(svc('a', age=1),
                             svc('b', age=90, state='down',
                                 status='disabled', disabled_reason=reason))
            self.assertTrue(w.waiting, reason)
            self.assertEqual(100 + watch.WAIT_INTERVAL,
                             w.next_at(watch.CALM))
            # Back (Nova reports it up): no longer waiting.
            w.read_done(101.0, snap_at(svc('a', age=1), svc(
                'b', age=1, status='disabled', disabled_reason=reason)),
                NOW, 30, 45)
            self.assertFalse(w.waiting)

    def test_a_configured_interval_is_the_closest_pace(self):
        w = self.watched(svc('a', age=29), configured=7)
        # Its turn (delta) in a second, then an interval; never sooner.
        self.assertEqual(108, w.next_at(watch.CALM))
        self.assertEqual(107, w.next_at(watch.NOW))

    def test_a_write_is_not_a_heartbeat(self):
        # Enabled since the last read: updated_at moved to the write, but
        # Nova judges by the heartbeat the last read showed (4 s old at
        # 100): it could turn at 100 + 9 - 4, read at 105.5 (delta 300).
        w = self.watched(svc('a', age=4, status='disabled'), down_time=10,
                         delta=300)
        w.read_done(103.0, snap_at(svc('a', age=-3)),
                    NOW + datetime.timedelta(seconds=3), 300, 45)
        self.assertEqual(105.5, w.next_at(watch.CALM))
        # Its next heartbeat (at NOW + 3.5) counts again: 112.5 + 0.5.
        w.read_done(104.0, snap_at(svc('a', age=-3.5)),
                    NOW + datetime.timedelta(seconds=4), 300, 45)
        self.assertEqual(113.0, w.next_at(watch.CALM))

    def test_proof_of_a_shorter_down_time_needs_a_true_heartbeat(self):
        w = watch.ServiceWatch(0, 60)

        def read(at, *services):
            when = NOW + datetime.timedelta(seconds=at)
            w.read_done(100.0 + at, snap_at(*services, at=when), when, 300,
                        45)

        def host(beat, **kw):
            return svc('a', age=-beat, **kw)

        # Disabled by someone at 2 (Nova stamps the write), dead since
        # 1: down at 21 after 19 s of silence by updated_at, but that
        # proves nothing (its last heartbeat is not known).
        read(0, host(0))
        read(3, host(2, status='disabled', disabled_reason='x'))
        read(21, host(2, status='disabled', disabled_reason='x',
                      state='down'))
        self.assertFalse(w.down.too_long())
        # A heartbeat seen moving (30, then 40), then down with the same
        # one: Nova waited less than 21 s.
        read(30, host(30))
        read(40, host(40))
        with self.assertLogs('instanceha.engine.watch', 'WARNING'):
            read(61, host(40, state='down'))
        self.assertTrue(w.down.too_long())


class TestDetectionAtEveryPhase(testtools.TestCase):
    """A failure is read within an interval of Nova calling it down.

    The schedule alone, on a cloud of heartbeats every 10 s at spread
    phases, ticking every 0.1 s: one host dies at many phases of the
    heartbeats and of the reads; the first read showing it down (or
    stale) comes at most one interval (plus a tick) after Nova (or
    ``delta``) says so.
    """

    TICK = 0.1
    REPORT = 10.0

    class Cloud(object):
        def __init__(self):
            self.snap = None

        def read_services(self):
            return self.snap

    def run_cloud(self, died: float, nova_down: float, delta: float,
                  configured: float = 60.0, hosts: int = 7):
        w = watch.ServiceWatch(0, configured)
        cloud = self.Cloud()
        t, reads = 0.0, 0
        while t < died + 200:
            if w.due(100 + t, watch.CALM):
                services = []
                for i in range(hosts):
                    phase = self.REPORT * i / hosts
                    last = min(t, died) if i == 0 else t
                    beat = phase + self.REPORT * ((last - phase) //
                                                  self.REPORT)
                    age = t - beat
                    services.append(model.Service(
                        id='h%d' % i, host='h%d' % i,
                        state='down' if age > nova_down else 'up',
                        status='enabled',
                        updated_at=NOW + datetime.timedelta(seconds=beat)))
                at = NOW + datetime.timedelta(seconds=t)
                cloud.snap = snap_at(*services, at=at)
                w.read_done(100 + t, w.read(cloud, 100 + t), at, delta, 45)
                reads += 1
                age = t - services[0].updated_at.timestamp() + \
                    NOW.timestamp()
                if services[0].state == 'down' or age > delta:
                    return t, reads
            t = round(t + self.TICK, 6)
        self.fail('never seen (died at %s)' % died)

    def turn(self, died, nova_down, delta):
        beat = self.REPORT * (died // self.REPORT)  # h0's phase is 0
        return beat + min(nova_down, delta)

    def seen_at_every_phase(self, delta, few_reads):
        """Death at 40 heartbeat phases: seen within one interval each."""
        for i in range(40):
            died = 20 + 0.55 * i
            seen, reads = self.run_cloud(died, 60, delta=delta)
            late = seen - self.turn(died, 60, delta)
            self.assertGreater(late, 0, died)
            self.assertLessEqual(late, 0.5 + self.TICK, died)
            if few_reads:
                # ...with a read every few seconds at most, not every 0.5 s.
                self.assertLess(reads, seen / 0.5 / 4, died)

    def test_nova_down_first(self):
        self.seen_at_every_phase(300, few_reads=False)

    def test_delta_first(self):
        self.seen_at_every_phase(30, few_reads=True)


class TestInTheSimulator(testtools.TestCase):
    """The production engine on the simulated cloud (calls are counted)."""

    def run_case(self, poll, timeline, case=CASE, delta=None, **detection):
        tmp = self.useFixture(fixtures.TempDir()).path
        case_dir = os.path.join(tmp, 'case')
        shutil.copytree(case, case_dir)
        with open(os.path.join(case_dir, 'instanceha.conf')) as f:
            conf = f.read().replace('poll = 15', 'poll = %d' % poll)
        if delta is not None:
            conf = conf.replace('delta = 300', 'delta = %d' % delta)
        if detection:
            conf += '\n[detection]\n' + ''.join(
                '%s = %s\n' % kv for kv in sorted(detection.items()))
        with open(os.path.join(case_dir, 'instanceha.conf'), 'w') as f:
            f.write(conf)
        if timeline is not None:
            with open(os.path.join(case_dir, 'timeline'), 'w') as f:
                f.write(timeline)
        sim = runner.Simulation(sim_scenario.load(case_dir))
        sim.counter = test_call_budget.CallCounter(sim.cloud,
                                                   sim.world.clock)
        return sim, sim.run()

    @staticmethod
    def reads(sim, since=0.0):
        """Reads of the services alone (since a simulated time)."""
        return sim.counter.by_kind(since).get('read_services', 0)

    def test_steady_state_reads_only_the_services(self):
        sim, _ = self.run_case(45, '', services_interval=1,
                               nova_service_down_time=0)
        # One full read at start-up, then the services alone: one call a
        # read, never the servers or aggregates while all are healthy.
        self.assertEqual(1, len(sim.snapshot_calls))
        self.assertGreater(self.reads(sim), 500)  # 600 s, a read a tick

    def test_steady_state_reads_when_a_host_could_turn(self):
        # Told Nova's service_down_time: the services are read when a
        # heartbeat could turn (here: Nova's 60 s, delta is 300 s), and
        # once a poll (the default); with 0 they are read every tick.
        every, _ = self.run_case(45, '', nova_service_down_time=0)
        told, _ = self.run_case(45, '', nova_service_down_time=60)
        self.assertEqual(1, len(every.snapshot_calls))
        self.assertEqual(1, len(told.snapshot_calls))
        self.assertLess(self.reads(told) * 20, self.reads(every))

    #: What detection decides, in a story: the plans, the fencing, the
    #: evacuations (not the power-on, which may come a tick later: it
    #: waits for a read newer than its step, every tick in the
    #: simulator, at once in the service).
    DETECTION = ('plan ', 'new=suspect', 'new=fencing', 'new=fenced',
                 'power_off', 'evacuate_requested', 'new=evacuated')

    def detection(self, lines):
        return [line for line in lines
                if any(word in line for word in self.DETECTION)]

    def assert_hand_back_within(self, lines, seconds):
        """Every host is enabled within ``seconds`` of its boot."""
        booted = {}
        for line in lines:
            t, parts = float(line.split()[0]), line.split()
            if parts[1] == 'host' and parts[3] == 'booted':
                booted[parts[2]] = t
            elif 'host_state enabled=true' in line and parts[2] in booted:
                self.assertLessEqual(t - booted.pop(parts[2]), seconds,
                                     '\n'.join(lines))

    def test_fewer_reads_see_a_failure_as_soon(self):
        # The reads left out could not have shown anything: the failure
        # is seen when a read every tick sees it, at every phase of the
        # heartbeats, whether Nova's down or delta comes first, and the
        # host is handed back within 3 s of its boot all the same.
        for delta in (300, 30):
            for stop in (60, 63.5, 69, 77.25):
                timeline = ('%s stop-compute compute-1\n'
                            '%s stop-compute compute-2\n'
                            % (stop, stop + 400))
                every, expected = self.run_case(600, timeline, delta=delta,
                                                nova_service_down_time=0)
                told, result = self.run_case(600, timeline, delta=delta,
                                             nova_service_down_time=60)
                why = 'stop at %s, delta %s' % (stop, delta)
                self.assertEqual(self.detection(expected.lines),
                                 self.detection(result.lines), why)
                self.assertIn('compute-1 host_state enabled=true',
                              '\n'.join(result.lines), why)
                self.assert_hand_back_within(result.lines, 3)
                self.assertLess(self.reads(told) * 4, self.reads(every),
                                why)

    def test_a_left_disabled_host_keeps_it_calm(self):
        # The host evacuated and left disabled waits for an operator:
        # the same story, and from then on reads as if all were healthy.
        case = os.path.join(os.path.dirname(CASE), 'r11-leave-disabled')
        every, expected = self.run_case(15, None, case=case,
                                        nova_service_down_time=0)
        told, result = self.run_case(15, None, case=case,
                                     nova_service_down_time=60)
        self.assertEqual(expected.lines, result.lines)
        self.assertIn('new=left_disabled', '\n'.join(result.lines))
        self.assertLess(self.reads(told, since=130) * 10,
                        self.reads(every, since=130))

    def test_detection_does_not_wait_for_the_poll(self):
        # poll = 600: the old engine would have fenced at t=600.
        _, result = self.run_case(600, '60 stop-compute compute-1\n')
        fenced = [line for line in result.lines
                  if 'compute-1 host_state new=fencing' in line]
        self.assertTrue(fenced, '\n'.join(result.lines))
        when = float(fenced[0].split()[0])
        # Nova reports it down 60 s after its last heartbeat (t<=60).
        self.assertLessEqual(when, 122)


class TestLoopPacing(testtools.TestCase):
    """The service loop: a finished job or a due services read wakes it."""

    class Engine(object):
        def __init__(self, stop, hint=30.0):
            self.ticks = []
            self.stop = stop
            self.hint = hint

        def tick(self):
            self.ticks.append(time.monotonic())
            if len(self.ticks) >= 3:
                self.stop.set()

        def wait_hint(self):
            return self.hint

        def shutdown(self, timeout):
            pass

    def test_a_finished_job_wakes_the_loop(self):
        pool = executor.ThreadPoolExecutor(1)
        self.addCleanup(pool.shutdown)
        stop = threading.Event()
        engine = self.Engine(stop)
        thread = threading.Thread(target=engine_runner.loop, args=(engine, stop),
                                  kwargs={'interval': 30,
                                          'shutdown_timeout': 0,
                                          'wake': pool.finished})
        started = time.monotonic()
        thread.start()
        for _ in range(3):
            time.sleep(0.05)
            pool.submit(lambda: None).result()
        thread.join(10)
        self.assertFalse(thread.is_alive())
        self.assertLess(time.monotonic() - started, 5)  # not 3 x 30 s

    def test_the_next_services_read_wakes_the_loop(self):
        stop = threading.Event()
        engine = self.Engine(stop, hint=0.1)
        started = time.monotonic()
        engine_runner.loop(engine, stop, interval=30, shutdown_timeout=0)
        self.assertLess(time.monotonic() - started, 5)
