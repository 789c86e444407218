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

"""The placement view: what a placement policy sees, as plain values."""

import datetime

import testtools

from instanceha.engine import model
from instanceha.engine import placement
from instanceha.plugins.evacuation import base

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def service(host, zone='az1', state='up', status='enabled', forced=False):
    return model.Service(id='svc-' + host, host=host, state=state,
                         status=status, forced_down=forced, zone=zone)


def server(sid, host, vcpus=2):
    return model.Server(id=sid, name=sid, host=host, status='ACTIVE',
                        flavor=model.Flavor('f%d' % vcpus, vcpus=vcpus))


def task(sid, **kw):
    return base.InstanceTask(server_id=sid, name=sid,
                             original_status='ACTIVE', **kw)


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
        self.assertEqual(4, view.need('v2'))

    def test_read_only(self):
        view = placement.build(self.snap, 'failed')

        def put():
            view.hosts['x'] = None
        self.assertRaises(TypeError, put)
        self.assertRaises(AttributeError, setattr, view, 'spare', 'x')

    def test_free_room_less_what_was_asked_since(self):
        view = placement.build(
            self.snap, 'failed', free={'rack-a': 5, 'zone-b': 3},
            on_the_way={'zone-b': ['v2']},
            asked_since_free={'rack-a': ['v1']})
        self.assertEqual(3, view.hosts['rack-a'].free_vcpus)
        self.assertEqual(3, view.hosts['zone-b'].free_vcpus)
        self.assertEqual(2 + 4, view.hosts['zone-b'].used_vcpus)
        self.assertEqual(2, view.hosts['zone-b'].instances)
        self.assertFalse(view.fits('zone-b', 'v2'))
        self.assertTrue(view.fits('zone-b', 'v1'))
        self.assertEqual(['far', 'rack-a', 'zone-b'],
                         [r.host for r in view.candidates('v1')])
