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

"""Nova calls a host failure costs, counted exactly in the simulator.

A host with five instances loses power; the service fences it, evacuates
its instances, powers it on and enables it again. Every call beyond those
of the same run without the failure (the steady reads) is the failure's;
divided by the instances moved, it must stay within the budget below.

The goal is 1.5 calls per instance in the default mode (fire-and-forget)
and 2 with tracking (smart). Not met at five instances: a failure has a
floor of calls that do not depend on its instances (list the host's
servers, mark it forced down, learn that the rebuilds ended, confirm
them, mark it waiting, enable it: 7 to 9), so the budget below is what is
measured now and may only go down. Before this change the same failure
cost 12.0 (fire-and-forget) and 13.2 (smart) calls per instance.
"""

import os

import fixtures
import testtools

from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

INSTANCES = 5

TOPOLOGY = """simulation:
  end: %(end)d
  # Nova's fake driver, as in benchmarks/recovery_timeline.py: a rebuild
  # is scheduled and done within about two seconds.
  timing: {schedule_time: 1, rebuild_time: 1}
hosts:
  compute-0: {}
  compute-1: {}
  compute-2: {}
  compute-3: {}
flavors:
  m1.small: {vcpus: 1}
images:
  cirros: {}
instance_groups:
  - {prefix: vm-0-, count: %(n)d, hosts: [compute-0], flavor: m1.small,
     image: cirros}
  - {prefix: vm-x-, count: 3, hosts: [compute-1, compute-2, compute-3],
     flavor: m1.small, image: cirros}
"""

FENCING = """hosts:
  compute-0: {driver: sim, name: bmc}
  compute-1: {driver: sim, name: bmc}
  compute-2: {driver: sim, name: bmc}
  compute-3: {driver: sim, name: bmc}
"""

CONF = """[DEFAULT]
poll = 15
delta = 30
%(extra)s

[fencing]
config_file = fencing.yaml
"""

#: Calls per evacuated instance, at most.
BUDGET = {'fire-and-forget': 5.4, 'smart': 6.0}


def failure_calls(case_dir: str, timeline: str, extra: str,
                  end: int = 400) -> tuple[int, list[str]]:
    """Every Nova call of the run, and the log."""
    for name, text in (
            ('topology.yaml', TOPOLOGY % {'end': end, 'n': INSTANCES}),
            ('fencing.yaml', FENCING),
            ('instanceha.conf', CONF % {'extra': extra}),
            ('timeline', timeline)):
        with open(os.path.join(case_dir, name), 'w') as f:
            f.write(text)
    sim = runner.Simulation(sim_scenario.load(case_dir))
    result = sim.run()
    return sim.cloud.api_calls, result.lines


def per_instance(test: testtools.TestCase, extra: str) -> float:
    tmp = test.useFixture(fixtures.TempDir()).path
    quiet, fail = os.path.join(tmp, 'quiet'), os.path.join(tmp, 'fail')
    os.mkdir(quiet)
    os.mkdir(fail)
    # The same run without the failure: its calls (the services read at
    # the same pace, the steady reads) are not the failure's.
    base, _ = failure_calls(quiet, '', extra)
    calls, lines = failure_calls(fail, '30 power-off compute-0\n', extra)
    text = '\n'.join(lines)
    test.assertIn('compute-0 host_state enabled=true new=healthy', text)
    test.assertEqual(INSTANCES, text.count('compute-0 evacuate_requested'),
                     text)
    test.assertIn('violations=0', text)
    return (calls - base) / float(INSTANCES)


class TestCallBudget(testtools.TestCase):

    def test_fire_and_forget(self):
        got = per_instance(self, '')
        self.assertLessEqual(got, BUDGET['fire-and-forget'],
                             'Nova calls per evacuated instance')

    def test_smart(self):
        got = per_instance(self, 'smart_evacuation = true')
        self.assertLessEqual(got, BUDGET['smart'],
                             'Nova calls per evacuated instance')
