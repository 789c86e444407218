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

"""The periodic capacity check: metrics, a degraded readiness, events.

Run on the simulator's cloud (the built-in demo: four hosts of 64 vCPUs
in one zone, so N+3; the whole cloud lost is not absorbed).
"""

import os
import threading
import types

import fixtures
import testtools

from instanceha.cmd import simulate
from instanceha.daemon import capacity as capacity_check
from instanceha.daemon import health
from instanceha.daemon import metrics as metrics_mod
from instanceha.engine import events as ev
from instanceha.engine import runner as engine_runner
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario
from tests import conf_fixture
from tests.unit import test_health


class TestCapacityCheck(testtools.TestCase):

    def setUp(self):
        super().setUp()
        sim = runner.Simulation(sim_scenario.load(
            os.path.join(simulate.BUILTIN, 'demo')))
        self.cloud = sim.cloud
        self.fixture = self.useFixture(conf_fixture.ConfFixture(
            **{'capacity.minimum_tolerance': 4}))
        self.metrics = metrics_mod.Metrics()
        self.monitor = health.Monitor(self.metrics, stuck_after=60)
        self.events = test_health.RecordingSink()
        self.leading = True

        def publish(report, short):
            self.metrics.set_capacity(report, short)
            self.monitor.capacity_short = short
        self.check = capacity_check.CapacityCheck(
            self.fixture.conf, self.cloud,
            types.SimpleNamespace(filters=[], reservation=None),
            self.events, publish, leading=lambda: self.leading)

    def value(self, name, **labels):
        return self.metrics.registry.get_sample_value(name, labels or None)

    def test_short_then_met(self):
        report = self.check.check()
        self.assertEqual(3, report.domains[0].tolerance)
        self.assertEqual(3.0, self.value('instanceha_capacity_tolerance',
                                         domain='cloud'))
        self.assertEqual(1.0, self.value('instanceha_capacity_short'))
        self.assertEqual([(ev.CAPACITY_SHORT, None, {
            'reason': 'below N+4: cloud N+3', 'minimum': 4})],
            self.events.events)
        engine_runner.tick_once(test_health.FakeEngine(), [self.monitor])
        ready, body = self.monitor.readiness()
        # Degraded, never unready: a recovery is not held back by it.
        self.assertTrue(ready)
        self.assertEqual('degraded', body['status'])
        self.assertEqual(['failover capacity below N+4: cloud N+3'],
                         body['degraded'])
        self.check.check()  # no change: no second event
        self.assertEqual(1, len(self.events.events))
        self.fixture.conf.set_override('minimum_tolerance', 3, 'capacity')
        self.check.check()
        self.assertEqual(ev.CAPACITY_MET, self.events.events[-1][0])
        self.assertEqual(0.0, self.value('instanceha_capacity_short'))
        self.assertEqual('ready', self.monitor.readiness()[1]['status'])

    def test_a_follower_reads_nothing(self):
        self.leading = False
        calls = self.cloud.api_calls
        self.assertIsNone(self.check.check())
        self.assertEqual(calls, self.cloud.api_calls)

    def test_an_unreadable_cloud_is_said(self):
        def broken():
            raise RuntimeError('placement down')
        self.cloud.host_resources = broken
        self.assertIsNone(self.check.check())
        self.assertEqual(0.0, self.value('instanceha_capacity_known'))
        self.assertEqual([], self.events.events)


class TestSimulateCapacity(testtools.TestCase):

    def test_simulate_answers_for_a_scenario(self):
        out = self.useFixture(fixtures.StringStream('stdout'))
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', out.stream))
        self.assertEqual(0, simulate.main(['--capacity', 'demo']))
        text = out.getDetails()['stdout'].as_text()
        # Four hosts of 64 vCPUs, 22 used: any three lost fit on the
        # fourth; all four do not.
        self.assertIn('cloud       4  N+3        yes        no (8 of 8 '
                      'instances without room)', text)


class TestPeriodic(testtools.TestCase):

    def test_rounds_go_on_after_a_failure_and_stop(self):
        from instanceha.daemon import periodic

        rounds = []
        done = threading.Event()

        class Check(periodic.Periodic):
            first = 0.0

            def interval(self):
                return 0.01

            def check(self):
                rounds.append(1)
                if len(rounds) == 1:
                    raise RuntimeError('first round fails')
                if len(rounds) == 3:
                    done.set()

        check = Check()
        logged = self.useFixture(fixtures.FakeLogger())
        check.start()
        self.assertTrue(done.wait(10))
        check.stop()
        count = len(rounds)
        self.assertIn('periodic: the round failed', logged.output)
        done.wait(0.05)
        self.assertEqual(count, len(rounds))
