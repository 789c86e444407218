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

"""How history groups Nova's records (the real nova: functional tests)."""

import datetime

import testtools

from instanceha.cmd import manage_history
from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha import exceptions
from instanceha.ops import history

T0 = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


class Records:
    """Nova's records as the Nova port returns them."""

    def __init__(self, migrations, actions, reason=None):
        self._migrations = migrations
        self._actions = actions
        self.reason = reason

    def list_services(self):
        return (model.Service(id='1', host='h1', status='disabled',
                              state='down', forced_down=True,
                              disabled_reason=self.reason),)

    def migrations(self, *, server_id=None, source_host=None, since=None,
                   migration_type='evacuation'):
        return [m for m in self._migrations
                if (server_id in (None, m.server_id)) and
                (source_host in (None, m.source_host)) and
                m.migration_type == migration_type and
                (since is None or m.created_at >= since)]

    def instance_actions(self, server_id):
        return self._actions.get(server_id, [])


def mig(mid, server, minutes, status='done', dest='h2',
        kind='evacuation'):
    return model.Migration(id=mid, server_id=server, source_host='h1',
                           dest_host=dest, status=status,
                           created_at=at(minutes),
                           updated_at=at(minutes + 0.5),
                           migration_type=kind)


def action(rid, minutes, message=None):
    return {'action': 'evacuate', 'request_id': rid, 'user_id': 'ha',
            'start_time': at(minutes).strftime('%Y-%m-%dT%H:%M:%S.000000'),
            'message': message}


class TestHostHistory(testtools.TestCase):

    def test_two_recoveries_far_apart(self):
        cloud = Records(
            [mig('m1', 'a', 0), mig('m2', 'b', 1, status='error'),
             mig('m3', 'a', 120, dest='h3')],
            {'a': [action('req-1', 0), action('req-3', 120)],
             'b': [action('req-2', 1, message='Error')]})
        first, second = history.host_history(cloud, 'h1')
        self.assertEqual([('a', 'h2', 'req-1', 'evacuated'),
                          ('b', 'h2', 'req-2', 'failed')],
                         [(i.server, i.target, i.request_id, i.result)
                          for i in first.instances])
        self.assertEqual([('a', 'h3', 'req-3')],
                         [(i.server, i.target, i.request_id)
                          for i in second.instances])
        self.assertIsNone(second.recovery_id)
        self.assertEqual('finished', second.as_dict()['state'])

    def test_the_marker_names_the_running_recovery(self):
        mark = marker.Marker(state=states.HostState.EVACUATING, when=at(0),
                             fenced_at=at(-1), recovery='rid-1')
        cloud = Records([mig('m1', 'a', 0, status='running')],
                        {'a': [action('req-1', 0), action('req-0', -600)]},
                        reason=mark.render())
        [rec] = history.host_history(cloud, 'h1')
        self.assertEqual(('rid-1', 'evacuating'),
                         (rec.recovery_id, rec.state))
        [inst] = rec.instances
        # The action of another day is not this evacuation's.
        self.assertEqual((1, 'req-1', 'in progress (running)'),
                         (inst.attempts, inst.request_id, inst.result))

    def test_a_marker_before_any_evacuation(self):
        mark = marker.Marker(state=states.HostState.FENCED, when=at(0),
                             recovery='rid-2')
        [rec] = history.host_history(Records([], {}, mark.render()), 'h1')
        self.assertEqual(('rid-2', 'fenced', []),
                         (rec.recovery_id, rec.state, rec.instances))

    def test_the_latest_request_of_a_record_is_shown(self):
        cloud = Records([mig('m1', 'a', 0)],
                        {'a': [action('req-1', 0, 'Error'),
                               action('req-2', 0.2)]})
        [rec] = history.host_history(cloud, 'h1')
        self.assertEqual((1, 'req-2', 'evacuated'),
                         (rec.instances[0].attempts,
                          rec.instances[0].request_id,
                          rec.instances[0].result))


class TestEmptied(testtools.TestCase):

    def cloud(self, reason=None):
        return Records(
            [mig('m1', 'a', 0), mig('l1', 'b', 60, kind='live-migration'),
             mig('l2', 'c', 61, kind='live-migration', dest='h3')],
            {'a': [action('req-1', 0)],
             'b': [dict(action('req-2', 60), action='live-migration',
                        user_id='svc')],
             'c': [dict(action('req-3', 61), action='live-migration',
                        user_id='svc')]}, reason)

    def test_a_proactive_maintenance_says_why_while_it_lasts(self):
        why = reasons.Maintenance(
            since=at(59.5), note='proactive: power_supply PSU 2 Critical')
        recovery, emptied = history.host_history(
            self.cloud(why.render()), 'h1')
        self.assertEqual(('recovery', 'finished'),
                         (recovery.kind, recovery.as_dict()['state']))
        self.assertEqual(('emptied', 'maintenance',
                          'proactive: power_supply PSU 2 Critical'),
                         (emptied.kind, emptied.state, emptied.note))
        self.assertEqual([('b', 'h2', 'req-2', 'svc'),
                          ('c', 'h3', 'req-3', 'svc')],
                         [(m.server, m.target, m.request_id, m.user)
                          for m in emptied.instances])
        text = manage_history.format_host('h1', [recovery, emptied])
        self.assertIn('h1 emptied by live migration: in maintenance, '
                      'started 2026-11-30T13:00:00Z, 2 instance(s) '
                      '(proactive: power_supply PSU 2 Critical)', text)

    def test_after_the_maintenance_the_moves_remain_without_why(self):
        _, emptied = history.host_history(self.cloud(), 'h1')
        self.assertEqual((None, ''), (emptied.state, emptied.note))
        self.assertEqual(2, len(emptied.instances))

    def test_a_maintenance_with_nothing_moved_yet(self):
        why = reasons.Maintenance(since=at(200), note='disk swap')
        episodes = history.host_history(self.cloud(why.render()), 'h1')
        self.assertEqual(['recovery', 'emptied', 'emptied'],
                         [e.kind for e in episodes])
        self.assertEqual(('maintenance', 'disk swap', []),
                         (episodes[-1].state, episodes[-1].note,
                          episodes[-1].instances))
        self.assertIsNone(episodes[1].state)


class TestSince(testtools.TestCase):

    def test_forms(self):
        self.assertEqual(at(-90), manage_history.parse_since('90m', T0))
        self.assertEqual(at(-7 * 24 * 60),
                         manage_history.parse_since('7d', T0))
        self.assertEqual(datetime.datetime(2026, 11, 1, tzinfo=T0.tzinfo),
                         manage_history.parse_since('2026-11-01', T0))
        self.assertEqual(at(0), manage_history.parse_since(
            '2026-11-30T12:00:00Z', T0))

    def test_bad_value_says_what_is_accepted(self):
        exc = self.assertRaises(exceptions.ConfigurationError,
                                manage_history.parse_since, 'yesterday', T0)
        self.assertIn("'yesterday'", str(exc))
        self.assertIn('7d', str(exc))


class TestRetries(testtools.TestCase):

    def test_one_row_per_instance_with_every_try_counted(self):
        cloud = Records([mig('m1', 'a', 0, status='error'),
                         mig('m2', 'a', 1, dest='h3')],
                        {'a': [action('req-1', 0, 'Error'),
                               action('req-2', 1)]})
        [rec] = history.host_history(cloud, 'h1')
        [row] = rec.instances
        self.assertEqual((2, 'h3', 'req-2', 'evacuated', at(0)),
                         (row.attempts, row.target, row.request_id,
                          row.result, row.started))
