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

"""The recovery workflow on a small in-memory cloud (see the fakes)."""

import dataclasses
import datetime
import logging

import fixtures
import testtools

from instanceha.cmd import manage_hosts
from instanceha.conf import evacuation as evac_conf
from instanceha.engine import events
from instanceha.engine import migration_records
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine.states import HostState as S
from instanceha import exceptions
from tests.unit import test_recovery_fakes as fakes


class TestCase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())


def marker_state(rig, host):
    parsed = reasons.read(rig.cloud.services[host].disabled_reason).marker
    return parsed.state if parsed else None


class TestHappyPath(TestCase):

    def test_fenced_evacuated_powered_on_enabled(self):
        rig = fakes.Rig()
        a, b = rig.cloud.boot('host1', 2)
        off, = rig.cloud.boot('host1', 1, status='SHUTOFF')
        err, = rig.cloud.boot('host1', 1, status='ERROR')
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual(
            [('healthy', 'suspect'), ('suspect', 'fencing'),
             ('fencing', 'fenced'), ('fenced', 'evacuating'),
             ('evacuating', 'evacuated'), ('evacuated', 'powering_on'),
             ('powering_on', 'waiting_up'), ('waiting_up', 'enabling'),
             ('enabling', 'healthy')], rig.transitions('host1'))
        for sid in (a, b, off, err):
            self.assertNotEqual('host1', rig.cloud.servers[sid].host)
            self.assertEqual(1, len(rig.cloud.evacuations(sid)))
            self.assertFalse(rig.cloud.servers[sid].locked)
        self.assertEqual('SHUTOFF', rig.cloud.servers[off].status)
        self.assertEqual('ERROR', rig.cloud.servers[err].status)
        self.assertEqual('ACTIVE', rig.cloud.servers[a].status)
        svc = rig.cloud.services['host1']
        self.assertEqual('enabled', svc.status)
        self.assertFalse(svc.forced_down)
        self.assertIsNone(svc.disabled_reason)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual([('off', 'host1'), ('on', 'host1')],
                         rig.fencer.calls)
        # Evacuate only after forced down + a marker (R10), one write.
        calls = [c[0] for c in rig.cloud.calls]
        first_evac = calls.index('evacuate')
        mark = rig.cloud.calls[calls.index('update_service')]
        self.assertLess(calls.index('update_service'), first_evac)
        self.assertTrue(mark[3].startswith('instanceha:evacuating '))
        self.assertTrue(mark[4])

    def test_non_evacuable_status_left_alone_and_reported(self):
        rig = fakes.Rig()
        ok, = rig.cloud.boot('host1', 1)
        paused, = rig.cloud.boot('host1', 1, status='PAUSED')
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual([], rig.cloud.evacuations(paused))
        self.assertEqual('host1', rig.cloud.servers[paused].host)
        self.assertEqual([{'server': paused, 'status': 'PAUSED'}],
                         rig.events.named(events.EVACUATE_SKIPPED, 'host1'))
        self.assertEqual('host2', rig.cloud.servers[ok].host)

    def test_instance_locked_by_its_owner_stays_locked(self):
        rig = fakes.Rig(**{'evacuation.lock_instances': True})
        mine, = rig.cloud.boot('host1', 1)
        theirs, = rig.cloud.boot('host1', 1)
        rig.cloud.set_server_lock(theirs, True)
        rig.cloud.calls.clear()
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertTrue(rig.cloud.servers[theirs].locked)
        self.assertNotEqual('host1', rig.cloud.servers[theirs].host)
        self.assertNotIn(('unlock', theirs), rig.cloud.calls)
        self.assertIn(('unlock', mine), rig.cloud.calls)

    def test_enable_only_after_up(self):
        rig = fakes.waiting_up_rig()
        svc = rig.cloud.services['host1']
        # Waiting after our power-on: nothing written since the marker of
        # its evacuation (forced down, disabled).
        self.assertEqual('disabled', svc.status)
        self.assertTrue(svc.forced_down)
        self.assertEqual(S.EVACUATING, marker_state(rig, 'host1'))
        rig.cloud.revive('host1')
        rig.run(5)
        self.assertEqual({}, rig.engine.host_states())
        svc = rig.cloud.services['host1']
        self.assertEqual('enabled', svc.status)
        self.assertFalse(svc.forced_down)
        self.assertEqual([{}], rig.events.named(events.FORCED_DOWN_CLEARED,
                                                'host1'))

    def test_stale_up_after_power_on_is_not_trusted(self):
        # Nova keeps saying 'up' for down_time after the last heartbeat:
        # the host must be enabled only on a heartbeat after power-on.
        rig = fakes.Rig(delta=5)
        rig.cloud.down_time = 30
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        booted = rig.power_on_without_boot()  # still booting
        rig.run(20)
        self.assertTrue(booted)
        self.assertEqual({'host1': S.WAITING_UP}, rig.engine.host_states())
        self.assertEqual('disabled', rig.cloud.services['host1'].status)
        rig.cloud.revive('host1')
        rig.run(5)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('enabled', rig.cloud.services['host1'].status)
        # and the host was not detected failed (fenced) a second time
        self.assertEqual(1, sum(1 for c in rig.fencer.calls
                                if c[0] == 'off'))

    def test_leave_disabled(self):
        rig = fakes.Rig(leave_disabled=True)
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual({'host1': S.LEFT_DISABLED},
                         rig.engine.host_states())
        svc = rig.cloud.services['host1']
        self.assertEqual('disabled', svc.status)
        self.assertTrue(svc.forced_down)
        self.assertEqual(S.LEFT_DISABLED, marker_state(rig, 'host1'))
        self.assertEqual([('off', 'host1')], rig.fencer.calls)
        self.assertEqual('host2', rig.cloud.servers[vm].host)


class TestFencing(TestCase):

    def test_no_fencing_config_never_evacuated(self):
        rig = fakes.Rig(configured={'host2', 'host3'})
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(60)
        self.assertEqual([], rig.cloud.evacuations(vm))
        self.assertEqual({'host1': S.FENCE_FAILED}, rig.engine.host_states())
        pending = rig.events.named(events.FENCE_PENDING, 'host1')
        self.assertGreater(len(pending), 10)  # reported every cycle
        self.assertIn('no fencing configuration', pending[-1]['reason'])
        self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_fence_failure_retried_with_backoff(self):
        rig = fakes.Rig()
        vm, = rig.cloud.boot('host1', 1)
        rig.fencer.fail['host1'] = 3
        rig.run(2)
        rig.cloud.kill('host1')
        t0 = rig.clock.t
        rig.run(45)
        # 10, 20, 40 s back-off: attempts at ~0, 10, 30 s; the 4th (70 s)
        # has not happened yet: still nothing evacuated.
        self.assertEqual(3, len(rig.fencer.calls))
        self.assertEqual([], rig.cloud.evacuations(vm))
        failed = rig.events.named(events.HOST_STATE, 'host1')
        self.assertEqual([10, 20, 40], [
            d['retry_in'] for d in failed if d['new'] == 'fence_failed'])
        rig.run(45)
        self.assertGreater(rig.clock.t - t0, 70)
        self.assertEqual(1, len(rig.cloud.evacuations(vm)))
        self.assertEqual({}, rig.engine.host_states())

    def test_fence_failed_host_that_recovers_is_dropped(self):
        rig = fakes.Rig()
        rig.cloud.boot('host1', 1)
        rig.fencer.fail['host1'] = 1
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(3)
        self.assertEqual({'host1': S.FENCE_FAILED}, rig.engine.host_states())
        rig.cloud.revive('host1')
        rig.run(3)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual(('fence_failed', 'healthy'),
                         rig.transitions('host1')[-1])

    def test_unfenceable_host_does_not_starve_the_per_cycle_cap(self):
        # host1 sorts first and can never be fenced; with a cap of one
        # new host per cycle, host2 must still get its turn.
        rig = fakes.Rig(hosts=4, configured={'host2', 'host3', 'host4'},
                        threshold=100, **{'gates.max_hosts_per_cycle': 1})
        rig.cloud.boot('host1', 1)
        vm, = rig.cloud.boot('host2', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(3)
        self.assertEqual(S.FENCE_FAILED, rig.engine.host_states()['host1'])
        rig.cloud.kill('host2')
        rig.run(30)
        self.assertEqual(1, len(rig.cloud.evacuations(vm)))
        self.assertEqual(['host1'], list(rig.engine.host_states()))
        self.assertIn(rig.engine.host_states()['host1'],
                      (S.FENCE_FAILED, S.FENCING))  # or retrying
        # host1 kept its workflow (never dropped and restarted).
        self.assertEqual(1, rig.transitions('host1').count(
            ('healthy', 'suspect')))

    def test_kdump_host_is_fenced_without_power_cycle(self):
        rig = fakes.Rig(kdump=True, **{'kdump.check_kdump': True,
                                       'kdump.kdump_timeout': 10,
                                       'kdump.message_timeout': 5})
        # It reboots by itself after its dump, slowly (a minute).
        rig.cloud.world.timing.boot_time = 60
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        # Crashes now, dumps from 2 s later until 11 s later, a message a
        # second.
        rig.cloud.world.start_kdump('host1', 11)
        rig.run(2)
        self.assertEqual([], rig.fencer.calls)  # waiting for kdump
        rig.run(8)
        self.assertEqual('host2', rig.cloud.servers[vm].host)
        self.assertEqual({'host1': S.EVACUATED}, rig.engine.host_states())
        rig.run(10)  # stopped sending: it reboots by itself
        self.assertEqual({'host1': S.WAITING_UP}, rig.engine.host_states())
        rig.cloud.world.timing.boot_time = 0
        rig.cloud.revive('host1')
        rig.run(6)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual([], rig.fencer.calls)

    def test_kdump_timeout_then_normal_fencing(self):
        rig = fakes.Rig(kdump=True, **{'kdump.check_kdump': True,
                                       'kdump.kdump_timeout': 10})
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(8)
        self.assertEqual([], rig.fencer.calls)
        rig.run(20)
        self.assertEqual(('off', 'host1'), rig.fencer.calls[0])


class TestSmart(TestCase):

    def test_failed_rebuild_retried_then_done(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.fail_rebuild(vm, 2)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual(3, len(rig.cloud.evacuations(vm)))
        self.assertEqual('ACTIVE', rig.cloud.servers[vm].status)
        self.assertEqual({}, rig.engine.host_states())

    def test_attempts_told_apart_by_id_not_time(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        rig.cloud.same_second = True
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.fail_rebuild(vm, 2)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(30)
        self.assertEqual(3, len(rig.cloud.evacuations(vm)))
        self.assertEqual(2, len(rig.events.named(events.EVACUATE_FAILED)))
        self.assertEqual({}, rig.engine.host_states())

    def test_retries_exhausted_marks_host_failed(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.retries': 3})
        vm, ok = rig.cloud.boot('host1', 2)
        rig.cloud.fail_rebuild(vm, 100)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(60)
        self.assertEqual(4, len(rig.cloud.evacuations(vm)))
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())
        svc = rig.cloud.services['host1']
        self.assertEqual('disabled', svc.status)
        self.assertTrue(svc.forced_down)
        self.assertIn('FAILED', svc.disabled_reason)
        self.assertIn('instanceha-manage hosts clear host1',
                      svc.disabled_reason)
        self.assertEqual([('off', 'host1')], rig.fencer.calls)  # no power on
        self.assertFalse(rig.cloud.servers[vm].locked)
        gave_up = rig.events.named(events.EVACUATE_GAVE_UP, 'host1')
        self.assertEqual([vm], [d['server'] for d in gave_up])
        self.assertIn('run "instanceha-manage hosts clear host1"',
                      self.log.output)
        # Reported every poll until an operator acts.
        pending = len(rig.events.named(events.HOST_FAILED_PENDING, 'host1'))
        self.assertGreater(pending, 5)
        rig.run(5)
        self.assertEqual(pending + 5, len(rig.events.named(
            events.HOST_FAILED_PENDING, 'host1')))
        # A new engine (restart) does not touch a FAILED host either.
        rig.restart()
        rig.run(20)
        self.assertEqual(4, len(rig.cloud.evacuations(vm)))
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())

    def test_stop_evacuating_after_give_up(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.retries': 1,
                           'evacuation.max_in_flight': 1})
        bad, rest1, rest2 = rig.cloud.boot('host1', 3)
        rig.cloud.fail_rebuild(bad, 100)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(40)
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())
        self.assertEqual(2, len(rig.cloud.evacuations(bad)))
        self.assertEqual([], rig.cloud.evacuations(rest1))
        self.assertEqual([], rig.cloud.evacuations(rest2))
        gave_up = sorted(d['server'] for d in
                         rig.events.named(events.EVACUATE_GAVE_UP))
        self.assertEqual(sorted([bad, rest1, rest2]), gave_up)
        for sid in (bad, rest1, rest2):
            self.assertFalse(rig.cloud.servers[sid].locked)

    def test_force_enable_does_not_apply_to_smart(self):
        rig = fakes.Rig(force_enable=True, **{'evacuation.strategy': 'smart',
                                              'evacuation.retries': 0})
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.fail_rebuild(vm, 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())

    def test_other_target_after_same_target_retries(self):
        rig = fakes.Rig(hosts=4, **{'evacuation.strategy': 'smart',
                                    'evacuation.same_target_retries': 1})
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.fail_rebuild(vm, None, dest='host2')
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(30)
        targets = [c[2] for c in rig.cloud.evacuations(vm)]
        # Nova's choice twice (host2 both times), then explicitly another.
        self.assertEqual([None, None, 'host3'], targets)
        self.assertEqual('host3', rig.cloud.servers[vm].host)

    def test_no_destination_chosen_is_said_plainly(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.retries': 0})
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.scheduler_finds_nothing()
        rig.cloud.kill('host1')
        rig.run(20)
        failed, = rig.events.named(events.EVACUATE_FAILED, 'host1')
        self.assertEqual('rebuild ended error before Nova chose a '
                         'destination', failed['reason'])
        self.assertIsNone(failed['dest'])

    def test_in_flight_cap(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.max_in_flight': 2})
        rig.cloud.boot('host1', 5)
        rig.run(2)
        rig.cloud.kill('host1')
        peak = 0
        for _ in range(30):
            rig.run(1)
            running = sum(1 for m in rig.cloud.migs
                          if m.status in migration_records.MIGRATION_RUNNING)
            peak = max(peak, running)
        self.assertEqual(2, peak)
        self.assertEqual({}, rig.engine.host_states())

    def test_fire_and_forget_failure_without_force_enable(self):
        rig = fakes.Rig()
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.refuse[vm] = 1
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())
        self.assertFalse(rig.cloud.servers[vm].locked)

    def test_fire_and_forget_failure_with_force_enable(self):
        rig = fakes.Rig(force_enable=True)
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.refuse[vm] = 1
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('enabled', rig.cloud.services['host1'].status)


class TestRetryBackoff(TestCase):
    """A failed rebuild is retried after a growing, bounded wait."""

    def _rig(self, **kw):
        conf = {'evacuation.strategy': 'smart', 'evacuation.retries': 5,
                'evacuation.retry_interval': 2,
                'evacuation.retry_max_interval': 6}
        conf.update(kw)
        rig = fakes.Rig(**conf)
        times = []
        evacuate = rig.cloud.evacuate

        def timed(server_id, *, host=None):
            times.append(rig.clock.t)
            return evacuate(server_id, host=host)
        rig.cloud.evacuate = timed
        return rig, times

    def test_refusals_back_off_exponentially_up_to_the_cap(self):
        rig, times = self._rig()
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.refuse[vm] = 100
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(120)
        # 1 + retries attempts in all (R17), however long the waits.
        self.assertEqual(6, len(times))
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.assertEqual([2, 4, 6, 6, 6], gaps)
        refused = rig.events.named(events.EVACUATE_REFUSED, 'host1')
        self.assertEqual([2, 4, 6, 6, 6, None],
                         [d.get('retry_in') for d in refused])
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())

    def test_failed_rebuilds_back_off_then_succeed(self):
        rig, times = self._rig()
        vm, = rig.cloud.boot('host1', 1)
        rig.cloud.fail_rebuild(vm, 2)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(60)
        self.assertEqual(3, len(times))
        # Each failure is seen 2 ticks after the call, then 2 s, then 4 s.
        self.assertEqual([4, 6], [b - a for a, b in zip(times, times[1:])])
        self.assertEqual('ACTIVE', rig.cloud.servers[vm].status)
        self.assertEqual({}, rig.engine.host_states())

    def test_backing_off_instance_does_not_hold_up_others(self):
        rig, times = self._rig(**{'evacuation.retry_interval': 30,
                                  'evacuation.retry_max_interval': 30})
        bad, good = rig.cloud.boot('host1', 2)
        rig.cloud.refuse[bad] = 1
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        # Refused once and waiting; the other one is rebuilt meanwhile.
        self.assertEqual(1, len(rig.cloud.evacuations(bad)))
        self.assertEqual('ACTIVE', rig.cloud.servers[good].status)
        self.assertNotEqual('host1', rig.cloud.servers[good].host)
        rig.run(30)
        self.assertEqual(2, len(rig.cloud.evacuations(bad)))
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('ACTIVE', rig.cloud.servers[bad].status)

    def test_delay_is_deterministic_and_bounded(self):
        conf = fakes.make_conf(**{'evacuation.retry_interval': 5,
                                  'evacuation.retry_max_interval': 60})
        self.assertEqual([0, 5, 10, 20, 40, 60, 60],
                         [evac_conf.retry_delay(conf, n)
                          for n in (0, 1, 2, 3, 4, 5, 10**6)])
        conf.set_override('retry_interval', 0, group='evacuation')
        self.assertEqual(0, evac_conf.retry_delay(conf, 3))

    def test_max_below_interval_is_refused(self):
        conf = fakes.make_conf(**{'evacuation.retry_interval': 30,
                                  'evacuation.retry_max_interval': 10})
        err = self.assertRaises(exceptions.ConfigurationError,
                                evac_conf.validate, conf)
        self.assertIn('[evacuation] retry_max_interval', str(err))


class TestOrchestrated(TestCase):

    def test_priority_order(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'orchestrated',
                           'evacuation.priority_sources': ['server']})
        key = 'instanceha:priority'
        low, = rig.cloud.boot('host1', 1, metadata={key: '1'})
        db1, db2 = rig.cloud.boot('host1', 2, metadata={key: '10'})
        plain, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(30)
        requested = [d['server'] for d in
                     rig.events.named(events.EVACUATE_REQUESTED)]
        self.assertEqual({db1, db2}, set(requested[:2]))
        self.assertEqual([low, plain], requested[2:])
        done = [d['server'] for d in rig.events.named(events.EVACUATE_DONE)]
        self.assertLess(done.index(db2), done.index(low))
        self.assertLess(done.index(low), done.index(plain))


class TestReservation(TestCase):

    def _rig(self, **kw):
        # host1..host5 in service, host6 and host7 spares (threshold 50%)
        rig = fakes.Rig(hosts=7, **{'reservation.strategy': 'reserved-hosts',
                                    **kw})
        import dataclasses
        from instanceha.engine import model
        for spare in ('host6', 'host7'):
            rig.cloud.services[spare] = dataclasses.replace(
                rig.cloud.services[spare], status='disabled',
                disabled_reason='instanceha:reserved')
        rig.cloud.aggregates = [
            model.Aggregate('1', 'rack-a', frozenset({'host1', 'host7'})),
            model.Aggregate('2', 'rack-b', frozenset({'host2', 'host6'}))]
        return rig

    def test_spare_in_same_aggregate_used(self):
        rig = self._rig()
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual([{'spare': 'host7'}],
                         rig.events.named(events.SPARE_CLAIMED, 'host1'))
        self.assertEqual('host7', rig.cloud.servers[vm].host)
        self.assertEqual('enabled', rig.cloud.services['host7'].status)
        self.assertEqual('disabled', rig.cloud.services['host6'].status)

    def test_two_failed_hosts_never_share_a_spare(self):
        rig = self._rig()
        rig.cloud.aggregates = []
        rig.cloud.boot('host1', 1)
        rig.cloud.boot('host2', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.cloud.kill('host2')
        rig.run(20)
        claimed = sorted(d['spare'] for d in
                         rig.events.named(events.SPARE_CLAIMED))
        self.assertEqual(['host6', 'host7'], claimed)

    def test_unused_spare_returned(self):
        rig = self._rig(**{'reservation.evacuate_to_spare': False})
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        svc = rig.cloud.services['host7']
        # the scheduler (fake: first enabled host) chose host2
        self.assertEqual([{'spare': 'host7'}],
                         rig.events.named(events.SPARE_RELEASED, 'host1'))
        self.assertEqual('disabled', svc.status)
        self.assertTrue(svc.disabled_reason.startswith('instanceha:reserved'))


class TestResume(TestCase):

    def test_restart_mid_evacuation_evacuates_once(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.max_in_flight': 2})
        vms = rig.cloud.boot('host1', 5)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run_until(lambda: any(rig.cloud.evacuations(v) for v in vms), 40)
        self.assertEqual(S.EVACUATING, marker_state(rig, 'host1'))
        rig.restart()
        rig.run(30)
        for vm in vms:
            self.assertEqual(1, len(rig.cloud.evacuations(vm)), vm)
            self.assertFalse(rig.cloud.servers[vm].locked, vm)
            self.assertNotEqual('host1', rig.cloud.servers[vm].host)
        self.assertEqual({}, rig.engine.host_states())
        resumed = rig.events.named(events.HOST_RESUMED, 'host1')
        self.assertEqual([{'state': 'evacuating'}], resumed)

    def test_marker_of_the_previous_version_is_adopted(self):
        # A host the previous version fenced and left mid-evacuation: its
        # literal marker (no recovery id yet) is resumed by this version.
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        vms = rig.cloud.boot('host1', 2)
        rig.run(2)
        rig.cloud.power_off('host1')
        rig.cloud.services['host1'] = fakes._replace(
            rig.cloud.services['host1'], status='disabled', forced_down=True,
            disabled_reason='instanceha:evacuating 2026-11-29T12:00:02Z '
                            'fenced_at=2026-11-29T12:00:02Z')
        rig.restart()
        rig.run(30)
        self.assertEqual([{'state': 'evacuating'}],
                         rig.events.named(events.HOST_RESUMED, 'host1'))
        # Resumed, not recovered anew: it is not fenced again.
        self.assertEqual([], [c for c in rig.fencer.calls if c[0] == 'off'])
        for vm in vms:
            self.assertEqual(1, len(rig.cloud.evacuations(vm)), vm)
            self.assertNotEqual('host1', rig.cloud.servers[vm].host)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_restart_in_every_state_finishes_the_job(self):
        for stop_at in ('evacuating', 'waiting_up'):
            rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
            vms = rig.cloud.boot('host1', 3)
            rig.run(2)
            rig.cloud.kill('host1')
            rig.run_until(lambda: rig.engine.host_states().get(
                'host1') == S(stop_at), 40)
            self.assertEqual(S(stop_at), rig.engine.host_states()['host1'])
            # Waiting up after the power-on: Nova keeps the marker of the
            # evacuation (a resumed copy powers on again and waits).
            self.assertEqual(S.EVACUATING, marker_state(rig, 'host1'))
            rig.restart()
            rig.run(30)
            for vm in vms:
                self.assertEqual(1, len(rig.cloud.evacuations(vm)),
                                 (stop_at, vm))
                self.assertFalse(rig.cloud.servers[vm].locked)
            self.assertEqual({}, rig.engine.host_states(), stop_at)
            self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_markers_of_the_previous_version_are_adopted(self):
        # It wrote "evacuated" and "powering_on" between the end of the
        # rebuilds and the power-on; a restart finds them and goes on.
        for written in ('evacuated', 'powering_on'):
            rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
            vms = rig.cloud.boot('host1', 3)
            rig.run(2)
            rig.cloud.kill('host1')
            rig.run_until(lambda: all(
                rig.cloud.servers[v].host != 'host1' for v in vms), 40)
            rig.restart()
            svc = rig.cloud.services['host1']
            rig.cloud.services['host1'] = dataclasses.replace(
                svc, disabled_reason=svc.disabled_reason.replace(
                    'instanceha:evacuating', 'instanceha:' + written))
            self.assertEqual(S(written), marker_state(rig, 'host1'))
            rig.run(30)
            resumed = rig.events.named(events.HOST_RESUMED, 'host1')
            self.assertEqual([{'state': written}], resumed)
            for vm in vms:
                self.assertEqual(1, len(rig.cloud.evacuations(vm)))
            self.assertEqual({}, rig.engine.host_states(), written)
            self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_killed_between_force_down_and_evacuating_marker(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        vms = rig.cloud.boot('host1', 3)
        rig.run(2)
        rig.cloud.kill('host1')

        class Killed(BaseException):
            pass

        def killed(server_id, host=None):
            # The marker is written in the job of the first evacuate
            # calls: the service dies right before the first of them.
            raise Killed()

        rig.cloud.evacuate = killed
        rig.run_until(lambda: marker_state(rig, 'host1') is S.EVACUATING, 40)
        del rig.cloud.evacuate
        self.assertEqual([], [c for c in rig.cloud.calls
                              if c[0] == 'evacuate'])
        reason = rig.cloud.services['host1'].disabled_reason
        rig.cloud.services['host1'] = fakes.dataclasses.replace(
            rig.cloud.services['host1'],
            disabled_reason=reason.replace(':evacuating', ':fenced'))
        rig.restart()
        rig.run(30)
        for vm in vms:
            self.assertEqual(1, len(rig.cloud.evacuations(vm)))
        self.assertEqual({}, rig.engine.host_states())

    def test_restart_after_fence_failure(self):
        rig = fakes.Rig()
        vm, = rig.cloud.boot('host1', 1)
        rig.fencer.fail['host1'] = 1
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(3)
        self.assertEqual({'host1': S.FENCE_FAILED}, rig.engine.host_states())
        self.assertIsNone(marker_state(rig, 'host1'))
        rig.restart()
        rig.run(20)
        self.assertEqual(1, len(rig.cloud.evacuations(vm)))

    def test_fire_and_forget_restart_unlocks_rebuilt_instances(self):
        rig = fakes.Rig(**{'evacuation.lock_instances': True})
        vms = rig.cloud.boot('host1', 2)
        rig.run(2)
        rig.cloud.kill('host1')
        # Calls accepted, rebuilds still running: the host waits for them
        # (its marker still says evacuating).
        rig.run_until(lambda: rig.engine.host_states().get('host1') in (
            S.EVACUATED, S.POWERING_ON), 40)
        self.assertEqual(S.EVACUATING, marker_state(rig, 'host1'))
        # the previous process died before its aftercare unlocked them
        for vm in vms:
            rig.cloud.set_server_lock(vm, True)
        rig.restart()
        rig.run(20)
        for vm in vms:
            self.assertFalse(rig.cloud.servers[vm].locked)
            self.assertEqual(1, len(rig.cloud.evacuations(vm)))
        self.assertEqual({}, rig.engine.host_states())

    def test_shutdown_marks_nothing_failed(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        rig.cloud.boot('host1', 3)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(5)
        rig.engine.shutdown(5)
        self.assertNotEqual(S.FAILED, marker_state(rig, 'host1'))
        before = len(rig.cloud.calls)
        rig.run(5)  # a stopped engine does nothing
        self.assertEqual(before, len(rig.cloud.calls))


class TestLeadership(TestCase):

    def test_follower_does_nothing(self):
        rig = fakes.Rig()
        rig.coordinator.leader = False
        vm, = rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual([], rig.fencer.calls)
        self.assertEqual([], rig.cloud.evacuations(vm))
        rig.coordinator.leader = True
        rig.run(20)
        self.assertEqual(1, len(rig.cloud.evacuations(vm)))

    def test_losing_leadership_stops_evacuations(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart',
                           'evacuation.max_in_flight': 1})
        vms = rig.cloud.boot('host1', 4)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run_until(lambda: any(rig.cloud.evacuations(v) for v in vms), 40)
        rig.coordinator.leader = False
        count = sum(len(rig.cloud.evacuations(v)) for v in vms)
        rig.run(20)
        self.assertEqual(count, sum(len(rig.cloud.evacuations(v))
                                    for v in vms))
        rig.coordinator.leader = True
        rig.run(30)
        for vm in vms:
            self.assertEqual(1, len(rig.cloud.evacuations(vm)))


class TestDisabled(TestCase):

    def test_disabled_takes_no_action(self):
        rig = fakes.Rig(disabled=True)
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual([], rig.fencer.calls)
        self.assertEqual([], [c for c in rig.cloud.calls])

    def test_failed_host_reported_every_poll(self):
        # The default gates include 'disabled', which blocks the plan:
        # the engine still says, as a warning, what it would do.
        rig = fakes.Rig(disabled=True)
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(10)
        held = rig.events.named(events.RECOVERY_HELD, 'host1')
        self.assertGreaterEqual(len(held), 9)  # poll = 1 s
        self.assertEqual('would recover, but [DEFAULT] disabled = true',
                         held[-1]['note'])
        self.assertIn('nova: state down', held[-1]['reason'])
        self.assertIn(events.RECOVERY_HELD, events.WARNINGS)
        self.assertEqual([], rig.events.named(events.RECOVERY_HELD, 'host2'))

    def test_mass_failure_still_logged_when_disabled(self):
        log = self.useFixture(fixtures.FakeLogger(
            name='instanceha.engine.recovery', level=logging.INFO,
            format='%(levelname)s %(message)s'))
        rig = fakes.Rig(disabled=True)
        rig.cloud.boot('host1', 1)
        rig.cloud.boot('host2', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.cloud.kill('host2')
        rig.run(3)
        self.assertIn('WARNING plan blocked by threshold: 2 of 3', log.output)
        self.assertIn('(and [DEFAULT] disabled = true)', log.output)
        # Not "would recover": the threshold would block them anyway.
        self.assertEqual([], rig.events.named(events.RECOVERY_HELD))

    def _mid_recovery(self, rig, state):
        rig.cloud.boot('host1', 2)
        rig.run(2)
        rig.cloud.kill('host1')
        if not rig.run_until(
                lambda: rig.engine.host_states().get('host1') is state, 60):
            self.fail('host1 never reached %s' % state)

    def test_restart_with_disabled_holds_a_running_recovery(self):
        rig = fakes.Rig(**{'evacuation.strategy': 'smart'})
        self._mid_recovery(rig, S.EVACUATING)
        rig.conf.set_override('disabled', True)
        rig.restart()
        calls = len(rig.cloud.calls)
        fenced = list(rig.fencer.calls)
        rig.run(10)
        # Held where it stopped: no Nova change, no power action.
        self.assertEqual(calls, len(rig.cloud.calls))
        self.assertEqual(fenced, rig.fencer.calls)
        self.assertEqual(S.EVACUATING, marker_state(rig, 'host1'))
        held = rig.events.named(events.RECOVERY_HELD, 'host1')
        self.assertGreaterEqual(len(held), 9)
        self.assertEqual('evacuating', held[-1]['state'])
        self.assertIn('held in evacuating', held[-1]['note'])
        # Back to normal: resumed from the marker, each instance moved
        # once.
        rig.conf.set_override('disabled', False)
        rig.run(40)
        self.assertEqual({}, rig.engine.host_states())
        for sid in rig.cloud.servers:
            self.assertLessEqual(len(rig.cloud.evacuations(sid)), 1)
            self.assertNotEqual('host1', rig.cloud.servers[sid].host)

    def test_switched_on_while_running_finishes_step_starts_no_next(self):
        rig = fakes.Rig()
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.engine.tick()  # suspect, fencing job ran (inline: done)
        self.assertEqual(S.FENCING, rig.engine.host_states()['host1'])
        rig.conf.set_override('disabled', True)
        rig.clock.t += 1
        rig.run(10)
        # The fence result was recorded, but the host was not forced
        # down, disabled or evacuated.
        self.assertEqual({'host1': S.FENCED}, rig.engine.host_states())
        self.assertEqual([], [c for c in rig.cloud.calls
                              if c[0] != 'get_server'])
        held = rig.events.named(events.RECOVERY_HELD, 'host1')
        self.assertEqual('fenced', held[-1]['state'])
        rig.conf.set_override('disabled', False)
        rig.run(30)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('enabled', rig.cloud.services['host1'].status)


class TestPlanLogging(TestCase):

    def test_levels(self):
        log = self.useFixture(fixtures.FakeLogger(
            name='instanceha.engine.recovery', level=logging.DEBUG,
            format='%(levelname)s %(message)s'))
        rig = fakes.Rig()
        rig.cloud.boot('host1', 1)
        rig.cloud.boot('host2', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.cloud.kill('host2')
        cycles = rig.engine.cycles
        rig.run(3)
        polls = rig.engine.cycles - cycles
        lines = log.output.splitlines()

        def count(prefix):
            return sum(1 for line in lines if line.startswith(prefix))

        self.assertEqual(3, polls)
        self.assertEqual(polls, count('INFO plan: host1 blocked: nova: '
                                      'state down'))
        self.assertEqual(polls, count('WARNING plan blocked by threshold: '
                                      '2 of 3'))
        self.assertEqual(0, count('INFO plan: host3 healthy'))
        self.assertGreaterEqual(count('DEBUG plan: host3 healthy'), polls)


class TestUpTimeout(TestCase):

    def test_host_that_never_comes_up_is_reported(self):
        rig = fakes.waiting_up_rig(run=30, up_timeout=60)
        self.assertEqual([], rig.events.named(events.UP_OVERDUE))
        rig.run(60)
        overdue = rig.events.named(events.UP_OVERDUE, 'host1')
        self.assertGreater(len(overdue), 5)  # every poll
        self.assertGreaterEqual(overdue[0]['waited'], 60)
        self.assertNotIn('forced_down_cleared', overdue[-1])
        # Kept forced down (and nothing written) while it does not report.
        self.assertTrue(rig.cloud.services['host1'].forced_down)
        self.assertIn('nova-compute running', overdue[-1]['check'])
        self.assertIn(events.UP_OVERDUE, events.WARNINGS)
        # Never power-cycled again; still unhealthy for the gates.
        self.assertEqual([('off', 'host1'), ('on', 'host1')],
                         rig.fencer.calls)
        self.assertEqual(S.WAITING_UP, rig.engine.host_states()['host1'])
        self.assertEqual('recovering',
                         rig.engine.plan.decision('host1').decision.value)
        # It comes up late: enabled as usual, no more warnings.
        rig.cloud.revive('host1')
        rig.run(5)
        self.assertEqual({}, rig.engine.host_states())
        n = len(rig.events.named(events.UP_OVERDUE))
        rig.run(5)
        self.assertEqual(n, len(rig.events.named(events.UP_OVERDUE)))


class TestWaitingUp(TestCase):
    """After the power-on: nothing written until nova-compute reports."""

    def updates(self, rig):
        return [c for c in rig.cloud.calls if c[0] == 'update_service']

    def test_restart_while_waiting_powers_on_again_and_waits(self):
        rig = fakes.waiting_up_rig()
        writes = len(self.updates(rig))
        # Nova shows the marker of its evacuation, forced down: a new
        # process resumes from there.
        self.assertEqual(S.EVACUATING, marker_state(rig, 'host1'))
        self.assertTrue(rig.cloud.services['host1'].forced_down)
        rig.restart()
        rig.run(60)
        self.assertEqual([{'state': 'evacuating'}],
                         rig.events.named(events.HOST_RESUMED, 'host1'))
        # Powered on again (no change) and waiting from then on; its last
        # heartbeat, from before the power-off, is never taken for one.
        self.assertEqual([('off', 'host1'), ('on', 'host1'),
                          ('on', 'host1')], rig.fencer.calls)
        self.assertEqual({'host1': S.WAITING_UP}, rig.engine.host_states())
        svc = rig.cloud.services['host1']
        self.assertEqual(('disabled', True), (svc.status, svc.forced_down))
        self.assertEqual(writes, len(self.updates(rig)))
        # Its nova-compute reports: one write enables it, forced_down
        # cleared with it.
        rig.cloud.revive('host1')
        rig.run(5)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual([('update_service', 'host1', 'enabled', None,
                           False)], self.updates(rig)[writes:])

    def test_own_write_stamp_is_no_report(self):
        # Nova stamps updated_at on every write, ours too: a stamp within
        # OWN_WRITE of the power-on (or of our marker) proves nothing.
        when = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.timezone.utc)

        def svc(after):
            return model.Service(
                id='1', host='h', state='down', status='disabled',
                forced_down=True,
                updated_at=when + datetime.timedelta(seconds=after))
        self.assertFalse(svc(-30).reported_after(when))
        self.assertFalse(svc(model.OWN_WRITE).reported_after(when))
        self.assertTrue(svc(model.OWN_WRITE + 1).reported_after(when))
        self.assertFalse(dataclasses.replace(
            svc(60), updated_at=None).reported_after(when))

    def test_report_older_than_delta_does_not_enable(self):
        # A report after the power-on seen only much later (Nova could not
        # be read meanwhile) is no proof the host runs now.
        rig = fakes.waiting_up_rig(delta=5)
        world = rig.cloud.world
        world.nova_down = True
        rig.cloud.revive('host1')
        rig.run(1)
        rig.cloud.kill('host1')  # it reported at boot, then died
        rig.run(10)
        world.nova_down = False
        rig.run(5)
        self.assertEqual({'host1': S.WAITING_UP}, rig.engine.host_states())
        self.assertEqual('disabled', rig.cloud.services['host1'].status)


class TestHandBack(TestCase):
    """instanceha-manage hosts clear, as the engine sees it (the table)."""

    def _failed(self):
        rig = fakes.failed_host_rig()
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())
        return rig

    def test_failed_cleared_goes_to_waiting_up_then_healthy(self):
        rig = self._failed()
        rig.cloud.revive('host1')
        manage_hosts.clear(rig.cloud, 'host1', False, rig.clock.now())
        rig.run(10)
        self.assertEqual([('evacuating', 'failed'), ('failed', 'waiting_up'),
                          ('waiting_up', 'enabling'), ('enabling', 'healthy')],
                         rig.transitions('host1')[-4:])
        handed = rig.events.named(events.HOST_STATE, 'host1')[-3]
        self.assertEqual('cleared by operator', handed['reason'])
        self.assertEqual([], rig.events.named(events.HOST_RESUMED))
        self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_failed_cleared_with_enable_goes_to_healthy(self):
        rig = self._failed()
        rig.cloud.revive('host1')
        manage_hosts.clear(rig.cloud, 'host1', True, rig.clock.now())
        rig.run(5)
        self.assertEqual(('failed', 'healthy'), rig.transitions('host1')[-1])
        self.assertEqual('enabled by an operator', rig.events.named(
            events.HOST_STATE, 'host1')[-1]['reason'])
        self.assertEqual({}, rig.engine.host_states())

    def test_left_disabled_cleared(self):
        rig = fakes.Rig(leave_disabled=True)
        rig.cloud.boot('host1', 1)
        rig.run(2)
        rig.cloud.kill('host1')
        rig.run(20)
        self.assertEqual({'host1': S.LEFT_DISABLED},
                         rig.engine.host_states())
        rig.cloud.revive('host1')
        manage_hosts.clear(rig.cloud, 'host1', False, rig.clock.now())
        rig.run(10)
        self.assertEqual([('left_disabled', 'waiting_up'),
                          ('waiting_up', 'enabling'), ('enabling', 'healthy')],
                         rig.transitions('host1')[-3:])

    def test_waiting_up_enabled_by_operator(self):
        rig = fakes.waiting_up_rig()
        # Its marker still says evacuating: hosts clear refuses it, the
        # operator enables it (and clears forced_down) through Nova.
        self.assertRaises(exceptions.InstanceHAError, manage_hosts.clear,
                          rig.cloud, 'host1', True, rig.clock.now())
        rig.cloud.update_service(rig.cloud.services['host1'],
                                 status='enabled', forced_down=False)
        rig.cloud.revive('host1')
        rig.run(5)
        self.assertEqual(('waiting_up', 'healthy'),
                         rig.transitions('host1')[-1])
        self.assertEqual({}, rig.engine.host_states())

    def test_operator_takes_a_failed_host_over(self):
        rig = self._failed()
        svc = rig.cloud.services['host1']
        rig.cloud.services['host1'] = fakes._replace(
            svc, disabled_reason='RMA ticket 42')
        rig.run(5)
        self.assertEqual(('failed', 'healthy'), rig.transitions('host1')[-1])
        self.assertEqual('disabled by an operator: RMA ticket 42',
                         rig.events.named(events.HOST_STATE,
                                          'host1')[-1]['reason'])
        # Out of scope now (operator-disabled): never picked up again.
        rig.run(10)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('disabled', rig.cloud.services['host1'].status)
