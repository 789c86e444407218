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

"""One reading of every reason instanceha writes into Nova."""

import datetime
import pathlib
import re

import testtools

from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import shutdown
from instanceha.engine.states import HostState as S

K = reasons.Kind
NOW = datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.timezone.utc)
LATER = NOW + datetime.timedelta(minutes=15)

#: Texts written by earlier versions (golden logs, markers in Nova), with
#: the kind each reads as: they must read the same and, rendered again
#: from what was read, come out byte for byte.
WRITTEN = {
    'instanceha:evacuating 2026-01-01T00:01:46Z '
    'fenced_at=2026-01-01T00:01:46Z spare=spare-2 kdump=yes': K.RECOVERY,
    'instanceha:failed 2026-01-01T00:04:03Z FAILED 1 instance(s) not '
    'evacuated; ids: vm-1b': K.RECOVERY,
    'instanceha:service_down 2026-01-01T00:01:31Z clock=nova nova-compute '
    'down while the host is alive (its heartbeat); enabled again when '
    'nova-compute reports up': K.SERVICE_DOWN,
    'instanceha-shutdown 2026-01-01T00:01:00Z reboot '
    'until=2026-01-01T00:16:00Z policy conditional ([shutdown] policy)':
        K.SHUTDOWN,
    'instanceha-shutdown 2026-01-01T00:01:00Z poweroff '
    'until=2026-01-01T00:16:00Z action=failover clock=nova policy failover '
    '([shutdown] policy): recovered elsewhere once proven off': K.SHUTDOWN,
    'instanceha-maintenance 2026-01-01T00:00:30Z kernel upgrade CHG-1':
        K.MAINTENANCE,
    'instanceha-maintenance 2026-01-01T00:01:00Z shutdown policy migrate: '
    'reboot announced': K.MAINTENANCE,
    'instanceha-maintenance 2026-01-01T00:00:30Z': K.MAINTENANCE,
}


def svc(reason, status='disabled'):
    return model.Service(id='1', host='h1', state='up', status=status,
                         disabled_reason=reason)


def server(reason, locked=True):
    return model.Server(id='u1', name='vm1', status='ACTIVE', host='h2',
                        flavor={},
                        locked=locked, locked_reason=reason)


class TestRoundTrip(testtools.TestCase):
    """Each of ours renders the text it reads back, as its kind."""

    def check(self, value, kind):
        text = value.render()
        reading = reasons.read(text)
        self.assertEqual((kind, value, text),
                         (reading.kind, reading.value, reading.text))
        self.assertTrue(reading.ours)
        self.assertLessEqual(len(text), marker.MAX_LENGTH)

    def test_recovery_marker(self):
        for state in S:
            if state is S.SERVICE_DOWN:
                continue
            m = marker.Marker(state=state, when=NOW, fenced_at=NOW,
                              spare='s1', recovery='r-1', gave_up=('ab',),
                              shutdown='poweroff', nova_clock=True,
                              note='2 instance(s)')
            self.check(m, K.RECOVERY)
            self.assertEqual(m, reasons.read(m.render()).recovery)
            self.assertIsNone(reasons.read(m.render()).service_down)

    def test_service_down(self):
        m = marker.Marker(state=S.SERVICE_DOWN, when=NOW, nova_clock=True,
                          note='nova-compute down')
        self.check(m, K.SERVICE_DOWN)
        reading = reasons.read(m.render())
        self.assertEqual(m, reading.service_down)
        self.assertEqual(m, reading.marker)
        self.assertIsNone(reading.recovery)

    def test_shutdown(self):
        for action in (None, reasons.FAILOVER):
            for nova_clock in (False, True):
                self.check(reasons.Frozen(
                    since=NOW, kind='reboot', until=LATER, action=action,
                    nova_clock=nova_clock, note='policy freeze'),
                    K.SHUTDOWN)

    def test_maintenance(self):
        self.check(reasons.Maintenance(NOW, 'kernel upgrade'),
                   K.MAINTENANCE)
        self.check(reasons.Maintenance(NOW), K.MAINTENANCE)
        drain = reasons.Maintenance(NOW, reasons.DRAIN_NOTE + ' reboot')
        self.assertTrue(reasons.read(drain.render()).drain)
        self.assertFalse(reasons.read(
            reasons.Maintenance(NOW, 'disks').render()).drain)

    def test_lock(self):
        for was in (None, 'SHUTOFF', 'ERROR'):
            lock = reasons.Lock('compute-1', was)
            reading = reasons.of_lock(server(lock.render()))
            self.assertEqual((K.LOCK, lock), (reading.kind, reading.lock))
            self.assertEqual(lock, reading.lock_for('compute-1'))
            self.assertIsNone(reading.lock_for('compute-2'))
        self.assertEqual('instanceha: evacuating from h1 (was SHUTOFF)',
                         reasons.Lock('h1', 'SHUTOFF').render())


class TestEarlierVersions(testtools.TestCase):

    def test_texts_written_before_read_the_same(self):
        for text, kind in WRITTEN.items():
            reading = reasons.read(text)
            self.assertEqual(kind, reading.kind, text)
            self.assertEqual(text, reading.value.render(), text)

    def test_locks_written_before(self):
        for text, was in (('instanceha: evacuating from compute-1', None),
                          ('instanceha: evacuating from compute-1 '
                           '(was SHUTOFF)', 'SHUTOFF')):
            lock = reasons.of_lock(server(text)).lock
            self.assertEqual(('compute-1', was), (lock.host, lock.was))
            self.assertEqual(text, lock.render())


class TestWhoseReason(testtools.TestCase):

    def test_nobodys(self):
        for text in (None, ''):
            reading = reasons.read(text)
            self.assertEqual((K.NOBODY, '', None),
                             (reading.kind, reading.text, reading.value))
            self.assertFalse(reading.ours)

    def test_an_operators(self):
        for text in ('firmware update', 'instanceha:reserved',
                     'instanceha:bogus 2026-11-29T12:00:05Z',
                     'instanceha:fenced yesterday',
                     'instanceha-maintenance now',
                     'instanceha-shutdown 2026-01-01T00:01:00Z halt '
                     'until=2026-01-01T00:16:00Z',
                     # A lock reason is never a service's reason of ours.
                     'instanceha: evacuating from compute-1', '  '):
            reading = reasons.read(text)
            self.assertEqual((K.OPERATOR, text, None),
                             (reading.kind, reading.text, reading.value),
                             text)

    def test_prefixed_is_never_someone_elses_disable(self):
        self.assertTrue(reasons.read('instanceha:reserved').prefixed)
        self.assertTrue(reasons.read(next(iter(WRITTEN))).prefixed)
        self.assertFalse(reasons.read('firmware update').prefixed)
        self.assertFalse(reasons.read(None).prefixed)

    def test_grammars_never_overlap(self):
        for text in WRITTEN:
            reading = reasons.read(text)
            owners = [v for v in (reading.marker, reading.frozen,
                                  reading.maintenance, reading.lock)
                      if v is not None]
            self.assertEqual([reading.value], owners, text)

    def test_of_service_and_of_disabled(self):
        text = reasons.Maintenance(NOW).render()
        self.assertEqual(K.MAINTENANCE, reasons.of_service(svc(text)).kind)
        self.assertEqual(K.MAINTENANCE,
                         reasons.of_disabled(svc(text)).kind)
        enabled = svc(text, status='enabled')
        self.assertEqual(K.MAINTENANCE, reasons.of_service(enabled).kind)
        self.assertEqual(K.NOBODY, reasons.of_disabled(enabled).kind)
        self.assertEqual(K.NOBODY, reasons.of_service(None).kind)
        self.assertEqual(K.NOBODY, reasons.of_disabled(None).kind)

    def test_locks_not_ours(self):
        ours = reasons.Lock('h1').render()
        self.assertEqual(K.NOBODY,
                         reasons.of_lock(server(ours, locked=False)).kind)
        self.assertEqual(K.NOBODY, reasons.of_lock(server(None)).kind)
        self.assertEqual(K.NOBODY, reasons.of_lock(None).kind)
        for text in ('held by bob', ours + ' by hand',
                     marker.Marker(S.FENCED, NOW).render()):
            reading = reasons.of_lock(server(text))
            self.assertEqual((K.OPERATOR, None), (reading.kind,
                                                  reading.lock), text)
            self.assertIsNone(reading.lock_for('h1'))

    def test_failover_action_is_the_policys_name(self):
        self.assertEqual(shutdown.FAILOVER, reasons.FAILOVER)


class TestOneReader(testtools.TestCase):

    def test_only_the_codec_decodes(self):
        # Whoever needs to know what a reason is asks reasons.read.
        root = pathlib.Path(reasons.__file__).parent.parent
        found = []
        for path in sorted(root.rglob('*.py')):
            if path.name == 'reasons.py':
                continue
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r'\.decode\(', line) and re.search(
                        r'Marker|Frozen|Maintenance|Lock', line):
                    found.append('%s:%d' % (path, lineno))
        self.assertEqual([], found)
