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

"""The notification catalogue and the dispatcher (drivers in memory).

The drivers that talk to real receivers are tested in
tests/functional/test_notifiers.py; here drivers are small classes of the
test's own, so the dispatcher's queueing, counting and isolation can be
pinned down without a network.
"""

import logging
import threading
import time

import fixtures
import testtools

from instanceha.engine import events
from instanceha import exceptions
from instanceha.plugins.notifiers import base
from instanceha.plugins.notifiers import catalogue
from instanceha.plugins.notifiers import dispatcher
from tests import conf_fixture


def engine_event_names() -> list[str]:
    return sorted(v for k, v in vars(events).items()
                  if k.isupper() and isinstance(v, str) and k != 'WARNINGS')


class Collect(base.NotifierDriver):
    def __init__(self, conf=None, name='collect', gate=None, fail=False):
        super().__init__(conf)
        self.name = name
        self.got: list[base.Notification] = []
        self.gate = gate
        self.fail = fail

    def notify(self, notification):
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise exceptions.NotifierError('receiver said no')
        self.got.append(notification)


class TestCatalogue(testtools.TestCase):

    def test_every_engine_event_has_a_named_type(self):
        for name in engine_event_names():
            if name == events.HOST_STATE:
                continue
            self.assertIn(name, catalogue.EVENTS, name)

    def test_every_host_state_has_a_type(self):
        from instanceha.engine import states
        for state in states.HostState:
            self.assertIn(state.value, catalogue.HOST_STATES)

    def test_host_states_map_to_the_documented_types(self):
        def etype(old, new):
            return catalogue.classify(events.HOST_STATE,
                                      {'old': old, 'new': new})[:2]
        self.assertEqual(('instanceha.host.failed', 'WARN'),
                         etype('healthy', 'suspect'))
        self.assertEqual(('instanceha.host.fence.error', 'ERROR'),
                         etype('fencing', 'fence_failed'))
        self.assertEqual(('instanceha.host.enabled', 'INFO'),
                         etype('enabling', 'healthy'))
        self.assertEqual(('instanceha.host.recovery.cancelled', 'INFO'),
                         etype('suspect', 'healthy'))

    def test_a_failed_evacuation_without_retry_is_an_error(self):
        retry = catalogue.classify(events.EVACUATE_FAILED, {'retry_in': 5})
        final = catalogue.classify(events.EVACUATE_FAILED, {})
        self.assertEqual('WARN', retry[1])
        self.assertEqual('ERROR', final[1])

    def test_unknown_event_still_goes_out(self):
        self.assertEqual(('instanceha.brand_new', 'INFO'),
                         catalogue.classify('brand_new', {})[:2])

    def test_instance_payload(self):
        note = catalogue.translate(
            events.EVACUATE_DONE, 'compute-1',
            {'server': 'vm-1', 'dest': 'compute-2', 'status': 'ACTIVE',
             'recovery_id': 'r-1', 'extra': ('a', 'b')},
            publisher_id='instanceha:test')
        self.assertEqual('instanceha.instance.evacuate.end', note.event_type)
        self.assertEqual('InstanceEvacuationPayload',
                         note.payload['instanceha_object.name'])
        self.assertEqual('1.0', note.payload['instanceha_object.version'])
        data = note.payload['instanceha_object.data']
        self.assertEqual({'event': 'evacuate_done', 'recovery_id': 'r-1',
                          'server': 'vm-1', 'source_host': 'compute-1',
                          'target_host': 'compute-2', 'attempt': None,
                          'status': 'ACTIVE', 'reason': None,
                          'retry_in': None, 'request_id': None,
                          'details': {'extra': ['a', 'b']}}, data)
        self.assertEqual('r-1', note.recovery_id)

    def test_host_payload(self):
        note = catalogue.translate(
            events.HOST_STATE, 'compute-1',
            {'old': 'fencing', 'new': 'fenced', 'level': 1},
            publisher_id='instanceha:test')
        data = note.payload['instanceha_object.data']
        self.assertEqual(('compute-1', 'fenced', 'fencing', {'level': 1}),
                         (data['host'], data['state'],
                          data['previous_state'], data['details']))
        self.assertIsNone(note.recovery_id)


class TestDispatcher(testtools.TestCase):

    def dispatch(self, *drivers, size=10):
        disp = dispatcher.Dispatcher(drivers, queue_size=size,
                                     publisher_id='instanceha:test')
        disp.start()
        self.addCleanup(disp.stop, 2)
        return disp

    def test_every_driver_gets_every_event_in_order(self):
        one, two = Collect(name='one'), Collect(name='two')
        disp = self.dispatch(one, two)
        for i in range(5):
            disp.emit(events.SERVER_LOCKED, 'h', server='vm-%d' % i)
        self.assertTrue(disp.flush(5))
        for drv in (one, two):
            self.assertEqual(['vm-%d' % i for i in range(5)],
                             [n.details['server'] for n in drv.got])
        self.assertEqual({'sent': 5, 'failed': 0, 'dropped': 0},
                         disp.counts()['one'])

    def test_a_stuck_driver_drops_and_never_delays_others(self):
        gate = threading.Event()
        stuck, fine = Collect(name='stuck', gate=gate), Collect(name='fine')
        disp = self.dispatch(stuck, fine, size=5)
        logs = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        slowest = 0.0
        for i in range(20):
            began = time.monotonic()
            disp.emit(events.SERVER_LOCKED, 'h', server='vm-%d' % i)
            slowest = max(slowest, time.monotonic() - began)
            # Time for the healthy driver's thread to keep up.
            time.sleep(0.01)
        self.assertLess(slowest, 0.1)
        deadline = time.monotonic() + 5
        while len(fine.got) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(20, len(fine.got))
        # One taken by the stuck thread, five queued: 14 dropped.
        self.assertEqual(14, disp.counts()['stuck']['dropped'])
        # Said once, not 14 times.
        self.assertEqual(1, logs.output.count('queue full'))
        gate.set()
        self.assertTrue(disp.flush(5))
        self.assertEqual(6, len(stuck.got))

    def test_failures_are_counted_and_logged_without_raising(self):
        bad = Collect(name='bad', fail=True)
        disp = self.dispatch(bad)
        logs = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        disp.emit(events.LEADER)
        disp.emit(events.NOT_LEADER)
        self.assertTrue(disp.flush(5))
        self.assertEqual({'sent': 0, 'failed': 2, 'dropped': 0},
                         disp.counts()['bad'])
        self.assertIn('receiver said no', logs.output)

    def test_inline_driver_runs_in_the_callers_thread(self):
        seen = []

        class Inline(Collect):
            inline = True

            def notify(self, notification):
                seen.append(threading.current_thread())

        disp = self.dispatch(Inline(name='inline'))
        disp.emit(events.LEADER)
        self.assertEqual([threading.current_thread()], seen)

    def test_metrics(self):
        from prometheus_client import exposition
        from prometheus_client import registry
        disp = self.dispatch(Collect(name='one'))
        disp.emit(events.LEADER)
        disp.flush(5)
        reg = registry.CollectorRegistry()
        reg.register(disp)
        text = exposition.generate_latest(reg).decode()
        self.assertIn('instanceha_notifications_total{driver="one",'
                      'result="sent"} 1.0', text)


class TestLogDriver(testtools.TestCase):

    def test_default_is_the_event_log_line(self):
        conf = self.useFixture(conf_fixture.ConfFixture()).conf
        disp = dispatcher.from_conf(conf)
        self.assertEqual(['log'], [d.name for d in disp.drivers])
        logs = self.useFixture(fixtures.FakeLogger(
            name='instanceha.events', level=logging.INFO))
        disp.start()
        self.addCleanup(disp.stop)
        disp.emit(events.EVACUATE_DONE, 'compute-1', server='vm-1',
                  dest='compute-2', status='ACTIVE')
        self.assertEqual('evacuate_done compute-1 dest=compute-2 '
                         'server=vm-1 status=ACTIVE\n', logs.output)


class TestWiring(testtools.TestCase):
    """The service's first event reader is the notifier dispatcher."""

    def test_build_puts_the_configured_notifiers_first(self):
        from instanceha.daemon import service as service_mod
        from tests.unit import test_recovery_fakes as fakes

        rig = fakes.Rig()
        service = service_mod.build(rig.conf, rig.drivers, cloud=rig.cloud,
                                    fencer=rig.fencer,
                                    coordinator=rig.coordinator,
                                    clock=rig.clock)
        self.addCleanup(service.executor.shutdown, wait=False)
        self.assertIsInstance(service.notifications, dispatcher.Dispatcher)
        self.assertEqual([service.notifications], service.events.sinks)
        self.assertEqual(['log'], [d.name for d in
                                   service.notifications.drivers])
        logs = self.useFixture(fixtures.FakeLogger(
            name='instanceha.events', level=logging.INFO))
        service.env.events.emit(events.LEADER)
        self.assertEqual('leader\n', logs.output)


class TestCatalogueDoc(testtools.TestCase):
    """doc/notifications.md lists every event type the catalogue has."""

    def test_every_event_type_is_documented(self):
        import os
        path = os.path.join(os.path.dirname(__file__), '..', '..', 'doc',
                            'notifications.md')
        with open(path) as f:
            text = f.read()
        types = {t for t, _p in catalogue.HOST_STATES.values()}
        types |= {t for t, _p, _s in catalogue.EVENTS.values()}
        types.add(catalogue.CANCELLED[0])
        missing = sorted(t for t in types if '`%s`' % t not in text)
        self.assertEqual([], missing)
        for schema in catalogue.SCHEMAS:
            self.assertIn(schema.name, text)


class TestLogAlwaysRuns(testtools.TestCase):

    def test_a_list_without_log_still_logs(self):
        conf = self.useFixture(conf_fixture.ConfFixture(notifications={
            'drivers': ['kubernetes'],
            'kubernetes_api_url': 'http://127.0.0.1:1',
            'kubernetes_namespace': 'ns',
            'kubernetes_object_name': 'obj'})).conf
        self.useFixture(fixtures.EnvironmentVariable(
            'KUBERNETES_SERVICE_HOST'))
        disp = dispatcher.from_conf(conf)
        self.assertEqual(['log', 'kubernetes'],
                         [d.name for d in disp.drivers])


class TestMessagingExtra(testtools.TestCase):
    """oslo.messaging is an extra: without it the driver names it."""

    def test_missing_oslo_messaging_names_the_extra(self):
        from unittest import mock

        from instanceha.plugins.notifiers import messaging

        conf = self.useFixture(conf_fixture.ConfFixture()).conf
        with mock.patch.dict('sys.modules', {'oslo_messaging': None}):
            exc = self.assertRaises(exceptions.ConfigurationError,
                                    messaging.MessagingNotifier(conf)
                                    .validate)
        self.assertIn('pip install "instanceha[messaging]"', str(exc))


class TestKubernetesAdapter(testtools.TestCase):
    """One in-cluster setup for the BMH fencer and the notifier."""

    def test_in_cluster_api_url(self):
        from instanceha.adapters import kubernetes as kube

        for host, url in (('10.0.0.1', 'https://10.0.0.1:6443'),
                          ('fd00::1', 'https://[fd00::1]:6443')):
            self.useFixture(fixtures.EnvironmentVariable(
                'KUBERNETES_SERVICE_HOST', host))
            self.useFixture(fixtures.EnvironmentVariable(
                'KUBERNETES_SERVICE_PORT', '6443'))
            self.assertTrue(kube.in_cluster())
            self.assertEqual(url, kube.in_cluster_api())
