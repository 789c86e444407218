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
from instanceha.engine import model
from instanceha.engine import runner as engine_runner
from instanceha.engine import watch
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

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


class TestInTheSimulator(testtools.TestCase):
    """The production engine on the simulated cloud (calls are counted)."""

    def run_case(self, poll, timeline):
        tmp = self.useFixture(fixtures.TempDir()).path
        case = os.path.join(tmp, 'case')
        shutil.copytree(CASE, case)
        with open(os.path.join(case, 'instanceha.conf')) as f:
            conf = f.read().replace('poll = 15', 'poll = %d' % poll)
        with open(os.path.join(case, 'instanceha.conf'), 'w') as f:
            f.write(conf)
        with open(os.path.join(case, 'timeline'), 'w') as f:
            f.write(timeline)
        sim = runner.Simulation(sim_scenario.load(case))
        return sim, sim.run()

    def test_steady_state_reads_only_the_services(self):
        sim, _ = self.run_case(45, '')
        # One full read at start-up, then the services alone: one call a
        # read, never the servers or aggregates while all are healthy.
        self.assertEqual(1, len(sim.snapshot_calls))
        services_reads = sim.cloud.api_calls - sum(sim.snapshot_calls)
        self.assertGreater(services_reads, 500)  # 600 s, a read a tick

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
