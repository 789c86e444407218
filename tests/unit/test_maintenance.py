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

"""The maintenance reason: written, parsed, and never a recovery marker."""

import datetime

import testtools

from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha import exceptions
from instanceha.ops import maintenance
from instanceha.plugins.filters import enabled
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import world as sim_world

NOW = datetime.datetime(2026, 11, 29, 22, 5, 7,
                        tzinfo=datetime.timezone.utc)


def service(status='disabled', state='up', reason=None, forced=False):
    return model.Service(id='1', host='h1', state=state, status=status,
                         forced_down=forced, disabled_reason=reason)


class TestReason(testtools.TestCase):

    def test_round_trip(self):
        text = reasons.Maintenance(NOW, 'kernel  upgrade\nCHG-1').render()
        self.assertEqual('instanceha-maintenance 2026-11-29T22:05:07Z '
                         'kernel upgrade CHG-1', text)
        self.assertEqual(reasons.Maintenance(NOW, 'kernel upgrade CHG-1'),
                         reasons.read(text).maintenance)
        self.assertEqual(reasons.Maintenance(NOW), reasons.read(
            reasons.Maintenance(NOW).render()).maintenance)

    def test_local_time_stored_as_utc(self):
        cet = datetime.timezone(datetime.timedelta(hours=1))
        text = reasons.Maintenance(NOW.astimezone(cet)).render()
        self.assertEqual(reasons.Maintenance(NOW),
                         reasons.read(text).maintenance)

    def test_fits_novas_limit(self):
        self.assertEqual(255, len(reasons.Maintenance(NOW,
                                                      'x' * 400).render()))

    def test_not_ours(self):
        for text in (None, '', 'kernel upgrade',
                     'instanceha-maintenance', 'instanceha-maintenance now',
                     'instanceha:fenced 2026-11-29T22:05:07Z',
                     'xinstanceha-maintenance 2026-11-29T22:05:07Z'):
            self.assertIsNone(reasons.read(text).maintenance, text)

    def test_never_a_recovery_marker(self):
        # The engine resumes any recovery marker it reads; maintenance
        # must stay an operator's reason the enabled filter ignores.
        text = reasons.Maintenance(NOW, 'instanceha:fenced').render()
        self.assertIsNone(reasons.read(text).marker)
        reason = enabled.EnabledFilter(None).host_reason(
            'h1', model.Snapshot(taken_at=NOW, services=(
                service(reason=text),)))
        self.assertIn('disabled by an operator', reason)

    def test_in_maintenance_needs_disabled(self):
        text = reasons.Maintenance(NOW).render()
        self.assertIsNotNone(
            reasons.of_disabled(service(reason=text)).maintenance)
        self.assertIsNone(reasons.of_disabled(
            service(status='enabled', reason=text)).maintenance)
        self.assertIsNone(reasons.of_disabled(None).maintenance)


class TestStartable(testtools.TestCase):

    def check(self, svc):
        return maintenance.Maintenance(None).check_startable(svc)

    def test_healthy_and_resumed_ok(self):
        self.check(service(status='enabled'))
        self.check(service(reason=reasons.Maintenance(NOW).render()))

    def test_refusals_say_why(self):
        cases = [
            (service(reason=marker_mod.Marker(states.HostState.EVACUATING, NOW).render()),
             'being recovered by instanceha (marker evacuating'),
            (service(status='enabled', state='down'),
             'is down (Nova state down)'),
            (service(status='enabled', forced=True),
             'forced down'),
            (service(reason='disk swap'),
             'already disabled by an operator (reason: disk swap)'),
        ]
        for svc, text in cases:
            e = self.assertRaises(exceptions.InstanceHAError, self.check,
                                  svc)
            self.assertIn(text, str(e))
            self.assertIn('h1', str(e))


def stuck_world(refuse=False):
    """The simulator's Nova: live migrations that never end, or refused.

    The real nova of the functional tests cannot show either: its fake
    driver live-migrates at once and accepts every request its API
    validates.
    """
    clock = sim_clock.SimClock(start=NOW)
    world = sim_world.World(clock, sim_events.EventLog(clock))
    world.flavors['f'] = sim_world.Flavor('f')
    for n, name in enumerate(('h1', 'h2')):
        world.add_host(sim_world.Host(name=name, id=str(n)))
    world.add_server(sim_world.Server(id='u1', name='vm1', host='h1',
                                      status='ACTIVE', flavor='f'))
    world.timing.live_migration_time = 1e9
    if refuse:
        world.nova_faults.append(sim_world.NovaFault('live_migrate', 1,
                                                     '409'))

    def sleep(seconds):
        clock.advance_to(clock.t + seconds)
        world.run_due()
    clock.on_sleep = sleep
    return world


class TestNotHalfDone(testtools.TestCase):

    def start(self, world):
        lines = []
        m = maintenance.Maintenance(sim_cloud.SimCloud(world),
                                    out=lines.append, poll=5,
                                    clock=world.clock)
        return m.start('h1', NOW, wait=True, timeout=60), lines

    def test_timeout_says_still_migrating(self):
        out, lines = self.start(stuck_world())
        self.assertEqual('running', out[0].result)
        self.assertIn('vm1 (u1): running: still migrating after 60 s (task '
                      'migrating, on h1); Nova carries on', lines[-1])
        self.assertIn('request id req-sim-vm1-1', '\n'.join(lines))

    def test_refused_names_instance_error_and_request_id(self):
        world = stuck_world(refuse=True)
        out, lines = self.start(world)
        self.assertEqual('failed', out[0].result)
        self.assertIn('vm1 (u1): failed: Nova refused the live migration, '
                      'it is still on h1: live-migrate server u1: HTTP 409 '
                      'from Nova: Conflict', lines[-1])
        self.assertIn('(request id req-sim-fault-1)', lines[-1])
        self.assertIsNotNone(reasons.of_disabled(
            world.service_model(world.hosts['h1'])).maintenance)
        self.assertEqual({maintenance.HOME_KEY: 'h1'},
                         world.servers['u1'].metadata)


class MovedAfterListing(sim_cloud.SimCloud):
    """Nova where someone acts on u1 right after the host's listing."""

    def __init__(self, world, change):
        super().__init__(world)
        self.change = change

    def snapshot(self, *args, **kwargs):
        snap = super().snapshot(*args, **kwargs)
        srv = self.world.servers['u1']
        self.change(srv)
        self.world._changed(srv)  # as Nova would: a new view of it
        return snap


class TestEveryMoveReadsItsInstance(testtools.TestCase):
    """A move reads its instance again: not where it was listed, it stays."""

    def start(self, change, **kwargs):
        world = stuck_world()
        lines = []
        m = maintenance.Maintenance(MovedAfterListing(world, change),
                                    out=lines.append, poll=5,
                                    clock=world.clock)
        return m.start('h1', NOW, timeout=60, **kwargs)[0], world, lines

    def test_moved_elsewhere_meanwhile_is_left(self):
        out, world, lines = self.start(
            lambda srv: setattr(srv, 'host', 'h2'))
        self.assertEqual('left', out.result)
        self.assertIn('not moved: it is on h2 now, not on h1', lines[-1])
        self.assertEqual({}, world.servers['u1'].metadata)
        self.assertEqual('h2', world.servers['u1'].host)

    def test_a_task_begun_meanwhile_is_awaited(self):
        out, world, lines = self.start(
            lambda srv: setattr(srv, 'task_state', 'powering-off'))
        self.assertEqual('running', out.result)
        self.assertIn('not moved: ACTIVE task powering-off now', lines[-1])
        self.assertEqual({}, world.servers['u1'].metadata)

    def test_a_drain_awaits_a_task_under_way(self):
        # Listed with a start under way (instance HA restarting it): the
        # operator's command leaves it; a drain waits for it to end.
        world = stuck_world()
        world.servers['u1'].task_state = 'powering-on'
        m = maintenance.Maintenance(sim_cloud.SimCloud(world),
                                    out=lambda _: None, poll=5,
                                    clock=world.clock)
        self.assertEqual('left', m.start('h1', NOW)[0].result)
        out = m.start('h1', NOW, settle=True)[0]
        self.assertEqual('running', out.result)
        self.assertIn('task powering-on under way', out.detail)
