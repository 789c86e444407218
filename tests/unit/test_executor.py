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

"""A job's own calls: at once in production, in order elsewhere."""

import contextvars
import dataclasses
import threading
import time

import testtools

from instanceha.engine import evacuation_job
from instanceha.engine import executor
from instanceha.engine import guard
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.plugins.evacuation import fire_and_forget
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import world as sim_world
from tests import conf_fixture
from tests.unit import test_placement
from tests.unit import test_recovery_fakes

_VAR: contextvars.ContextVar = contextvars.ContextVar('test_var',
                                                      default=None)


class TestRunCalls(testtools.TestCase):

    def test_production_runs_them_at_once_in_the_jobs_context(self):
        pool = executor.ThreadPoolExecutor(4)
        self.addCleanup(pool.shutdown)
        # Every call waits for all the others: they can only all return
        # if they run at the same time.
        barrier = threading.Barrier(3, timeout=10)
        seen = []

        def call():
            seen.append(_VAR.get())
            barrier.wait()

        def boom():
            barrier.wait()
            raise ValueError('refused')

        def job():
            _VAR.set('proof of this step')
            return pool.run_calls([call, boom, call])

        errors = pool.submit(job).result(timeout=20)
        self.assertEqual([None, 'ValueError', None],
                         [type(e).__name__ if e else None for e in errors])
        self.assertEqual(['proof of this step'] * 2, seen)

    def test_production_streams_them_within_the_limit(self):
        # Seven calls, at most two at once on a pool of four threads:
        # each waits until the test lets it return; the next starts the
        # moment one returns.
        pool = executor.ThreadPoolExecutor(4)
        self.addCleanup(pool.shutdown)
        held = _Held()
        job = pool.submit(pool.run_calls,
                          [held.call(n) for n in range(7)], limit=2)
        for n in range(7):
            held.wait_started(n + 1)
            time.sleep(0.05)  # room for a call that should not start
            self.assertEqual(min(n + 2, 7), len(held.started))
            held.let_one_return()
        self.assertEqual([None] * 7, job.result(timeout=20))
        self.assertEqual(list(range(7)), held.started)
        self.assertEqual(2, held.peak)

    def test_production_starts_nothing_after_an_error(self):
        pool = executor.ThreadPoolExecutor(4)
        self.addCleanup(pool.shutdown)
        held = _Held()
        raise_now = threading.Event()

        def boom():
            held.enter('boom')
            raise_now.wait(20)
            raise ValueError('refused')
        calls = [held.call(0), boom, held.call(2), held.call(3)]
        job = pool.submit(pool.run_calls, calls, limit=2)
        held.wait_started(2)
        raise_now.set()  # boom's slot frees first: with an error
        time.sleep(0.05)  # room for a call that should not start
        held.let_one_return()  # call 0, waited for
        errors = job.result(timeout=20)
        self.assertEqual([None, 'ValueError', None, None],
                         [type(e).__name__ if e else None for e in errors])
        self.assertEqual([0, 'boom'], held.started)

    def test_production_shut_down_mid_stream_starts_no_more(self):
        pool = executor.ThreadPoolExecutor(4)
        held = _Held()
        job = threading.Thread(target=lambda: out.append(pool.run_calls(
            [held.call(n) for n in range(4)], limit=1)))
        out: list = []
        job.start()
        held.wait_started(1)
        pool.shutdown(wait=False)  # the service on its way out
        held.let_one_return()
        job.join(20)
        self.assertEqual([None, 'RuntimeError', None, None],
                         [type(e).__name__ if e else None for e in out[0]])
        self.assertEqual([0], held.started)

    def test_elsewhere_in_order_stopping_at_the_first_error(self):
        ran = []

        def call(n, fail=False):
            def run():
                ran.append(n)
                if fail:
                    raise ValueError(n)
            return run

        errors = executor.InlineExecutor().run_calls(
            [call(1), call(2, fail=True), call(3)])
        self.assertEqual([1, 2], ran)
        self.assertEqual([None, 'ValueError', None],
                         [type(e).__name__ if e else None for e in errors])
        self.assertIsInstance(executor.InlineExecutor(), ports.Executor)
        del ran[:]
        errors = executor.InlineExecutor().run_calls(
            [call(1), call(2), call(3)], limit=2)
        self.assertEqual([1, 2, 3], ran)
        self.assertEqual([None] * 3, errors)


class _Held:
    """Calls that each wait, once started, until the test lets one return."""

    def __init__(self):
        self._mu = threading.Condition()
        self._go = threading.Semaphore(0)
        self.started: list = []
        self.running = self.peak = 0

    def call(self, n):
        def run():
            self.enter(n)
            try:
                if not self._go.acquire(timeout=20):
                    raise AssertionError('call %s never let through' % n)
            finally:
                with self._mu:
                    self.running -= 1
        return run

    def enter(self, n) -> None:
        with self._mu:
            self.started.append(n)
            self.running += 1
            self.peak = max(self.peak, self.running)
            self._mu.notify_all()

    def wait_started(self, count: int, timeout: float = 10) -> None:
        with self._mu:
            if not self._mu.wait_for(lambda: len(self.started) >= count,
                                     timeout):
                raise AssertionError('%d call(s) started, not %d: %s'
                                     % (len(self.started), count,
                                        self.started))

    def let_one_return(self) -> None:
        self._go.release()


class _HeldCloud(sim_cloud.SimCloud):
    """The simulator's Nova; each evacuate call held until let through."""

    def __init__(self, world, held: _Held):
        super().__init__(world)
        self.held = held
        self._world_lock = threading.Lock()

    def evacuate(self, server_id, *, host=None):
        self.held.call(server_id)()
        with self._world_lock:  # the simulated world is not thread-safe
            return super().evacuate(server_id, host=host)


class _Leading(test_placement._Leader):
    leading = True

    def is_leader(self):
        return self.leading


class TestEvacuationsStreamed(testtools.TestCase):
    """Fire-and-forget on the production pool, the job's side.

    The cap bounds the calls running at once, not the calls of a step.
    """

    def setUp(self):
        super().setUp()
        conf = self.useFixture(conf_fixture.ConfFixture()).conf
        self.clock = sim_clock.SimClock()
        world = sim_world.World(self.clock, sim_events.EventLog(self.clock))
        world.flavors['f'] = sim_world.Flavor('f', vcpus=1)
        for n, name in enumerate(('h1', 'h2', 'h3')):
            world.add_host(sim_world.Host(name=name, id=str(n)))
        for n in range(7):
            world.add_server(sim_world.Server(
                id='vm%d' % n, name='vm%d' % n, host='h1',
                status='ACTIVE', flavor='f'))
        world.set_power('h1', False)
        h1 = world.hosts['h1']
        h1.fence_proof = h1.forced_down = True
        self.held = _Held()
        self.cloud = _HeldCloud(world, self.held)
        self.events = test_placement._Events()
        self.leader = _Leading()
        self.pool = executor.ThreadPoolExecutor(4)
        self.addCleanup(self.pool.shutdown)
        self.env = guard.assemble(
            cloud=self.cloud, clock=self.clock,
            fencer=test_recovery_fakes.FakeFencer(self.cloud),
            coordinator=self.leader, events=self.events,
            executor=self.pool)
        #: What the host's devices say when read.
        self.off = True
        snap = self.cloud.snapshot()
        self.job = fire_and_forget.FireAndForget(conf).begin(
            'h1', list(snap.servers_on('h1')))
        self.job.new_failure = True
        self.ctx = evacuation_job.StepContext(
            env=self.env, snapshot=snap, budget=2, reuse=True,
            prove_off=lambda: ports.PowerReading(
                host='h1', off=self.off, detail='bmc says so'))

    def requested(self):
        return [d['server'] for e, d in self.events.seen
                if e == 'evacuate_requested']

    def test_one_step_starts_every_instance_two_at_most_at_once(self):
        step = self.pool.submit(self.job.step, self.ctx)
        for n in range(7):
            self.held.wait_started(n + 1)
            time.sleep(0.05)  # room for a call that should not start
            self.assertEqual(min(n + 2, 7), len(self.held.started))
            self.held.let_one_return()
        progress = step.result(timeout=20)
        self.assertEqual(2, self.held.peak)
        self.assertEqual(['vm%d' % n for n in range(7)],
                         sorted(self.requested()))
        self.assertTrue(progress.complete)
        self.assertIsNone(progress.unproven)

    def attempted(self):
        return sorted(t.server_id for t in self.job.tasks.values()
                      if t.attempts)

    def test_a_host_found_on_mid_stream_stops_the_calls_not_started(self):
        # One call at a time: vm0 runs when the host is powered on
        # behind our back. The next call reads the devices again (its
        # proof is older than PROOF_TTL) and is refused; no later call
        # is started.
        step = self.pool.submit(self.job.step,
                                dataclasses.replace(self.ctx, budget=1))
        self.held.wait_started(1)
        self.off = False
        self.clock.advance_to(guard.PROOF_TTL + 1)
        self.held.let_one_return()
        progress = step.result(timeout=20)
        self.assertEqual(['vm0'], self.held.started)
        self.assertEqual(['vm0'], self.requested())
        self.assertEqual(['vm0', 'vm1'], self.attempted())
        self.assertFalse(progress.unproven.off)
        self.assertFalse(progress.complete)

    def test_leadership_lost_mid_stream_stops_the_calls_not_started(self):
        step = self.pool.submit(self.job.step,
                                dataclasses.replace(self.ctx, budget=1))
        self.held.wait_started(1)
        self.leader.leading = False
        self.held.let_one_return()
        self.assertRaises(exceptions.CoordinationError, step.result,
                          timeout=20)
        self.assertEqual(['vm0'], self.held.started)
        self.assertEqual(['vm0', 'vm1'], self.attempted())
