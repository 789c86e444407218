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

"""Crashed instances: the record in Nova, the detector, the strategy,
and ``instanceha-manage instances clear`` against the simulated Nova.

The whole loop (restart, relocate, error, storms, user stops) is told by
the scenario cases ``instance-*``; these check the parts one by one.
"""

import datetime

from oslo_config import cfg
import testtools

from instanceha.cmd import manage_instances
from instanceha import conf as ha_conf
from instanceha.engine import instance_record as irec
from instanceha.engine import model
from instanceha import exceptions
from instanceha.plugins.instance_failure import base
from instanceha.plugins.instance_failure import power_sync
from instanceha.plugins.instance_failure import restart_relocate
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import guests
from instanceha.sim import world as sim_world

NOW = datetime.datetime(2026, 11, 29, 12, 0, 5,
                        tzinfo=datetime.timezone.utc)


def action(name, user, rid='req-1'):
    return model.InstanceAction(action=name, request_id=rid, user_id=user,
                                start_time=NOW)


def server(status='SHUTOFF', task=None):
    return model.Server(id='s1', name='vm', host='h1', status=status,
                        flavor=model.Flavor('f'), task_state=task)


def make_conf(**opts):
    conf = cfg.ConfigOpts()
    ha_conf.register_opts(conf)
    conf([], project='instanceha', default_config_files=[])
    for name, value in opts.items():
        conf.set_override(name, value, 'instance_failure')
    return conf


class TestRecord(testtools.TestCase):

    def test_round_trip(self):
        for nova_clock in (False, True):
            rec = irec.Record(2, 1, irec.RELOCATING, NOW, 'req-9', 'h1',
                              nova_clock=nova_clock)
            self.assertEqual(rec, irec.Record.parse(rec.render()))

    def test_times_of_the_previous_version_are_taken_as_ours(self):
        old = irec.Record.parse('restarts=1 relocations=0 state=restarting '
                                'at=2026-11-29T12:00:00Z stop=req-1')
        self.assertFalse(old.nova_clock)
        # Our clock 300 s behind Nova's: on Nova's, 300 s later.
        new = old.on_nova_clock(-300)
        self.assertTrue(new.nova_clock)
        self.assertEqual(old.at + datetime.timedelta(seconds=300), new.at)
        self.assertIn(' clock=nova', new.render())
        self.assertIs(new, new.on_nova_clock(100))

    def test_absent_and_malformed(self):
        self.assertIsNone(irec.Record.parse(None))
        self.assertIsNone(irec.Record.parse('restarts=many'))

    def test_error_text_names_the_command(self):
        text = irec.error_text('vm-1', irec.Record(1, 1), NOW)
        self.assertIn('instanceha-manage instances clear vm-1', text)
        self.assertLessEqual(len(text), 255)


class TestPowerSync(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.det = power_sync.PowerSyncDetector(make_conf())

    def test_only_idle_shutoff_is_suspect(self):
        self.assertTrue(self.det.suspect(server()))
        self.assertFalse(self.det.suspect(server('ACTIVE')))
        self.assertFalse(self.det.suspect(server(task='powering-on')))

    def test_stop_by_no_user_is_a_crash(self):
        stop = action('stop', None)
        self.assertEqual(stop, self.det.crashed(server(), [stop]))

    def test_a_users_stop_is_not(self):
        self.assertIsNone(self.det.crashed(server(),
                                           [action('stop', 'alice')]))

    def test_only_the_newest_action_counts(self):
        self.assertIsNone(self.det.crashed(server(), [
            action('stop', 'alice', 'req-2'), action('stop', None)]))
        self.assertIsNone(self.det.crashed(server(), []))


class TestRestartRelocate(testtools.TestCase):

    def test_the_chain(self):
        strat = restart_relocate.RestartRelocate(
            make_conf(max_restart=2, max_relocate=1))
        steps = [strat.next_step(base.Counters(r, m)).value
                 for r, m in ((0, 0), (1, 0), (2, 0), (2, 1))]
        self.assertEqual(['restart', 'restart', 'relocate', 'error'], steps)

    def test_zero_restarts_relocates_at_once(self):
        strat = restart_relocate.RestartRelocate(
            make_conf(max_restart=0, max_relocate=0))
        self.assertIs(base.Step.ERROR, strat.next_step(base.Counters()))


class TestClear(testtools.TestCase):
    """``instances clear`` against the simulated Nova."""

    def setUp(self):
        super().setUp()
        clock = sim_clock.SimClock()
        self.world = sim_world.World(clock, sim_events.EventLog(clock))
        self.world.flavors['f'] = sim_world.Flavor('f')
        self.world.add_host(sim_world.Host(name='h1', id='1'))
        self.srv = sim_world.Server(id='s1', name='vm', host='h1',
                                    status='ERROR', flavor='f')
        self.world.add_server(self.srv)
        self.cloud = sim_cloud.SimCloud(self.world)

        def sleep(seconds):
            clock.advance_to(clock.t + seconds)
            self.world.run_due()
        self.sleep = sleep

    def test_error_state_is_left_shutoff_by_an_operators_stop(self):
        self.srv.metadata.update({irec.ERROR_KEY: 'x', irec.KEY: 'y'})
        out = manage_instances.clear(self.cloud, 'vm', sleep=self.sleep)
        self.assertIn('counters removed', out)
        self.assertEqual('SHUTOFF', self.srv.status)
        self.assertEqual({}, self.srv.metadata)
        newest = self.world.instance_actions['s1'][-1]
        self.assertEqual(('stop', 'admin'), (newest.action, newest.user_id))

    def test_an_instance_never_handled_is_refused(self):
        self.assertRaisesRegex(exceptions.InstanceHAError, 'nothing to '
                               'clear', manage_instances.clear, self.cloud,
                               'vm', sleep=self.sleep)

    def test_unknown_name(self):
        self.assertRaisesRegex(exceptions.InstanceHAError, "no instance "
                               "named 'nope'", manage_instances.clear,
                               self.cloud, 'nope', sleep=self.sleep)


class TestSimGuests(testtools.TestCase):
    """The simulated Nova records who stopped an instance."""

    def test_crash_and_user_stop(self):
        clock = sim_clock.SimClock()
        w = sim_world.World(clock, sim_events.EventLog(clock))
        w.flavors['f'] = sim_world.Flavor('f')
        w.add_host(sim_world.Host(name='h1', id='1'))
        for name in ('a', 'b'):
            w.add_server(sim_world.Server(id=name, name=name, host='h1',
                                          status='ACTIVE', flavor='f'))
        guests.crash(w, 'a')
        guests.user_power(w, 'b', on=False)
        clock.advance_to(10)
        w.run_due()
        cloud = sim_cloud.SimCloud(w)
        self.assertEqual(('stop', None),
                         (cloud.server_actions('a')[0].action,
                          cloud.server_actions('a')[0].user_id))
        self.assertEqual(guests.USER, cloud.server_actions('b')[0].user_id)
        self.assertEqual('SHUTOFF', w.servers['a'].status)


class TestMetrics(testtools.TestCase):
    """The failure events are counted for Prometheus."""

    def test_counted(self):
        from instanceha.daemon import metrics as metrics_mod
        from instanceha.engine import events
        metrics = metrics_mod.Metrics()
        sink = metrics_mod.MetricsEventSink(metrics)
        sink.emit(events.PROCESS_FAILURE, 'h1', reason='x', disabled=True)
        sink.emit(events.INSTANCE_CRASHED, 'h1', server='vm', next='error')
        sink.emit(events.INSTANCE_RECOVERED, 'h1', server='vm')

        def value(name, **labels):
            return metrics.registry.get_sample_value(name, labels)
        self.assertEqual(1.0, value('instanceha_process_failures_total',
                                    change='disabled'))
        self.assertEqual(1.0, value('instanceha_instance_failures_total',
                                    result='error'))
        self.assertEqual(1.0, value('instanceha_instance_failures_total',
                                    result='recovered'))
