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

import datetime

import testtools

from instanceha.engine import marker
from instanceha.engine.marker import Marker
from instanceha.engine import reasons
from instanceha.engine.states import HostState as S

NOW = datetime.datetime(2026, 11, 29, 12, 0, 5,
                        tzinfo=datetime.timezone.utc)
FENCED = datetime.datetime(2026, 11, 29, 11, 58, 0,
                           tzinfo=datetime.timezone.utc)


def parse(text):
    """The recovery marker in ``text`` as every caller reads it."""
    return reasons.read(text).marker


class TestMarker(testtools.TestCase):

    def test_round_trip_every_field(self):
        for state in S:
            for nova_clock in (True, False):
                m = Marker(state=state, when=NOW, fenced_at=FENCED,
                           spare='spare-1', kdump=True, recovery='r-1a2b',
                           gave_up=('0a1b2c3d4e5f', 'ffee00112233'),
                           stopped=True, shutdown='poweroff',
                           note='2 instance(s) not evacuated',
                           nova_clock=nova_clock)
                text = m.render()
                self.assertLessEqual(len(text), marker.MAX_LENGTH)
                self.assertEqual(m, parse(text))

    def test_times_on_novas_clock_name_the_same_moment(self):
        # Written while our clock ran 40 s ahead of Nova's; read back
        # after it was stepped 300 s back (260 s behind Nova's).
        written = Marker(state=S.EVACUATING,
                         when=marker.to_nova(NOW, 40),
                         fenced_at=marker.to_nova(FENCED, 40),
                         nova_clock=True)
        text = written.render()
        self.assertIn(' clock=nova', text)
        back = parse(text)
        self.assertTrue(back.nova_clock)
        step = datetime.timedelta(seconds=300)
        self.assertEqual(NOW - step, back.ours(back.when, -260))
        self.assertEqual(FENCED - step, back.ours(back.fenced_at, -260))
        self.assertEqual(marker.to_nova(NOW, 40),
                         back.on_nova(back.when, -260))
        self.assertIsNone(back.ours(None, -260))
        # How the times are kept is not news for the plan and hosts list.
        self.assertNotIn('clock', back.details())

    def test_times_of_the_previous_version_are_read_as_ours(self):
        # No clock=nova: written on the writer's clock, which is taken to
        # be ours (what every earlier version did).
        old = parse('instanceha:evacuating 2026-11-29T12:00:05Z '
                    'fenced_at=2026-11-29T11:58:00Z rid=r-1')
        self.assertFalse(old.nova_clock)
        self.assertEqual(NOW, old.ours(old.when, -260))
        self.assertEqual(FENCED, old.ours(old.fenced_at, -260))
        skewed = datetime.timedelta(seconds=260)
        self.assertEqual(NOW + skewed, old.on_nova(old.when, -260))
        # Rewritten on Nova's clock (hosts clear), naming the same moment.
        new = old.on_nova_clock(-260)
        self.assertTrue(new.nova_clock)
        self.assertEqual((NOW + skewed, FENCED + skewed),
                         (new.when, new.fenced_at))
        self.assertIs(new, new.on_nova_clock(100))
        self.assertEqual(FENCED, new.ours(new.fenced_at, -260))

    def test_shutdown_element_is_only_added(self):
        # Written by the previous version (no element): adopted, and the
        # host is powered on after its evacuation as before.
        old = parse('instanceha:evacuating 2026-11-29T12:00:05Z '
                    'fenced_at=2026-11-29T12:00:01Z rid=r-1')
        self.assertIsNone(old.shutdown)
        self.assertEqual('r-1', old.recovery)
        new = old.replace(shutdown='poweroff')
        self.assertIn(' shutdown=poweroff', new.render())
        self.assertEqual('poweroff', parse(new.render()).shutdown)

    def test_failed_stands_out(self):
        text = Marker(state=S.FAILED, when=NOW, note='x').render()
        self.assertTrue(text.startswith(
            'instanceha:failed 2026-11-29T12:00:05Z FAILED '), text)

    def test_long_note_is_cut_fields_kept(self):
        m = Marker(state=S.FAILED, when=NOW, spare='s1', recovery='r1',
                   note='ids: ' + ','.join(['x' * 36] * 20))
        text = m.render()
        self.assertEqual(marker.MAX_LENGTH, len(text))
        parsed = parse(text)
        self.assertEqual(('s1', 'r1'), (parsed.spare, parsed.recovery))
        self.assertTrue(parsed.note.endswith('...'))

    def test_markers_of_the_previous_version_are_adopted(self):
        # Literal disabled_reason texts written by the previous version.
        cases = {
            'instanceha:evacuating 2026-01-01T00:01:46Z '
            'fenced_at=2026-01-01T00:01:46Z spare=spare-2 kdump=yes':
                (S.EVACUATING, '2026-01-01T00:01:46Z', 'spare-2', True, ''),
            'instanceha:fenced 2026-01-01T00:01:46Z '
            'fenced_at=2026-01-01T00:01:46Z':
                (S.FENCED, '2026-01-01T00:01:46Z', None, False, ''),
            'instanceha:waiting_up 2026-01-01T00:06:23Z '
            'fenced_at=2026-01-01T00:05:51Z':
                (S.WAITING_UP, '2026-01-01T00:05:51Z', None, False, ''),
            'instanceha:waiting_up 2026-01-01T00:06:23Z cleared by '
            'operator': (S.WAITING_UP, None, None, False,
                         'cleared by operator'),
            'instanceha:failed 2026-01-01T00:04:03Z FAILED 1 instance(s) '
            'not evacuated; fix them, then run "instanceha-manage hosts '
            'clear compute-1"; ids: vm-1b':
                (S.FAILED, None, None, False,
                 '1 instance(s) not evacuated; fix them, then run '
                 '"instanceha-manage hosts clear compute-1"; ids: vm-1b'),
            'instanceha:evacuated 2026-01-01T00:04:03Z': (
                S.EVACUATED, None, None, False, ''),
        }
        for text, (state, fenced_at, spare, kdump, note) in cases.items():
            m = parse(text)
            self.assertIsNotNone(m, text)
            self.assertEqual(state, m.state)
            self.assertEqual(fenced_at, m.fenced_at and marker.format_ts(
                m.fenced_at))
            self.assertEqual((spare, kdump, note), (m.spare, m.kdump,
                                                    m.note))
            self.assertIsNone(m.recovery)
            # Written back unchanged: the codec loses nothing.
            self.assertEqual(text, m.render())

    def test_given_up_ids_that_do_not_fit_stop_the_host(self):
        ids = tuple(marker.short_id('%032x' % i) for i in range(40))
        m = Marker(state=S.EVACUATING, when=NOW, fenced_at=FENCED,
                   spare='spare-host-with-a-long-name', recovery='r' * 36,
                   gave_up=ids)
        fitted = m.fitted()
        text = fitted.render()
        self.assertLessEqual(len(text), marker.MAX_LENGTH)
        back = parse(text)
        # Every id kept is whole, and the ones dropped are covered by
        # stopped=yes (nothing pending is started any more).
        self.assertTrue(back.stopped)
        self.assertEqual(fitted.gave_up, back.gave_up)
        self.assertEqual(ids[:len(back.gave_up)], back.gave_up)
        self.assertGreater(len(back.gave_up), 0)

    def test_given_up_ids_that_fit_are_all_kept(self):
        ids = ('a' * 12, 'b' * 12)
        m = Marker(state=S.EVACUATING, when=NOW, gave_up=ids).fitted()
        self.assertEqual(ids, parse(m.render()).gave_up)
        self.assertFalse(m.stopped)

    def test_unknown_fields_are_kept(self):
        text = 'instanceha:evacuating 2026-01-01T00:01:46Z later=v2 spare=s'
        m = parse(text)
        self.assertEqual((('later', 'v2'),), m.extra)
        self.assertEqual('s', m.spare)
        self.assertEqual(parse(m.render()), m)

    def test_foreign_reasons_are_not_markers(self):
        for text in (None, '', 'maintenance by bob',
                     'instanceha-maintenance 2026-11-29T12:00:05Z',
                     'instanceha:bogus 2026-11-29T12:00:05Z',
                     'instanceha:fenced 2026-13-45T12:00:05Z',
                     'instanceha:fenced yesterday'):
            self.assertIsNone(parse(text), text)

    def test_timestamp_format_written_once(self):
        self.assertEqual('2026-11-29T12:00:05Z', marker.format_ts(NOW))
        self.assertEqual(NOW, marker.parse_ts('2026-11-29T12:00:05Z'))
        self.assertIsNone(marker.parse_ts('noon'))
