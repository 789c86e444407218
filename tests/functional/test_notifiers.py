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

"""Notifier drivers against real receivers on 127.0.0.1.

messaging: a private rabbitmq-server node and an oslo.messaging
notification listener (a real consumer). webhook: an HTTP(S) server that
checks signatures as a receiver must. kubernetes: the Kubernetes API
stand-in of the bmh fencing tests (no real API server can run here),
which now also takes core/v1 Events.
"""

import os
import threading
import time

import fixtures
from oslo_config import cfg
import testtools

from instanceha.engine import events
from instanceha import exceptions
from instanceha.plugins.notifiers import dispatcher
from tests import conf_fixture
from tests.functional.peers import base as peers_base
from tests.functional.peers import rabbitmq_peer
from tests.functional.peers import webhook_receiver
from tests.functional import test_fencing_bmh

SECRET = b'webhook-secret-0123456789abcdef'
RID = 'f0c1a2b3-0000-4000-8000-00000000abcd'


def make_conf(**opts) -> cfg.ConfigOpts:
    """The shared test configuration; ``group__name=value`` overrides."""
    return conf_fixture.make_conf(**{
        key.replace('__', '.', 1): value for key, value in opts.items()})


def recovery_story(sink, host='compute-1'):
    """The events of one host recovery with one instance."""
    sink.emit(events.HOST_STATE, host, old='healthy', new='suspect',
              reason='nova: down', recovery_id=RID)
    sink.emit(events.HOST_STATE, host, old='suspect', new='fencing',
              recovery_id=RID)
    sink.emit(events.HOST_STATE, host, old='fencing', new='fenced', level=1,
              recovery_id=RID)
    sink.emit(events.EVACUATE_REQUESTED, host, server='vm-1', target=None,
              attempt=1, recovery_id=RID)
    sink.emit(events.EVACUATE_DONE, host, server='vm-1', dest='compute-2',
              status='ACTIVE', recovery_id=RID)
    sink.emit(events.HOST_STATE, host, old='enabling', new='healthy',
              recovery_id=RID)


STORY_TYPES = ['instanceha.host.failed', 'instanceha.host.fence.start',
               'instanceha.host.fence.end',
               'instanceha.instance.evacuate.start',
               'instanceha.instance.evacuate.end', 'instanceha.host.enabled']


class Base(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def start(self, conf) -> dispatcher.Dispatcher:
        disp = dispatcher.from_conf(conf)
        disp.start()
        self.addCleanup(disp.stop, 2)
        return disp


class TestWebhook(Base):

    def setUp(self):
        super().setUp()
        self.secret_file = os.path.join(self.tmp, 'secret')
        with open(self.secret_file, 'wb') as f:
            f.write(SECRET + b'\n')

    def conf(self, urls, **opts):
        opts = dict(dict(
            notifications__drivers=['webhook'],
            notifications__webhook_urls=urls,
            notifications__webhook_secret_file=self.secret_file,
            notifications__webhook_retry_interval=0.05), **opts)
        return make_conf(**opts)

    def test_signed_posts_reach_every_url(self):
        one = self.useFixture(webhook_receiver.WebhookReceiver(SECRET))
        two = self.useFixture(webhook_receiver.WebhookReceiver(SECRET))
        disp = self.start(self.conf([one.url, two.url]))
        recovery_story(disp)
        self.assertTrue(disp.flush(10))
        for rcv in (one, two):
            self.assertEqual(STORY_TYPES, rcv.event_types())
            self.assertEqual([], rcv.refused)
            self.assertEqual({RID}, {n['payload']['instanceha_object.data']
                                     ['recovery_id'] for n in rcv.received})
        done = one.received[4]
        self.assertEqual('INFO', done['priority'])
        data = done['payload']['instanceha_object.data']
        self.assertEqual(('vm-1', 'compute-1', 'compute-2', 'ACTIVE'),
                         (data['server'], data['source_host'],
                          data['target_host'], data['status']))
        # The log driver always runs beside the configured ones.
        self.assertEqual({'sent': 6, 'failed': 0, 'dropped': 0},
                         disp.counts()['webhook'])

    def test_wrong_secret_is_refused_by_the_receiver(self):
        rcv = self.useFixture(webhook_receiver.WebhookReceiver(
            b'another-secret-0123456789abcdef'))
        disp = self.start(self.conf([rcv.url],
                                    notifications__webhook_retries=0))
        recovery_story(disp)
        self.assertTrue(disp.flush(10))
        self.assertEqual([], rcv.received)
        self.assertEqual(['bad signature'] * 6, rcv.refused)
        self.assertEqual(6, disp.counts()['webhook']['failed'])

    def test_server_errors_are_retried(self):
        rcv = self.useFixture(webhook_receiver.WebhookReceiver(SECRET))
        rcv.fail_next = 2
        disp = self.start(self.conf([rcv.url]))
        disp.emit(events.HOST_STATE, 'compute-1', old='healthy',
                  new='suspect', recovery_id=RID)
        self.assertTrue(disp.flush(10))
        self.assertEqual(['instanceha.host.failed'], rcv.event_types())
        self.assertEqual(1, disp.counts()['webhook']['sent'])

    def test_tls_is_verified(self):
        rcv = self.useFixture(webhook_receiver.WebhookReceiver(SECRET,
                                                               tls=True))
        disp = self.start(self.conf([rcv.url],
                                    notifications__webhook_retries=0))
        disp.emit(events.LEADER)
        self.assertTrue(disp.flush(10))
        self.assertEqual([], rcv.received)
        self.assertEqual(1, disp.counts()['webhook']['failed'])
        disp = self.start(self.conf([rcv.url],
                                    notifications__webhook_ca_file=rcv.cert))
        disp.emit(events.LEADER)
        self.assertTrue(disp.flush(10))
        self.assertEqual(['instanceha.service.leader.gained'],
                         rcv.event_types())

    def test_dead_receiver_never_blocks_the_emitter(self):
        rcv = self.useFixture(webhook_receiver.WebhookReceiver(SECRET,
                                                               delay=1.0))
        conf = self.conf([rcv.url], notifications__queue_size=3)
        disp = self.start(conf)
        began = time.monotonic()
        for i in range(50):
            disp.emit(events.SERVER_LOCKED, 'compute-1', server='vm-%d' % i)
        elapsed = time.monotonic() - began
        self.assertLess(elapsed, 0.5)
        counts = disp.counts()['webhook']
        # One in flight, three queued, the rest dropped and counted.
        self.assertGreaterEqual(counts['dropped'], 45)
        rcv.stop()

    def test_bad_settings_name_the_option(self):
        exc = self.assertRaises(exceptions.ConfigurationError,
                                dispatcher.from_conf,
                                self.conf(['ftp://example.com/x']))
        self.assertIn('webhook_urls', str(exc))
        short = os.path.join(self.tmp, 'short')
        with open(short, 'w') as f:
            f.write('tiny\n')
        exc = self.assertRaises(
            exceptions.ConfigurationError, dispatcher.from_conf,
            self.conf(['http://127.0.0.1:1/'],
                      notifications__webhook_secret_file=short))
        self.assertIn('webhook_secret_file', str(exc))
        self.assertNotIn('tiny', str(exc))


class Consumer(fixtures.Fixture):
    """An oslo.messaging notification listener collecting what arrives."""

    def __init__(self, url, topic='notifications'):
        super().__init__()
        self.url = url
        self.topic = topic
        self.received = []
        self.cond = threading.Condition()

    def _setUp(self):
        import oslo_messaging
        conf = cfg.ConfigOpts()
        conf([], project='consumer', default_config_files=[])
        transport = oslo_messaging.get_notification_transport(
            conf, url=self.url)
        consumer = self

        class Endpoint:
            def _take(self, priority, ctxt, publisher_id, event_type,
                      payload, metadata):
                with consumer.cond:
                    consumer.received.append({
                        'priority': priority, 'publisher_id': publisher_id,
                        'event_type': event_type, 'payload': payload})
                    consumer.cond.notify_all()

            def info(self, *args):
                self._take('INFO', *args)

            def warn(self, *args):
                self._take('WARN', *args)

            def error(self, *args):
                self._take('ERROR', *args)

        self.listener = oslo_messaging.get_notification_listener(
            transport, [oslo_messaging.Target(topic=self.topic)],
            [Endpoint()], executor='threading', pool='test')
        self.listener.start()
        self.addCleanup(transport.cleanup)
        self.addCleanup(self.listener.wait)
        self.addCleanup(self.listener.stop)

    def wait_for(self, count, timeout=20):
        with self.cond:
            self.cond.wait_for(lambda: len(self.received) >= count, timeout)
            return list(self.received)


class TestMessaging(Base):

    def setUp(self):
        super().setUp()
        self.rabbit = self.useFixture(rabbitmq_peer.RabbitPeer())

    def conf(self, url=None, **opts):
        import oslo_messaging
        conf = make_conf(notifications__drivers=['messaging'], **opts)
        # oslo.messaging registers its options when first asked.
        oslo_messaging.get_notification_transport(conf, url=self.rabbit.url)
        conf.set_override('transport_url', url or self.rabbit.url,
                          group='oslo_messaging_notifications')
        conf.set_override('retry', 1, group='oslo_messaging_notifications')
        return conf

    def test_versioned_notifications_on_the_bus(self):
        conf = self.conf()
        consumer = self.useFixture(Consumer(self.rabbit.url))
        disp = self.start(conf)
        recovery_story(disp)
        disp.emit(events.EVACUATE_GAVE_UP, 'compute-1', server='vm-2',
                  attempts=3, reason='no valid host', recovery_id=RID)
        got = consumer.wait_for(7)
        self.assertEqual(STORY_TYPES + ['instanceha.instance.evacuate.error'],
                         [n['event_type'] for n in got])
        self.assertEqual(['WARN', 'INFO', 'INFO', 'INFO', 'INFO', 'INFO',
                          'ERROR'], [n['priority'] for n in got])
        for n in got:
            self.assertTrue(n['publisher_id'].startswith('instanceha:'))
            self.assertEqual('1.0', n['payload']['instanceha_object.version'])
            self.assertEqual(RID, n['payload']['instanceha_object.data']
                             ['recovery_id'])
        self.assertEqual('InstanceEvacuationPayload',
                         got[3]['payload']['instanceha_object.name'])

    def test_broker_away_never_blocks_the_emitter(self):
        conf = self.conf(notifications__queue_size=5)
        self.rabbit.stop()
        disp = self.start(conf)
        began = time.monotonic()
        for i in range(40):
            disp.emit(events.SERVER_LOCKED, 'compute-1', server='vm-%d' % i)
        self.assertLess(time.monotonic() - began, 0.5)
        self.assertGreater(disp.counts()['messaging']['dropped'], 30)

    def test_bad_transport_url_names_the_option(self):
        conf = self.conf(url='nosuch://u:s3cret@h/')
        exc = self.assertRaises(exceptions.ConfigurationError,
                                dispatcher.from_conf, conf)
        self.assertIn('transport_url', str(exc))
        self.assertNotIn('s3cret', str(exc))


class TestKubernetes(Base):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.EnvironmentVariable(
            'KUBERNETES_SERVICE_HOST'))
        self.api = self.useFixture(test_fencing_bmh.KubeApiStandIn([]))
        self.token_file = os.path.join(self.tmp, 'token')
        with open(self.token_file, 'w') as f:
            f.write(test_fencing_bmh.TOKEN + '\n')

    def conf(self, **opts):
        base = dict(notifications__drivers=['kubernetes'],
                    notifications__kubernetes_api_url=self.api.url,
                    notifications__kubernetes_token_file=self.token_file,
                    notifications__kubernetes_namespace='openstack',
                    notifications__kubernetes_object_kind='InstanceHa',
                    notifications__kubernetes_object_api_version=(
                        'instanceha.openstack.org/v1beta1'),
                    notifications__kubernetes_object_name='instanceha-0')
        base.update(opts)
        return make_conf(**base)

    def test_events_on_the_object(self):
        disp = self.start(self.conf())
        recovery_story(disp)
        self.assertTrue(disp.flush(10))
        created = self.api.events
        self.assertEqual(['HostFailed', 'HostFenceStart', 'HostFenceEnd',
                          'InstanceEvacuateStart', 'InstanceEvacuateEnd',
                          'HostEnabled'], [e['reason'] for e in created])
        first = created[0]
        self.assertEqual('Warning', first['type'])
        self.assertEqual('Normal', created[1]['type'])
        self.assertEqual({'apiVersion': 'instanceha.openstack.org/v1beta1',
                          'kind': 'InstanceHa', 'name': 'instanceha-0',
                          'namespace': 'openstack'},
                         first['involvedObject'])
        self.assertEqual(RID, first['metadata']['annotations']
                         ['instanceha.openstack.org/recovery-id'])
        self.assertIn('host_state compute-1', first['message'])
        self.assertEqual(6, disp.counts()['kubernetes']['sent'])

    def test_a_read_only_token_is_counted_as_failed(self):
        with open(self.token_file, 'w') as f:
            f.write(test_fencing_bmh.READER)
        disp = self.start(self.conf())
        disp.emit(events.LEADER)
        self.assertTrue(disp.flush(10))
        self.assertEqual([], self.api.events)
        self.assertEqual(1, disp.counts()['kubernetes']['failed'])

    def test_missing_object_names_the_option(self):
        exc = self.assertRaises(
            exceptions.ConfigurationError, dispatcher.from_conf,
            self.conf(notifications__kubernetes_object_name=None))
        self.assertIn('kubernetes_object_name', str(exc))


class TestRabbitPeer(testtools.TestCase):
    """The fixture leaves nothing behind."""

    def test_stop_releases_the_port(self):
        peer = rabbitmq_peer.RabbitPeer()
        peer.setUp()
        port = peer.port
        self.assertTrue(peers_base.port_open(port))
        peer.cleanUp()
        self.assertFalse(peers_base.port_open(port))
