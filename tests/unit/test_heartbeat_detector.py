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

"""Heartbeat/kdump listeners' packet handling and the two detectors.

The listeners' ``handle`` is driven directly here with real packets and
a controllable clock (no sockets, no sleeping); the socket paths are in
tests/functional/test_heartbeat.py and test_kdump.py.
"""

import datetime

import fixtures
import hypothesis
from hypothesis import strategies as st
import testtools

from instanceha import conf as ha_conf
from instanceha.engine import decide
from instanceha.engine import model
from instanceha import exceptions
from instanceha.heartbeat import kdump
from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol as p
from instanceha.heartbeat import udp as udp_mod
from instanceha.plugins.detectors import base
from instanceha.plugins.detectors import heartbeat as hb_det
from instanceha.plugins.detectors import kdump as kd_det
from instanceha.plugins.detectors import nova as nova_det
from tests import conf_fixture

KEY = b'k' * 32
OLD = b'o' * 32
T0 = 1_800_000_000.0
UTC = datetime.timezone.utc


class Clock:
    """Monotonic and wall clocks moved by hand, in step."""

    def __init__(self):
        self.mono = 500.0
        self.wall = T0

    def advance(self, seconds):
        self.mono += seconds
        self.wall += seconds

    def now(self):
        return datetime.datetime.fromtimestamp(self.wall, UTC)


make_conf = conf_fixture.make_conf


def snapshot(*hosts, down=(), now=None):
    when = now or datetime.datetime.fromtimestamp(T0, UTC)
    return model.Snapshot(taken_at=when, services=tuple(
        model.Service(id=str(i), host=h,
                      state=model.DOWN if h in down else model.UP,
                      status=model.ENABLED, updated_at=when)
        for i, h in enumerate(hosts)))


class Sender:
    """An agent's packets, without the agent's socket."""

    def __init__(self, host, clock, key=KEY):
        self.host, self.clock, self.key = host, clock, key
        self.boot = p.new_boot_id()
        self.seq = 0

    def packet(self, offset=0.0):
        self.seq += 1
        return p.encode(self.host, self.boot, self.seq,
                        self.clock.wall + offset, self.key)


class ListenerBase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.clock = Clock()
        self.lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], (KEY, OLD), max_clock_skew=15,
            clock=lambda: self.clock.mono, wall=lambda: self.clock.wall,
            log_interval=60)
        self.lst.start()
        self.addCleanup(self.lst.stop)

    def reject(self, data, reason):
        before = self.lst.rejects.counts.get(reason, 0)
        self.assertIsNone(self.lst.handle(data, '192.0.2.1'))
        self.assertEqual(before + 1, self.lst.rejects.counts.get(reason))


class TestHeartbeatListener(ListenerBase):

    def test_records_last_valid_heartbeat(self):
        s = Sender('host1', self.clock)
        self.assertIsNotNone(self.lst.handle(s.packet(), '192.0.2.1'))
        self.clock.advance(4)
        self.assertEqual(4, self.lst.age('host1'))
        self.lst.handle(s.packet(), '192.0.2.1')
        self.assertEqual(0, self.lst.age('host1'))
        self.assertEqual(2, self.lst.record('host1').sequence)
        self.assertIsNone(self.lst.age('host2'))
        self.assertEqual({'accepted': 2, 'accepted_previous_key': 0,
                          'rejected': {}, 'errors': {}, 'hosts': 1},
                         self.lst.stats())

    def test_previous_key_is_counted(self):
        self.lst.handle(Sender('h', self.clock, OLD).packet(), 'x')
        self.assertEqual(1, self.lst.accepted_previous_key)

    def test_replayed_capture_is_rejected(self):
        s = Sender('host1', self.clock)
        first, second = s.packet(), s.packet()
        self.lst.handle(first, 'a')
        self.lst.handle(second, 'a')
        self.reject(first, p.REPLAY)
        self.assertEqual(2, self.lst.record('host1').sequence)

    def test_same_packet_twice_is_a_quiet_duplicate(self):
        data = Sender('host1', self.clock).packet()
        self.lst.handle(data, 'a')
        self.reject(data, p.DUPLICATE)
        self.assertNotIn('duplicate', self.log.output)

    def test_agent_restart_is_not_a_replay(self):
        old = Sender('host1', self.clock)
        for _ in range(5):
            self.lst.handle(old.packet(), 'a')
        self.clock.advance(1)
        new = Sender('host1', self.clock)
        self.assertIsNotNone(self.lst.handle(new.packet(), 'a'))
        self.assertEqual(new.boot, self.lst.record('host1').boot_id)
        # The old boot's packets cannot come back after the new one.
        self.reject(old.packet(-0.5), p.REPLAY)

    def test_new_boot_with_older_time_is_a_replay(self):
        s = Sender('host1', self.clock)
        self.lst.handle(s.packet(), 'a')
        self.reject(Sender('host1', self.clock).packet(-1), p.REPLAY)

    def test_stale_and_future(self):
        s = Sender('host1', self.clock)
        self.reject(s.packet(-16), p.STALE)
        self.reject(s.packet(+16), p.FUTURE)
        self.assertIsNotNone(self.lst.handle(s.packet(-14), 'a'))

    def test_unknown_host(self):
        self.lst.set_known_hosts(['host1'])
        self.reject(Sender('intruder', self.clock).packet(), p.UNKNOWN_HOST)
        self.assertIsNotNone(self.lst.handle(
            Sender('host1', self.clock).packet(), 'a'))

    def test_every_bad_shape_counted(self):
        good = Sender('host1', self.clock).packet()
        self.reject(good[:10], p.TRUNCATED)
        self.reject(good + b'x', p.OVERSIZED)
        self.reject(b'NOPE' + good[4:], p.BAD_MAGIC)
        self.reject(good[:4] + b'\x09' + good[5:], p.BAD_VERSION)
        self.reject(good[:-1] + bytes([good[-1] ^ 1]), p.BAD_HMAC)
        self.reject(Sender('host1', self.clock, b'z' * 32).packet(),
                    p.BAD_HMAC)
        self.assertEqual(6, self.lst.rejects.total)
        self.assertIsNone(self.lst.record('host1'))

    def test_logging_is_rate_limited(self):
        for _ in range(100):
            self.lst.handle(b'garbage' * 20, '198.51.100.7')
        self.assertEqual(1, self.log.output.count('bad_magic'))
        self.assertIn('198.51.100.7', self.log.output)
        self.clock.advance(61)
        self.lst.handle(b'garbage' * 20, '198.51.100.7')
        self.assertIn('99 more bad_magic packets', self.log.output)
        self.assertEqual(101, self.lst.rejects.counts[p.BAD_MAGIC])

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=400), st.sampled_from(
        ['192.0.2.1', 'fd00::1', '::ffff:192.0.2.1']))
    def test_fuzz_handle_never_raises(self, data, sender):
        before = self.lst.accepted + self.lst.rejects.total
        self.lst.handle(data, sender)
        self.assertEqual(before + 1,
                         self.lst.accepted + self.lst.rejects.total)

    def test_no_key_no_listener(self):
        self.assertRaises(ValueError, lst_mod.HeartbeatListener, [], (), 1)


class DetectorBase(ListenerBase):

    hb_opts: dict = {}

    def setUp(self):
        super().setUp()
        opts = {'timeout': 15, 'mass_loss_share': 50,
                'mass_loss_min_hosts': 3, 'mass_loss_hold_cycles': 2}
        opts.update(self.hb_opts)
        self.conf = make_conf(heartbeat=opts)
        self.det = hb_det.HeartbeatDetector(self.conf, listener=self.lst)
        self.det.start()  # an injected listener is left alone
        self.senders = {}

    def beat(self, *hosts):
        for h in hosts:
            s = self.senders.setdefault(h, Sender(h, self.clock))
            self.assertIsNotNone(self.lst.handle(s.packet(), '192.0.2.9'))

    def verdicts(self, snap):
        return {h: e.verdict.value for h, e in
                self.det.detect(snap, self.clock.now()).items()}


class TestHeartbeatDetector(DetectorBase):

    def test_first_interval_held_then_failed(self):
        snap = snapshot('host1', 'host2')
        self.beat('host1')
        ev = self.det.detect(snap, self.clock.now())
        self.assertEqual(base.Verdict.ALIVE, ev['host1'].verdict)
        self.assertEqual(base.Verdict.HOLD, ev['host2'].verdict)
        self.assertIn('not heard yet', ev['host2'].reason)
        self.clock.advance(14.9)
        self.beat('host1')
        self.assertEqual('hold', self.verdicts(snap)['host2'])
        self.clock.advance(0.2)
        ev = self.det.detect(snap, self.clock.now())
        self.assertEqual(base.Verdict.FAILED, ev['host2'].verdict)
        self.assertIn('never heard', ev['host2'].reason)

    def test_host_appearing_later_gets_its_own_first_interval(self):
        self.clock.advance(100)
        self.beat('host1')
        self.verdicts(snapshot('host1'))
        self.assertEqual({'host1': 'alive', 'new': 'hold'},
                         self.verdicts(snapshot('host1', 'new')))

    def test_stale_is_failed(self):
        snap = snapshot('host1')
        self.beat('host1')
        self.clock.advance(15)
        self.assertEqual('alive', self.verdicts(snap)['host1'])
        self.clock.advance(0.5)
        ev = self.det.detect(snap, self.clock.now())['host1']
        self.assertEqual(base.Verdict.FAILED, ev.verdict)
        self.assertIn('last heartbeat 15.5s ago > timeout 15s', ev.reason)

    def test_fresh_heartbeat_while_nova_says_down_is_isolated(self):
        self.beat('host1')
        snap = snapshot('host1', down=['host1'])
        ev = self.det.detect(snap, self.clock.now())['host1']
        self.assertEqual(base.Verdict.ALIVE, ev.verdict)
        self.assertIn('isolated from the control plane', ev.reason)
        self.assertIn('host host1: Nova reports its compute service down',
                      self.log.output)
        self.det.detect(snap, self.clock.now())
        self.assertEqual(1, self.log.output.count('Nova reports'))

    def test_stale_nova_report_with_fresh_heartbeat_is_logged_isolated(self):
        self.beat('host1')
        when = datetime.datetime.fromtimestamp(self.clock.wall - 60, UTC)
        snap = model.Snapshot(taken_at=self.clock.now(), services=(
            model.Service('1', 'host1', model.UP, model.ENABLED,
                          updated_at=when),))
        ev = self.det.detect(snap, self.clock.now())['host1']
        self.assertEqual(base.Verdict.ALIVE, ev.verdict)
        self.assertIn('host host1: Nova reports its compute service silent '
                      'for more than delta', self.log.output)

    def test_heartbeat_alive_vetoes_nova_failed(self):
        # R15 with the decide engine's combination: never FAILED.
        self.beat('host1')
        snap = snapshot('host1', down=['host1'])
        nova = nova_det.NovaDetector(make_conf()).detect(snap,
                                                         self.clock.now())
        hb = self.det.detect(snap, self.clock.now())
        for mode in ('veto', 'all'):
            verdict, reasons = decide.combine([nova['host1'], hb['host1']],
                                              mode)
            self.assertEqual(decide.ISOLATED, verdict, mode)
        self.clock.advance(16)
        hb = self.det.detect(snap, self.clock.now())
        for mode in ('veto', 'all', 'any'):
            self.assertEqual(decide.FAILED, decide.combine(
                [nova['host1'], hb['host1']], mode)[0], mode)

    def test_listener_not_running(self):
        det = hb_det.HeartbeatDetector(self.conf)
        ev = det.detect(snapshot('h'), self.clock.now())
        self.assertEqual(base.Verdict.UNKNOWN, ev['h'].verdict)

    def test_dead_listener_thread_is_blind_not_failed(self):
        self.beat('host1')
        self.clock.advance(100)
        self.lst.udp.stop()
        ev = self.det.detect(snapshot('host1'), self.clock.now())['host1']
        self.assertEqual(base.Verdict.UNKNOWN, ev.verdict)
        self.assertIn('listener thread is not running', self.log.output)

    def test_stats(self):
        self.beat('host1')
        self.assertEqual(1, self.det.stats()['accepted'])
        self.assertEqual({}, hb_det.HeartbeatDetector(self.conf).stats())

    def test_known_hosts_follow_the_snapshot(self):
        self.verdicts(snapshot('host1'))
        self.reject(Sender('other', self.clock).packet(), p.UNKNOWN_HOST)


class TestMassLoss(DetectorBase):

    HOSTS = ['h%d' % i for i in range(10)]

    def start_all(self):
        self.beat(*self.HOSTS)
        self.assertEqual({'alive'}, set(self.verdicts(
            snapshot(*self.HOSTS)).values()))

    def cycle(self, beating):
        self.clock.advance(16)
        self.beat(*beating)
        return self.verdicts(snapshot(*self.HOSTS))

    def test_mass_loss_is_held_for_bounded_cycles(self):
        self.start_all()
        alive = self.HOSTS[:4]
        for n in (1, 2):
            v = self.cycle(alive)
            self.assertEqual(['unknown'] * 6, [v[h] for h in self.HOSTS[4:]])
            self.assertEqual(['alive'] * 4, [v[h] for h in alive])
        ev = self.det.detect(snapshot(*self.HOSTS), self.clock.now())
        self.assertIn('mass loss: 6 of 10', self.log.output)
        self.assertIn('mass-loss hold over', self.log.output)
        self.assertEqual(base.Verdict.FAILED, ev['h9'].verdict)
        # The hold is not re-armed by the same silent hosts.
        v = self.cycle(alive)
        self.assertEqual(['failed'] * 6, [v[h] for h in self.HOSTS[4:]])

    def test_hold_reason_says_why(self):
        self.start_all()
        self.clock.advance(16)
        self.beat(*self.HOSTS[:2])
        found = self.det.detect(snapshot(*self.HOSTS), self.clock.now())
        ev = found['h5']
        self.assertIn('held: mass heartbeat loss (cycle 1 of 2)', ev.reason)
        # Part of a mass failure for the gates; the hosts still beating
        # are not.
        self.assertTrue(ev.mass_loss)
        self.assertFalse(found['h0'].mass_loss)

    def test_hold_ends_early_when_hosts_return(self):
        self.start_all()
        self.cycle(self.HOSTS[:3])
        v = self.cycle(self.HOSTS)
        self.assertEqual({'alive'}, set(v.values()))
        self.assertIn('hold ended early', self.log.output)
        # A single later failure is judged normally.
        v = self.cycle(self.HOSTS[1:])
        self.assertEqual('failed', v['h0'])

    def test_small_loss_is_not_mass_loss(self):
        self.start_all()
        v = self.cycle(self.HOSTS[2:])
        self.assertEqual(['failed', 'failed'], [v['h0'], v['h1']])

    def test_share_must_be_exceeded(self):
        self.start_all()
        v = self.cycle(self.HOSTS[5:])  # exactly 50 %
        self.assertEqual('failed', v['h0'])


class TestMassLossOff(DetectorBase):

    hb_opts = {'mass_loss_hold_cycles': 0}

    def test_no_hold(self):
        hosts = ['a', 'b', 'c', 'd']
        self.beat(*hosts)
        self.verdicts(snapshot(*hosts))
        self.clock.advance(16)
        self.assertEqual({'failed'}, set(self.verdicts(
            snapshot(*hosts)).values()))


class TestHeartbeatConfig(testtools.TestCase):

    def test_missing_key_file_names_option(self):
        conf = make_conf(heartbeat={'key_file': '/nonexistent/hb.key'})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                hb_det.HeartbeatDetector(conf).validate)
        self.assertIn('[heartbeat] key_file', str(exc))

    def test_bad_listen_address_names_option(self):
        path = self.useFixture(fixtures.TempDir()).join('k')
        with open(path, 'wb') as f:
            f.write(KEY)
        conf = make_conf(heartbeat={'key_file': path,
                                    'listen_addresses': ['localhost']})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                hb_det.HeartbeatDetector(conf).validate)
        self.assertIn('[heartbeat] listen_addresses', str(exc))
        self.assertNotIn(KEY.decode(), str(exc))

    def test_same_file_twice(self):
        conf = make_conf(heartbeat={'key_file': '/k',
                                    'previous_key_file': '/k'})
        self.assertRaises(exceptions.ConfigurationError, ha_conf.validate,
                          conf)

    def test_port_in_use_names_option(self):
        busy = udp_mod.UdpListener('x', [('127.0.0.1', 0)], lambda d, a: 0,
                                   10)
        busy.start()
        self.addCleanup(busy.stop)
        path = self.useFixture(fixtures.TempDir()).join('k')
        with open(path, 'wb') as f:
            f.write(KEY)
        conf = make_conf(heartbeat={'key_file': path,
                                    'listen_addresses': ['127.0.0.1'],
                                    'port': busy.addresses[0][1]})
        det = hb_det.HeartbeatDetector(conf)
        exc = self.assertRaises(exceptions.ConfigurationError, det.start)
        self.assertIn('[heartbeat] listen_addresses/port', str(exc))
        self.assertIn('127.0.0.1', str(exc))
        det.stop()


class KdumpBase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.clock = Clock()
        self.lookups = []
        self.lst = lst_mod.KdumpListener(
            [], address_map={'192.0.2.11': 'host1', 'fd00::12': 'host2'},
            now=self.clock.now, resolver=self.resolve)

    def resolve(self, address):
        # Stands in for DNS: no name server can run here; the real
        # resolver is used in tests/functional/test_kdump.py.
        self.lookups.append(address)
        names = {'192.0.2.13': ('host3.example.org', [], [address])}
        if address not in names:
            raise OSError('unknown host')
        return names[address]


class TestKdumpListener(KdumpBase):

    def test_mapped_senders(self):
        rec = self.lst.handle(kdump.encode(), '192.0.2.11')
        self.assertEqual((1, '192.0.2.11'), (rec.count, rec.address))
        self.lst.handle(kdump.encode(), '::ffff:192.0.2.11')
        self.lst.handle(kdump.encode(byteorder='big'), 'fd00:0::12')
        self.assertEqual(2, self.lst.record('host1').count)
        self.assertEqual(self.clock.now(), self.lst.last_message('host2'))
        self.assertIn('host host1 (192.0.2.11) is writing a crash dump',
                      self.log.output)
        self.assertEqual([], self.lookups)

    def test_reverse_dns_fallback_matches_known_host(self):
        self.lst.set_known_hosts(['host3'])
        self.assertIsNotNone(self.lst.handle(kdump.encode(), '192.0.2.13'))
        self.assertIsNotNone(self.lst.last_message('host3'))
        self.lst.handle(kdump.encode(), '192.0.2.13')
        self.assertEqual(1, len(self.lookups))  # cached

    def test_unknown_sender(self):
        self.assertIsNone(self.lst.handle(kdump.encode(), '192.0.2.99'))
        self.lst.set_known_hosts(['hostX'])
        self.assertIsNone(self.lst.handle(kdump.encode(), '192.0.2.13'))
        self.assertEqual(2, self.lst.rejects.counts[kdump.UNKNOWN_SENDER])
        self.assertIn('192.0.2.99 is not in [kdump] address_map',
                      self.log.output)

    def test_bad_packets_counted(self):
        for data in (b'', b'\x40\x2a\x30', kdump.encode() + b'\0',
                     b'\0' * 8, kdump.encode(3)):
            self.assertIsNone(self.lst.handle(data, '192.0.2.11'))
        self.assertEqual({'truncated': 2, 'oversized': 1, 'bad_magic': 1,
                          'bad_version': 1}, self.lst.rejects.counts)
        self.assertIsNone(self.lst.last_message('host1'))

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=16), st.sampled_from(
        ['192.0.2.11', '192.0.2.13', '192.0.2.99', 'fd00::12']))
    def test_fuzz_handle_never_raises(self, data, sender):
        before = self.lst.accepted + self.lst.rejects.total
        self.lst.handle(data, sender)
        self.assertEqual(before + 1,
                         self.lst.accepted + self.lst.rejects.total)

    def test_new_episode_after_long_silence(self):
        self.lst.handle(kdump.encode(), '192.0.2.11')
        self.clock.advance(3600)
        rec = self.lst.handle(kdump.encode(), '192.0.2.11')
        self.assertEqual((1, self.clock.now()), (rec.count, rec.first))


class TestKdumpDetector(KdumpBase):

    def setUp(self):
        super().setUp()
        self.conf = make_conf(kdump={'message_timeout': 30})
        self.det = kd_det.KdumpDetector(self.conf, listener=self.lst)

    def test_dumping_host_is_failed_others_have_no_opinion(self):
        self.lst.handle(kdump.encode(), '192.0.2.11')
        self.clock.advance(10)
        ev = self.det.detect(snapshot('host1', 'host2'), self.clock.now())
        self.assertEqual(['host1'], list(ev))
        self.assertEqual(base.Verdict.FAILED, ev['host1'].verdict)
        self.assertIn('writing a crash dump', ev['host1'].reason)
        self.assertTrue(self.det.is_dumping('host1', self.clock.now()))
        self.clock.advance(21)
        self.assertEqual({}, self.det.detect(snapshot('host1'),
                                             self.clock.now()))
        self.assertFalse(self.det.is_dumping('host1', self.clock.now()))
        self.assertEqual(self.clock.now() - datetime.timedelta(seconds=31),
                         self.det.last_message('host1'))
        self.assertIsNone(self.det.last_message('host2'))

    def test_beating_host_vetoes_a_spoofed_kdump_message(self):
        # fence_kdump is unauthenticated; the documented mitigation is the
        # heartbeat witness, whose ALIVE vetoes kdump's FAILED.
        self.lst.handle(kdump.encode(), '192.0.2.11')
        kd = self.det.detect(snapshot('host1'), self.clock.now())['host1']
        alive = base.Evidence('host1', base.Verdict.ALIVE,
                              'heartbeat: last heartbeat 1.0s ago')
        for mode in ('veto', 'all'):
            # Nova has no vote here: disputed, not a partition from Nova.
            self.assertEqual(decide.DISPUTED,
                             decide.combine([kd, alive], mode)[0], mode)

    def test_find_watch(self):
        nova = nova_det.NovaDetector(self.conf)
        self.assertIs(self.det, kd_det.find_watch([nova, self.det]))
        self.assertIsNone(kd_det.find_watch([nova]))

    def test_not_started(self):
        det = kd_det.KdumpDetector(self.conf)
        self.assertIsNone(det.last_message('host1'))
        self.assertEqual({}, det.detect(snapshot('host1'), self.clock.now()))


class TestKdumpConfig(testtools.TestCase):

    def test_address_map(self):
        from instanceha.conf import kdump as kconf
        conf = make_conf(kdump={'address_map': [
            '192.0.2.1=host1', 'FD00::0:1 = host2']})
        self.assertEqual({'192.0.2.1': 'host1', 'fd00::1': 'host2'},
                         kconf.address_map(conf))

    def test_bad_entries_named(self):
        for entry in ('192.0.2.1', 'host1=192.0.2.1', '192.0.2.1='):
            conf = make_conf(kdump={'address_map': [entry]})
            exc = self.assertRaises(exceptions.ConfigurationError,
                                    ha_conf.validate, conf)
            self.assertIn('[kdump] address_map', str(exc))
            self.assertIn(repr(entry), str(exc))

    def test_address_mapped_twice(self):
        conf = make_conf(kdump={'address_map': ['192.0.2.1=a',
                                                '192.0.2.1=b']})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('both a and b', str(exc))

    def test_check_kdump_needs_the_detector(self):
        conf = make_conf(kdump={'check_kdump': True})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('[kdump] check_kdump', str(exc))
        ha_conf.validate(make_conf(kdump={'check_kdump': True},
                                   detection={'detectors': ['nova',
                                                            'kdump']}))
