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

"""The simulator itself: its Nova, its clock, its invariants, its CLI.

The scenario tests trust the simulator to behave like the real cloud and
to catch an unsafe engine; these tests check that it does, including
with a deliberately unsafe engine that must be caught.
"""

import io
import os
import shutil
import tempfile

import fixtures
import testtools

from instanceha.cmd import simulate
from instanceha.engine import model
from instanceha import exceptions
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import executor as sim_executor
from instanceha.sim import golden
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario
from instanceha.sim import story as sim_story
from instanceha.sim import world as sim_world
from tests import conf_fixture

DEMO = os.path.join(simulate.BUILTIN, 'demo')


def small_world(hosts=('h1', 'h2', 'h3')):
    clock = sim_clock.SimClock()
    log = sim_events.EventLog(clock)
    w = sim_world.World(clock, log)
    w.flavors['f'] = sim_world.Flavor('f', vcpus=1)
    for n, name in enumerate(hosts):
        w.add_host(sim_world.Host(name=name, id=str(n)))
    w.add_server(sim_world.Server(id='vm1', name='vm1', host='h1',
                                  status='ACTIVE', flavor='f'))
    return w


def advance(w, t):
    while w.next_event() is not None and w.next_event() <= t:
        w.clock.advance_to(w.next_event())
        w.run_due()
    w.clock.advance_to(t)


class TestSimCloud(testtools.TestCase):

    def test_evacuate_refused_while_source_up(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        exc = self.assertRaises(exceptions.CloudError, cloud.evacuate, 'vm1')
        self.assertEqual(409, exc.status)
        self.assertIn('still in use', str(exc))
        self.assertEqual([], w.violations)

    def test_injected_nova_faults(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        svc = w.service_model(w.hosts['h2'])
        w.nova_faults.append(sim_world.NovaFault('update_service', 2, '503'))
        for _ in range(2):
            exc = self.assertRaises(exceptions.CloudError,
                                    cloud.update_service, svc,
                                    status='disabled')
            self.assertEqual(503, exc.status)
        self.assertEqual('enabled', w.hosts['h2'].status)
        cloud.update_service(svc, status='disabled')
        self.assertEqual('disabled', w.hosts['h2'].status)
        w.nova_down = True
        exc = self.assertRaises(exceptions.CloudError, cloud.snapshot)
        self.assertIsNone(exc.status)
        self.assertIn('cannot connect', str(exc))

    def test_timeout_carries_the_call_out(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = w.hosts['h1'].forced_down = True
        w.nova_faults.append(sim_world.NovaFault('evacuate', 1, 'timeout'))
        w.migration_delay = 10
        self.assertRaises(exceptions.CloudError, cloud.evacuate, 'vm1')
        self.assertEqual('rebuilding', w.servers['vm1'].task_state)
        self.assertEqual([], cloud.migrations(server_id='vm1'))
        advance(w, 10)
        self.assertEqual(1, len(cloud.migrations(server_id='vm1')))

    def test_forced_down_service_keeps_reporting(self):
        # As Nova's DB servicegroup driver does: nova-compute's reports
        # stamp updated_at whatever forced_down says; only the state
        # (Nova's judgement) says down while it is forced down.
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        svc = w.service_model(w.hosts['h2'])
        cloud.update_service(svc, forced_down=True)
        before = cloud.snapshot().service('h2')
        advance(w, 3 * w.timing.report_interval)
        after = cloud.snapshot().service('h2')
        self.assertEqual(('down', True), (after.state, after.forced_down))
        self.assertGreater(after.updated_at, before.updated_at)

    def test_deleted_service_is_not_listed(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.deleted_services.add('h2')
        self.assertIsNone(cloud.snapshot().service('h2'))
        exc = self.assertRaises(
            exceptions.CloudError, cloud.update_service,
            w.service_model(w.hosts['h2']), status='enabled')
        self.assertEqual(404, exc.status)

    def test_a_starting_nova_compute_registers_anew(self):
        # Nova's compute service creates its record when it starts and
        # finds none: enabled, nothing of the deleted one.
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        h2 = w.hosts['h2']
        h2.status, h2.disabled_reason = 'disabled', 'instanceha:x'
        w.set_compute('h2', False)
        w.deleted_services.add('h2')
        w.set_compute('h2', True)
        svc = cloud.snapshot().service('h2')
        self.assertEqual(('enabled', None),
                         (svc.status, svc.disabled_reason))

    def test_an_armed_run_ended_by_power_counts_as_reset(self):
        # A watchdog-armed host powered off after its last answer ended
        # the run the watchdog guarded: its evacuation is no violation.
        # One that still runs is.
        from instanceha.sim import watchdogs as sim_watchdogs
        w = small_world()
        w.add_server(sim_world.Server(id='vm2', name='vm2', host='h2',
                                      status='ACTIVE', flavor='f'))
        cloud = sim_cloud.SimCloud(w)
        w.watchdogs = sim_watchdogs.Watchdogs(w)
        for host in ('h1', 'h2'):
            w.watchdogs.add(host, 60)
            w.watchdogs.dogs[host].armed = True
            w.watchdogs.dogs[host].run = w.hosts[host].agent_boot
            w.hosts[host].forced_down = True
            w.set_network(host, False)
        w.set_power('h1', False)
        w.set_power('h1', True)
        self.assertTrue(w.hosts['h1'].self_fenced)
        self.assertFalse(w.hosts['h2'].self_fenced)
        cloud.evacuate('vm1')
        self.assertEqual([], w.violations)
        cloud.evacuate('vm2')
        self.assertIn('no fencing device confirmed off', w.violations[0])

    def test_heartbeat_staleness_and_down(self):
        w = small_world()
        w.set_power('h1', False)
        advance(w, 45)
        svc = w.service_model(w.hosts['h1'])
        self.assertEqual(model.UP, svc.state)
        self.assertEqual(w.clock.at(0), svc.updated_at)
        advance(w, 61)
        self.assertEqual(model.DOWN, w.service_model(w.hosts['h1']).state)

    def test_evacuation_progresses_through_migration_states(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = True
        cloud.update_service(w.service_model(w.hosts['h1']),
                             forced_down=True)
        cloud.evacuate('vm1')
        self.assertEqual('REBUILD', cloud.get_server('vm1').status)
        self.assertEqual('accepted', cloud.migrations()[0].status)
        advance(w, 3)
        self.assertEqual('pre-migrating', cloud.migrations()[0].status)
        advance(w, 30)
        mig = cloud.migrations(server_id='vm1')[0]
        self.assertEqual(('done', 'h1'), (mig.status, mig.source_host))
        srv = cloud.get_server('vm1')
        self.assertEqual('ACTIVE', srv.status)
        self.assertEqual(mig.dest_host, srv.host)
        self.assertEqual([], w.violations)

    def test_no_capacity_ends_in_error(self):
        w = small_world()
        for h in ('h2', 'h3'):
            w.hosts[h].vcpus = 0
            w.capacity_changed(h)
        cloud = sim_cloud.SimCloud(w)
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = True
        w.hosts['h1'].forced_down = True
        cloud.evacuate('vm1')
        advance(w, 5)
        self.assertEqual('error', cloud.migrations()[0].status)
        self.assertEqual('ERROR', cloud.get_server('vm1').status)

    def test_a_requested_host_is_validated_never_forced(self):
        # Like Nova 2.94's scheduler: a named destination without room,
        # disabled or down is refused (migration error, the host asked
        # for kept as its destination, as Nova's dest_compute), never
        # forced; an unknown one is a 404 and the server's own host a 400.
        def refused(setup):
            w = small_world()
            cloud = sim_cloud.SimCloud(w)
            w.set_power('h1', False)
            w.hosts['h1'].fence_proof = w.hosts['h1'].forced_down = True
            setup(w)
            cloud.evacuate('vm1', host='h2')
            advance(w, 5)
            mig = cloud.migrations(server_id='vm1')[0]
            return mig.status, mig.dest_host, w.servers['vm1'].host

        def full(w):
            w.hosts['h2'].vcpus = 0
            w.capacity_changed('h2')

        def disabled(w):
            w.hosts['h2'].status = model.DISABLED

        def down(w):
            w.hosts['h2'].forced_down = True

        for setup in (full, disabled, down):
            self.assertEqual(('error', 'h2', 'h1'), refused(setup),
                             setup.__name__)
        self.assertEqual(('pre-migrating', 'h2', 'h1'),
                         refused(lambda w: None))
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = w.hosts['h1'].forced_down = True
        for host, status in (('nope', 404), ('h1', 400)):
            exc = self.assertRaises(exceptions.CloudError, cloud.evacuate,
                                    'vm1', host=host)
            self.assertEqual(status, exc.status)

    def test_host_vcpus_count_the_schedulers_claims(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        self.assertEqual({'h1': (64, 1), 'h2': (64, 0), 'h3': (64, 0)},
                         {h: (v.capacity, v.used)
                          for h, v in cloud.host_vcpus().items()})
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = w.hosts['h1'].forced_down = True
        cloud.evacuate('vm1', host='h3')
        self.assertEqual(64, cloud.host_vcpus()['h3'].free)
        advance(w, 5)
        self.assertEqual(63, cloud.host_vcpus()['h3'].free)

    def test_snapshot_calls_do_not_grow_with_hosts(self):
        small = sim_cloud.SimCloud(small_world())
        big = sim_cloud.SimCloud(small_world(
            hosts=['h%d' % i for i in range(1, 500)]))
        small.snapshot()
        big.snapshot()
        self.assertEqual(small.api_calls, big.api_calls)


class TestInvariants(testtools.TestCase):

    def test_evacuating_an_unfenced_host_is_caught(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        # nova-compute dies but the host and its guest run on.
        w.set_compute('h1', False)
        w.hosts['h1'].forced_down = True
        cloud.evacuate('vm1')
        advance(w, 30)
        self.assertEqual(3, len(w.violations), w.violations)
        self.assertIn('no fencing device confirmed off', w.violations[0])
        self.assertIn('where its guest still runs', w.violations[1])
        self.assertIn('running on h1 and', w.violations[2])

    def test_a_lying_bmc_confirms_nothing(self):
        # A BMC that reads "on" whatever the truth: the host it powered
        # off is off, but no device confirmed it, and an evacuation that
        # trusted the request is caught.
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.device('h1').behaviour = sim_world.LIES_ON
        w.device_request('h1', 'off', 20)
        advance(w, 30)
        self.assertFalse(w.hosts['h1'].powered)
        self.assertEqual('on', w.device_read('h1', 20))
        w.hosts['h1'].forced_down = True
        cloud.evacuate('vm1')
        self.assertIn('no fencing device confirmed off', w.violations[0])

    def test_double_evacuation_is_caught(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = True
        w.hosts['h1'].forced_down = True
        cloud.evacuate('vm1')
        advance(w, 30)
        # The engine asks again for the same failure (here for an
        # instance Nova still places on h1): that is the bug to catch.
        w.servers['vm1'].host = 'h1'
        cloud.evacuate('vm1')
        self.assertIn('evacuated twice', ' '.join(w.violations))

    def test_planned_moves_are_no_evacuation(self):
        # Moved away for maintenance and back, then its host fails: the
        # first evacuation of this failure is no second one.
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        cloud.live_migrate('vm1', 'h2')
        advance(w, 100)
        cloud.live_migrate('vm1', 'h1')
        advance(w, 200)
        self.assertEqual('h1', w.servers['vm1'].host)
        w.set_power('h1', False)
        w.hosts['h1'].fence_proof = True
        w.hosts['h1'].forced_down = True
        cloud.evacuate('vm1')
        self.assertEqual([], w.violations)

    def test_non_leader_and_gate_are_caught(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.actor = 'ha-b'
        w.is_leader = lambda actor: actor == 'ha-a'
        w.blocked['ha-b'] = {'h1'}
        cloud.update_service(w.service_model(w.hosts['h1']),
                             forced_down=True)
        self.assertEqual(2, len(w.violations))
        self.assertIn('not the leader', w.violations[0])
        self.assertIn('gate blocked', w.violations[1])


class TestPlannedMoves(testtools.TestCase):
    """Live and cold migration in the simulated Nova (maintenance)."""

    def test_no_valid_host_shows_only_in_the_instance_action(self):
        w = small_world(hosts=('h1', 'h2'))
        w.hosts['h2'].status = 'disabled'
        cloud = sim_cloud.SimCloud(w)
        rid = cloud.live_migrate('vm1')
        self.assertEqual('migrating', cloud.get_server('vm1').task_state)
        advance(w, 10)
        srv = cloud.get_server('vm1')
        self.assertEqual(('h1', 'ACTIVE', None),
                         (srv.host, srv.status, srv.task_state))
        got_rid, errors = cloud.action_errors('vm1', 'live-migration')
        self.assertEqual(rid, got_rid)
        self.assertIn('NoValidHost', errors[0])
        mig, = cloud.migrations(server_id='vm1',
                                migration_type='live-migration')
        self.assertEqual('error', mig.status)
        self.assertEqual([], cloud.migrations(server_id='vm1'))

    def test_refusals_name_the_state(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        cloud.live_migrate('vm1')
        exc = self.assertRaises(exceptions.CloudError, cloud.live_migrate,
                                'vm1')
        self.assertEqual(409, exc.status)
        self.assertIn('task_state migrating', str(exc))
        exc = self.assertRaises(exceptions.CloudError, cloud.cold_migrate,
                                'vm1', 'h1')
        self.assertEqual(409, exc.status)
        exc = self.assertRaises(exceptions.CloudError, cloud.confirm_resize,
                                'vm1')
        self.assertEqual(400, exc.status)

    def test_cold_migration_waits_for_confirmation(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        w.servers['vm1'].status = 'SHUTOFF'
        w.servers['vm1'].running_on.clear()
        cloud.cold_migrate('vm1', 'h3')
        advance(w, 60)
        self.assertEqual(('h3', 'VERIFY_RESIZE'), (
            cloud.get_server('vm1').host, cloud.get_server('vm1').status))
        self.assertEqual(63, w.free('h1'))  # held until confirmed
        cloud.confirm_resize('vm1')
        self.assertEqual('SHUTOFF', cloud.get_server('vm1').status)
        self.assertEqual(64, w.free('h1'))

    def test_metadata(self):
        w = small_world()
        cloud = sim_cloud.SimCloud(w)
        cloud.set_server_metadata('vm1', 'k', 'v')
        self.assertEqual({'k': 'v'}, cloud.get_server('vm1').metadata)
        cloud.delete_server_metadata('vm1', 'k')
        cloud.delete_server_metadata('vm1', 'k')
        self.assertEqual({}, cloud.get_server('vm1').metadata)


class TestExecutor(testtools.TestCase):

    def test_jobs_finish_in_simulated_time(self):
        clock = sim_clock.SimClock()
        ex = sim_executor.SimExecutor(clock, workers=1)
        seen = []

        def job(name, seconds):
            seen.append((name, 'start', clock.t))
            clock.sleep(seconds)
            seen.append((name, 'end', clock.t))
            return name

        a = ex.submit(job, 'a', 10)
        b = ex.submit(job, 'b', 5)
        self.assertFalse(a.done())
        self.assertRaises(RuntimeError, a.result)
        self.assertEqual(10, ex.next_due())
        clock.advance_to(10)
        ex.complete_due()
        self.assertEqual('a', a.result())
        self.assertEqual(15, ex.next_due())
        clock.advance_to(15)
        ex.complete_due()
        self.assertEqual('b', b.result())
        self.assertEqual([('a', 'start', 0), ('a', 'end', 10),
                          ('b', 'start', 10), ('b', 'end', 15)], seen)

    def test_threads_and_greenlets_tell_the_same_story(self):
        self.useFixture(fixtures.FakeLogger())
        logs = []
        installed = sim_executor.greenlet
        if installed is None:
            self.skipTest('greenlet is not installed')
        for module in (None, installed):
            self.useFixture(fixtures.MonkeyPatch(
                'instanceha.sim.executor.greenlet', module))
            for case in ('service-crash-mid-fence',
                         'bmc-timeout-second-level'):
                path = os.path.join(os.path.dirname(__file__), 'cases', case)
                logs.append(runner.run_scenario(path).lines)
        self.assertEqual(logs[:2], logs[2:])

    def test_abandoned_jobs_never_finish(self):
        clock = sim_clock.SimClock()
        ex = sim_executor.SimExecutor(clock)
        fut = ex.submit(clock.sleep, 10)
        ex.abandon()
        self.assertFalse(fut.done())
        self.assertIsNone(ex.next_due())


class TestSimFencing(testtools.TestCase):
    """The sim driver: only through the simulator's device factory."""

    def _conf_and_file(self, entry):
        conf = self.useFixture(conf_fixture.ConfFixture(
            fencing={'allow_noop': True})).conf
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'fencing.yaml')
        with open(path, 'w') as f:
            f.write('hosts:\n  h1: %s\n' % entry)
        return conf, path

    def _load(self, entry, world=None):
        from instanceha.plugins.fencing import config
        from instanceha.sim import fencing as sim_fencing

        conf, path = self._conf_and_file(entry)
        if world is False:
            return config.load(conf, path)
        return config.load(conf, path, devices=sim_fencing.SimDeviceFactory(
            world or small_world()))

    def test_not_a_production_driver(self):
        from instanceha.plugins import loader

        self.assertNotIn('sim', loader.available('instanceha.fencing'))

    def test_refused_at_start_up_outside_the_simulator(self):
        # A real fencing file naming the sim driver must not pass for a
        # fencing device: the service refuses it when it loads the file.
        exc = self.assertRaises(exceptions.ConfigurationError, self._load,
                                '{driver: sim}', world=False)
        self.assertIn('only works inside instanceha-simulate', str(exc))
        self.assertIn('h1', str(exc))

    def test_fencing_validate_reports_it_invalid(self):
        from instanceha.cmd import manage_fencing

        conf, path = self._conf_and_file('{driver: sim}')
        (host, ok, text), = manage_fencing.validate_file(conf, path)
        self.assertEqual(('h1', False), (host, ok))
        self.assertIn('only works inside instanceha-simulate', text)

    def test_accepted_inside_the_simulator(self):
        entry = self._load('{driver: sim}').hosts['h1']
        self.assertEqual('sim', entry.levels[0][0].name)

    def test_unknown_target_names_it(self):
        exc = self.assertRaises(exceptions.ConfigurationError, self._load,
                                '{driver: sim, target: nope}')
        self.assertIn("'nope'", str(exc))
        self.assertIn('h1', str(exc))

    def test_any_driver_can_act_on_a_simulated_device(self):
        # A third-party driver's device in a scenario: its own parameter
        # checks run, its power changes act on the world's device.
        w = small_world()
        w.clock.on_sleep = lambda seconds: advance(w, w.clock.t + seconds)
        drv = self._load('{driver: noop, simulate: h1}',
                         world=w).hosts['h1'].levels[0][0]
        self.assertEqual('noop', drv.name)
        drv.power_off()
        self.assertFalse(w.hosts['h1'].powered)
        self.assertTrue(w.hosts['h1'].fence_proof)
        exc = self.assertRaises(exceptions.ConfigurationError, self._load,
                                '{driver: noop, simulate: nope}')
        self.assertIn("'nope'", str(exc))
        exc = self.assertRaises(exceptions.ConfigurationError, self._load,
                                '{driver: noop, simulate: h1}', world=False)
        self.assertIn("'simulate'", str(exc))

    def test_without_simulate_it_acts_on_the_hosts_own_bmc(self):
        # A scenario never reaches real hardware: a device of another
        # driver with no ``simulate:`` is the host's simulated BMC.
        w = small_world()
        w.clock.on_sleep = lambda seconds: advance(w, w.clock.t + seconds)
        drv = self._load('{driver: noop}', world=w).hosts['h1'].levels[0][0]
        drv.power_off()
        self.assertFalse(w.hosts['h1'].powered)
        self.assertEqual('simulated h1', drv.describe_target())

    def test_devices_run_on_the_simulated_clock(self):
        # Every device the simulator builds -- its own and installed
        # drivers alike -- polls and sleeps in simulated time.
        w = small_world()
        w.device('h1').behaviour = 'timeout'
        drv = self._load('{driver: sim, timeout: 40}',
                         world=w).hosts['h1'].levels[0][0]
        noop = self._load('{driver: noop}', world=w).hosts['h1'].levels[0][0]
        self.assertIs(w.clock, drv.clock)
        self.assertIs(w.clock, noop.clock)
        self.assertRaises(exceptions.FencingError, drv.power_status)
        self.assertEqual(40.0, w.clock.t)


class TestScenarioFormat(testtools.TestCase):

    def test_unknown_command_names_line(self):
        exc = self.assertRaises(sim_world.ScenarioError,
                                sim_scenario.parse_timeline,
                                '10 power-off h1\n20 explode h1\n')
        self.assertIn('line 2', str(exc))
        self.assertIn("'explode'", str(exc))

    def test_time_must_not_go_back(self):
        self.assertRaises(sim_world.ScenarioError,
                          sim_scenario.parse_timeline,
                          '20 power-off h1\n10 power-on h1\n')


class TestStory(testtools.TestCase):

    def _tell(self, *events):
        out = []
        story = sim_story.Story(write=out.append)
        for ev in events:
            story(ev)
        return out

    def test_progress_line_per_host(self):
        ev = sim_events.Event
        out = self._tell(
            ev(107, 'ha', 'evacuate_requested', 'c1',
               {'server': 'a', 'attempt': 1, 'target': None}),
            ev(107, 'ha', 'evacuate_requested', 'c1',
               {'server': 'b', 'attempt': 1, 'target': None}),
            ev(129, 'nova', 'rebuilt', 'c1',
               {'server': 'a', 'dest': 'c2', 'status': 'ACTIVE'}))
        self.assertIn('[01:47]   evacuating a', out[0])
        self.assertIn('Nova: a is ACTIVE on c2', out[2])
        self.assertIn('1/2 instances rebuilt', out[3])

    def test_unknown_event_is_shown_raw(self):
        out = self._tell(sim_events.Event(5, 'ha', 'brand_new', 'c1',
                                          {'why': 'because'}))
        self.assertEqual(['[00:05] brand_new c1 why=because'], out)


class UnsafeEngine:
    """Evacuates every down host's instances without fencing: must fail.

    It talks to the simulated cloud behind the ports' guard (which would
    refuse these evacuations): the simulator's own invariants must catch
    an engine that gets past every guard.
    """

    def __init__(self, conf, drivers, env, planner=None):
        self.cloud = getattr(env.cloud, '_inner', env.cloud)

    def tick(self):
        snap = self.cloud.snapshot()
        for svc in snap.services:
            if svc.state == model.DOWN and not svc.forced_down:
                self.cloud.update_service(svc, forced_down=True)
                for srv in snap.servers_on(svc.host):
                    self.cloud.evacuate(srv.id)

    def shutdown(self, timeout):
        pass


class TestGolden(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.case = os.path.join(self.tmp, 'demo')
        shutil.copytree(DEMO, self.case)

    def test_unsafe_engine_breaks_invariants(self):
        with open(os.path.join(self.case, 'timeline'), 'w') as f:
            f.write('60 stop-compute compute-2\n')
        sc = sim_scenario.load(self.case)
        result = runner.Simulation(sc, engine_factory=UnsafeEngine).run()
        text = ' '.join(result.violations)
        self.assertIn('no fencing device confirmed off', text)
        self.assertIn('running on compute-2 and', text)

    def test_evacuation_before_fencing_fails_with_diff(self):
        expect = os.path.join(self.case, 'log.expect')
        with open(expect) as f:
            lines = f.read().splitlines()
        fenced = next(i for i, x in enumerate(lines) if 'new=fenced' in x)
        evac = next(i for i, x in enumerate(lines)
                    if 'evacuate_requested' in x)
        lines.insert(fenced, lines.pop(evac))
        with open(expect, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        out = golden.check(self.case)
        self.assertFalse(out.ok)
        self.assertIn('--- log.expect', out.message)
        self.assertIn('-', out.message)
        self.assertTrue(os.path.exists(os.path.join(self.case, 'log.new')))

    def test_missing_expected_log_is_written_and_fails(self):
        os.unlink(os.path.join(self.case, 'log.expect'))
        out = golden.check(self.case)
        self.assertFalse(out.ok)
        self.assertIn('no log.expect', out.message)
        with open(os.path.join(self.case, 'log.new')) as f:
            self.assertEqual(out.lines, f.read().splitlines())
        ok, _ = golden.bless(self.case)
        self.assertTrue(ok)
        self.assertTrue(golden.check(self.case).ok)

    def test_cli_tells_the_demo_story(self):
        out = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', out))
        self.assertEqual(0, simulate.main(['--quiet']))
        story = out.getvalue()
        for words in ('compute-2 looks failed', 'is fenced',
                      'instances rebuilt', 'back in service',
                      'all invariants held'):
            self.assertIn(words, story)
        self.assertLess(story.index('is fenced'),
                        story.index('instances rebuilt'))

    def test_timeline_naming_an_unknown_host(self):
        with open(os.path.join(self.case, 'timeline'), 'w') as f:
            f.write('10 power-off compute-9\n')
        err = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', io.StringIO()))
        self.assertEqual(2, simulate.main([self.case]))
        self.assertIn('timeline line 1', err.getvalue())
        self.assertIn("unknown host 'compute-9'", err.getvalue())

    def assert_refused(self, lines: tuple[str, ...], words: str) -> None:
        """Each timeline line alone is refused, naming line 1 and words."""
        for bad in lines:
            with open(os.path.join(self.case, 'timeline'), 'w') as f:
                f.write('10 %s\n' % bad)
            err = io.StringIO()
            self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
            self.useFixture(fixtures.MonkeyPatch('sys.stdout', io.StringIO()))
            self.assertEqual(2, simulate.main([self.case]), bad)
            self.assertIn('timeline line 1', err.getvalue())
            self.assertIn(words, err.getvalue())

    def test_clock_skew_needs_a_number_of_seconds(self):
        self.assert_refused(('clock skew', 'clock skew soon',
                             'clock ahead 5'), 'clock skew')

    def test_clear_commands_check_their_words(self):
        self.assert_refused(('hosts clear', 'hosts list compute-1',
                             'hosts clear compute-1 start',
                             'instances clear',
                             'instances clear vm-1a enable'), 'clear')

    def test_cli_unknown_scenario(self):
        err = io.StringIO()
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        with tempfile.TemporaryDirectory() as empty:
            self.assertEqual(2, simulate.main([os.path.join(empty, 'x')]))
        self.assertIn('no scenario', err.getvalue())
