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

"""Full reads list only the hosts being decided (simulated Nova, counted)."""

import dataclasses
import os
import types

import testtools

from instanceha.engine import decide
from instanceha.engine import reads
from instanceha.plugins.detectors import base as det_base
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

CASE = os.path.join(os.path.dirname(__file__), '..', 'scenarios', 'cases',
                    'r04-service-down')


class Witness(object):
    """A detector naming its suspects (None: it cannot say)."""

    def __init__(self, suspects=frozenset()):
        self._suspects = suspects
        self.supports_suspects = suspects is not None

    def suspects(self, services, now):
        return self._suspects


class Claims(object):
    def __init__(self, spares=()):
        self.spares = frozenset(spares)

    def claimed(self):
        return self.spares


class TestFocusedReads(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.sim = runner.Simulation(sim_scenario.load(CASE))
        self.world = self.sim.world
        self.cloud = self.sim.cloud
        self.conf = types.SimpleNamespace(
            delta=300, detection=types.SimpleNamespace(
                aggregates_max_age=300.0))

    def reader(self, detectors=None, filters=(), spares=()):
        drivers = types.SimpleNamespace(
            detectors=[Witness()] if detectors is None else detectors,
            filters=list(filters), reservation=Claims(spares),
            evacuation=None)
        return reads.FocusedReads(self.conf, drivers, self.world.clock)

    def calls(self, fn):
        before = self.cloud.api_calls
        result = fn()
        return result, self.cloud.api_calls - before

    def test_all_healthy_is_one_call(self):
        r = self.reader()
        _, calls = self.calls(lambda: r.snapshot(self.cloud))
        self.assertEqual(2, calls)  # the services and the aggregates
        snap, calls = self.calls(lambda: r.snapshot(self.cloud))
        self.assertEqual(1, calls)  # the aggregates are cached
        self.assertEqual(frozenset(), snap.servers_read)
        self.assertEqual((), snap.servers)
        self.assertEqual(4, len(snap.services))

    def test_a_down_host_is_listed_with_the_aggregates(self):
        r = self.reader()
        self.world.host('compute-1').forced_down = True
        snap, calls = self.calls(lambda: r.snapshot(self.cloud))
        # services, compute-1's servers, aggregates
        self.assertEqual(3, calls)
        self.assertEqual(frozenset({'compute-1'}), snap.servers_read)
        self.assertEqual(['vm-1a', 'vm-1b'],
                         sorted(s.name for s in snap.servers))
        self.assertTrue(snap.aggregates_of('compute-1'))
        # The aggregates are reused while young; the workflow's host and
        # the claimed spare are listed too.
        r.drivers.reservation = Claims({'compute-3'})
        snap, calls = self.calls(lambda: r.snapshot(
            self.cloud, extra={'compute-2'}))
        self.assertEqual(4, calls)
        self.assertEqual({'compute-1', 'compute-2', 'compute-3'},
                         snap.servers_read)
        self.assertTrue(snap.aggregates_of('compute-1'))

    def test_aggregates_read_again_when_old(self):
        self.conf.detection.aggregates_max_age = 0
        r = self.reader()
        self.world.host('compute-1').forced_down = True
        for _ in range(2):
            _, calls = self.calls(lambda: r.snapshot(self.cloud))
            self.assertEqual(3, calls)

    def test_a_witness_suspect_is_listed(self):
        r = self.reader(detectors=[Witness(frozenset({'compute-2'}))])
        snap, calls = self.calls(lambda: r.snapshot(self.cloud))
        self.assertEqual(3, calls)
        self.assertEqual(frozenset({'compute-2'}), snap.servers_read)

    def test_everything_when_a_witness_cannot_say(self):
        r = self.reader(detectors=[Witness(None)])
        snap, calls = self.calls(lambda: r.snapshot(self.cloud))
        self.assertIsNone(snap.servers_read)
        self.assertEqual(8, len(snap.servers))
        self.assertEqual(3, calls)  # services, one page, aggregates

    def test_everything_when_a_filter_looks_at_every_server(self):
        r = self.reader(filters=[types.SimpleNamespace(
            needs_all_servers=True)])
        snap, _ = self.calls(lambda: r.snapshot(self.cloud))
        self.assertIsNone(snap.servers_read)

    def test_a_failed_host_not_listed_is_not_decided(self):
        # Its servers unknown, a failed host is never taken for a host
        # without instances (recovered with nothing, or ignored).
        r = self.reader()
        snap = r.snapshot(self.cloud)
        self.world.host('compute-1').forced_down = True
        late = self.cloud.read_services()
        snap = dataclasses.replace(snap, services=late.services)

        class Detector(object):
            reports_failures_only = False

            def detect(self, snapshot, now):
                return {'compute-1': det_base.Evidence(
                    'compute-1', det_base.Verdict.FAILED, 'down')}
        drivers = types.SimpleNamespace(detectors=[Detector()], filters=[],
                                        gates=[])
        conf = types.SimpleNamespace(detection=types.SimpleNamespace(
            combine='veto'))
        plan = decide.make_plan(snap, drivers, conf,
                                self.world.clock.now())
        decision = plan.decision('compute-1')
        self.assertEqual('unknown', decision.decision.value)
        self.assertIn(decide.UNREAD_REASON, decision.reasons)
