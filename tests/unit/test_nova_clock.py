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

"""Nova's time stamps are judged by Nova's clock, and a skew is reported."""

import datetime

import fixtures
import testtools

from instanceha.engine import model
from instanceha.plugins.detectors import base
from instanceha.plugins.detectors import nova as nova_det
from tests.unit import test_heartbeat_detector as h

UTC = datetime.timezone.utc
NOVA_NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def snap(skew, ages):
    """Services last heard ``ages`` seconds ago by Nova's clock."""
    return model.Snapshot(
        taken_at=NOVA_NOW + datetime.timedelta(seconds=skew or 0),
        clock_skew=skew, services=tuple(
            model.Service(id=str(i), host='host%d' % i, state=model.UP,
                          status=model.ENABLED,
                          updated_at=NOVA_NOW - datetime.timedelta(
                              seconds=age))
            for i, age in enumerate(ages)))


class TestNovaClock(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.det = nova_det.NovaDetector(h.make_conf())

    def verdicts(self, skew, ages):
        s = snap(skew, ages)
        ours = NOVA_NOW + datetime.timedelta(seconds=skew or 0)
        return [e.verdict for _, e in sorted(self.det.detect(s, ours).items())]

    def test_our_clock_ahead_does_not_fail_healthy_hosts(self):
        self.assertEqual([base.Verdict.ALIVE, base.Verdict.FAILED],
                         self.verdicts(300, [5, 45]))
        self.assertIn("this machine's clock is 300s ahead of Nova's",
                      self.log.output)

    def test_our_clock_behind_does_not_hide_a_stale_host(self):
        self.assertEqual([base.Verdict.ALIVE, base.Verdict.FAILED],
                         self.verdicts(-300, [5, 45]))
        self.assertIn('300s behind Nova', self.log.output)

    def test_unknown_skew_judges_by_our_clock(self):
        self.assertEqual([base.Verdict.ALIVE, base.Verdict.FAILED],
                         self.verdicts(None, [5, 45]))

    def test_skew_reported_once_then_when_it_changes_or_ends(self):
        for _ in range(3):
            self.verdicts(60, [1])
        self.assertEqual(1, self.log.output.count('ahead of'))
        self.verdicts(65, [1])  # within another bound: not again
        self.assertEqual(1, self.log.output.count('ahead of'))
        self.verdicts(120, [1])
        self.assertEqual(2, self.log.output.count('ahead of'))
        self.verdicts(2, [1])
        self.assertIn('agree again', self.log.output)
        self.verdicts(1, [1])
        self.assertEqual(1, self.log.output.count('agree again'))
