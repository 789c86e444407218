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

"""The placement view, the spread strategy, and the job asking for targets.

The view and the strategy are pure policy on values; the job's side runs
on the simulator's Nova (the one fake cloud of the tests), which
validates a requested host the way Nova's scheduler does.
"""

import contextlib
import dataclasses
import datetime
import math

import fixtures
import testtools

from instanceha.engine import evacuation_job
from instanceha.engine import executor
from instanceha.engine import guard
from instanceha.engine import model
from instanceha.engine import placement
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.plugins.evacuation import smart
from instanceha.plugins.evacuation import spread
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import world as sim_world
from tests import conf_fixture
from tests.unit import test_recovery_fakes

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def service(host, zone='az1', state='up', status='enabled', forced=False):
    return model.Service(id='svc-' + host, host=host, state=state,
                         status=status, forced_down=forced, zone=zone)


def server(sid, host, vcpus=2):
    return model.Server(id=sid, name=sid, host=host, status='ACTIVE',
                        flavor=model.Flavor('f%d' % vcpus, vcpus=vcpus))


def vc(capacity, used):
    return model.HostVcpus(capacity=capacity, used=used)


def task(sid, failures=None, target=None):
    return placement.request(sid, sid, original_status='ACTIVE', priority=0,
                             attempts=0, failures=failures or {},
                             same_target_retries=1, target=target)


class TestView(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.snap = model.Snapshot(
            taken_at=T0,
            services=(service('failed'), service('rack-a'),
                      service('zone-b'), service('far', zone='az2'),
                      service('down', state='down'),
                      service('off', status='disabled'),
                      service('forced', forced=True)),
            servers=(server('v1', 'failed'), server('v2', 'failed', 4),
                     server('x', 'rack-a', 8), server('y', 'zone-b')),
            aggregates=(model.Aggregate('1', 'rack', frozenset(
                {'failed', 'rack-a'})),))

    def test_hosts_domains_and_eligibility(self):
        view = placement.build(self.snap, 'failed')
        self.assertNotIn('failed', view.hosts)
        self.assertEqual(placement.SAME_AGGREGATE,
                         view.hosts['rack-a'].closeness)
        self.assertEqual(placement.SAME_ZONE, view.hosts['zone-b'].closeness)
        self.assertEqual(placement.ELSEWHERE, view.hosts['far'].closeness)
        self.assertEqual({'rack-a', 'zone-b', 'far'},
                         {h for h, r in view.hosts.items() if r.eligible})
        self.assertEqual(frozenset({'rack'}), view.failed_aggregates)
        self.assertEqual('az1', view.failed_zone)
        self.assertEqual(8, view.hosts['rack-a'].used_vcpus)
        self.assertIsNone(view.hosts['rack-a'].free_vcpus)
        self.assertEqual(8.0, view.hosts['rack-a'].load)
        self.assertEqual(4, view.need('v2'))

    def test_read_only(self):
        view = placement.build(self.snap, 'failed')

        def put():
            view.hosts['x'] = None
        self.assertRaises(TypeError, put)
        self.assertRaises(AttributeError, setattr, view, 'spare', 'x')

    def test_the_clouds_count_plus_what_was_asked_since(self):
        view = placement.build(
            self.snap, 'failed', vcpus={'rack-a': vc(16, 11),
                                        'zone-b': vc(9, 6)},
            on_the_way={'zone-b': ['v2']},
            asked_since_read={'rack-a': ['v1']})
        self.assertEqual(3, view.hosts['rack-a'].free_vcpus)
        self.assertEqual(13 / 16, view.hosts['rack-a'].load)
        self.assertEqual(3, view.hosts['zone-b'].free_vcpus)
        self.assertEqual(2 + 4, view.hosts['zone-b'].used_vcpus)
        self.assertEqual(2, view.hosts['zone-b'].instances)
        self.assertFalse(view.fits('zone-b', 'v2'))
        self.assertTrue(view.fits('zone-b', 'v1'))
        self.assertEqual(['far', 'rack-a', 'zone-b'],
                         [r.host for r in view.candidates('v1')])
        # Never less than what Nova lists there and what is on its way.
        view = placement.build(self.snap, 'failed',
                               vcpus={'zone-b': vc(9, 0)},
                               on_the_way={'zone-b': ['v2']})
        self.assertEqual(6, view.hosts['zone-b'].used_vcpus)

    def test_hosts_whose_servers_were_not_listed(self):
        snap = dataclasses.replace(self.snap, servers_read=frozenset(
            {'failed', 'rack-a'}))
        view = placement.build(snap, 'failed')
        self.assertEqual(8, view.hosts['rack-a'].used_vcpus)
        self.assertIsNone(view.hosts['zone-b'].used_vcpus)
        self.assertIsNone(view.hosts['zone-b'].instances)
        self.assertIsNone(view.hosts['zone-b'].load)
        self.assertEqual(2, view.need('v1'))

    def test_derived_only_when_looked_at(self):
        # The built-in strategies never look: no host walk, no read.
        reads = []

        def read():
            reads.append(1)
            return {'rack-a': vc(16, 8)}
        view = placement.build(self.snap, 'failed', vcpus=read, spare='s')
        self.assertEqual('s', view.spare)
        self.assertEqual([], reads)
        self.assertTrue(view.fits('rack-a', 'v1'))
        view.candidates('v1')
        self.assertEqual([1], reads)


class TestDecide(testtools.TestCase):
    """The one placement decision, for a strategy that does not place."""

    def setUp(self):
        super().setUp()
        conf = self.useFixture(conf_fixture.ConfFixture()).conf
        self.strategy = smart.SmartEvacuation(conf)
        self.reads = []
        self.snap = model.Snapshot(
            taken_at=T0,
            services=(service('failed'), service('b'), service('c'),
                      service('d', state='down'),
                      service('e', status='disabled'),
                      service('f', forced=True)),
            servers=(server('v1', 'failed'),))

    def view(self, spare=None):
        def read():
            self.reads.append(1)
            return {}
        return placement.build(self.snap, 'failed', vcpus=read, spare=spare)

    def decide(self, request, spare=None):
        return placement.decide(request, self.view(spare), self.strategy)

    def test_the_spare_first_while_the_rule_allows_it(self):
        self.assertEqual('s', self.decide(task('v1'), spare='s'))
        self.assertEqual('s', self.decide(task('v1', {'s': 1}, 's'), 's'))
        # Failed on it more than same_target_retries (1) times: the
        # least-failed other host that is up and enabled.
        self.assertEqual('c', self.decide(
            task('v1', {'s': 2, 'b': 1}, 's'), spare='s'))
        self.assertEqual([], self.reads)  # room is Nova's to judge

    def test_nova_chooses_until_its_choices_failed_on_one_host(self):
        self.assertIsNone(self.decide(task('v1')))
        self.assertIsNone(self.decide(task('v1', {'b': 1})))
        self.assertEqual('c', self.decide(task('v1', {'b': 2})))
        self.assertEqual('b', self.decide(task('v1', {'b': 1}, 'b')))

    def test_never_a_host_that_is_down_disabled_or_failed_too_often(self):
        self.assertIsNone(self.decide(task('v1', {'b': 2, 'c': 3}, 'c')))

    def test_the_request_is_frozen(self):
        request = task('v1', {'b': 1})
        self.assertRaises(dataclasses.FrozenInstanceError, setattr,
                          request, 'target', 'x')

        def put():
            request.failures['b'] = 5
        self.assertRaises(TypeError, put)

    def test_choose_target_has_the_last_word(self):
        seen = []

        class Old(smart.SmartEvacuation):
            def choose_target(self, task, view):
                seen.append(task)
                return 'mine'
        self.strategy = Old(self.strategy.conf)
        self.assertEqual('mine', self.decide(task('v1'), spare='s'))
        self.assertEqual('s', seen[0].target)  # the engine's decision

    def test_a_failing_strategy_leaves_the_engines_proposal(self):
        class Broken(spread.SpreadEvacuation):
            def rank(self, request, candidates, view):
                raise ValueError('bug')
        self.strategy = Broken(self.strategy.conf)
        logged = self.useFixture(fixtures.FakeLogger())
        self.assertEqual('c', self.decide(task('v1', {'b': 2}, 'b')))
        self.assertIn('failed to choose a target for v1; asking for c',
                      logged.output)

    def test_a_strategy_that_abstains_is_said_and_counted(self):
        # The out-of-tree "pack" of the issue: it ranks only hosts whose
        # load is known, and on a cloud that says nothing it abstains.
        class Pack(spread.SpreadEvacuation):
            name = 'pack'

            def rank(self, request, candidates, view):
                return [c for c in candidates if c.load is not None]
        self.strategy = Pack(self.strategy.conf)
        # As on a real cloud: only the failed host's servers are listed.
        self.snap = dataclasses.replace(self.snap,
                                        servers_read=frozenset({'failed'}))
        logged = self.useFixture(fixtures.FakeLogger())
        before = placement.abstentions().get('pack', 0)
        self.assertIsNone(self.decide(task('v1')))
        self.assertEqual(before + 1, placement.abstentions()['pack'])
        self.assertIn('evacuation strategy pack chose none of 2 candidate '
                      'host(s) for v1 (their load known on 0); Nova\'s '
                      'scheduler chooses', logged.output)
        # With Placement's numbers it decides.
        self.view = lambda spare=None: placement.build(
            self.snap, 'failed', vcpus={'b': vc(8, 2), 'c': vc(8, 6)})
        self.assertIn(self.decide(task('v1')), ('b', 'c'))
        self.assertEqual(before + 1, placement.abstentions()['pack'])

    def test_placements_reading_reaches_the_strategy(self):
        def res(vcpus, used, memory, memory_used):
            return model.HostResources('x', {
                'VCPU': model.Inventory(vcpus, used),
                'MEMORY_MB': model.Inventory(memory, memory_used)})
        self.snap = dataclasses.replace(self.snap, servers=(
            dataclasses.replace(server('v1', 'failed'), flavor=model.Flavor(
                'f', vcpus=2, ram_mb=4096)),))
        view = placement.build(self.snap, 'failed', vcpus={
            'b': res(16, 4, 8192, 6144), 'c': res(16, 15, 65536, 0)})
        self.assertEqual((12, 4, 16), (view.hosts['b'].free_vcpus,
                                       view.hosts['b'].used_vcpus,
                                       view.hosts['b'].total_vcpus))
        self.assertEqual(6144, view.hosts['b'].resources['MEMORY_MB'].used)
        # b has the vCPUs but 2048 MiB free for 4096; c 1 vCPU for 2.
        self.assertEqual([], view.candidates('v1'))


class TestSpread(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.fixture = self.useFixture(conf_fixture.ConfFixture(
            **{'evacuation.strategy': 'spread'}))
        self.strategy = spread.SpreadEvacuation(self.fixture.conf)
        self.services = [service('failed'), service('a1'), service('a2'),
                         service('z1'), service('far', zone='az2')]
        self.aggs = (model.Aggregate('1', 'rack', frozenset(
            {'failed', 'a1', 'a2'})),)

    def view(self, servers=(), free=None, spare=None, **kw):
        if free is not None:
            free = {h: vc(max(f, 64), max(f, 64) - f)
                    for h, f in free.items()}
        snap = model.Snapshot(
            taken_at=T0, services=tuple(self.services),
            servers=(server('v1', 'failed'),) + tuple(servers),
            aggregates=self.aggs)
        return placement.build(snap, 'failed', vcpus=free, spare=spare,
                               **kw)

    def decide(self, request, view):
        return placement.decide(request, view, self.strategy)

    def test_least_loaded_of_the_same_aggregate_first(self):
        view = self.view([server('x', 'a1', 4), server('y', 'a2', 2)])
        self.assertEqual('a2', self.decide(task('v1'), view))

    def test_its_own_earlier_choices_count(self):
        view = self.view(on_the_way={'a1': ['v0']}, servers=[
            server('v0', 'failed')])
        self.assertEqual('a2', self.decide(task('v1'), view))

    def test_then_the_zone_then_anywhere(self):
        free = {'a1': 1, 'a2': 0, 'z1': 2, 'far': 50}
        self.assertEqual('z1', self.decide(task('v1'),
                                           self.view(free=free)))
        free['z1'] = 1
        self.assertEqual('far', self.decide(task('v1'),
                                            self.view(free=free)))

    def test_no_room_anywhere_lets_nova_choose(self):
        free = dict.fromkeys(['a1', 'a2', 'z1', 'far'], 1)
        self.assertIsNone(self.decide(task('v1'), self.view(free=free)))

    def test_not_eligible_hosts_are_never_chosen(self):
        self.services[1] = service('a1', status='disabled')
        self.services[2] = service('a2', state='down')
        self.assertEqual('z1', self.decide(task('v1'), self.view()))

    def test_restart_limits_move_on(self):
        failed = task('v1', failures={'a1': 2})
        self.assertEqual('a2', self.decide(
            failed, self.view([server('y', 'a2', 8)])))

    def test_the_reserved_spare_first_while_it_has_room(self):
        self.assertEqual('far', self.decide(task('v1'),
                                            self.view(spare='far')))
        self.assertEqual('a1', self.decide(
            task('v1'), self.view(spare='far', free={'far': 1})))

    def test_zone_only(self):
        self.fixture.set(**{'evacuation.spread_domains': ['zone']})
        view = self.view([server('x', 'a1', 4), server('y', 'a2', 2)])
        self.assertEqual('z1', self.decide(task('v1'), view))

    def test_validate_names_the_option(self):
        self.fixture.set(**{'evacuation.spread_domains': ['zone', 'zone']})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                self.strategy.validate)
        self.assertIn('[evacuation] spread_domains', str(exc))
        self.assertIn('spread_domains', ' '.join(
            self.strategy.get_properties()))


class _Leader(ports.Coordinator):
    def is_leader(self):
        return True

    def proven_for(self):
        return math.inf

    @contextlib.contextmanager
    def host_lock(self, host):
        yield


class _Events(ports.EventSink):
    def __init__(self):
        self.seen = []

    def emit(self, event, host=None, **details):
        self.seen.append((event, details))


class _Cloud(sim_cloud.SimCloud):
    """The simulator's Nova, counting the free-room reads."""

    reads = 0

    def host_vcpus(self):
        self.reads += 1
        return super().host_vcpus()


class _Told(spread.SpreadEvacuation):
    """Asks for what the test says and remembers the views it got."""

    def __init__(self, conf, answer):
        super().__init__(conf)
        self.answer = answer
        self.views = []

    def choose_target(self, task, view):
        self.views.append(view)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class TestJobAsksTheStrategy(testtools.TestCase):
    """The evacuation job's side of the hook, on the simulator's Nova."""

    def setUp(self):
        super().setUp()
        self.conf = self.useFixture(conf_fixture.ConfFixture(
            **{'evacuation.strategy': 'spread'})).conf
        clock = sim_clock.SimClock()
        self.world = sim_world.World(clock, sim_events.EventLog(clock))
        self.world.flavors['f'] = sim_world.Flavor('f', vcpus=2)
        for n, name in enumerate(('h1', 'h2', 'h3')):
            self.world.add_host(sim_world.Host(name=name, id=str(n)))
        for sid in ('vm1', 'vm2'):
            self.world.add_server(sim_world.Server(
                id=sid, name=sid, host='h1', status='ACTIVE', flavor='f'))
        self.world.set_power('h1', False)
        h1 = self.world.hosts['h1']
        h1.fence_proof = h1.forced_down = True
        self.cloud = _Cloud(self.world)
        self.events = _Events()
        self.env = guard.assemble(
            cloud=self.cloud, clock=clock,
            fencer=test_recovery_fakes.FakeFencer(self.cloud),
            coordinator=_Leader(), events=self.events,
            executor=executor.InlineExecutor())

    def step(self, strategy, spare=None):
        snap = self.cloud.snapshot()
        job = strategy.begin('h1', list(snap.servers_on('h1')), spare=spare)
        # h1 is powered off in the world above; the reading says so (the
        # cloud port refuses an evacuate call without a proof).
        off = ports.PowerReading(host='h1', off=True, detail='h1 off')
        job.step(evacuation_job.StepContext(
            env=self.env, snapshot=snap, budget=10, prove_off=lambda: off))
        return {m.server_id: m.requested_dest
                for m in self.world.migrations if m.status != 'error'}

    def test_a_resumed_job_keeps_the_rule_for_hosts_failed_before(self):
        # Before a restart, vm1's rebuild failed twice on the spare h2
        # (more than same_target_retries = 1): Nova's records say so, and
        # the resumed job asks another host for it; vm2 still goes to
        # the spare. (The second failure was a minute ago: its back-off
        # is over.)
        self._failed_twice(at=-60.0)
        strategy = smart.SmartEvacuation(self.conf)
        self.assertEqual({'vm1': 'h3', 'vm2': 'h2'},
                         self.step(strategy, spare='h2'))

    def _failed_twice(self, at: float) -> None:
        for n in (1, 2):
            self.world.migrations.append(sim_world.Migration(
                id='old%d' % n, server_id='vm1', source_host='h1',
                dest_host='h2', status='error', created_at=at,
                updated_at=at))

    def test_a_resumed_retry_waits_out_its_back_off(self):
        # The second failure just happened (Nova's clock): a copy that
        # never stopped would wait retry_delay(2) before the third
        # attempt, and so does the resumed job.
        self._failed_twice(at=0.0)
        strategy = smart.SmartEvacuation(self.conf)
        self.assertEqual({'vm2': 'h2'}, self.step(strategy, spare='h2'))

    def test_the_chosen_host_is_requested_from_nova(self):
        told = _Told(self.conf, 'h3')
        self.assertEqual({'vm1': 'h3', 'vm2': 'h3'}, self.step(told))
        view = told.views[-1]
        self.assertEqual('h1', view.failed_host)
        self.assertEqual({'h2', 'h3'}, set(view.hosts))
        # Free room read once per step; the first call is counted.
        self.assertEqual(64 - 2, view.hosts['h3'].free_vcpus)
        self.assertEqual(1, self.cloud.reads)
        self.assertEqual(['h3', 'h3'], [d['target'] for e, d in
                                        self.events.seen
                                        if e == 'evacuate_requested'])

    def test_spread_spreads(self):
        strategy = spread.SpreadEvacuation(self.conf)
        self.assertEqual({'vm1': 'h2', 'vm2': 'h3'}, self.step(strategy))

    def test_a_failing_strategy_leaves_the_choice_to_nova(self):
        logged = self.useFixture(fixtures.FakeLogger())
        self.assertEqual({'vm1': None, 'vm2': None},
                         self.step(_Told(self.conf, ValueError('bug'))))
        self.assertIn('failed to choose a target for vm1; asking for '
                      'Nova\'s choice', logged.output)

    def test_the_built_in_strategies_read_nothing_more(self):
        self.assertEqual({'vm1': None, 'vm2': None},
                         self.step(smart.SmartEvacuation(self.conf)))
        self.assertEqual(0, self.cloud.reads)
