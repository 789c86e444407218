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

"""When running rebuilds are looked at: the average or the slowest."""

import datetime

import testtools

from instanceha.engine import evacuation_tasks
from instanceha.engine import model
from instanceha.engine import rebuild_pace
from instanceha.plugins.evacuation import fire_and_forget
from instanceha.plugins.evacuation import smart
from tests import conf_fixture

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def record(took: float) -> model.Migration:
    return model.Migration(
        id='m%s' % took, server_id='vm', source_host='h1', dest_host='h2',
        status='done', created_at=T0, updated_at=T0 + datetime.timedelta(seconds=took))


class TestRebuildPace(testtools.TestCase):

    def test_average_and_slowest_of_the_recent(self):
        pace = rebuild_pace.RebuildPace()
        self.assertIsNone(pace.slowest)
        for took in (2.0, 4.0, 3.0):
            pace.learn(record(took))
        self.assertEqual(3.0, pace.rebuild_time)
        self.assertEqual(4.0, pace.slowest)
        for _ in range(rebuild_pace.RebuildPace.RECENT):
            pace.learn(record(2.0))
        self.assertEqual(2.0, pace.slowest)  # the 4 s one is forgotten


class TestPace(testtools.TestCase):
    """Three rebuilds started 0.1 s apart; average 2 s, slowest 3 s."""

    def job(self, strategy, *, locked=False, pending=False,
            status='ACTIVE'):
        conf = self.useFixture(conf_fixture.ConfFixture()).conf
        job = strategy(conf).begin('h1', [])
        pace = rebuild_pace.RebuildPace()
        for took in (1.0, 3.0, 2.0):
            pace.learn(record(took))
        job.pace = pace
        for n in range(4 if pending else 3):
            task = job.tasks['vm%d' % n] = evacuation_tasks.InstanceTask(
                server_id='vm%d' % n, name='vm%d' % n,
                original_status=status)
            if n == 3:
                continue  # waits for a slot
            task.state = evacuation_tasks.TaskState.IN_FLIGHT
            task.started = 100.0 + n / 10.0
            task.locked_by_us = locked
        job.looks.plan(100.2, list(job.tasks.values()), pace,
                       job.strategy.timeout)
        return job.looks.next_check

    def test_only_the_last_end_moves_the_host_on(self):
        # Nothing waits on each end: looked at once, when the last one
        # started is expected to end at the slowest pace.
        self.assertAlmostEqual(103.2, self.job(
            fire_and_forget.FireAndForget))
        self.assertAlmostEqual(103.2, self.job(smart.SmartEvacuation))

    def test_each_end_matters(self):
        # An instance to unlock, to give its status back, or waiting
        # for a slot: the first expected end, at the average pace.
        for kw in ({'locked': True}, {'status': 'SHUTOFF'},
                   {'pending': True}):
            self.assertAlmostEqual(102.0, self.job(
                fire_and_forget.FireAndForget, **kw), msg=str(kw))
