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

"""The thread boundary: a job that writes a workflow record fails.

With every executor the service and the simulator run jobs on: the
production thread pool (a job's own calls included), the simulator's
coroutines (greenlets and threads) and the inline executor; and through
the engine's own submission of a step.
"""

import datetime

import testtools

from instanceha.engine import boundary
from instanceha.engine import evacuation_tasks
from instanceha.engine import events
from instanceha.engine import executor
from instanceha.engine import workflow
from instanceha import exceptions
from instanceha.sim import clock as sim_clock
from instanceha.sim import executor as sim_executor
from tests.unit import test_recovery_fakes as fakes

T0 = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)


def record() -> workflow.HostWorkflow:
    return workflow.HostWorkflow(host='host1', state=workflow.S.FENCED,
                                 entered=T0, detected=T0)


class TestRecordRefusesJobs(testtools.TestCase):

    def test_written_outside_every_job(self):
        wf = record()
        wf.local.attempts = 1
        wf.record(kdump=True)
        self.assertEqual((1, True), (wf.local.attempts, wf.durable.kdump))

    def test_a_write_inside_a_job_names_the_field_and_the_job(self):
        wf = record()

        def job():
            wf.first_job = True

        exc = self.assertRaises(boundary.WrittenByJob,
                                boundary.as_job('fence step of host1', job))
        self.assertIn('HostWorkflow.first_job', str(exc))
        self.assertIn('fence step of host1', str(exc))
        self.assertFalse(wf.first_job)
        wf.first_job = True  # the tick again, once the job is over
        self.assertIsNone(boundary.current_job())

    def test_the_durable_part_too(self):
        wf = record()
        self.assertRaises(boundary.WrittenByJob, boundary.as_job(
            'j', lambda: wf.record(spare='spare1')))
        self.assertIsNone(wf.durable.spare)

    def test_inline_executor(self):
        wf = record()
        fut = executor.InlineExecutor().submit(boundary.as_job(
            'j', lambda: setattr(wf.local, 'unmarked', True)))
        self.assertIsInstance(fut.exception(), boundary.WrittenByJob)
        self.assertIn('StateLocal.unmarked', str(fut.exception()))
        self.assertFalse(wf.local.unmarked)

    def test_thread_pool_and_a_jobs_own_calls(self):
        wf = record()
        pool = executor.ThreadPoolExecutor(2)
        self.addCleanup(pool.shutdown)

        def job():
            # A job's independent calls run on the other pool, in a copy
            # of its context: in its scope too.
            return pool.run_calls(
                [lambda: setattr(wf.local, 'reason', 'call')])

        errors = pool.submit(boundary.as_job('j', job)).result(timeout=10)
        self.assertIsInstance(errors[0], boundary.WrittenByJob)
        fut = pool.submit(boundary.as_job(
            'j', lambda: setattr(wf.local, 'reason', 'job')))
        self.assertIsInstance(fut.exception(timeout=10),
                              boundary.WrittenByJob)
        self.assertEqual('', wf.local.reason)

    def _sim(self, greenlets: bool) -> None:
        clock = sim_clock.SimClock()
        ex = sim_executor.SimExecutor(clock, workers=1, greenlets=greenlets)
        wf = record()
        seen = []

        def job():
            clock.sleep(5)  # hands control back to the simulation
            seen.append(wf.local.reason)  # reading is not writing
            wf.local.reason = 'job'

        fut = ex.submit(boundary.as_job('j', job))
        # The job sleeps: the tick (the simulation's own flow) writes.
        self.assertFalse(fut.done())
        wf.local.reason = 'tick'
        clock.advance_to(5)
        ex.complete_due()
        self.assertIsInstance(fut.exception(), boundary.WrittenByJob)
        self.assertEqual((['tick'], 'tick'), (seen, wf.local.reason))

    def test_simulator_greenlets(self):
        if sim_executor.greenlet is None:
            self.skipTest('greenlet is not installed')
        self._sim(greenlets=True)

    def test_simulator_threads(self):
        self._sim(greenlets=False)


class TestEngineJobs(testtools.TestCase):
    """The engine's own steps run in a job's scope."""

    def test_a_step_whose_job_writes_its_record_fails(self):
        rig = fakes.Rig()
        rig.engine.tick()  # leading
        wf = record()
        rig.engine._begin_record(wf)
        results = []

        def bad(draft):
            wf.local.attempts = 99

        rig.engine._submit(wf, bad, results.append)
        rig.engine._harvest()
        self.assertEqual([], results)
        error, = rig.events.named(events.STEP_ERROR, 'host1')
        self.assertIn('WrittenByJob', error['reason'])
        self.assertIn('StateLocal.attempts', error['reason'])
        self.assertEqual(0, wf.local.attempts)

    def test_a_step_whose_job_drives_the_runtime_fails(self):
        rig = fakes.Rig()
        rig.engine.tick()
        wf = record()
        rig.engine._begin_record(wf)

        def bad(draft):
            rig.engine._transition(wf, workflow.S.HEALTHY)

        rig.engine._submit(wf, bad, None)
        rig.engine._harvest()
        error, = rig.events.named(events.STEP_ERROR, 'host1')
        self.assertIn('WrittenByJob', error['reason'])
        self.assertEqual({'host1': workflow.S.FENCED},
                         rig.engine.host_states())

    def test_a_jobs_draft_is_applied_at_its_harvest_even_if_it_raised(self):
        rig = fakes.Rig()
        rig.engine.tick()
        wf = record()
        rig.engine._begin_record(wf)

        def job(draft):
            draft.update(kdump=True)
            # The tick does not see it while the job has not ended.
            raise exceptions.CloudError('later')

        rig.engine._submit(wf, job, None)
        self.assertFalse(wf.durable.kdump)
        rig.engine._harvest()
        self.assertTrue(wf.durable.kdump)
        self.assertFalse(rig.engine._running('host1'))


class TestJobView(testtools.TestCase):
    """The tick shares the slots on the view a job hands over."""

    def test_the_view_follows_every_change_of_an_instance(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        rig.cloud.boot('host1', 3)
        rig.run(2)
        rig.cloud.kill('host1')
        seen, job = set(), None
        for _ in range(30):
            rig.run(1)
            wf = rig.engine._workflows.get('host1')
            if wf is None or wf.job is None:
                continue
            job = wf.job
            self.assertEqual(
                evacuation_tasks.JobView(in_flight=job.in_flight,
                                         wants_more=job.wants_more()),
                job.view)
            seen.add(job.view.in_flight)
        self.assertIn(3, seen)
        # Handed over the moment a task changes, whoever changes it.
        task = next(iter(job.tasks.values()))
        before = job.view.in_flight
        task.state = evacuation_tasks.TaskState.IN_FLIGHT
        task.state = evacuation_tasks.TaskState.DONE
        self.assertEqual(job.in_flight, job.view.in_flight)
        self.assertLessEqual(job.view.in_flight, before)
