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

"""Readiness rules, metrics from events, and the HTTP endpoint.

The engine here is a small stand-in exposing what the monitor reads
(``tick``, ``cycles``, ``plan``, ``host_states``): the rules are about
what the loop reports, not about recovery. The HTTP server is real.
"""

import datetime
import json
import ssl
import threading
import types
from unittest import mock
import urllib.error
import urllib.request

import fixtures
from prometheus_client import parser
import testtools

from instanceha.adapters.coordination import Status
from instanceha.daemon import health
from instanceha.daemon import metrics as metrics_mod
from instanceha.engine import events as ev
from instanceha.engine import plan as plan_mod
from instanceha.engine import runner
from instanceha.engine import states
from instanceha import exceptions
from tests import conf_fixture

S = states.HostState


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class FakeCoordinator:
    def __init__(self, leader=True, connected=True):
        self.leader = leader
        self.connected = connected

    def is_leader(self):
        return self.leader and self.connected

    def status(self):
        return Status(member_id='m1', backend='redis://db:6379',
                      connected=self.connected, leader=self.is_leader(),
                      error=None if self.connected else
                      'backend redis://db:6379 unreachable: refused',
                      last_loss=None, members=2, elections_won=1,
                      stopping=False)


class FakeListenerDetector:
    """Stands in for the heartbeat detector's listener counters."""

    name = 'heartbeat'
    supports_stats = True

    def stats(self):
        return {'accepted': 7, 'rejected': {'bad_hmac': 2, 'replay': 1},
                'hosts': 3, 'answers': 5,
                'link_changes': {'isolated': 1, 'connected': 2}}


class FakeEngine:
    def __init__(self, sink=None):
        self.drivers = types.SimpleNamespace(
            detectors=[FakeListenerDetector(),
                       types.SimpleNamespace(supports_stats=False)])
        self.cycles = 0
        self.plan = None
        self.states = {}
        self.sink = sink
        self.fail_snapshot = False
        self.raise_in_tick = None

    def tick(self):
        self.cycles += 1
        if self.fail_snapshot:
            self.sink.emit(ev.SNAPSHOT_FAILED, reason='nova: 503')
        if self.raise_in_tick:
            raise self.raise_in_tick

    def host_states(self):
        return dict(self.states)


class RecordingSink:
    def __init__(self):
        self.events = []

    def emit(self, event, host=None, **details):
        self.events.append((event, host, details))


class MonitorTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.clock = Clock()
        self.metrics = metrics_mod.Metrics()
        self.coord = FakeCoordinator()
        self.stopping = False
        self.monitor = health.Monitor(
            self.metrics, stuck_after=60, coordinator=self.coord,
            stopping=lambda: self.stopping, clock=self.clock)
        self.inner = RecordingSink()
        self.sink = ev.FanOutEventSink(self.inner)
        self.sink.add(metrics_mod.MetricsEventSink(
            self.metrics, self.monitor, clock=self.clock))
        self.engine = FakeEngine(self.sink)
        self.monitor.watch_listeners(self.engine.drivers.detectors)

    def tick(self):
        """One tick of the service loop, observed by the monitor."""
        runner.tick_once(self.engine, [self.monitor])

    def ready(self):
        return self.monitor.readiness()

    def value(self, name, **labels):
        return self.metrics.registry.get_sample_value(name, labels or None)

    def test_not_ready_before_first_cycle(self):
        ok, body = self.ready()
        self.assertFalse(ok)
        self.assertIn('loop not started yet', body['reasons'])
        self.assertIn('no good cycle yet', body['reasons'])

    def test_ready_after_good_cycle(self):
        self.tick()
        ok, body = self.ready()
        self.assertTrue(ok, body)
        self.assertEqual('leader', body['role'])
        self.assertEqual(1.0, self.value('instanceha_cycles_total',
                                         result='ok'))

    def test_nova_unreachable_not_ready_then_recovers(self):
        self.tick()
        self.engine.fail_snapshot = True
        self.tick()
        ok, body = self.ready()
        self.assertFalse(ok)
        self.assertEqual(['last cycle failed: nova: 503'], body['reasons'])
        self.assertEqual(1.0, self.value('instanceha_cycles_total',
                                         result='error'))
        self.engine.fail_snapshot = False
        self.tick()
        self.assertTrue(self.ready()[0])

    def test_backend_unreachable_not_ready(self):
        self.tick()
        self.coord.connected = False
        ok, body = self.ready()
        self.assertFalse(ok)
        self.assertIn('coordination backend redis://db:6379 unreachable: '
                      'refused', body['reasons'])
        self.assertEqual('follower', body['role'])

    def test_follower_ready_without_cycles(self):
        self.coord.leader = False
        self.engine.tick = lambda: None  # a follower's tick reads nothing
        self.tick()
        ok, body = self.ready()
        self.assertTrue(ok, body)
        self.assertEqual('follower', body['role'])

    def test_stuck_tick(self):
        self.tick()
        self.monitor.tick_started()
        self.clock.now += 61
        ok, body = self.ready()
        self.assertFalse(ok)
        self.assertIn('loop stuck: a tick has been running for 61 s',
                      body['reasons'])

    def test_no_tick_for_too_long(self):
        self.tick()
        self.clock.now += 61
        ok, body = self.ready()
        self.assertIn('loop stuck: no tick for 61 s', body['reasons'])
        self.assertIn('no good cycle for 61 s', body['reasons'])

    def test_shutting_down(self):
        self.tick()
        self.stopping = True
        ok, body = self.ready()
        self.assertEqual((False, ['shutting down']), (ok, body['reasons']))
        self.assertEqual(1.0, self.value('instanceha_shutting_down'))

    def test_tick_error_recorded(self):
        self.engine.raise_in_tick = exceptions.CloudError('boom')
        self.tick()  # the loop goes on; the monitor knows why
        ok, body = self.ready()
        self.assertEqual('CloudError: boom', body['last_tick_error'])
        self.assertIn('last cycle failed: CloudError: boom', body['reasons'])

    def test_hosts_by_state(self):
        self.engine.states = {'h1': S.FENCING, 'h2': S.EVACUATING,
                              'h3': S.EVACUATING}
        self.tick()
        self.assertEqual(2.0, self.value('instanceha_hosts',
                                         state='evacuating'))
        self.assertEqual(0.0, self.value('instanceha_hosts', state='failed'))
        self.engine.states = {}
        self.tick()
        self.assertEqual(0.0, self.value('instanceha_hosts',
                                         state='evacuating'))

    def test_host_gauges_set_only_when_the_states_change(self):
        self.engine.states = {'h1': S.FENCING}
        self.tick()
        with mock.patch.object(self.metrics.hosts, 'labels',
                               wraps=self.metrics.hosts.labels) as labels:
            for _ in range(5):
                self.tick()
            self.assertEqual(0, labels.call_count)
            self.engine.states = {'h1': S.FENCED}
            self.tick()
            self.assertEqual(len(S), labels.call_count)
        self.assertEqual((0.0, 1.0), (
            self.value('instanceha_hosts', state='fencing'),
            self.value('instanceha_hosts', state='fenced')))
        self.assertEqual({'h1': 'fenced'}, self.monitor.host_states)

    def test_plan_and_gate_blocks(self):
        D = plan_mod.Decision
        self.engine.plan = plan_mod.Plan(
            taken_at=datetime.datetime.now(datetime.timezone.utc),
            decisions=(
                plan_mod.HostDecision('h1', D.BLOCKED, (
                    'nova: state down', 'gate threshold: 3 of 4 failed'),
                    gate='threshold'),
                plan_mod.HostDecision('h2', D.BLOCKED, (
                    'gate threshold: 3 of 4 failed',), gate='threshold'),
                # Reason text is never parsed: no gate, nothing counted.
                plan_mod.HostDecision('h6', D.BLOCKED, (
                    'gate lookalike: only text',)),
                plan_mod.HostDecision('h3', D.HEALTHY),
                plan_mod.HostDecision('h4', D.DISPUTED),
                plan_mod.HostDecision('h5', D.ISOLATED)),
            blocked_by=('threshold: 3 of 4 failed',
                        'hook-veto: maintenance window'),
            blocking_gates=('threshold', 'hook-veto'))
        self.tick()
        self.assertEqual(2.0, self.value('instanceha_gate_blocks_total',
                                         gate='threshold'))
        self.assertEqual(1.0, self.value('instanceha_gate_blocks_total',
                                         gate='hook-veto'))
        self.assertIsNone(self.value('instanceha_gate_blocks_total',
                                     gate='lookalike'))
        self.assertEqual(3.0, self.value('instanceha_plan_hosts',
                                         decision='blocked'))
        # Both directions of a disagreement are told apart, and every
        # decision is exported (0 when none).
        self.assertEqual(1.0, self.value('instanceha_plan_hosts',
                                         decision='disputed'))
        self.assertEqual(1.0, self.value('instanceha_plan_hosts',
                                         decision='isolated'))
        self.assertEqual(0.0, self.value('instanceha_plan_hosts',
                                         decision='unknown'))
        # The same plan seen again (no new cycle) is not counted twice.
        self.tick()
        self.assertEqual(2.0, self.value('instanceha_gate_blocks_total',
                                         gate='threshold'))

    def test_gate_labels_are_bounded(self):
        labels = {self.metrics.gate_label('g%d' % i) for i in range(100)}
        self.assertEqual(metrics_mod._MAX_GATES + 1, len(labels))
        self.assertIn('other', labels)

    def test_fencing_and_evacuation_from_events(self):
        emit = self.sink.emit
        emit(ev.HOST_STATE, 'h1', old='suspect', new='fencing')
        self.clock.now += 4
        emit(ev.HOST_STATE, 'h1', old='fencing', new='fenced')
        emit(ev.HOST_STATE, 'h2', old='suspect', new='fencing')
        emit(ev.HOST_STATE, 'h2', old='fencing', new='fence_failed')
        emit(ev.EVACUATE_REQUESTED, 'h1', server='s1', target=None,
             attempt=1)
        emit(ev.EVACUATE_REQUESTED, 'h1', server='s2', target=None,
             attempt=1)
        self.clock.now += 10
        emit(ev.EVACUATE_DONE, 'h1', server='s1', dest='h3', status='done')
        emit(ev.EVACUATE_FAILED, 'h1', server='s2', attempt=1, dest='h3',
             reason='x')
        emit(ev.EVACUATE_GAVE_UP, 'h1', server='s2', attempts=5, reason='x')
        emit(ev.EVACUATE_UNANSWERED, 'h1', server='s3', reason='503')
        emit(ev.STEP_ERROR, 'h1', state='evacuating', reason='x')
        emit(ev.STEP_ERROR, 'h1', state='bogus', reason='x')
        emit(ev.LEADER)
        v = self.value
        self.assertEqual(1.0, v('instanceha_fence_duration_seconds_count',
                                result='success'))
        self.assertEqual(4.0, v('instanceha_fence_duration_seconds_sum',
                                result='success'))
        self.assertEqual(1.0, v('instanceha_fence_duration_seconds_count',
                                result='failure'))
        self.assertEqual(2.0, v('instanceha_evacuations_total',
                                result='requested'))
        self.assertEqual(1.0, v('instanceha_evacuations_total',
                                result='gave_up'))
        self.assertEqual(1.0, v('instanceha_evacuations_total',
                                result='unanswered'))
        self.assertEqual(10.0, v('instanceha_evacuation_duration_seconds_sum',
                                 result='done'))
        self.assertEqual(1.0, v('instanceha_step_errors_total',
                                state='other'))
        self.assertEqual(1.0, v('instanceha_leadership_changes_total',
                                change='gained'))
        # Events still reach the log sink, unchanged.
        self.assertEqual(13, len(self.inner.events))
        self.assertEqual((ev.EVACUATE_DONE, 'h1', {'server': 's1',
                                                   'dest': 'h3',
                                                   'status': 'done'}),
                         self.inner.events[6])

    def test_no_host_or_instance_label(self):
        self.sink.emit(ev.HOST_STATE, 'compute-42', old='suspect',
                       new='fencing')
        self.sink.emit(ev.EVACUATE_REQUESTED, 'compute-42', server='uuid-1')
        text = self.metrics.render().decode()
        self.assertNotIn('compute-42', text)
        self.assertNotIn('uuid-1', text)

    def test_live_gauges(self):
        self.tick()
        self.assertEqual(1.0, self.value('instanceha_leader'))
        self.assertEqual(1.0, self.value('instanceha_ready'))
        self.assertEqual(2.0, self.value('instanceha_coordination_members'))
        self.coord.connected = False
        self.assertEqual(0.0, self.value('instanceha_leader'))
        self.assertEqual(0.0, self.value(
            'instanceha_coordination_backend_up'))

    def test_clock_skew_beyond_the_bound_is_a_reason_and_a_metric(self):
        self.monitor.max_clock_skew = 10
        self.engine.snapshot = types.SimpleNamespace(clock_skew=4.0)
        self.tick()
        self.assertTrue(self.ready()[0])
        self.assertEqual(4.0, self.value(
            'instanceha_nova_clock_skew_seconds'))
        self.engine.snapshot = types.SimpleNamespace(clock_skew=-42.0)
        self.tick()
        ok, body = self.ready()
        self.assertFalse(ok)
        self.assertEqual(["clock: this machine's clock is 42s behind Nova's "
                          "(more than [detection] max_clock_skew = 10s)"],
                         body['reasons'])
        self.assertEqual(-42.0, self.value(
            'instanceha_nova_clock_skew_seconds'))

    def test_listener_counters(self):
        self.assertEqual(7.0, self.value(
            'instanceha_listener_packets_total', listener='heartbeat',
            result='accepted', reason=''))
        self.assertEqual(2.0, self.value(
            'instanceha_listener_packets_total', listener='heartbeat',
            result='rejected', reason='bad_hmac'))
        self.assertEqual(3.0, self.value('instanceha_listener_hosts',
                                         listener='heartbeat'))
        self.assertEqual(5.0, self.value('instanceha_listener_answers_total',
                                         listener='heartbeat'))
        self.assertEqual(1.0, self.value(
            'instanceha_host_link_changes_total', listener='heartbeat',
            state='isolated'))


class ServerTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.metrics = metrics_mod.Metrics()
        self.monitor = health.Monitor(self.metrics, stuck_after=60,
                                      coordinator=FakeCoordinator())
        self.server = health.HealthServer(self.monitor, self.metrics,
                                          listen='127.0.0.1', port=0)
        self.server.start()
        self.addCleanup(self.server.stop)
        self.base = 'http://127.0.0.1:%d' % self.server.port

    def get(self, path):
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return r.status, r.headers['Content-Type'], r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers['Content-Type'], exc.read()

    def test_healthz_503_then_200(self):
        code, ctype, body = self.get('/healthz')
        self.assertEqual((503, 'application/json'), (code, ctype))
        self.assertEqual('not ready', json.loads(body)['status'])
        engine = FakeEngine()
        runner.tick_once(engine, [self.monitor])
        code, _, body = self.get('/healthz')
        self.assertEqual(200, code, body)
        data = json.loads(body)
        self.assertEqual('ready', data['status'])
        self.assertEqual('redis://db:6379', data['coordination']['backend'])

    def test_metrics_parse_as_prometheus_text(self):
        code, ctype, body = self.get('/metrics')
        self.assertEqual(200, code)
        self.assertIn('text/plain', ctype)
        names = {f.name for f in
                 parser.text_string_to_metric_families(body.decode())}
        for name in ('instanceha_cycles', 'instanceha_cycle_duration_seconds',
                     'instanceha_hosts', 'instanceha_fence_duration_seconds',
                     'instanceha_evacuations', 'instanceha_gate_blocks',
                     'instanceha_leader', 'instanceha_ready'):
            self.assertIn(name, names)

    def test_unknown_path(self):
        self.assertEqual(404, self.get('/nope')[0])

    def test_port_in_use_names_the_options(self):
        err = self.assertRaises(
            exceptions.ConfigurationError, health.HealthServer,
            self.monitor, self.metrics, listen='127.0.0.1',
            port=self.server.port)
        self.assertIn('[health] listen = 127.0.0.1, port = %d'
                      % self.server.port, str(err))

    def test_port_in_use_does_not_stop_the_service(self):
        conf = self.useFixture(conf_fixture.ConfFixture(
            health={'port': self.server.port})).conf
        engine = FakeEngine(RecordingSink())
        engine.conf = conf
        service = types.SimpleNamespace(
            engine=engine, stop=threading.Event(),
            events=ev.FanOutEventSink(RecordingSink()), observers=[],
            env=types.SimpleNamespace(coordinator=FakeCoordinator(),
                                      pause=None))
        with fixtures.FakeLogger(level='ERROR') as log:
            stop = health.attach(service)
        self.assertIn('runs on without /healthz', log.output)
        self.assertIn('[health] listen = 127.0.0.1, port = %d'
                      % self.server.port, log.output)
        stop()
        self.assertTrue(service.health.shutting_down())

    def test_a_failing_probe_answers_500_and_keeps_serving(self):
        def broken():
            raise RuntimeError('status unavailable')

        self.monitor.coordinator.status = broken
        self.assertEqual(500, self.get('/healthz')[0])
        del self.monitor.coordinator.status
        self.assertEqual(503, self.get('/healthz')[0])


class ProbeTest(MonitorTest):
    """/livez asks only the loop; /readyz (and /healthz) everything."""

    def serve(self, **kwargs):
        server = health.HealthServer(self.monitor, self.metrics,
                                     listen='127.0.0.1', port=0, **kwargs)
        server.start()
        self.addCleanup(server.stop)
        return server

    def get(self, url, context=None):
        try:
            with urllib.request.urlopen(url, timeout=10,
                                        context=context) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def test_livez_stays_up_while_nova_is_unreachable(self):
        base = 'http://127.0.0.1:%d' % self.serve().port
        self.tick()
        self.engine.fail_snapshot = True
        self.tick()
        self.assertEqual(200, self.get(base + '/livez')[0])
        code, body = self.get(base + '/readyz')
        self.assertEqual(503, code)
        self.assertIn('last cycle failed: nova: 503', body['reasons'])
        self.assertEqual(503, self.get(base + '/healthz')[0])
        # Nor does an unreachable backend make the process dead.
        self.coord.connected = False
        self.assertEqual(200, self.get(base + '/livez')[0])
        # A loop that stopped turning is not alive.
        self.clock.now += 61
        code, body = self.get(base + '/livez')
        self.assertEqual((503, ['loop stuck: no tick for 61 s']),
                         (code, body['reasons']))

    def test_host_state_gauge_only_for_hosts_in_a_workflow(self):
        self.engine.states = {'compute-7': S.EVACUATING}
        self.tick()
        self.assertEqual(1.0, self.value('instanceha_host_recovery_state',
                                         host='compute-7',
                                         state='evacuating'))
        self.assertEqual(1.0, self.value('instanceha_build_info',
                                         version=health._version()))
        self.engine.states = {}
        self.tick()
        self.assertNotIn('compute-7', self.metrics.render().decode())

    def test_tls_with_client_certificates(self):
        from tests.functional.peers import base as peer_base

        tmp = self.useFixture(fixtures.TempDir()).path
        cert, key = peer_base.self_signed_cert(tmp, 'server')
        ccert, ckey = peer_base.self_signed_cert(tmp, 'client')
        conf = self.useFixture(conf_fixture.ConfFixture(health={
            'tls_cert_file': cert, 'tls_key_file': key,
            'tls_client_ca_file': ccert})).conf
        server = self.serve(tls=health.tls_context(conf))
        url = 'https://127.0.0.1:%d/livez' % server.port
        self.tick()
        client = ssl.create_default_context(cafile=cert)
        self.assertRaises(OSError, self.get, url, client)  # no cert
        client.load_cert_chain(ccert, ckey)
        self.assertEqual(200, self.get(url, client)[0])
        # Plain HTTP is not served on an HTTPS port.
        self.assertRaises(OSError, self.get,
                          'http://127.0.0.1:%d/livez' % server.port)

    def test_half_a_tls_setting_is_refused(self):
        conf = self.useFixture(conf_fixture.ConfFixture(
            health={'tls_cert_file': '/etc/x.pem'})).conf
        err = self.assertRaises(exceptions.ConfigurationError,
                                health.tls_context, conf)
        self.assertIn('tls_cert_file and tls_key_file', str(err))
