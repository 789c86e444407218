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

"""What the leading copy answers the agents; the watchdog warnings."""

import dataclasses
import datetime
import math
import types

import fixtures
import testtools

from instanceha.conf import heartbeat as conf_hb
from instanceha.daemon import hostside
from instanceha.daemon import preflight
from instanceha.engine import model
from instanceha.engine import pause as pause_mod
from instanceha import exceptions
from instanceha.heartbeat import protocol as p
from tests import conf_fixture

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
KEY = 'instanceha_isolation_response'


class SkipTagged:
    """An instance filter: servers with metadata skip=1 are not recovered."""

    any_of = None
    out_of_scope = False

    def host_reason(self, host, snapshot):
        return 'skipped host' if host == 'skipped' else None

    def instance_reason(self, server, snapshot):
        return 'tagged' if server.metadata.get('skip') else None


class InMaintenance:
    """A scope filter: 'h2' is out of scope (an operator disabled it)."""

    any_of = None
    out_of_scope = True

    def host_reason(self, host, snapshot):
        return 'disabled by an operator' if host == 'h2' else None

    def instance_reason(self, server, snapshot):
        return None


def server(sid, host, **md):
    return model.Server(id=sid, name=sid, host=host, status='ACTIVE',
                        flavor=model.Flavor(name='f'), metadata=md)


class TestHostSide(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = self.useFixture(conf_fixture.ConfFixture()).conf
        self.log = self.useFixture(fixtures.FakeLogger())
        self.leader = True
        self.engine = types.SimpleNamespace(
            snapshot=None, drivers=types.SimpleNamespace(
                filters=[SkipTagged(), InMaintenance()]),
            pause=types.SimpleNamespace(active=None),
            env=types.SimpleNamespace(
                coordinator=types.SimpleNamespace(
                    is_leader=lambda: self.leader),
                guard=types.SimpleNamespace(halted=False),
                clock=types.SimpleNamespace(now=lambda: NOW,
                                            monotonic=lambda: self.mono),
                cloud=types.SimpleNamespace(snapshot=self.read)))
        self.mono = 1000.0
        #: Hosts whose agents take answers; servers Nova would list.
        self.reporting = set()
        self.nova: list[model.Server] = []
        self.reads: list[frozenset] = []
        self.read_fails = False
        #: Hosts whose agents announced a watchdog (armed or not).
        self.watchdogs = {'h1', 'h2'}
        detector = types.SimpleNamespace(listener=types.SimpleNamespace(
            reporting=lambda: set(self.reporting),
            watchdog=lambda h: object() if h in self.watchdogs else None))
        self.side = hostside.HostSide(self.conf, self.engine, detector)

    def read(self, hosts, aggregates, services):
        """The cloud port's snapshot, as HostSide asks it."""
        self.assertFalse(aggregates)
        self.assertIs(self.engine.snapshot, services)
        self.reads.append(hosts)
        if self.read_fails:
            raise exceptions.CloudError('nova down')
        return dataclasses.replace(
            services, servers=tuple(s for s in self.nova
                                    if s.host in hosts),
            servers_read=hosts)

    def take(self, servers=(), aggs=(), read=None):
        hosts = ('h1', 'h2', 'skipped')
        self.engine.snapshot = model.Snapshot(
            taken_at=NOW, servers=tuple(servers), servers_read=read,
            services=tuple(model.Service(id=h, host=h, state=model.UP,
                                         status=model.ENABLED,
                                         updated_at=NOW) for h in hosts),
            aggregates=tuple(model.Aggregate(id=n, name=n, hosts=frozenset(
                {'h1'}), metadata=md) for n, md in aggs))
        self.side.refresh()

    def test_protected_instances_follow_the_recovery_filters(self):
        self.take([server('a', 'h1'), server('b', 'h1', skip='1'),
                   server('c', 'skipped')])
        self.assertEqual(p.Policy('none', 120, ('a',)),
                         self.side.policy('h1'))
        self.assertEqual((), self.side.policy('skipped').protected)
        self.assertEqual((), self.side.policy('h2').protected)

    def test_maintenance_keeps_instances_protected(self):
        self.take([server('m', 'h2')])
        self.assertEqual(('m',), self.side.policy('h2').protected)

    def test_response_from_option_and_aggregate(self):
        self.conf.set_override('isolation_response', 'shutdown', 'heartbeat')
        self.take(aggs=[('a', {KEY: ' PowerOff'})])
        self.assertEqual('poweroff', self.side.policy('h1').response)
        self.assertEqual('shutdown', self.side.policy('h2').response)

    def test_bad_or_conflicting_aggregates_keep_the_option(self):
        self.take(aggs=[('a', {KEY: 'reboot'})])
        self.assertEqual('none', self.side.policy('h1').response)
        self.assertIn('not an isolation response', self.log.output)
        self.take(aggs=[('a', {KEY: 'poweroff'}), ('b', {KEY: 'shutdown'})])
        self.assertEqual('none', self.side.policy('h1').response)

    def test_a_host_not_read_keeps_its_policy(self):
        self.take([server('a', 'h1')])
        self.take([], read=frozenset({'h2'}))
        self.assertEqual(('a',), self.side.policy('h1').protected)

    def test_an_agent_host_never_listed_is_read_for_its_policy(self):
        # A healthy host is not listed by the engine's reads: its agent
        # would never learn what it protects (nor arm its watchdog).
        self.nova = [server('a', 'h1'), server('b', 'h1', skip='1')]
        self.reporting = {'h1'}
        self.take([], read=frozenset())
        self.assertEqual([frozenset({'h1'})], self.reads)
        self.assertEqual(('a',), self.side.policy('h1').protected)
        # Not again before policy_max_age ...
        self.mono += 299
        self.take([], read=frozenset())
        self.assertEqual(1, len(self.reads))
        # ... then again: a new instance is protected too.
        self.nova.append(server('c', 'h1'))
        self.mono += 1
        self.take([], read=frozenset())
        self.assertEqual(('a', 'c'), self.side.policy('h1').protected)

    def test_only_agents_that_use_the_list_are_read(self):
        # No watchdog and the isolation response none: the protected
        # instances change nothing for the agent, Nova is not asked.
        self.nova = [server('a', 'h1'), server('x', 'h2')]
        self.reporting = {'h1', 'h2'}
        self.watchdogs = set()
        self.take([], read=frozenset())
        self.assertEqual([], self.reads)
        # An aggregate gives h1 a response: h1 is read, h2 still not.
        self.take([], read=frozenset(), aggs=[('a', {KEY: 'poweroff'})])
        self.assertEqual([frozenset({'h1'})], self.reads)
        # h2's agent now announces a watchdog: it is read too.
        self.watchdogs = {'h2'}
        self.side.refresh()
        self.assertEqual([frozenset({'h1'}), frozenset({'h2'})], self.reads)

    def test_a_host_listed_by_the_engine_needs_no_read(self):
        self.reporting = {'h1'}
        self.take([server('a', 'h1')], read=frozenset({'h1'}))
        self.assertEqual([], self.reads)
        self.assertEqual(('a',), self.side.policy('h1').protected)

    def test_no_read_while_not_leading_nor_for_hosts_without_agent(self):
        self.nova = [server('a', 'h1'), server('x', 'h2')]
        self.reporting = {'h1'}
        self.leader = False
        self.take([], read=frozenset())
        self.assertEqual([], self.reads)
        self.leader = True
        self.side.refresh()
        self.assertEqual([frozenset({'h1'})], self.reads)
        self.assertIsNone(self.side.policy('h2'))

    def test_a_failed_read_keeps_the_policy_and_tries_next_tick(self):
        self.reporting = {'h1'}
        self.take([server('a', 'h1')], read=frozenset({'h1'}))
        self.mono += 300
        self.read_fails = True
        self.side.refresh()
        self.assertEqual(('a',), self.side.policy('h1').protected)
        self.assertIn('cannot read the instances of h1', self.log.output)
        self.read_fails = False
        self.side.refresh()
        self.assertEqual(2, len(self.reads))

    def test_answers_only_while_leading_with_the_pause(self):
        self.take([server('a', 'h1')])
        self.assertEqual(p.Answer(policy=self.side.policy('h1')),
                         self.side.answer('h1'))
        self.engine.pause.active = pause_mod.Pause(
            reason='r', since=NOW, until=NOW + datetime.timedelta(
                seconds=300))
        self.assertEqual(300.0, self.side.answer('h1').pause)
        self.engine.pause.active = pause_mod.Pause(reason='r', since=NOW)
        self.assertEqual(math.inf, self.side.answer('h1').pause)
        self.leader = False
        self.assertIsNone(self.side.answer('h1'))


class TestWatchdogWarnings(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = self.useFixture(conf_fixture.ConfFixture()).conf

    def test_nothing_while_no_watchdog_is_counted_on(self):
        self.assertEqual([], conf_hb.watchdog_warnings(self.conf))

    def test_deadline_must_exceed_an_election(self):
        self.conf.set_override('watchdog_min_deadline', 18, 'heartbeat')
        (text,) = conf_hb.watchdog_warnings(self.conf)
        self.assertIn('leader election', text)
        self.conf.set_override('watchdog_min_deadline', 19, 'heartbeat')
        self.assertEqual([], conf_hb.watchdog_warnings(self.conf))

    def test_deadline_must_exceed_the_network_failover(self):
        self.conf.set_override('watchdog_min_deadline', 60, 'heartbeat')
        self.conf.set_override('network_failover_time', 60, 'heartbeat')
        (text,) = conf_hb.watchdog_warnings(self.conf)
        self.assertIn('network_failover_time (60 s)', text)

    def test_config_validate_reports_them(self):
        self.conf.set_override('watchdog_min_deadline', 10, 'heartbeat')
        self.assertIn('leader election', ' '.join(
            f.message for f in preflight._watchdog(self.conf)))
