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

"""Shutdown announcements: the wire format, the listener, the agent's
side (over real UDP sockets on 127.0.0.1), the policy and the fencing
port's rule for announced hosts."""

import datetime
import sys

import fixtures
import testtools

from instanceha.engine import decide
from instanceha.engine import guard
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import shutdown
from instanceha import exceptions
from instanceha.heartbeat import agent as agent_mod
from instanceha.heartbeat import keys
from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol as p
from instanceha.plugins.detectors import base as det_base
from tests import conf_fixture

KEY = b'k' * 32
BOOT = b'b' * 16
TS = 1_700_000_000.0
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


class TestWireFormat(testtools.TestCase):

    def test_announcement_round_trip(self):
        for kind in (p.REBOOT, p.POWEROFF):
            hb = p.decode(p.encode('h1', BOOT, 4, TS, KEY, kind=kind), (KEY,))
            self.assertEqual((kind, None, 4), (hb.kind, hb.reply,
                                               hb.sequence))
        self.assertIsNone(p.decode(p.encode('h1', BOOT, 4, TS, KEY),
                                   (KEY,)).kind)

    def test_replies_only_where_replies_are_expected(self):
        reply = p.encode('h1', BOOT, 4, TS, KEY, reply=p.DRAINING)
        self.assertEqual(p.DRAINING, p.decode(reply, (KEY,),
                                              replies=True).reply)
        # Reflected at the listener, or a heartbeat sent to an agent.
        self.assertEqual(p.UNEXPECTED, self.assertRaises(
            p.Rejected, p.decode, reply, (KEY,)).reason)
        beat = p.encode('h1', BOOT, 4, TS, KEY, kind=p.REBOOT)
        self.assertEqual(p.UNEXPECTED, self.assertRaises(
            p.Rejected, p.decode, beat, (KEY,), replies=True).reason)

    def test_unknown_flags_are_malformed_and_the_flags_are_signed(self):
        data = bytearray(p.encode('h1', BOOT, 4, TS, KEY, kind=p.REBOOT))
        data[5] = p._KIND_FLAGS[p.POWEROFF]
        self.assertEqual(p.BAD_HMAC, self.assertRaises(
            p.Rejected, p.decode, bytes(data), (KEY,)).reason)
        data[5] = 7
        self.assertEqual(p.MALFORMED, self.assertRaises(
            p.Rejected, p.decode, bytes(data), (KEY,)).reason)
        self.assertRaises(ValueError, p.encode, 'h1', BOOT, 1, TS, KEY,
                          kind='halt')


class ListenerFixture(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        self.wall = [TS]
        self.clock = [100.0]
        self.lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], (KEY,), max_clock_skew=15,
            clock=lambda: self.clock[0], wall=lambda: self.wall[0])

    def send(self, seq, kind=None, boot=BOOT, reply=None):
        self.wall[0] += 1
        self.clock[0] += 1
        return self.lst.handle(p.encode('h1', boot, seq, self.wall[0], KEY,
                                        kind=kind), '192.0.2.1', reply)


class TestListener(ListenerFixture):

    def test_announcement_remembered_until_a_new_boot_beats(self):
        self.send(1)
        self.assertIsNone(self.lst.announcement('h1'))
        self.send(2, p.REBOOT)
        self.send(3, p.REBOOT)  # repeated while the agent waits
        ann = self.lst.announcement('h1')
        self.assertEqual((p.REBOOT, 102.0, 103.0),
                         (ann.kind, ann.first, ann.last))
        self.assertEqual({'h1': ann}, self.lst.announced())
        self.assertEqual({p.REBOOT: 1}, self.lst.stats()['announcements'])
        self.assertFalse(self.lst.returned('h1'))
        self.send(1, boot=b'n' * 16)  # the next boot's agent
        self.assertTrue(self.lst.returned('h1'))
        self.lst.forget_announcement('h1')
        self.assertIsNone(self.lst.announcement('h1'))

    def test_a_replayed_announcement_is_rejected(self):
        self.send(5, p.POWEROFF)
        old = p.encode('h1', BOOT, 4, self.wall[0], KEY, kind=p.POWEROFF)
        self.assertIsNone(self.lst.handle(old, '192.0.2.1'))
        self.assertEqual({p.REPLAY: 1}, self.lst.stats()['rejected'])

    def test_answer_is_signed_and_echoes_the_announcement(self):
        sent = []
        self.send(1, p.REBOOT, reply=sent.append)
        self.assertEqual([], sent)  # nobody decides: no answer
        self.lst.responder = lambda ann: p.DRAINING
        self.send(2, p.REBOOT, reply=sent.append)
        rep = p.decode(sent[0], (KEY,), replies=True)
        self.assertEqual(('h1', BOOT, 2, p.DRAINING),
                         (rep.host, rep.boot_id, rep.sequence, rep.reply))


class TestAgentAnnounces(testtools.TestCase):
    """The agent and a listener talking over UDP on 127.0.0.1."""

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        tmp = self.useFixture(fixtures.TempDir()).path
        self.key_file = '%s/key' % tmp
        with open(self.key_file, 'w') as f:
            f.write('x' * 32)
        ring = keys.KeyRing(self.key_file)
        self.lst = lst_mod.HeartbeatListener([('127.0.0.1', 0)], ring,
                                             max_clock_skew=15)
        self.lst.start()
        self.addCleanup(self.lst.stop)
        self.agent = agent_mod.Agent('h1', keys.KeyRing(self.key_file),
                                     self.lst.addresses, interval=1)

    def test_noted_ends_the_wait(self):
        self.lst.responder = lambda ann: p.NOTED
        self.assertEqual(p.NOTED, self.agent.announce(p.POWEROFF, 5, 5))
        self.assertEqual(p.POWEROFF, self.lst.announcement('h1').kind)

    def test_waits_while_draining_until_drained(self):
        asked = []

        def responder(ann):
            asked.append(ann.last)
            return p.DRAINED if len(asked) >= 3 else p.DRAINING

        self.lst.responder = responder
        self.assertEqual(p.DRAINED, self.agent.announce(p.REBOOT, 5, 30))
        self.assertEqual(3, len(asked))

    def test_gives_up_without_an_answer(self):
        self.assertIsNone(self.agent.announce(p.REBOOT, 1.5, 30))
        self.assertGreaterEqual(self.agent.sequence, 2)

    def test_drain_wait_is_bounded(self):
        self.lst.responder = lambda ann: p.DRAINING
        self.assertEqual(p.DRAINING, self.agent.announce(p.REBOOT, 5, 1.5))

    def test_shutdown_kind_from_the_job_list(self):
        def kind(out):
            return agent_mod.shutdown_kind('%s -c "print(%r)"' % (
                sys.executable, out))
        self.assertEqual(p.REBOOT, kind('7 reboot.target start waiting\n'
                                        '9 umount.target start waiting'))
        self.assertEqual(p.POWEROFF, kind('7 poweroff.target start running'))
        self.assertIsNone(kind('12 nova-compute.service stop running'))
        self.assertIsNone(kind('No jobs running.'))
        self.assertIsNone(agent_mod.shutdown_kind('/nonexistent/systemctl'))


class _Source:
    """An announcement source: the heartbeat detector's three questions."""

    poweroff_grace = 60.0

    def __init__(self, kind=None, age=0.0, returned=False):
        self.ann = kind and shutdown.Announcement('h1', kind, BOOT, 0.0, 0.0)
        self.age = age
        self.back = returned

    def announcement(self, host):
        return self.ann

    def returned(self, host):
        return self.back

    def now(self):
        return self.age


class _Fencer(ports.Fencer):
    """Records power operations (a stand-in for the fencing port).

    No BMC here: the port's contract against real BMCs is tested in
    tests/functional/test_fencing.py; this is only about the wrapper.
    """

    def __init__(self, reading):
        self.reading = reading
        self.calls = []

    def configured(self, host):
        return True

    def power_state(self, host):
        self.calls.append('read')
        return self.reading

    def fence(self, host):
        self.calls.append('off')
        return ports.FenceResult(host=host, level=1, devices=('bmc',))

    def unfence(self, host):
        self.calls.append('on')
        return ports.FenceResult(host=host, level=1, devices=('bmc',))


OFF = ports.PowerReading('h1', off=True, detail='bmc off', level=1)
ON = ports.PowerReading('h1', off=False, on=True, detail='bmc on')


class TestAnnouncedFencer(testtools.TestCase):

    def fencer(self, reading, **kw):
        inner = _Fencer(reading)
        return inner, shutdown.AnnouncedFencer(inner, _Source(**kw))

    def test_announced_and_off_is_proven_by_reading(self):
        inner, f = self.fencer(OFF, kind=shutdown.POWEROFF)
        result = f.fence('h1')
        self.assertEqual((1, True), (result.level, result.announced))
        self.assertEqual(['read'], inner.calls)
        self.assertTrue(f.unfence('h1').announced)  # left off
        self.assertEqual(['read'], inner.calls)

    def test_still_on_within_the_grace_waits(self):
        inner, f = self.fencer(ON, kind=shutdown.POWEROFF, age=10)
        self.assertRaises(exceptions.FencingError, f.fence, 'h1')
        self.assertEqual(['read'], inner.calls)

    def test_on_after_the_grace_or_a_reboot_is_fenced(self):
        inner, f = self.fencer(ON, kind=shutdown.POWEROFF, age=61)
        self.assertEqual(1, f.fence('h1').level)
        self.assertEqual(['read', 'off'], inner.calls)
        inner, f = self.fencer(ON, kind=shutdown.REBOOT, age=1)
        f.fence('h1')
        f.unfence('h1')  # a reboot's host is powered on again
        self.assertEqual(['read', 'off', 'on'], inner.calls)

    def test_unannounced_or_returned_hosts_pass_through(self):
        for kw in ({}, {'kind': shutdown.POWEROFF, 'returned': True}):
            inner, f = self.fencer(OFF, **kw)
            f.fence('h1')
            f.unfence('h1')
            self.assertEqual(['off', 'on'], inner.calls)

    def test_the_leadership_guard_still_reaches_the_devices(self):
        inner = _Fencer(OFF)
        inner.supports_device_guard = True
        env = guard.assemble(
            cloud=None, clock=None, fencer=inner, coordinator=None,
            events=None, executor=None, announcements=_Source())
        self.assertIsInstance(env.fencer._inner, shutdown.AnnouncedFencer)
        self.assertEqual(env.guard.device_check, inner.device_guard)


class TestPolicy(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = self.useFixture(conf_fixture.ConfFixture()).conf
        self.log = self.useFixture(fixtures.FakeLogger())

    def snapshot(self, *aggs):
        return model.Snapshot(taken_at=NOW, aggregates=tuple(
            model.Aggregate(id=name, name=name, hosts=frozenset({'h1'}),
                            metadata=md) for name, md in aggs))

    def test_default_and_conditional(self):
        self.assertEqual(('conditional', '[shutdown] policy'),
                         shutdown.policy_of(self.conf, self.snapshot(), 'h1'))
        self.assertEqual('freeze', shutdown.effective('conditional',
                                                      shutdown.REBOOT))
        self.assertEqual('failover', shutdown.effective('conditional',
                                                        shutdown.POWEROFF))
        self.assertEqual('migrate', shutdown.effective('migrate',
                                                       shutdown.POWEROFF))

    def test_aggregate_overrides(self):
        key = 'instanceha_shutdown_policy'
        self.assertEqual(('migrate', 'aggregate a'), shutdown.policy_of(
            self.conf, self.snapshot(('a', {key: ' Migrate'}), ('b', {})),
            'h1'))

    def test_bad_or_conflicting_values_keep_the_configured_one(self):
        key = 'instanceha_shutdown_policy'
        self.conf.set_override('policy', 'freeze', 'shutdown')
        self.assertEqual(('freeze', '[shutdown] policy'), shutdown.policy_of(
            self.conf, self.snapshot(('a', {key: 'reboot-it'})), 'h1'))
        self.assertIn("aggregate a: metadata instanceha_shutdown_policy="
                      "'reboot-it' is not a shutdown policy",
                      self.log.output)
        self.assertEqual(('freeze', '[shutdown] policy'), shutdown.policy_of(
            self.conf, self.snapshot(('a', {key: 'migrate'}),
                                     ('b', {key: 'failover'})), 'h1'))
        self.assertIn('a=migrate, b=failover', self.log.output)

    def test_frozen_reason_round_trip(self):
        fr = reasons.Frozen(since=NOW, kind='reboot',
                            until=NOW + datetime.timedelta(seconds=900),
                            note='policy freeze')
        text = fr.render()
        self.assertTrue(text.startswith('instanceha-shutdown '))
        self.assertEqual(fr, reasons.read(text).frozen)
        self.assertIsNone(reasons.read('instanceha:fenced x').frozen)
        self.assertIsNone(reasons.read('firmware update').frozen)

    def test_failover_record_round_trip_and_old_freezes_parse(self):
        fr = reasons.Frozen(since=NOW, kind='poweroff',
                            until=NOW + datetime.timedelta(seconds=900),
                            note='policy failover', action='failover')
        text = fr.render()
        self.assertIn(' action=failover policy failover', text)
        self.assertEqual(fr, reasons.read(text).frozen)
        self.assertTrue(reasons.read(text).frozen.failover)
        # A freeze written by the previous version: no action, a freeze.
        old = reasons.read(
            'instanceha-shutdown 2026-01-01T00:01:00Z reboot '
            'until=2026-01-01T00:16:00Z policy conditional ([shutdown] '
            'policy)').frozen
        self.assertIsNone(old.action)
        self.assertFalse(old.failover)
        self.assertEqual('policy conditional ([shutdown] policy)', old.note)
        # ... on the clock of the copy that wrote it, taken to be ours.
        self.assertFalse(old.nova_clock)
        self.assertEqual(old.until, old.ours(old.until, 600))

    def test_times_on_novas_clock(self):
        for action in (None, 'failover'):
            fr = reasons.Frozen(since=NOW, kind='reboot', action=action,
                                until=NOW + datetime.timedelta(seconds=300),
                                note='policy conditional', nova_clock=True)
            text = fr.render()
            self.assertIn(' clock=nova policy conditional', text)
            back = reasons.read(text).frozen
            self.assertEqual(fr, back)
            self.assertEqual('policy conditional', back.note)
            # Read by a copy whose clock runs 600 s ahead of Nova's.
            self.assertEqual(NOW + datetime.timedelta(seconds=900),
                             back.ours(back.until, 600))


class TestCombine(testtools.TestCase):

    def test_an_announced_power_off_is_failed_in_every_mode(self):
        ev = [det_base.Evidence('h1', det_base.Verdict.ALIVE, 'nova: up',
                                control_plane=True),
              det_base.Evidence('h1', det_base.Verdict.FAILED,
                                'heartbeat: announced', announced=True)]
        for mode in ('veto', 'all', 'any'):
            self.assertEqual(decide.FAILED, decide.combine(ev, mode)[0])
        # Without the announcement it is only disputed.
        ev[1] = det_base.Evidence('h1', det_base.Verdict.FAILED, 'silent')
        self.assertEqual(decide.DISPUTED, decide.combine(ev, 'veto')[0])
