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

"""Every side effect of the ports passes the leadership guard.

The ports are enumerated by introspection: a method added to CloudPort or
Fencer later is either declared read-only or must be guarded, or these
tests fail.
"""

import contextlib
import functools
import inspect
import math

import testtools

from instanceha.engine import executor
from instanceha.engine import guard
from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.sim import clock as sim_clock


class Coordinator(ports.Coordinator):
    def __init__(self, proven=math.inf):
        self.proven = proven

    def is_leader(self):
        return self.proven > 0

    def proven_for(self):
        return self.proven

    @contextlib.contextmanager
    def host_lock(self, host):
        yield


class Recorder:
    """Stands in for any port: records calls and the budget they had."""

    api_calls = 0

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def method(*args, **kwargs):
            self.calls.append((name, guard.call_budget()))
        return method


def port_methods(cls) -> set[str]:
    """Every public method a port declares (abstract or not)."""
    return {name for name, member in inspect.getmembers(cls)
            if not name.startswith('_') and callable(member)}


SERVICE = model.Service(id='1', host='h1', state='down', status='enabled')

ARGS = {
    'update_service': ((SERVICE,), {'status': 'disabled'}),
    'evacuate': (('s1',), {}),
    'set_server_lock': (('s1', True, 'r'), {}),
    'stop_server': (('s1',), {}),
    'start_server': (('s1',), {}),
    'reset_server_state': (('s1', 'error'), {}),
    'live_migrate': (('s1',), {}),
    'cold_migrate': (('s1', 'h2'), {}),
    'confirm_resize': (('s1',), {}),
    'set_server_metadata': (('s1', 'k', 'v'), {}),
    'delete_server_metadata': (('s1', 'k'), {}),
    'fence': (('h1',), {}),
    'unfence': (('h1',), {}),
}


def make_env(coordinator):
    return guard.assemble(
        cloud=Recorder(), clock=None, fencer=Recorder(),
        coordinator=coordinator, events=None,
        executor=executor.InlineExecutor())


class TestGuard(testtools.TestCase):

    def mutating(self, port_cls):
        return sorted(port_methods(port_cls) - guard.READ_ONLY[port_cls])

    def test_every_mutating_method_is_known_here(self):
        # A new mutating port method needs a guard and a line in ARGS.
        for cls in (ports.CloudPort, ports.Fencer):
            for name in self.mutating(cls):
                self.assertIn(name, ARGS, '%s.%s' % (cls.__name__, name))

    def test_wrappers_guard_every_mutating_method(self):
        for cls, wrapper in ((ports.CloudPort, guard.GuardedCloud),
                             (ports.Fencer, guard.GuardedFencer)):
            self.assertEqual(set(), set(getattr(
                wrapper, '__abstractmethods__', ())))
            for name in port_methods(cls):
                method = getattr(wrapper, name)
                self.assertIsNot(getattr(cls, name), method,
                                 '%s.%s is not wrapped' % (
                                     wrapper.__name__, name))
                self.assertEqual(name not in guard.READ_ONLY[cls],
                                 getattr(method, 'guarded', None), name)

    def each_call(self, env):
        # Evacuate calls also need a proof that their host is off (see
        # TestEvacuateNeedsProof): here one that always holds.
        proof = guard.PowerProof('h1', lambda: ports.PowerReading(
            host='h1', off=True), sim_clock.SimClock())

        def call(port, name, args, kwargs):
            with guard.proving(proof):
                return getattr(port, name)(*args, **kwargs)
        for cls, port in ((ports.CloudPort, env.cloud),
                          (ports.Fencer, env.fencer)):
            for name in self.mutating(cls):
                args, kwargs = ARGS[name]
                yield name, functools.partial(call, port, name, args, kwargs)

    def test_a_follower_changes_nothing(self):
        env = make_env(Coordinator(proven=0))
        for name, call in self.each_call(env):
            self.assertRaises(exceptions.CoordinationError, call)
        self.assertEqual([], env.cloud._inner.calls)
        self.assertEqual([], env.fencer._inner.calls)

    def test_leadership_about_to_lapse_changes_nothing(self):
        env = make_env(Coordinator(proven=guard.MIN_PROVEN / 2))
        for name, call in self.each_call(env):
            self.assertRaises(exceptions.CoordinationError, call)
        self.assertEqual([], env.cloud._inner.calls)

    def test_a_stopping_copy_changes_nothing(self):
        env = make_env(Coordinator())
        env.guard.halt('stopping')
        for name, call in self.each_call(env):
            self.assertRaises(exceptions.CoordinationError, call)
        self.assertEqual([], env.cloud._inner.calls)
        self.assertEqual([], env.fencer._inner.calls)

    def test_the_leader_acts_within_its_lease(self):
        env = make_env(Coordinator(proven=7.0))
        for name, call in self.each_call(env):
            call()
        calls = env.cloud._inner.calls + env.fencer._inner.calls
        self.assertEqual(sorted(ARGS), sorted(n for n, _ in calls))
        for name, budget in calls:
            self.assertLessEqual(budget, 7.0, name)
            self.assertGreater(budget, 6.0, name)
        self.assertIsNone(guard.call_budget())

    def test_reads_need_no_leadership(self):
        env = make_env(Coordinator(proven=0))
        env.cloud.snapshot()
        env.cloud.migrations(source_host='h1')
        env.fencer.power_state('h1')
        self.assertEqual(['snapshot', 'migrations'],
                         [n for n, _ in env.cloud._inner.calls])

    def test_assembled_ports_pass_the_environments_guard(self):
        env = make_env(Coordinator())
        self.assertIsInstance(env.cloud, guard.GuardedCloud)
        self.assertIsInstance(env.fencer, guard.GuardedFencer)
        env.guard.halt('stopping')
        for call in (lambda: env.cloud.stop_server('s1'),
                     lambda: env.fencer.fence('h1')):
            self.assertRaises(exceptions.CoordinationError, call)
        self.assertEqual([], env.cloud._inner.calls)

    def test_device_hook_is_installed_where_supported(self):
        class Topology(Recorder):
            supports_device_guard = True
            device_guard = None
        inner = Topology()
        env = guard.assemble(
            cloud=Recorder(), clock=None, fencer=inner,
            coordinator=Coordinator(proven=3.0), events=None,
            executor=executor.InlineExecutor())
        self.assertEqual(3.0, inner.device_guard('h1', 'pdu', 'off'))
        env.guard.halt('stopping')
        self.assertRaises(exceptions.CoordinationError,
                          inner.device_guard, 'h1', 'pdu', 'off')

    def test_device_hook_is_left_alone_where_not_supported(self):
        class Plain(Recorder):
            supports_device_guard = False
            device_guard = None
        inner = Plain()
        guard.assemble(cloud=Recorder(), clock=None, fencer=inner,
                       coordinator=Coordinator(), events=None,
                       executor=executor.InlineExecutor())
        self.assertIsNone(inner.device_guard)


class TestNovaRequestsBounded(testtools.TestCase):
    """The Nova adapter cuts each HTTP time-out to the call budget."""

    def test_timeout_cut_inside_a_guarded_call_only(self):
        from instanceha.adapters import nova

        class Http:
            def __init__(self):
                self.seen = []

            def request(self, method, url, **kwargs):
                self.seen.append(kwargs.get('timeout'))

        http = Http()
        nova._bound_by_lease(http)
        http.request('GET', '/x', timeout=60)
        leader = guard.LeaderGuard(Coordinator(proven=4.0))
        with leader.effect('evacuate s1'):
            http.request('POST', '/x', timeout=60)
            http.request('POST', '/x', timeout=(3.0, 60))
            http.request('POST', '/x')
        self.assertEqual(60, http.seen[0])
        self.assertTrue(3.9 < http.seen[1] <= 4.0, http.seen)
        self.assertEqual(3.0, http.seen[2][0])
        self.assertTrue(3.9 < http.seen[2][1] <= 4.0, http.seen)
        self.assertTrue(3.9 < http.seen[3] <= 4.0, http.seen)


class TestBudgetOnTheEngineClock(testtools.TestCase):
    """The call budget runs on the environment's clock, not the wall's."""

    def setUp(self):
        super().setUp()
        self.clock = sim_clock.SimClock()
        self.env = guard.assemble(
            cloud=Recorder(), clock=self.clock, fencer=Recorder(),
            coordinator=Coordinator(proven=10.0), events=None,
            executor=executor.InlineExecutor())

    def test_budget_shrinks_with_simulated_time_only(self):
        with self.env.guard.effect('evacuate s1'):
            self.assertEqual(10.0, guard.call_budget())
            self.clock.advance_to(4.0)
            self.assertEqual(6.0, guard.call_budget())
            self.clock.advance_to(12.0)
            self.assertEqual(0.0, guard.call_budget())
        self.assertIsNone(guard.call_budget())

    def test_nested_call_keeps_the_outer_deadline(self):
        with self.env.guard.effect('fencing of h1'):
            self.clock.advance_to(7.0)
            # The inner check sees a fresh 10 s lease, but the outer call
            # must end within the 3 s it has left.
            with self.env.guard.effect('power off of h1'):
                self.assertEqual(3.0, guard.call_budget())


class TestEvacuateNeedsProof(testtools.TestCase):
    """Every evacuate call reads its host's power first (the port does)."""

    def setUp(self):
        super().setUp()
        self.clock = sim_clock.SimClock()
        self.env = guard.assemble(
            cloud=Recorder(), clock=self.clock, fencer=Recorder(),
            coordinator=Coordinator(), events=None,
            executor=executor.InlineExecutor())
        self.readings = []

    def proof(self, *states):
        states = list(states)

        def read():
            off = states.pop(0)
            self.readings.append(off)
            return ports.PowerReading(host='h1', off=off, on=not off,
                                      detail='bmc: %s' % (
                                          'off' if off else 'on'))
        return guard.PowerProof('h1', read, self.clock)

    def evacuated(self):
        return [n for n, _ in self.env.cloud._inner.calls]

    def test_refused_outside_a_proving_step(self):
        exc = self.assertRaises(guard.PowerUnproven,
                                self.env.cloud.evacuate, 's1')
        self.assertIn('outside an evacuation step', str(exc))
        self.assertEqual([], self.evacuated())

    def test_a_host_found_on_is_not_evacuated(self):
        with guard.proving(self.proof(False)):
            exc = self.assertRaises(guard.PowerUnproven,
                                    self.env.cloud.evacuate, 's1')
        self.assertTrue(exc.reading.on)
        self.assertIn('bmc: on', str(exc))
        self.assertEqual([], self.evacuated())

    def test_one_reading_serves_the_calls_of_one_instant(self):
        with guard.proving(self.proof(True)):
            self.env.cloud.evacuate('s1')
            self.env.cloud.evacuate('s2')
        self.assertEqual([True], self.readings)
        self.assertEqual(['evacuate', 'evacuate'], self.evacuated())

    def test_an_old_reading_is_read_again(self):
        with guard.proving(self.proof(True, False)):
            self.env.cloud.evacuate('s1')
            self.clock.advance_to(guard.PROOF_TTL + 0.5)
            self.assertRaises(guard.PowerUnproven,
                              self.env.cloud.evacuate, 's2')
        self.assertEqual([True, False], self.readings)
        self.assertEqual(['evacuate'], self.evacuated())

    def test_a_crash_dump_message_proves_only_its_own_short_time(self):
        # A fence_kdump message proves the dump live when it was sent:
        # its reading counts for what is left of KDUMP_FRESH, not for
        # PROOF_TTL.
        readings = []

        def read():
            readings.append(self.clock.monotonic())
            return ports.PowerReading(host='h1', off=True, valid_for=0.2,
                                      detail='crash-dumping')
        with guard.proving(guard.PowerProof('h1', read, self.clock)):
            self.env.cloud.evacuate('s1')
            self.clock.advance_to(0.1)
            self.env.cloud.evacuate('s2')
            self.clock.advance_to(0.5)
            self.env.cloud.evacuate('s3')
        self.assertEqual([0.0, 0.5], readings)
        self.assertEqual(['evacuate'] * 3, self.evacuated())

    def test_a_new_step_reads_again(self):
        with guard.proving(self.proof(True)):
            self.env.cloud.evacuate('s1')
        with guard.proving(self.proof(False)):
            self.assertRaises(guard.PowerUnproven,
                              self.env.cloud.evacuate, 's2')
        self.assertEqual([True, False], self.readings)
