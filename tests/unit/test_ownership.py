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

"""One authority over each instance (engine.ownership), and the runtime
that consults it before a job acts on an instance.

Each test tries to have two workflows own one instance at once.
"""

import concurrent.futures
import dataclasses
import enum
import itertools
import os
import re

import testtools

from instanceha.engine import instance_effects as fx
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha import exceptions
from tests.unit import test_runtime as rt

O, R = ownership.Owner, ownership.Rule


class TestTable(testtools.TestCase):

    def test_every_pair_has_a_rule(self):
        for holder, wanting in itertools.product(O, O):
            self.assertIn((holder, wanting), ownership.RULES)

    def test_never_two_that_take_from_each_other(self):
        for a, b in itertools.product(O, O):
            if a is not b:
                self.assertFalse(
                    ownership.RULES[(a, b)] is R.TAKE_OVER and
                    ownership.RULES[(b, a)] is R.TAKE_OVER, (a, b))

    def test_one_kind_never_shares_an_instance(self):
        for owner in O:
            self.assertIs(R.WAIT, ownership.RULES[(owner, owner)])

    def test_nobody_takes_from_a_host_recovery(self):
        for wanting in O:
            self.assertIsNot(R.TAKE_OVER,
                             ownership.RULES[(O.HOST_RECOVERY, wanting)])

    def test_the_documented_table_is_the_code(self):
        # doc/architecture.md holds the same table, row by row.
        path = os.path.join(os.path.dirname(__file__), '..', '..', 'doc',
                            'architecture.md')
        with open(path) as f:
            text = f.read()
        names = {o.value.replace('_', ' '): o for o in O}
        rows = {}
        for line in text.splitlines():
            cells = [c.strip().strip('*') for c in line.strip('|').split('|')]
            if len(cells) == len(O) + 1 and cells[0] in names:
                rows[names[cells[0]]] = cells[1:]
        self.assertEqual(set(O), set(rows))
        header = [o for o in O]
        for holder, cells in rows.items():
            for wanting, cell in zip(header, cells):
                self.assertEqual(ownership.RULES[(holder, wanting)].value,
                                 re.sub(r'\s+', ' ', cell), (holder,
                                                             wanting))


class TestOwners(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.owners = ownership.Owners()

    def test_free_instance_is_claimed_then_refused_to_another(self):
        o = self.owners
        self.assertIsNone(o.claim(O.INSTANCE_FAILURE, 'vm', 'vm', 'h1'))
        rule, holder = o.claim(O.LOCK_SWEEP, 'sweep', 'vm', 'h1')
        self.assertIs(R.WAIT, rule)
        self.assertEqual((O.INSTANCE_FAILURE, 'vm'),
                         (holder.owner, holder.key))
        # The same workflow again: still its own.
        self.assertIsNone(o.claim(O.INSTANCE_FAILURE, 'vm', 'vm', 'h1'))
        o.release(O.INSTANCE_FAILURE, 'vm')
        self.assertIsNone(o.claim(O.LOCK_SWEEP, 'sweep', 'vm', 'h1'))

    def test_a_second_restart_of_one_instance_waits(self):
        o = self.owners
        o.claim(O.INSTANCE_FAILURE, 'a', 'vm', 'h1')
        self.assertIs(R.WAIT, o.claim(O.INSTANCE_FAILURE, 'b', 'vm',
                                      'h1')[0])

    def test_host_recovery_holds_every_instance_of_its_host(self):
        o = self.owners
        o.hold_hosts(O.HOST_RECOVERY, ['h1'])
        for wanting in (O.INSTANCE_FAILURE, O.DRAIN, O.LOCK_SWEEP):
            rule, holder = o.claim(wanting, 'k', 'vm', 'h1')
            self.assertIs(R.GIVE_WAY, rule)
            self.assertEqual(O.HOST_RECOVERY, holder.owner)
        # Not the instances of other hosts.
        self.assertIsNone(o.claim(O.INSTANCE_FAILURE, 'vm2', 'vm2', 'h2'))
        # Ended: free again.
        o.hold_hosts(O.HOST_RECOVERY, [])
        self.assertIsNone(o.claim(O.INSTANCE_FAILURE, 'vm', 'vm', 'h1'))

    def test_host_recovery_takes_over_a_restart_explicitly(self):
        o = self.owners
        o.claim(O.INSTANCE_FAILURE, 'vm', 'vm', 'h1')
        o.hold_hosts(O.HOST_RECOVERY, ['h1'])
        self.assertTrue(o.taken_over(O.INSTANCE_FAILURE, 'vm'))
        self.assertEqual(O.HOST_RECOVERY, o.holder('vm', 'h1').owner)
        # The restart cannot claim it back.
        self.assertIs(R.GIVE_WAY, o.claim(O.INSTANCE_FAILURE, 'vm', 'vm',
                                          'h1')[0])

    def test_a_drain_waits_for_a_restart_and_a_restart_gives_way(self):
        o = self.owners
        o.claim(O.INSTANCE_FAILURE, 'vm', 'vm', 'h1')
        o.hold_hosts(O.DRAIN, ['h1'])
        # The restart keeps it: the drain's host claim does not take it.
        self.assertFalse(o.taken_over(O.INSTANCE_FAILURE, 'vm'))
        self.assertIs(R.WAIT, o.claim(O.DRAIN, 'h1', 'vm', 'h1')[0])
        o.release(O.INSTANCE_FAILURE, 'vm')
        self.assertIsNone(o.claim(O.DRAIN, 'h1', 'vm', 'h1'))
        self.assertIs(R.GIVE_WAY, o.claim(O.INSTANCE_FAILURE, 'vm2', 'vm2',
                                          'h1')[0])

    def test_a_recovery_beats_a_drain_on_one_host(self):
        o = self.owners
        o.hold_hosts(O.DRAIN, ['h1'])
        o.hold_hosts(O.HOST_RECOVERY, ['h1'])
        self.assertEqual(O.HOST_RECOVERY, o.holder('vm', 'h1').owner)

    def test_record_in_nova_holds_until_it_settles(self):
        o = self.owners
        o.hold_instances(O.INSTANCE_FAILURE, {'vm': 'h1'})
        self.assertIs(R.WAIT, o.claim(O.LOCK_SWEEP, 's', 'vm', 'h1')[0])
        o.hold_instances(O.INSTANCE_FAILURE, {})
        self.assertIsNone(o.holder('vm', 'h1'))


class S(enum.Enum):
    ACT = 'act'
    DONE = 'done'


class _Actor:
    """A kind whose one step acts on instance ``vm`` as ``owner``."""

    def __init__(self, rt_, name, owner, gives=None):
        self.name, self.ran = name, []
        self.rt = rt_
        rt_.register(runtime.Kind(
            name=name, transitions={S.ACT: frozenset({S.DONE})},
            steps={S.ACT: self.act}, final=frozenset({S.DONE}),
            owner=owner, on_conflict=gives))

    def act(self, view):
        return runtime.Job(run=lambda: self.ran.append(view.record.key),
                           then=lambda v, r: runtime.Go(S.DONE),
                           lock=False, acts_on=(('vm', 'h1'),))


class _ManualPool:
    """Jobs run only when the test says so."""

    def __init__(self):
        self.waiting = []

    def submit(self, fn):
        fut = concurrent.futures.Future()
        self.waiting.append((fut, fn))
        return fut

    def finish_all(self):
        waiting, self.waiting = self.waiting, []
        for fut, fn in waiting:
            fut.set_result(fn())


class TestRuntimeConsults(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.pool = _ManualPool()
        self.env = rt._env(self.pool)
        self.rt = runtime_loop.Runtime(self.env, leading=lambda: True)

    def test_two_kinds_never_act_on_one_instance_at_once(self):
        a = _Actor(self.rt, 'a', O.INSTANCE_FAILURE)
        b = _Actor(self.rt, 'b', O.LOCK_SWEEP)
        self.rt.start('a', 'x', S.ACT)
        self.rt.start('b', 'y', S.ACT)
        self.rt.run()
        # a's job runs (not yet finished): b waits, submits nothing.
        self.assertEqual(1, len(self.pool.waiting))
        self.assertTrue(self.rt.running('a', 'x'))
        self.assertFalse(self.rt.running('b', 'y'))
        self.pool.finish_all()
        self.rt.run()
        self.env.clock.t += 10
        self.rt.run()
        self.pool.finish_all()
        self.rt.run()
        self.assertEqual(['x'], a.ran)
        self.assertEqual(['y'], b.ran)
        self.assertEqual([], self.rt.records('b'))

    def test_gives_way_to_a_host_recovery(self):
        gave = []

        def gives(view, rule, holder):
            gave.append((rule, holder.owner))
            return runtime.Go(S.DONE)
        a = _Actor(self.rt, 'a', O.INSTANCE_FAILURE, gives)
        self.rt.owners.hold_hosts(O.HOST_RECOVERY, ['h1'])
        self.rt.start('a', 'x', S.ACT)
        self.rt.run()
        self.assertEqual([], self.pool.waiting)
        self.assertEqual([(R.GIVE_WAY, O.HOST_RECOVERY)], gave)
        self.assertEqual([], a.ran)
        self.assertIsNone(self.rt.get('a', 'x'))

    def test_claim_released_when_the_job_is_applied_or_dropped(self):
        _Actor(self.rt, 'a', O.INSTANCE_FAILURE)
        self.rt.start('a', 'x', S.ACT)
        self.rt.run()
        self.assertEqual('x', self.rt.owners.holder('vm', 'h1').key)
        self.pool.finish_all()
        self.rt.run()
        self.assertIsNone(self.rt.owners.holder('vm', 'h1'))
        self.rt.start('a', 'z', S.ACT)
        self.rt.run()
        self.pool.finish_all()
        self.rt.drop_results()  # leadership lost
        self.assertIsNone(self.rt.owners.holder('vm', 'h1'))

    def test_a_kind_acting_on_instances_must_say_as_whom(self):
        _Actor(self.rt, 'a', None)
        self.rt.start('a', 'x', S.ACT)
        self.assertRaises(exceptions.InstanceHAError, self.rt.run)


class _Cloud:
    def __init__(self, srv):
        self.srv = srv
        self.calls = []

    def get_server(self, server_id):
        return self.srv

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append(name)


class TestEffectsReadWhereItIs(testtools.TestCase):
    """An instance-failure effect refuses an instance that moved."""

    SEEN = model.Server(id='vm', name='vm', host='h1', status='SHUTOFF',
                        flavor=model.Flavor('f'))

    def perform(self, now, effect=fx.Effect.RESTART):
        from instanceha.engine import instance_record as irec
        cloud = _Cloud(now)
        done = fx._perform(cloud, effect, fx.Order(self.SEEN, 0),
                           irec.Record(1, 0, irec.RESTARTING))
        return cloud.calls, [e[0] for e in done.emit]

    def test_acts_where_it_was_seen(self):
        calls, told = self.perform(self.SEEN)
        self.assertEqual(['set_server_metadata', 'start_server'], calls)
        self.assertEqual(['instance_start_requested'], told)

    def test_refuses_an_instance_on_another_host(self):
        for effect in fx.MOVES:
            calls, told = self.perform(dataclasses.replace(
                self.SEEN, host='h2'), effect)
            self.assertEqual([], calls, effect)
            self.assertEqual(['instance_recovery_failed'], told)

    def test_refuses_an_instance_started_meanwhile(self):
        calls, told = self.perform(dataclasses.replace(
            self.SEEN, status='ACTIVE'))
        self.assertEqual([], calls)
        calls, told = self.perform(dataclasses.replace(
            self.SEEN, task_state='migrating'), fx.Effect.RELOCATE)
        self.assertEqual([], calls)


class TestDrainClaims(testtools.TestCase):
    """The clean shutdown's migrate drain owns its host's instances."""

    def test_a_drain_acts_on_every_instance_of_its_host(self):
        from instanceha.engine import shutdown_acts

        def srv(id_, host):
            return model.Server(id=id_, name=id_, host=host,
                                status='ACTIVE', flavor=model.Flavor('f'))
        snap = model.Snapshot(taken_at=None, servers=(
            srv('b', 'h1'), srv('a', 'h1'), srv('c', 'h2')))
        self.assertEqual((('a', 'h1'), ('b', 'h1')),
                         shutdown_acts.draining(snap, 'h1'))
        # The servers of h1 were not read: it claims nothing it cannot
        # name (each move still reads its instance again).
        partial = dataclasses.replace(snap, servers_read=frozenset({'h2'}))
        self.assertEqual((), shutdown_acts.draining(partial, 'h1'))

    def test_waits_for_a_restart_gives_way_to_a_recovery(self):
        from instanceha.engine import shutdown
        from instanceha.engine import shutdown_acts
        from instanceha.engine import shutdown_flow
        ann = shutdown.Announcement('h1', shutdown.REBOOT, b'1', 0.0, 0.0)
        rec = runtime.Record(kind=shutdown_flow.KIND, key='h1',
                             state=shutdown_flow.P.ANNOUNCED,
                             durable=shutdown_flow.Durable(ann=ann))
        view = runtime.View(rec, None, 0.0)
        ctx = shutdown_flow.Context(conf=None, env=None, effects=None)
        wait = shutdown_acts.gives_way(
            ctx, view, R.WAIT, ownership.Claim(O.INSTANCE_FAILURE, 'vm'))
        self.assertIsInstance(wait, runtime.Retry)
        self.assertIn('instance_failure vm', wait.why)
        way = shutdown_acts.gives_way(
            ctx, view, R.GIVE_WAY, ownership.Claim(O.HOST_RECOVERY, 'h1'))
        self.assertEqual(shutdown_flow.P.ANNOUNCED, way.state)
        self.assertTrue(way.local['skipped'])
