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

"""The workflow runtime: tables in, every rule of the tick applied once.

A toy kind (two writes and a wait) runs on the production thread pool
and on the inline executor; the rules pinned here hold for every kind
that plugs in: records change only in the tick, a job cannot write one,
state-local data goes with its state, nothing is submitted or applied
without leadership, errors back off.
"""

import concurrent.futures
import contextlib
import dataclasses
import enum
import operator
import threading
import time
import types

import testtools

from instanceha.engine import boundary
from instanceha.engine import events
from instanceha.engine import executor
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha import exceptions


class S(enum.Enum):
    FIRST = 'first'
    SECOND = 'second'
    WAITING = 'waiting'
    DONE = 'done'


class _Clock:
    def __init__(self):
        self.t = 100.0

    def monotonic(self):
        return self.t


class _Coordinator:
    def __init__(self):
        self.locked = []

    @contextlib.contextmanager
    def host_lock(self, host):
        self.locked.append(host)
        yield


class _Manual:
    """An executor whose jobs run when the test says (``finish``)."""

    def __init__(self):
        self.jobs = []

    def submit(self, fn):
        fut = concurrent.futures.Future()
        self.jobs.append((fn, fut))
        return fut

    def finish(self, i=0):
        fn, fut = self.jobs.pop(i)
        try:
            fut.set_result(fn())
        except Exception as exc:
            fut.set_exception(exc)


@dataclasses.dataclass(slots=True)
class _Owned(boundary.TickOwned):
    value: int = 0


def _env(pool=None):
    return types.SimpleNamespace(
        clock=_Clock(), events=events.RecordingEventSink(),
        coordinator=_Coordinator(),
        executor=pool or executor.InlineExecutor())


class _Kind:
    """first --job--> second --job--> waiting (until told) --> done."""

    def __init__(self, job=None):
        self.calls = []
        self.seen_local = []
        self.job = job or (lambda: 'ok')
        self.release = False
        #: The thread each job's result was applied in.
        self.applied_in = []

    def first(self, view):
        return runtime.Job(run=self.job, then=self.after_first)

    def after_first(self, view, result):
        self.applied_in.append(threading.get_ident())
        self.calls.append(('first', result))
        return runtime.Go(S.SECOND, local={'from': 'first'},
                          emit=runtime.emit('moved', to='second'))

    def second(self, view):
        self.seen_local.append(dict(view.record.local))
        return runtime.Job(run=self.job, then=self.after_second, lock=False)

    def after_second(self, view, result):
        self.calls.append(('second', result))
        return runtime.Go(S.WAITING, durable=('written', result))

    def waiting(self, view):
        self.seen_local.append(dict(view.record.local))
        return runtime.Go(S.DONE) if self.release else runtime.Wait()

    def kind(self, **kw):
        return runtime.Kind(
            name='toy',
            transitions={S.FIRST: frozenset({S.SECOND}),
                         S.SECOND: frozenset({S.WAITING}),
                         S.WAITING: frozenset({S.DONE})},
            steps={S.FIRST: self.first, S.SECOND: self.second,
                   S.WAITING: self.waiting},
            final=frozenset({S.DONE}), **kw)


class TestRuntime(testtools.TestCase):

    def make(self, toy=None, leading=True, pool=None):
        env = _env(pool)
        self.lead = [leading]
        rt = runtime_loop.Runtime(env, leading=lambda: self.lead[0])
        toy = toy or _Kind()
        rt.register(toy.kind())
        return env, rt, toy

    def test_runs_until_nothing_changes(self):
        env, rt, toy = self.make()
        rt.start('toy', 'h1', S.FIRST, durable='start')
        rt.run()
        # Both jobs (inline: done at once) applied in one run.
        self.assertEqual([('first', 'ok'), ('second', 'ok')], toy.calls)
        rec = rt.get('toy', 'h1')
        self.assertIs(S.WAITING, rec.state)
        self.assertEqual(('written', 'ok'), rec.durable)
        self.assertEqual([('moved', 'h1', {'to': 'second'})],
                         env.events.events)
        # The first job held the host's lock, the second asked for none.
        self.assertEqual(['h1'], env.coordinator.locked)
        toy.release = True
        rt.run()
        self.assertIsNone(rt.get('toy', 'h1'))

    def test_a_settling_kind_applies_a_result_at_the_next_run(self):
        env = _env()
        rt = runtime_loop.Runtime(env, leading=lambda: True)
        toy = _Kind()
        rt.register(toy.kind(settle=True))
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        # Inline: done at once, but applied only by the next run (against
        # the world that run is given, read after the job).
        self.assertEqual([], toy.calls)
        self.assertIs(S.FIRST, rt.get('toy', 'h1').state)
        rt.run()
        self.assertEqual([('first', 'ok')], toy.calls)
        self.assertIs(S.SECOND, rt.get('toy', 'h1').state)
        rt.run()
        self.assertIs(S.WAITING, rt.get('toy', 'h1').state)

    def test_a_job_says_its_events_when_submitted(self):
        env, rt, toy = self.make(leading=False)
        toy.first = lambda view: runtime.Job(
            run=toy.job, then=toy.after_first,
            emit=runtime.emit('submitted', what='first'))
        rt.register(toy.kind())
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        self.assertEqual([], env.events.events)  # not submitted: not said
        self.lead[0] = True
        rt.run()
        self.assertEqual([('submitted', 'h1', {'what': 'first'}),
                          ('moved', 'h1', {'to': 'second'})],
                         env.events.events)

    def test_local_data_goes_with_its_state(self):
        env, rt, toy = self.make()
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        # second saw what first left; waiting saw nothing of it.
        self.assertEqual({'from': 'first'}, toy.seen_local[0])
        self.assertEqual([{}], list(map(dict, set(
            tuple(d.items()) for d in toy.seen_local[1:]))))

    def test_a_job_cannot_write_a_record(self):
        env, rt, toy = self.make()
        rt.start('toy', 'h1', S.FIRST)
        rec = rt.get('toy', 'h1')

        def sneaky():
            rec.state = S.DONE  # what a worker must never do
        toy.job = sneaky
        rt.run()
        # Refused (frozen), reported as the job's error and retried later.
        self.assertIs(S.FIRST, rt.get('toy', 'h1').state)
        self.assertEqual(1, rt.get('toy', 'h1').errors)
        rec = rt.get('toy', 'h1')
        self.assertRaises(dataclasses.FrozenInstanceError,
                          setattr, rec, 'durable', 'x')
        self.assertRaises(TypeError, operator.setitem, rec.local, 'x', 1)

    def test_results_applied_only_in_run_on_the_pool(self):
        pool = executor.ThreadPoolExecutor(2)
        self.addCleanup(pool.shutdown)
        gate = threading.Event()
        toy = _Kind(job=lambda: gate.wait(5) and threading.get_ident())
        env, rt, toy = self.make(toy=toy, pool=pool)
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        self.assertTrue(rt.running('toy', 'h1'))
        gate.set()
        deadline = time.monotonic() + 5
        while not all(f.done() for f in rt.futures()):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        # Finished, but not applied until the tick runs the runtime.
        self.assertIs(S.FIRST, rt.get('toy', 'h1').state)
        self.assertEqual([], toy.applied_in)
        rt.run()
        tick = threading.get_ident()
        self.assertEqual([tick], toy.applied_in)
        ran_in = toy.calls[0][1]
        self.assertNotEqual(tick, ran_in)  # the job ran on the pool

    def test_nothing_submitted_without_leadership(self):
        env, rt, toy = self.make(leading=False)
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        self.assertEqual([], toy.calls)
        self.assertFalse(rt.busy())
        self.lead[0] = True
        rt.run()
        self.assertIs(S.WAITING, rt.get('toy', 'h1').state)

    def test_result_of_a_lost_leadership_is_dropped(self):
        pool = executor.ThreadPoolExecutor(1)
        self.addCleanup(pool.shutdown)
        gate = threading.Event()
        env, rt, toy = self.make(toy=_Kind(job=lambda: gate.wait(5)),
                                 pool=pool)
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        gate.set()
        for fut in rt.futures():
            fut.result(5)
        self.lead[0] = False
        rt.run()
        self.assertEqual([], toy.calls)
        self.assertIsNone(rt.get('toy', 'h1'))

    def test_errors_back_off(self):
        def boom():
            raise exceptions.CloudError('nova says no')
        env, rt, toy = self.make(toy=_Kind(job=boom))
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        rec = rt.get('toy', 'h1')
        self.assertEqual((1, 105.0), (rec.errors, rec.retry_at))
        rt.run()  # not due yet
        self.assertEqual(1, rt.get('toy', 'h1').errors)
        env.clock.t = 105.0
        rt.run()
        rec = rt.get('toy', 'h1')
        self.assertEqual((2, 115.0), (rec.errors, rec.retry_at))

    def test_a_transition_not_in_the_table_is_refused(self):
        env, rt, toy = self.make()
        toy.after_first = lambda view, result: runtime.Go(S.DONE)
        rt.start('toy', 'h1', S.FIRST)
        self.assertRaises(exceptions.InstanceHAError, rt.run)

    def test_a_looping_table_cannot_hang_the_tick(self):
        env = _env()
        rt = runtime_loop.Runtime(env, leading=lambda: True)
        spins = []

        def spin(view):
            spins.append(1)
            return runtime.Job(run=lambda: None,
                               then=lambda v, r: runtime.Go(S.FIRST))
        rt.register(runtime.Kind(
            name='loop', transitions={S.FIRST: frozenset({S.FIRST})},
            steps={S.FIRST: spin}))
        rt.start('loop', 'h1', S.FIRST)
        rt.run()
        self.assertEqual(runtime_loop.MAX_ROUNDS, len(spins))

    def test_forget_keeps_running_jobs(self):
        pool = executor.ThreadPoolExecutor(1)
        self.addCleanup(pool.shutdown)
        gate = threading.Event()
        self.addCleanup(gate.set)
        env, rt, toy = self.make(toy=_Kind(job=lambda: gate.wait(5)),
                                 pool=pool)
        rt.start('toy', 'h1', S.FIRST)
        rt.start('toy', 'h2', S.WAITING)
        rt.run()
        rt.forget('toy')
        self.assertIsNotNone(rt.get('toy', 'h1'))
        self.assertIsNone(rt.get('toy', 'h2'))


class TestWhatKindsAsk(testtools.TestCase):
    """What a kind may ask beside its tables (order, pace, survival)."""

    def make(self, pool=None, **kw):
        env = _env(pool)
        rt = runtime_loop.Runtime(env, leading=lambda: True)
        toy = _Kind()
        rt.register(toy.kind(**kw))
        return env, rt, toy

    def test_every_job_runs_inside_the_boundary(self):
        owned = _Owned()
        env, rt, toy = self.make()

        def writes():
            owned.value = 1
        toy.job = writes
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        # Refused, reported as the job's error, retried later.
        self.assertEqual(0, owned.value)
        self.assertEqual((S.FIRST, 1), (rt.get('toy', 'h1').state,
                                        rt.get('toy', 'h1').errors))

    def test_boundary_names_the_kind_and_key(self):
        seen = []
        env, rt, toy = self.make()
        toy.job = lambda: seen.append(boundary.current_job())
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        self.assertEqual('toy h1', seen[0])
        self.assertIsNone(boundary.current_job())

    def test_only_results_finished_before_a_read_are_applied(self):
        manual = _Manual()
        env, rt, toy = self.make(pool=manual)
        rt.start('toy', 'h1', S.FIRST)
        rt.start('toy', 'h2', S.FIRST)
        rt.run()
        manual.finish(0)  # h1's job
        before = rt.finished()
        manual.finish(0)  # h2's, after the caller's read
        self.assertEqual(frozenset({('toy', 'h1')}), before)
        rt.run(only=before)
        self.assertEqual((S.SECOND, S.FIRST),
                         (rt.get('toy', 'h1').state,
                          rt.get('toy', 'h2').state))
        rt.run()
        self.assertIs(S.SECOND, rt.get('toy', 'h2').state)
        self.assertEqual(frozenset(), rt.finished(kinds=('other',)))

    def test_pace(self):
        pace = [10.0]
        env, rt, toy = self.make(pace=lambda: pace[0])
        toy.after_first = lambda view, result: runtime.Wait()
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        rt.run()
        self.assertEqual(1, len(env.coordinator.locked))  # stepped once
        env.clock.t += 9.9
        rt.run()
        self.assertEqual(1, len(env.coordinator.locked))
        env.clock.t += 0.1
        rt.run()
        self.assertEqual(2, len(env.coordinator.locked))
        pace[0] = 0.0  # read at every step
        rt.run()
        self.assertEqual(3 + runtime_loop.MAX_ROUNDS - 1,
                         len(env.coordinator.locked))

    def test_named_only_and_harvest_alone(self):
        manual = _Manual()
        env, rt, toy = self.make(pool=manual, named_only=True)
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        self.assertEqual([], manual.jobs)  # a run of every kind: not it
        rt.run(kinds=('toy',))
        manual.finish()
        rt.harvest(kinds=('toy',))
        # Applied (second), but its step not taken: no job submitted.
        self.assertIs(S.SECOND, rt.get('toy', 'h1').state)
        self.assertEqual([], manual.jobs)

    def test_survives_leadership(self):
        manual = _Manual()
        lead = [True]
        env = _env(manual)
        rt = runtime_loop.Runtime(env, leading=lambda: lead[0])
        toy = _Kind()
        rt.register(toy.kind(survives_leadership=True))
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        manual.finish()
        lead[0] = False
        rt.drop_results()
        # The result is dropped, the record kept and stepped again later.
        self.assertEqual([], toy.calls)
        self.assertIs(S.FIRST, rt.get('toy', 'h1').state)
        self.assertFalse(rt.busy())
        lead[0] = True
        rt.run()
        self.assertEqual(1, len(manual.jobs))

    def test_start_replacing_and_errors_counted_for_every_kind(self):
        manual = _Manual()
        seen = []

        def on_error(view, exc):
            seen.append(view.record.errors)
            return runtime.Wait()
        env, rt, toy = self.make(pool=manual, on_error=on_error)
        rt.start('toy', 'h1', S.FIRST, errors=2)
        rt.run()
        rt.start('toy', 'h1', S.WAITING, replace=True)
        self.assertFalse(rt.running('toy', 'h1'))
        manual.finish()
        rt.run()  # the replaced one's result is never applied
        self.assertEqual([], toy.calls)
        self.assertIs(S.WAITING, rt.get('toy', 'h1').state)
        rt.start('toy', 'h2', S.FIRST, errors=2)
        toy.job = lambda: 1 / 0
        rt.run()
        manual.finish()
        rt.run()
        self.assertEqual([3], seen)
        self.assertEqual(3, rt.get('toy', 'h2').errors)


class TestWhatHostRecoveryAsks(testtools.TestCase):
    """One step a run, data that stays, a job's writes, moves from outside.

    What a kind whose workflows pass several states in one step (a host
    fenced, then marked, then evacuating) asks of the runtime.
    """

    def make(self, pool=None, **kw):
        env = _env(pool)
        rt = runtime_loop.Runtime(env, leading=lambda: True)
        toy = _Kind()
        rt.register(toy.kind(**kw))
        # Steps changed by a test are declared again (the kind holds
        # the steps it was given).
        self.declare = lambda: rt.register(toy.kind(**kw))
        return env, rt, toy

    def test_a_chain_kind_takes_the_next_states_step_at_once(self):
        manual = _Manual()
        env, rt, toy = self.make(pool=manual, chain=True)
        toy.second = lambda view: runtime.Go(S.WAITING, local={'n': 1})
        waited = []

        def waiting(view):
            waited.append(dict(view.record.local))
            return runtime.Wait()
        toy.waiting = waiting
        self.declare()
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        manual.finish()
        rt.run()
        # The job's result went to second, whose step went on to waiting
        # at once (with its own data), whose step was taken then: one
        # step of each state on the way. The run's own stepping takes
        # waiting's step once more, no further rounds.
        self.assertIs(S.WAITING, rt.get('toy', 'h1').state)
        self.assertEqual([{'n': 1}, {'n': 1}], waited)
        rt.run()
        self.assertEqual(3, len(waited))

    def test_a_chain_kind_is_stepped_once_a_run(self):
        env, rt, toy = self.make(chain=True)
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        # Inline: the first job ended at once, but its result waits for
        # the next run (a plain kind applies it in this run's rounds).
        self.assertEqual([], toy.calls)
        rt.run()
        self.assertEqual([('first', 'ok')], toy.calls)
        self.assertIs(S.SECOND, rt.get('toy', 'h1').state)

    def test_stay_changes_local_data_without_a_transition(self):
        env, rt, toy = self.make()
        toy.first = lambda view: runtime.Stay(
            local={'tries': view.record.local.get('tries', 0) + 1},
            after=5.0, emit=runtime.emit('tried'))
        self.declare()
        rt.start('toy', 'h1', S.FIRST, local={'kept': True})
        rt.run()
        rt.run()  # not due yet
        rec = rt.get('toy', 'h1')
        self.assertEqual((S.FIRST, {'tries': 1, 'kept': True}, 105.0),
                         (rec.state, dict(rec.local), rec.retry_at))
        env.clock.t += 5
        rt.run()
        self.assertEqual(2, rt.get('toy', 'h1').local['tries'])
        self.assertEqual(2, len(env.events.events))

    def test_a_transition_hands_on_only_what_it_names(self):
        env, rt, toy = self.make()
        toy.after_first = lambda view, result: runtime.Go(
            S.SECOND, local={'new': 1}, keep=('attempts', 'absent'))
        toy.second = lambda view: runtime.Wait()
        self.declare()
        rt.start('toy', 'h1', S.FIRST,
                 local={'attempts': 3, 'deadline': 7.0})
        rt.run()
        self.assertEqual({'attempts': 3, 'new': 1},
                         dict(rt.get('toy', 'h1').local))

    def test_what_a_job_wrote_is_applied_whether_it_returned_or_raised(
            self):
        for run in (lambda: 'ok', lambda: 1 / 0):
            env, rt, toy = self.make(
                chain=True, on_error=lambda v, e: runtime.Wait())
            draft = []  # the job's own copy (its markers, say)
            toy.first = lambda view: runtime.Job(
                run=lambda: draft.append('marker') or run(),
                then=lambda v, r: runtime.Wait(),
                wrote=lambda durable: durable + tuple(draft))
            self.declare()
            rt.start('toy', 'h1', S.FIRST, durable=('fenced',))
            rt.run()
            self.assertEqual(('fenced',), rt.get('toy', 'h1').durable)
            rt.run()
            self.assertEqual(('fenced', 'marker'),
                             rt.get('toy', 'h1').durable)

    def test_apply_moves_a_workflow_from_outside_its_steps(self):
        manual = _Manual()
        env, rt, toy = self.make(pool=manual, chain=True)
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        # Never while its job runs: its result comes first.
        self.assertRaises(exceptions.InstanceHAError, rt.apply, 'toy', 'h1',
                          runtime.Go(S.SECOND))
        manual.finish()
        rt.run()
        self.assertIs(S.SECOND, rt.get('toy', 'h1').state)
        manual.finish()
        rt.run()
        self.assertIs(S.WAITING, rt.get('toy', 'h1').state)
        self.assertRaises(exceptions.InstanceHAError, rt.apply, 'toy', 'h1',
                          runtime.Go(S.FIRST))  # not in the table
        self.assertTrue(rt.apply('toy', 'h1', runtime.Go(S.DONE)))
        self.assertIsNone(rt.get('toy', 'h1'))
        self.assertFalse(rt.apply('toy', 'h1', runtime.Go(S.DONE)))

    def test_a_job_cannot_drive_the_runtime(self):
        env, rt, toy = self.make()
        rt.start('toy', 'h2', S.WAITING)
        attempts = [lambda: rt.start('toy', 'h3', S.FIRST),
                    lambda: rt.apply('toy', 'h2', runtime.Go(S.DONE)),
                    rt.run, rt.harvest, rt.forget, rt.drop_results]
        for attempt in attempts:
            toy.job = attempt
            rt.start('toy', 'h1', S.FIRST, replace=True)
            rt.run()
            rec = rt.get('toy', 'h1')
            self.assertEqual((S.FIRST, 1), (rec.state, rec.errors))
            self.assertIsNotNone(rt.get('toy', 'h2'))
            self.assertIsNone(rt.get('toy', 'h3'))

    def test_a_retry_may_count_as_a_failure(self):
        env, rt, toy = self.make()
        toy.first = lambda view: runtime.Retry(
            10.0, 'no proof', count=view.record.local.get('count', True))
        self.declare()
        rt.start('toy', 'h1', S.FIRST)
        rt.run()
        self.assertEqual((1, 110.0), (rt.get('toy', 'h1').errors,
                                      rt.get('toy', 'h1').retry_at))
        rt.start('toy', 'h2', S.FIRST, local={'count': False})
        rt.run()
        self.assertEqual(0, rt.get('toy', 'h2').errors)
