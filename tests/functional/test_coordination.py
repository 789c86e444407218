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

"""Leader election on real tooz backends: file://, redis and etcd.

Copies run as coordinators in this process and, for kill -9, as a child
process. A sampler thread watches every copy throughout a test and fails
it if two ever claim leadership at the same instant. Durations are
printed, never asserted (waits have generous bounds only so that a
broken build fails instead of hanging).
"""

import os
import subprocess
import sys
import textwrap
import threading
import time

import fixtures
import testtools

from instanceha.adapters import coordination
from instanceha import exceptions
from tests.functional import peers
from tests.functional.peers import base as peer_base

LEASE = 3
BEAT = 1.0
#: Bound of every wait: far above any legitimate takeover.
PATIENCE = 10 * LEASE


def wait_for(predicate, what):
    return peer_base.wait_until(predicate, PATIENCE * peer_base.TIMEOUT_SCALE,
                                interval=0.05, what=what)


class OverlapSampler(fixtures.Fixture):
    """Fails the test if two copies ever say is_leader() together."""

    def __init__(self):
        super().__init__()
        self.copies = []
        self.overlaps = []

    def _setUp(self):
        self._stop = threading.Event()
        thread = threading.Thread(target=self._sample, daemon=True)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(self._stop.set)

    def _sample(self):
        while not self._stop.is_set():
            leaders = [c.member_id for c in list(self.copies)
                       if c.is_leader()]
            if len(leaders) > 1:
                self.overlaps.append(leaders)
            time.sleep(0.005)


class _Election:
    """The tests; subclasses provide the backend."""

    def backend_url(self):
        raise NotImplementedError

    def setUp(self):
        super().setUp()
        self.sampler = self.useFixture(OverlapSampler())
        self.addCleanup(lambda: self.assertEqual([], self.sampler.overlaps))

    def copy(self, name, start=True):
        coord = coordination.ToozCoordinator(
            self.backend_url(), member_id=name, lease_time=LEASE,
            heartbeat_interval=BEAT, group='test')
        self.sampler.copies.append(coord)
        if start:
            coord.start()
        self.addCleanup(coord.stop)
        return coord

    def leaders(self, copies):
        return [c.member_id for c in copies if c.is_leader()]

    def test_exactly_one_leader_and_clean_handover(self):
        a = self.copy('a')
        wait_for(a.is_leader, 'a to lead alone')
        b = self.copy('b')
        wait_for(lambda: b.status().connected, 'b to connect')
        self.assertEqual(['a'], self.leaders([a, b]))
        self.assertEqual(2, b.status().members)

        started = time.monotonic()
        a.stop()
        self.assertFalse(a.is_leader())
        wait_for(b.is_leader, 'b to take over after a clean stop')
        print('%s: takeover after clean stop (a.stop() included): %.2f s '
              '(heartbeat %.1f s)'
              % (self.id(), time.monotonic() - started, BEAT))

    def test_host_locks_are_exclusive(self):
        a, b = self.copy('a'), self.copy('b')
        wait_for(lambda: a.status().connected and b.status().connected,
                 'both to connect')
        with a.host_lock('compute-1'):
            err = self.assertRaises(exceptions.CoordinationError,
                                    b.host_lock('compute-1', timeout=0)
                                    .__enter__)
            self.assertIn('compute-1', str(err))
            with b.host_lock('compute-2', timeout=0):
                pass
        with b.host_lock('compute-1', timeout=0):
            pass

    def test_leader_killed_follower_takes_over(self):
        victim = self.spawn_leader('victim')
        survivor = self.copy('survivor')
        wait_for(lambda: survivor.status().connected, 'survivor to connect')
        self.assertFalse(survivor.is_leader())

        victim.kill()
        started = time.monotonic()
        wait_for(survivor.is_leader, 'survivor to take over after kill -9')
        print('%s: takeover after kill -9 of the leader: %.2f s (lease %d s, '
              'heartbeat %.1f s)' % (self.id(), time.monotonic() - started,
                                     LEASE, BEAT))

    def spawn_leader(self, name):
        """A copy in a child process; returns once it leads."""
        script = textwrap.dedent('''
            import sys, time
            from instanceha.adapters import coordination
            c = coordination.ToozCoordinator(
                sys.argv[1], member_id=sys.argv[2], lease_time=%d,
                heartbeat_interval=%r, group='test')
            c.start()
            while not c.is_leader():
                time.sleep(0.05)
            print('LEADER', flush=True)
            time.sleep(600)
        ''' % (LEASE, BEAT))
        proc = subprocess.Popen(
            [sys.executable, '-c', script, self.backend_url(), name],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                os.path.abspath(__file__)))))
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        line = proc.stdout.readline()
        self.assertEqual(b'LEADER\n', line)
        return proc


class FileElectionTest(_Election, testtools.TestCase):

    def setUp(self):
        self.dir = self.useFixture(fixtures.TempDir()).path
        super().setUp()

    def backend_url(self):
        return 'file://' + self.dir


class _Networked(_Election):

    def test_backend_down_nobody_leads_then_exactly_one(self):
        a, b = self.copy('a'), self.copy('b')
        wait_for(lambda: len(self.leaders([a, b])) == 1, 'one leader')
        wait_for(lambda: b.status().connected, 'b to connect')

        self.backend.stop()
        started = time.monotonic()
        wait_for(lambda: not self.leaders([a, b]), 'leadership to end')
        print('%s: leader stopped acting %.2f s after the backend went '
              '(lease %d s)' % (self.id(), time.monotonic() - started, LEASE))
        wait_for(lambda: not a.status().connected
                 and not b.status().connected, 'both to notice')
        for c in (a, b):
            self.assertIn('unreachable', c.status().error)
            self.assertRaises(exceptions.CoordinationError,
                              c.host_lock('compute-1').__enter__)

        self.backend.start()
        started = time.monotonic()
        wait_for(lambda: len(self.leaders([a, b])) == 1, 'a new leader')
        print('%s: a leader again %.2f s after the backend came back'
              % (self.id(), time.monotonic() - started))
        wait_for(lambda: a.status().connected and b.status().connected,
                 'both to reconnect')
        # Several more heartbeats: still exactly one.
        deadline = time.monotonic() + 3 * BEAT
        while time.monotonic() < deadline:
            self.assertLessEqual(len(self.leaders([a, b])), 1)
            time.sleep(0.05)
        self.assertEqual(1, len(self.leaders([a, b])))

    def test_frozen_backend_ends_leadership(self):
        a = self.copy('a')
        wait_for(a.is_leader, 'a to lead')
        self.backend.pause()
        self.addCleanup(self.backend.resume)
        wait_for(lambda: not a.is_leader(), 'a to stop leading')
        self.backend.resume()
        wait_for(a.is_leader, 'a to lead again')


class RedisElectionTest(_Networked, testtools.TestCase):

    def setUp(self):
        self.backend = self.useFixture(peers.RedisPeer())
        super().setUp()

    def backend_url(self):
        return self.backend.url


class EtcdElectionTest(_Networked, testtools.TestCase):

    def setUp(self):
        self.backend = self.useFixture(peers.EtcdPeer())
        super().setUp()

    def backend_url(self):
        return self.backend.url
