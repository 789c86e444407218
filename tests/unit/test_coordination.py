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

"""The coordinator's leadership rules, stepped by hand on file://.

The file:// backend is real (tooz, fcntl locks in a temporary directory);
the clock is a counter the test moves, so the lease arithmetic is checked
exactly without waiting. Real redis and etcd are in
tests/functional/test_coordination.py.
"""

import fixtures
import testtools

from instanceha.adapters import coordination
from instanceha import exceptions
from tests.unit.test_conf import load


class Clock:
    def __init__(self):
        self.now = 1000.0
        #: Added on every read: a slow backend seen from the caller.
        self.step = 0.0

    def __call__(self):
        value = self.now
        self.now += self.step
        return value


class CoordinatorTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.url = 'file://' + self.useFixture(fixtures.TempDir()).path
        self.clock = Clock()

    def copy(self, name, **kwargs):
        kwargs.setdefault('lease_time', 15)
        kwargs.setdefault('heartbeat_interval', 3)
        kwargs.setdefault('takeover_wait', 0)
        coord = coordination.ToozCoordinator(
            self.url, member_id=name, clock=self.clock, **kwargs)
        self.addCleanup(coord.stop)
        return coord

    def test_not_leader_before_first_heartbeat(self):
        self.assertFalse(self.copy('a').is_leader())

    def test_one_leader_then_clean_handover(self):
        a, b = self.copy('a'), self.copy('b')
        a.beat_once()
        b.beat_once()
        self.assertEqual((True, False), (a.is_leader(), b.is_leader()))
        self.assertEqual(2, b.status().members)
        a.stop()
        self.assertFalse(a.is_leader())
        b.beat_once()
        self.assertTrue(b.is_leader())
        # The members are read again within half a lease.
        self.clock.now += 7.5
        b.beat_once()
        self.assertEqual(1, b.status().members)

    def test_members_read_every_half_lease_not_every_beat(self):
        a = self.copy('a', lease_time=15, heartbeat_interval=3)
        a.beat_once()
        reads = []
        get_members = a._driver.get_members
        a._driver.get_members = lambda group: (reads.append(self.clock.now),
                                               get_members(group))[1]
        for _ in range(10):
            self.clock.now += 3
            a.beat_once()
        self.assertTrue(a.is_leader())
        # Beats at +3 .. +30 s: a read at +9, +18 and +27 only.
        self.assertEqual([1009.0, 1018.0, 1027.0], reads)

    @staticmethod
    def unreachable(copy):
        """Fault injection on the real driver: the backend stops answering.

        Returns the driver's own heartbeat, to put back.
        """
        from tooz import coordination as tooz_coordination

        beat = copy._driver.heartbeat

        def unreachable():
            raise tooz_coordination.ToozConnectionError('refused')

        copy._driver.heartbeat = unreachable
        return beat

    def test_forgotten_member_joins_again_after_a_failed_beat(self):
        a, b = self.copy('a'), self.copy('b')
        a.beat_once()
        b.beat_once()
        self.assertEqual(2, b.status().members)
        # The backend forgets a (its membership expired while a could not
        # reach it): a's beats fail, then succeed again.
        a._driver.leave_group(b'instanceha').get()
        beat = self.unreachable(a)
        self.clock.now += 1
        a.beat_once()
        a._driver.heartbeat = beat
        self.clock.now += 1
        a.beat_once()
        self.assertTrue(a.status().connected)
        self.assertIn(b'a', b._driver.get_members(b'instanceha').get())

    def test_leadership_ends_one_heartbeat_before_the_lease(self):
        a = self.copy('a')
        a.beat_once()
        self.clock.now += 15 - 3 - 0.001
        self.assertTrue(a.is_leader())
        self.clock.now += 0.002
        self.assertFalse(a.is_leader())

    def test_proven_for_counts_down_to_the_margin(self):
        a = self.copy('a')
        self.assertEqual(0.0, a.proven_for())
        a.beat_once()
        self.assertAlmostEqual(12.0, a.proven_for(), places=3)
        self.clock.now += 11.5
        self.assertAlmostEqual(0.5, a.proven_for(), places=3)
        self.clock.now += 1
        self.assertEqual(0.0, a.proven_for())

    def test_refresh_extends_from_the_time_it_was_sent(self):
        a = self.copy('a')
        a.beat_once()
        self.clock.now += 10
        a.beat_once()
        self.clock.now += 11.9
        self.assertTrue(a.is_leader())
        self.clock.now += 0.2
        self.assertFalse(a.is_leader())

    def test_late_heartbeat_gives_up_and_competes_again(self):
        a = self.copy('a')
        a.beat_once()
        self.clock.now += 16
        a.beat_once()
        status = a.status()
        self.assertIn('lease may have expired', status.last_loss)
        # Nobody else wanted it: re-elected, counted as a new election.
        self.assertTrue(a.is_leader())
        self.assertEqual(2, status.elections_won)

    def test_refresh_coming_back_too_late_is_not_trusted(self):
        a = self.copy('a', lease_time=15, heartbeat_interval=3)
        a.beat_once()
        self.clock.now += 12
        # Each clock read now takes 3 s: the refresh is sent before the
        # lease ends but comes back after it.
        self.clock.step = 3.0
        a.beat_once()
        self.clock.step = 0.0
        self.assertEqual("the lease refresh came back too late",
                         a.status().last_loss)

    def test_failed_heartbeat_suspends_at_once_then_resumes(self):
        a, b = self.copy('a'), self.copy('b')
        a.beat_once()
        b.beat_once()
        beat = self.unreachable(a)
        self.clock.now += 1
        a.beat_once()
        self.assertFalse(a.is_leader())
        self.assertFalse(a.status().connected)
        self.assertIn('refused', a.status().error)
        b.beat_once()
        self.assertFalse(b.is_leader())
        # Back before the lease could end: same leader, no election.
        a._driver.heartbeat = beat
        self.clock.now += 1
        a.beat_once()
        self.assertTrue(a.is_leader())
        self.assertEqual((1, None), (a.status().elections_won,
                                     a.status().last_loss))

    def test_stop_releases_at_once_even_mid_lease(self):
        a, b = self.copy('a'), self.copy('b')
        a.beat_once()
        b.beat_once()
        a.stop()
        b.beat_once()
        self.assertTrue(b.is_leader())

    def test_stopping_copy_never_leads(self):
        a = self.copy('a')
        a.stop()
        a.beat_once()
        self.assertFalse(a.is_leader())

    def test_host_lock_exclusive_and_released(self):
        a, b = self.copy('a'), self.copy('b')
        a.beat_once()
        b.beat_once()
        with a.host_lock('compute-1'):
            err = self.assertRaises(exceptions.CoordinationError,
                                    b.host_lock('compute-1', timeout=0)
                                    .__enter__)
            self.assertEqual('host compute-1 is locked by another worker',
                             str(err))
        with b.host_lock('compute-1', timeout=0):
            pass

    def test_host_lock_released_on_error(self):
        a = self.copy('a')
        a.beat_once()

        def boom():
            with a.host_lock('compute-1'):
                raise RuntimeError('step failed')

        self.assertRaises(RuntimeError, boom)
        with a.host_lock('compute-1', timeout=0):
            pass

    def test_host_lock_refused_before_connecting(self):
        err = self.assertRaises(exceptions.CoordinationError,
                                self.copy('a').host_lock('h1').__enter__)
        self.assertIn('cannot lock host h1', str(err))

    def test_unreachable_backend_is_reported_not_raised(self):
        # A directory that cannot be created: the file backend cannot
        # start, like a network backend that does not answer.
        blocker = self.useFixture(fixtures.TempDir()).path + '/f'
        open(blocker, 'w').close()
        coord = coordination.ToozCoordinator(
            'file://%s/sub' % blocker, member_id='a', clock=self.clock)
        self.addCleanup(coord.stop)
        coord.beat_once()
        status = coord.status()
        self.assertFalse(status.connected)
        self.assertFalse(coord.is_leader())
        self.assertIn('unreachable', status.error)


class ConstructionTest(testtools.TestCase):

    def test_unknown_backend_names_the_option_and_choices(self):
        err = self.assertRaises(exceptions.ConfigurationError,
                                coordination.ToozCoordinator, 'bogus://x')
        self.assertIn('[coordination] backend_url', str(err))
        self.assertIn('redis', str(err))

    def test_file_url_without_directory(self):
        err = self.assertRaises(exceptions.ConfigurationError,
                                coordination.ToozCoordinator, 'file://')
        self.assertIn('needs a directory', str(err))

    def test_heartbeat_must_fit_the_lease_three_times(self):
        self.assertRaises(exceptions.ConfigurationError,
                          coordination.ToozCoordinator, 'file:///tmp/x',
                          lease_time=6, heartbeat_interval=3)

    def test_default_member_id_is_host_and_pid(self):
        coord = coordination.ToozCoordinator('file:///tmp/x')
        self.assertEqual(coordination.default_member_id(), coord.member_id)

    def test_secrets_never_shown(self):
        url = 'redis://admin:s3cret@db:6379?sentinel=m&password=s3cret'
        coord = coordination.ToozCoordinator(url)
        self.assertNotIn('s3cret', coord.status().backend)
        self.assertEqual('redis://admin:***@db:6379?sentinel=m&password=***',
                         coordination.redact_url(url))

    def test_url_options_win_over_derived_ones(self):
        coord = coordination.ToozCoordinator(
            'redis://db:6379?socket_timeout=9', lease_time=30,
            heartbeat_interval=2.5)
        options = coord._options()
        self.assertNotIn('socket_timeout', options)
        self.assertEqual('30', options['lock_timeout'])
        self.assertEqual('3', options['timeout'])


class ConfTest(testtools.TestCase):

    def test_defaults(self):
        conf = load('')
        self.assertEqual('file:///var/lib/instanceha/coordination',
                         conf.coordination.backend_url)
        coord = coordination.ToozCoordinator.from_conf(conf)
        self.assertEqual((15, 3.0), (coord.lease_time,
                                     coord.heartbeat_interval))
        self.assertEqual(('127.0.0.1', 9797, True),
                         (conf.health.listen, conf.health.port,
                          conf.health.enabled))

    def test_heartbeat_too_slow_for_lease(self):
        from instanceha import conf as ha_conf

        conf = load('[coordination]\nlease_time = 10\n'
                    'heartbeat_interval = 4\n')
        err = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('[coordination] heartbeat_interval', str(err))

    def test_lease_bounds(self):
        from instanceha import conf as ha_conf

        conf = load('[coordination]\nlease_time = 1\n')
        err = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('lease_time', str(err))


class RedisRetriesPinTest(testtools.TestCase):
    """Pins the one place that reaches into tooz's redis driver.

    _no_redis_retries replaces the driver's client factory (tooz offers
    no option for redis-py's retries). If a tooz release renames it, the
    fix would silently do nothing and a stopped redis would hold every
    call for about a minute; this fails instead.
    """

    def test_a_refused_connection_fails_at_once(self):
        import socket
        import time

        from tooz import coordination as tooz_coordination

        with socket.socket() as sock:
            sock.bind(('127.0.0.1', 0))
            port = sock.getsockname()[1]
        driver = tooz_coordination.get_coordinator(
            'redis://127.0.0.1:%d?socket_connect_timeout=1' % port, b'pin')
        coordination._no_redis_retries(driver)
        started = time.monotonic()
        self.assertRaises(tooz_coordination.ToozConnectionError,
                          driver.start, start_heart=False)
        self.assertLess(time.monotonic() - started, 5)
