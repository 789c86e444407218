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

"""The reserved-hosts strategy: which spare, claimed once, given back."""

import dataclasses
import threading

import testtools

from instanceha.engine import model
from instanceha.plugins.reservation import reserved_hosts
from tests.unit import test_recovery_fakes as fakes


def service(host, status='enabled', reason=None, state='up', zone='az1'):
    return model.Service(id='svc-' + host, host=host, state=state,
                         status=status, disabled_reason=reason, zone=zone)


def add(cloud, svc):
    """Put the host of ``svc`` into the simulated cloud, as it says."""
    cloud.add_host(svc.host, status=svc.status,
                   disabled_reason=svc.disabled_reason,
                   up=svc.state == 'up', zone=svc.zone)


SPARE = 'instanceha:reserved'


class TestReservedHosts(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = fakes.make_conf(**{
            'reservation.strategy': 'reserved-hosts'})
        self.strategy = reserved_hosts.ReservedHosts(self.conf)
        self.services = [
            service('c1'), service('c2', zone='az2'),
            service('s-agg', 'disabled', SPARE, zone='az2'),
            service('s-az', 'disabled', SPARE),
            service('s-other', 'disabled', SPARE, zone='az9'),
            service('s-down', 'disabled', SPARE, state='down'),
            service('operator', 'disabled', 'maintenance'),
        ]
        self.aggs = (model.Aggregate('1', 'rack', frozenset({'c1',
                                                             's-agg'})),)

    def snap(self, services=None):
        return model.Snapshot(taken_at=fakes.T0,
                              services=tuple(services or self.services),
                              aggregates=self.aggs)

    def test_preference_aggregate_then_zone_then_any(self):
        self.assertEqual(['s-agg', 's-az', 's-other'],
                         self.strategy.candidates('c1', self.snap()))
        # c2 shares no aggregate; its zone az2 holds s-agg
        self.assertEqual(['s-agg', 's-az', 's-other'],
                         self.strategy.candidates('c2', self.snap()))

    def test_same_domain_only(self):
        self.conf.set_override('same_domain_only', True, 'reservation')
        self.assertEqual(['s-agg', 's-az'],
                         self.strategy.candidates('c1', self.snap()))

    def test_listed_hosts_are_spares_whatever_their_reason(self):
        self.conf.set_override('reserved_hosts', ['operator'],
                               'reservation')
        self.assertIn('operator', self.strategy.candidates('c1',
                                                           self.snap()))

    def test_down_and_operator_disabled_are_not_spares(self):
        found = self.strategy.candidates('c1', self.snap())
        self.assertNotIn('s-down', found)
        self.assertNotIn('operator', found)

    def test_concurrent_claims_never_share(self):
        clock = fakes.FakeClock()
        cloud = fakes.FakeCloud(clock, hosts=0)
        for svc in self.services:
            add(cloud, svc)
        env = dataclasses.make_dataclass('Env', ['cloud'])(cloud)
        snap = self.snap()
        got = {}
        barrier = threading.Barrier(3)

        def claim(host):
            barrier.wait()
            got[host] = self.strategy.reserve(env, host, snap)

        threads = [threading.Thread(target=claim, args=(h,))
                   for h in ('c1', 'c2', 'c3')]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(3, len(set(got.values())))
        # the same failed host asking again keeps its spare
        self.assertEqual(got['c1'], self.strategy.reserve(env, 'c1', snap))
        self.assertIsNone(self.strategy.reserve(env, 'c4', snap))

    def test_release_only_when_empty(self):
        clock = fakes.FakeClock()
        cloud = fakes.FakeCloud(clock, hosts=0)
        add(cloud, service('s-az'))
        env = dataclasses.make_dataclass('Env', ['cloud'])(cloud)
        busy = model.Snapshot(
            taken_at=fakes.T0, services=(service('s-az'),),
            servers=(model.Server('x', 'x', 's-az', 'ACTIVE',
                                  model.Flavor('f')),))
        self.strategy.release(env, 'c1', 's-az', busy)
        self.assertEqual('enabled', cloud.services['s-az'].status)
        self.strategy.release(env, 'c1', 's-az', model.Snapshot(
            taken_at=fakes.T0, services=(service('s-az'),)))
        self.assertEqual('disabled', cloud.services['s-az'].status)
        self.assertTrue(cloud.services['s-az'].disabled_reason.startswith(
            SPARE))

    def test_repeated_release_leaves_a_reclaimed_spare_alone(self):
        clock = fakes.FakeClock()
        cloud = fakes.FakeCloud(clock, hosts=0)
        add(cloud, service('s-az', 'disabled', SPARE))
        env = dataclasses.make_dataclass('Env', ['cloud'])(cloud)
        pool = model.Snapshot(taken_at=fakes.T0, services=(
            service('c1'), service('c2'),
            service('s-az', 'disabled', SPARE)))
        empty = model.Snapshot(taken_at=fakes.T0,
                               services=(service('s-az'),))
        self.assertEqual('s-az', self.strategy.reserve(env, 'c1', pool))
        self.strategy.release(env, 'c1', 's-az', empty)
        self.assertEqual('s-az', self.strategy.reserve(env, 'c2', pool))
        self.assertEqual('enabled', cloud.services['s-az'].status)
        # c1's release is repeated (say, after a Nova error): the spare now
        # serves c2 and must stay enabled and claimed.
        self.strategy.release(env, 'c1', 's-az', empty)
        self.assertEqual('enabled', cloud.services['s-az'].status)
        self.assertIsNone(self.strategy.reserve(env, 'c3', pool))

    def test_rebuild_on_spare_follows_option(self):
        self.assertTrue(self.strategy.rebuild_on_spare)
        self.conf.set_override('evacuate_to_spare', False, 'reservation')
        self.assertFalse(self.strategy.rebuild_on_spare)
