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

"""No workflow kind calls Nova or a fencing device on the tick thread.

The tick decides and applies; slow calls are jobs (the runtime's, or the
host recovery's). Each scenario below runs with every copy's cloud and
fencer wrapped: a call made outside every job (``boundary.current_job()``
is None, the scope every submission sets) is recorded with the engine
functions that made it. Only the engine's own observation of the world
(its poll's read, the compute services' watch) may read on the tick.
The cases cover host recovery (fencing, evacuation, power-on, enable,
kdump, spares, retries), process failure, instance failure (restart,
relocation, give-up, a user's stop, deletes), the clean-shutdown
handler (freeze, failover, migrate), maintenance, the lock sweep and an
operator taking hosts.
"""

import collections
import os
import traceback

import fixtures
import testtools

from instanceha.engine import boundary
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases')

#: What the engine reads on the tick to see the world: its observation,
#: not a workflow's effect.
OBSERVATION = frozenset({'snapshot', 'read_services', 'host_vcpus',
                         'changed_servers'})
#: The fencer's methods that reach a device.
FENCING = frozenset({'fence', 'unfence', 'power_state'})

#: Cases per workflow kind.
KINDS = {
    'host recovery': (
        'kernel-panic', 'r08-kdump', 'r07-reserved-host',
        'rebuild-fails-then-other-target', 'r13-without-force-enable',
        'nova-evacuate-timeout', 'all-levels-fail', 'r11-rehabilitate',
        'restart-while-waiting-up', 'operator-disables-mid-evacuation'),
    'process failure': (
        'process-failure-stop-compute', 'process-failure-operator-enables',
        'process-failure-then-host-fails', 'process-failure-partition'),
    'instance failure': (
        'instance-crash-restart', 'instance-crash-loop-counters',
        'instance-crash-storm', 'instance-user-stop-left-alone',
        'instance-deleted-by-its-user', 'instance-error-and-mid-task',
        'instance-crash-leader-lost-mid-relocation',
        'instance-crash-on-process-failure'),
    'clean shutdown': (
        'shutdown-conditional-reboot', 'shutdown-freeze-poweroff',
        'shutdown-migrate', 'shutdown-failover-mass-poweroff',
        'shutdown-poweroff-hangs'),
    'maintenance': (
        'maintenance-start-end', 'maintenance-host-fails',
        'maintenance-migration-refused'),
    'lock sweep': (
        'stale-lock-of-ours-at-start', 'operator-takes-host-then-crash',
        'operator-takes-host-then-crash-restores-status',
        'nova-unlock-fails'),
}


def _where() -> str:
    """The engine functions on the stack, innermost first."""
    frames = [f for f in traceback.extract_stack()[:-2]
              if os.sep + 'instanceha' + os.sep in f.filename and
              os.sep + 'sim' + os.sep not in f.filename and
              not f.filename.endswith('guard.py')]
    return ' < '.join('%s.%s' % (os.path.basename(f.filename)[:-3], f.name)
                      for f in reversed(frames[-3:]))


class _Watched:
    """A port whose calls outside every job are recorded."""

    def __init__(self, port, watched, calls: collections.Counter):
        self._port = port
        self._watched = watched
        self._calls = calls

    def __getattr__(self, name):
        attr = getattr(self._port, name)
        if not callable(attr) or not self._watched(name):
            return attr

        def call(*args, **kwargs):
            if boundary.current_job() is None:
                self._calls['%s (%s)' % (name, _where())] += 1
            return attr(*args, **kwargs)
        return call


def run_watched(test: testtools.TestCase, case: str) -> collections.Counter:
    """Run ``case``; the calls its copies made on the tick thread."""
    calls: collections.Counter = collections.Counter()
    plain_cloud = runner._CycleCloud

    def cloud(*args, **kwargs):
        return _Watched(plain_cloud(*args, **kwargs),
                        lambda n: not n.startswith('_') and
                        n not in OBSERVATION, calls)
    test.useFixture(fixtures.MonkeyPatch(
        'instanceha.sim.runner._CycleCloud', cloud))
    sim = runner.Simulation(sim_scenario.load(os.path.join(CASES, case)))
    plain_fencer = sim._fencer_factory
    sim._fencer_factory = lambda *args, **kwargs: _Watched(
        plain_fencer(*args, **kwargs), FENCING.__contains__, calls)
    sim.run()
    return calls


class TestNoCallOnTheTick(testtools.TestCase):
    """Generated below: one test per workflow kind."""


def _make_test(kind: str, cases: tuple[str, ...]):
    def test(self):
        found = []
        for case in cases:
            calls = run_watched(self, case)
            found.extend('%s: %dx %s' % (case, n, call)
                         for call, n in sorted(calls.items()))
        if found:
            self.fail('%s called Nova or fencing on the tick thread:\n%s'
                      % (kind, '\n'.join(found)))
    test.__doc__ = 'no Nova or fencing call on the tick: %s' % kind
    return test


for _kind, _cases in KINDS.items():
    setattr(TestNoCallOnTheTick, 'test_%s' % _kind.replace(' ', '_'),
            _make_test(_kind, _cases))


class TestTheWatchCatches(testtools.TestCase):
    """The watch itself: a call on the tick thread is caught."""

    def test_a_call_outside_every_job_is_recorded(self):
        calls: collections.Counter = collections.Counter()

        class Port:
            def start_server(self, server_id):
                return server_id
        port = _Watched(Port(), lambda n: True, calls)
        self.assertEqual('s1', port.start_server('s1'))
        self.assertEqual(1, sum(calls.values()))
        boundary.as_job('test', lambda: port.start_server('s2'))()
        self.assertEqual(1, sum(calls.values()))
