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

"""A leader of a healthy cloud stays ready, and reads fully on regaining.

While every host is healthy the engine reads the compute services alone
and skips the full read of every poll. The health monitor must take that
read as the poll's good cycle (a leader would otherwise be reported not
ready ``stuck_after`` seconds after its last full read), and a copy that
leads again must read everything at once: a marker another copy left is
only seen in a full read.
"""

import os

import fixtures
import testtools

from instanceha.daemon import health
from instanceha.daemon import metrics as metrics_mod
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

TOPOLOGY = """simulation: {end: %(end)d}
hosts:
  compute-0: {}
  compute-1: {}
  compute-2: {}
flavors:
  m1.small: {vcpus: 2}
images:
  cirros: {}
instances:
  vm-0: {host: compute-0, flavor: m1.small, image: cirros}
  vm-1: {host: compute-1, flavor: m1.small, image: cirros}
"""
CONF = """[DEFAULT]
poll = 15
delta = 60

[fencing]
config_file = fencing.yaml
"""
FENCING = """hosts:
  compute-0: {driver: sim, name: bmc}
  compute-1: {driver: sim, name: bmc}
  compute-2: {driver: sim, name: bmc}
"""


class Watched(runner.Simulation):
    """The simulation with a health monitor watching the copy's ticks."""

    def __init__(self, sc):
        super().__init__(sc)
        metrics = metrics_mod.Metrics()
        self.monitor = health.Monitor(metrics, stuck_after=60,
                                      clock=self.clock.monotonic)
        #: (simulated second, engine.cycles) after each tick.
        self.ticks = []

    def _tick(self, copy):
        self.monitor.tick_started()
        super()._tick(copy)
        self.monitor.tick_finished(copy.engine)
        self.ticks.append((self.clock.monotonic(), copy.engine.cycles))


class TestQuietLeader(testtools.TestCase):

    def case(self, timeline, end):
        path = self.useFixture(fixtures.TempDir()).path
        for name, text in (('topology.yaml', TOPOLOGY % {'end': end}),
                           ('instanceha.conf', CONF),
                           ('fencing.yaml', FENCING),
                           ('timeline', timeline),
                           ('README.md', '# quiet: a healthy cloud\n')):
            with open(os.path.join(path, name), 'w') as f:
                f.write(text)
        return sim_scenario.load(path)

    def run_watched(self, timeline, end):
        sim = Watched(self.case(timeline, end))
        sim.run()
        return sim, sim.monitor

    def test_leader_of_a_healthy_cloud_stays_ready(self):
        sim, monitor = self.run_watched('', 600)
        # The engine really skipped full reads (else this proves nothing).
        cycles = sim.ticks[-1][1]
        self.assertLess(cycles, 600 / 15 / 2, sim.ticks[-5:])
        ready, body = monitor.readiness()
        self.assertTrue(ready, body)

    def test_leading_again_reads_everything_at_once(self):
        sim, monitor = self.run_watched(
            '200 coordination down\n230 coordination up\n', 400)
        before = max(c for t, c in sim.ticks if t < 200)
        after = [(t, c) for t, c in sim.ticks if t >= 230]
        # The first tick as leader again (within the lease and a tick or
        # two of the backend's return) made a full cycle.
        regained = [t for t, c in after if c > before]
        self.assertTrue(regained, after[:10])
        self.assertLess(regained[0], 230 + 20, after[:10])
        ready, body = monitor.readiness()
        self.assertTrue(ready, body)
