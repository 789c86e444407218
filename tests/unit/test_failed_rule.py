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

"""One rule for "this compute service shows its host failed".

It lives on the detector contract (``Detector.judge_service``); the Nova
detector votes by it and the engine's fast path reads the services by
it: changing the rule changes both.
"""

import datetime
from unittest import mock

import testtools

from instanceha.engine import model
from instanceha.engine import watch
from instanceha.plugins.detectors import base
from instanceha.plugins.detectors import heartbeat
from instanceha.plugins.detectors import kdump
from instanceha.plugins.detectors import nova
from tests.unit import test_heartbeat_detector as h

V = base.Verdict
NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)


def svc(host='h1', age=5, state='up', status='enabled', forced=False,
        raw=None):
    at = None if age is None else NOW - datetime.timedelta(seconds=age)
    return model.Service(id=host, host=host, state=state, status=status,
                         forced_down=forced, updated_at=at,
                         updated_at_raw=raw)


def snap(*services):
    return model.Snapshot(taken_at=NOW, services=services, clock_skew=0.0)


class TestRule(testtools.TestCase):

    def judge(self, service, delta=30):
        return base.Detector.judge_service(service, NOW, delta)

    def test_verdicts(self):
        cases = [
            (svc(age=5), V.ALIVE, False, 'state up, last heartbeat 5s ago'),
            (svc(age=30), V.ALIVE, False, 'state up, last heartbeat 30s ago'),
            (svc(age=31), V.FAILED, True,
             'state up but last heartbeat 31s ago > delta 30s'),
            (svc(state='down'), V.FAILED, False,
             'state down (last heartbeat 5s ago)'),
            (svc(forced=True), V.FAILED, False,
             'forced down (last heartbeat 5s ago)'),
            (svc(age=None, raw='yesterday'), V.UNKNOWN, True,
             "state up but malformed updated_at 'yesterday'"),
            (svc(age=None), V.UNKNOWN, True, 'state up but no updated_at'),
            (svc(state='weird'), V.UNKNOWN, False,
             "unexpected state 'weird' (last heartbeat 5s ago)"),
        ]
        for service, verdict, stale, seen in cases:
            self.assertEqual(base.ServiceView(verdict, seen, stale),
                             self.judge(service), seen)

    def test_a_disabled_service_is_judged_like_any(self):
        self.assertEqual(V.ALIVE,
                         self.judge(svc(status='disabled')).verdict)


class TestOneRule(testtools.TestCase):
    """The Nova detector and the fast path both ask the contract."""

    def rule(self, verdict):
        return mock.patch.object(
            base.Detector, 'judge_service', staticmethod(
                lambda service, nova_now, delta: base.ServiceView(
                    verdict, 'said so', verdict is not V.ALIVE)))

    def test_nova_detector_votes_by_the_rule(self):
        det = nova.NovaDetector(h.make_conf())
        for verdict in V:
            if verdict is V.HOLD:
                continue
            with self.rule(verdict):
                ev = det.detect(snap(svc()), NOW)['h1']
            self.assertEqual((verdict, 'nova: said so', True),
                             (ev.verdict, ev.reason, ev.control_plane))

    def test_fast_path_reads_the_services_by_the_rule(self):
        services = snap(svc('fresh'), svc('down', state='down'))
        with self.rule(V.FAILED):
            self.assertEqual({'fresh', 'down'},
                             set(watch.attention(services, NOW, 30)))
        with self.rule(V.ALIVE):
            self.assertEqual({}, watch.attention(services, NOW, 30))
            # Disabled is news whatever the rule says.
            self.assertEqual({'off'}, set(watch.attention(
                snap(svc('off', status='disabled')), NOW, 30)))

    def test_only_the_nova_detector_judges_by_services_only(self):
        self.assertFalse(base.Detector.judges_services_only)
        self.assertTrue(nova.NovaDetector.judges_services_only)
        self.assertFalse(heartbeat.HeartbeatDetector.judges_services_only)
        self.assertFalse(kdump.KdumpDetector.judges_services_only)
