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

"""The instance failure loop's read of the stopped servers.

One full listing at start-up, then only the servers Nova changed since
the previous read (``changes-since``), against the simulator's Nova,
which answers those listings as Nova does (deleted servers included,
on Nova's clock, a call per page).
"""

import dataclasses
import types

import testtools

from instanceha.engine import instance_failure as inst
from instanceha.engine import instance_record as irec
from instanceha import exceptions
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import guests
from instanceha.sim import world as sim_world
from tests.unit import test_instance_failure as base
from tests.unit import test_recovery_fakes as fakes

POLL = 45.0
#: The first read (after the world's servers were made, at 0).
START = 100.0
STOPPED = 2500  # three pages of the simulated Nova


class Rig(object):
    """A world with ``STOPPED`` stopped servers and two running ones."""

    def __init__(self, **opts):
        self.clock = sim_clock.SimClock()
        self.world = w = sim_world.World(self.clock,
                                         sim_events.EventLog(self.clock))
        w.flavors['f'] = sim_world.Flavor('f')
        w.add_host(sim_world.Host(name='h1', id='1', vcpus=10000))
        for i in range(STOPPED):
            w.add_server(sim_world.Server(id='off-%04d' % i,
                                          name='off-%04d' % i, host='h1',
                                          status='SHUTOFF', flavor='f'))
        for name in ('a', 'b'):
            w.add_server(sim_world.Server(id=name, name=name, host='h1',
                                          status='ACTIVE', flavor='f'))
        self.cloud = sim_cloud.SimCloud(w)
        #: Nova's answers carry no time (no Date header).
        self.skew_unknown = False
        self.loop = inst.InstanceFailures(
            base.make_conf(**opts),
            types.SimpleNamespace(instance_detector=None,
                                  instance_recovery=None),
            types.SimpleNamespace(cloud=self.cloud))

    def at(self, t: float) -> None:
        self.clock.advance_to(t)
        self.world.run_due()

    def read_at(self, snapshot):
        """What the loop's reader lists now (its own schedule aside)."""
        return self.loop._reads.read(
            snapshot, self.world.local(self.clock.t),
            self.loop.conf.instance_failure.full_read_every)

    def read(self) -> tuple[set[str] | None, int]:
        """The ids the loop reads now, and the Nova calls it took."""
        snapshot = self.cloud.read_services()
        if self.skew_unknown:
            snapshot = dataclasses.replace(snapshot, clock_skew=None)
        before = self.cloud.api_calls
        found = self.read_at(snapshot)
        calls = self.cloud.api_calls - before
        return (None if found is None else {s.id for s in found}), calls

    def stopped_in_nova(self) -> set[str]:
        return {s.id for s in self.world.servers.values()
                if s.status in ('SHUTOFF', 'VERIFY_RESIZE')}


class TestReads(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.rig = Rig()

    def polls(self, *ts: float) -> list[tuple[set[str] | None, int]]:
        out = []
        for t in ts:
            self.rig.at(t)
            out.append(self.rig.read())
        return out

    def test_full_listing_once_then_one_small_call(self):
        (first, full), (again, small) = self.polls(START, START + POLL)
        self.assertEqual(self.rig.stopped_in_nova(), first)
        self.assertEqual(3, full)  # every stopped server, in pages
        self.assertEqual(first, again)
        self.assertEqual(1, small)  # nothing changed: one empty page

    def test_stopped_started_and_deleted_between_two_reads(self):
        self.polls(START)
        self.rig.at(START + 20)
        guests.user_power(self.rig.world, 'a', on=False)
        guests.user_power(self.rig.world, 'off-0001', on=True)
        guests.user_delete(self.rig.world, 'off-0002')
        ((found, calls),) = self.polls(START + POLL)
        self.assertEqual(1, calls)
        self.assertIn('a', found)
        self.assertNotIn('off-0002', found)  # listed as DELETED
        self.assertNotIn('off-0001', found)  # starting: not SHUTOFF
        self.assertEqual(self.rig.stopped_in_nova(), found)

    def _after_changes_listing(self, effect):
        """Run ``effect`` as the second poll's listing of changes ends."""
        rig = self.rig
        listing = rig.cloud.stopped_servers

        def wrapped(since=None):
            answer = listing(since)
            if since is not None and rig.clock.t < START + 2 * POLL:
                effect()
            return answer
        rig.cloud.stopped_servers = wrapped

    def test_a_change_during_the_read_is_listed_by_the_next(self):
        # The second listing takes 40 s (pages of a big cloud); a server
        # stopped 10 s into it is not in its answer. The next read asks
        # for the changes since that listing started, not ended.
        rig = self.rig

        def slow():
            rig.at(rig.clock.t + 10)
            guests.user_power(rig.world, 'b', on=False)
            rig.at(rig.clock.t + 30)
        self._after_changes_listing(slow)
        (first, _), (second, _) = self.polls(START, START + POLL)
        self.assertNotIn('b', first)
        self.assertNotIn('b', second)
        ((third, _),) = self.polls(START + 2 * POLL)
        self.assertIn('b', third)

    def test_a_change_stamped_before_the_read_and_seen_after(self):
        # Nova stamps a change when it makes it and shows it when its
        # transaction ends: a change stamped 5 s before a read can be
        # missing from it. The next read reaches back far enough.
        rig = self.rig

        def late():
            guests.user_power(rig.world, 'b', on=False)
            rig.world.servers['b'].changed_at = rig.clock.t - 5
        self._after_changes_listing(late)
        (_, _), (second, _), (third, _) = self.polls(
            START, START + POLL, START + 2 * POLL)
        self.assertNotIn('b', second)
        self.assertIn('b', third)

    def test_on_novas_clock(self):
        # Our clock 300 s behind Nova's: the changes asked for are
        # Nova's of the last poll, not of five minutes later.
        self.rig.world.clock_skew = -300.0
        self.polls(START)
        self.rig.at(START + 20)
        guests.user_power(self.rig.world, 'a', on=False)
        ((found, _),) = self.polls(START + POLL)
        self.assertIn('a', found)

    def _silent_stop(self, name: str) -> None:
        """A change a changes-since listing does not show."""
        srv = self.rig.world.servers[name]
        srv.status = 'SHUTOFF'
        self.rig.world._server_cache.pop(name, None)

    def test_periodic_full_listing(self):
        self.rig = Rig(full_read_every=3)
        self.polls(START)
        self._silent_stop('a')
        reads = self.polls(*(START + POLL * i for i in range(1, 4)))
        self.assertEqual([1, 1, 3], [calls for _, calls in reads])
        self.assertEqual([False, False, True],
                         ['a' in found for found, _ in reads])

    def test_full_listing_after_a_failed_read(self):
        self.polls(START)
        self._silent_stop('a')
        self.rig.world.nova_faults.append(
            sim_world.NovaFault(kind='stopped', count=1, error='503'))
        self.assertEqual([(None, 1)], self.polls(START + POLL))
        ((found, calls),) = self.polls(START + 2 * POLL)
        self.assertEqual(3, calls)
        self.assertIn('a', found)

    def test_full_listing_when_leading_again(self):
        self.polls(START)
        self._silent_stop('a')
        self.rig.loop.forget()
        ((found, calls),) = self.polls(START + POLL)
        self.assertEqual(3, calls)
        self.assertIn('a', found)

    def test_servers_acted_on_are_read_from_the_changes(self):
        # A server being restarted (tracked) and running: read alone
        # after a full listing (which has only the stopped ones), then
        # taken from the listings of the changes.
        rig = self.rig
        rig.loop._tracked.add('a')
        reads = []

        def poll(t):
            rig.at(t)
            snapshot = rig.cloud.read_services()
            before = rig.cloud.api_calls
            found = {s.id: s for s in rig.read_at(snapshot)}
            reads.append((rig.cloud.api_calls - before, found.get('a')))
        poll(START)
        poll(START + POLL)
        rig.cloud.set_server_metadata('a', irec.KEY, 'state=running')
        poll(START + 2 * POLL)
        guests.user_delete(rig.world, 'a')
        poll(START + 3 * POLL)
        self.assertEqual([4, 1, 1, 1], [calls for calls, _ in reads])
        self.assertEqual('ACTIVE', reads[1][1].status)
        self.assertEqual('state=running', reads[2][1].metadata[irec.KEY])
        self.assertIsNone(reads[3][1])
        self.assertNotIn('a', rig.loop._tracked)

    def test_servers_acted_on_read_again_at_a_full_listing(self):
        # It lists only stopped servers: what changed on the others since
        # the previous read is not known.
        self.rig = Rig(full_read_every=2)
        self.rig.loop._tracked.add('a')
        calls = []
        for t in (START, START + POLL, START + 2 * POLL):
            calls.append(self.polls(t)[0][1])
        self.assertEqual([4, 1, 4], calls)

    def test_every_poll_in_full_without_novas_time(self):
        # Which changes are new is asked on Nova's clock: unknown, the
        # loop lists every stopped server.
        self.rig.skew_unknown = True
        self.assertEqual([3, 3],
                         [c for _, c in self.polls(START, START + POLL)])

    def test_every_poll_in_full_when_asked(self):
        self.rig = Rig(full_read_every=1)
        self.assertEqual([3, 3],
                         [c for _, c in self.polls(START, START + POLL)])


class TestSimNova(testtools.TestCase):
    """The simulator's changes-since listing, as Nova's."""

    def test_deleted_server_listed_as_deleted_then_gone(self):
        rig = Rig()
        rig.at(10)
        guests.user_delete(rig.world, 'a')
        changed = rig.cloud.stopped_servers(rig.world.local(5))
        self.assertEqual([('a', 'DELETED')],
                         [(s.id, s.status) for s in changed])
        self.assertRaises(exceptions.CloudError, rig.cloud.get_server, 'a')
        self.assertEqual([], [s for s in rig.cloud.stopped_servers()
                              if s.id == 'a'])


class TestInTheEngine(testtools.TestCase):

    def test_full_listing_at_start_and_when_leading_again(self):
        rig = fakes.Rig()  # poll 1 s
        full: list[bool] = []
        listing = rig.cloud.stopped_servers

        def recorded(since=None):
            full.append(since is None)
            return listing(since)
        rig.cloud.stopped_servers = recorded
        rig.run(4)
        self.assertEqual([True, False, False, False], full)
        rig.coordinator.leader = False
        rig.run(3)
        rig.coordinator.leader = True
        rig.run(2)
        self.assertEqual([True, False, False, False, True, False], full)
