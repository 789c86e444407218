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

"""One host failure, told on the bus and to a webhook, end to end.

The real instanceha-service process with ``[notifications] drivers = log,
messaging, webhook`` against the real nova, IPMI BMC emulators, a private
rabbitmq-server (read by an oslo.messaging listener) and a webhook
receiver that checks every signature. A host is powered off at its BMC:
its failed / fence / evacuate / enabled notifications arrive on both, one
evacuate start and end per instance, all with one recovery id; ``hosts
history`` then names each instance's source, target and Nova request id.
With both receivers gone the recovery runs its course the same way (the
times of both runs are printed, not asserted: speed is a benchmark's
business).
"""

import json
import os
import time

import fixtures

from instanceha.plugins.notifiers import webhook
from tests.functional.peers import rabbitmq_peer
from tests.functional.peers import webhook_receiver
from tests.functional import test_notifiers
from tests.functional import test_recovery

SECRET = b'e2e-webhook-secret-0123456789ab'

#: What every recovery of a host with instances must tell.
HOST_STORY = ['instanceha.host.failed', 'instanceha.host.fence.start',
              'instanceha.host.fence.end', 'instanceha.host.evacuate.start',
              'instanceha.host.evacuate.end', 'instanceha.host.enabled']


class TestNotifiedRecovery(test_recovery.RecoveryTestBase):

    # The real instanceha-service process, as TestService runs it (its
    # tests are not inherited: they would run twice).
    start_service = test_recovery.TestService.start_service

    def setUp(self):
        super().setUp()
        self.rabbit = self.useFixture(rabbitmq_peer.RabbitPeer())
        self.receiver = self.useFixture(
            webhook_receiver.WebhookReceiver(SECRET))

    def notified_cloud(self):
        secret = os.path.join(self.useFixture(fixtures.TempDir()).path,
                              'webhook.key')
        with open(secret, 'wb') as f:
            f.write(SECRET)
        return self.cloud(options={
            'notifications.drivers': 'log,messaging,webhook',
            'notifications.webhook_urls': self.receiver.url,
            'notifications.webhook_secret_file': secret,
            'notifications.webhook_retries': 1,
            'notifications.webhook_retry_interval': 0.5,
            'oslo_messaging_notifications.transport_url': self.rabbit.url,
            'oslo_messaging_notifications.retry': 1})

    def recover(self, cloud, vms):
        self.start_service(cloud)
        t0 = time.monotonic()
        cloud.power_off('host1')
        # Until Nova notices, the host still looks healthy: wait for the
        # recovery to start before waiting for its end.
        test_recovery.wait_for(lambda: cloud.service('host1').forced_down,
                               test_recovery.RECOVERY_TIMEOUT,
                               'host1 forced down')
        test_recovery.wait_for(lambda: cloud.recovered('host1'),
                               test_recovery.RECOVERY_TIMEOUT,
                               'host1 recovered')
        return time.monotonic() - t0

    def check_story(self, notes, vms, where):
        mine = [n for n in notes
                if (n['payload']['instanceha_object.data'].get('host') ==
                    'host1' or n['payload']['instanceha_object.data'].get(
                        'source_host') == 'host1')]
        types = [n['event_type'] for n in mine]
        for etype in HOST_STORY:
            self.assertIn(etype, types, where)
        for vm in vms:
            for etype in ('instanceha.instance.evacuate.start',
                          'instanceha.instance.evacuate.end'):
                self.assertEqual(1, sum(
                    1 for n in mine if n['event_type'] == etype and
                    n['payload']['instanceha_object.data']['server'] == vm),
                    '%s %s %s' % (where, etype, vm))
        ids = {n['payload']['instanceha_object.data']['recovery_id']
               for n in mine}
        self.assertEqual(1, len(ids), '%s: recovery ids %s' % (where, ids))
        self.assertNotIn(None, ids)
        return ids.pop()

    def test_bus_and_webhook_tell_one_recovery(self):
        self.consumer = self.useFixture(
            test_notifiers.Consumer(self.rabbit.url))
        cloud = self.notified_cloud()
        vms = cloud.boot('host1', 2)
        took = self.recover(cloud, vms)
        test_recovery.wait_for(
            lambda: 'instanceha.host.enabled' in self.receiver.event_types(),
            30, 'host.enabled at the webhook')
        self.consumer.wait_for(1)
        test_recovery.wait_for(
            lambda: 'instanceha.host.enabled' in
            [n['event_type'] for n in self.consumer.received],
            30, 'host.enabled on the bus')
        self.assertEqual([], self.receiver.refused)
        rid = self.check_story(self.receiver.received, vms, 'webhook')
        self.assertEqual(rid, self.check_story(self.consumer.received, vms,
                                               'bus'))
        with open(os.path.join(cloud.dir, 'service.log')) as f:
            log = f.read()
        self.assertIn('recovery_id=%s' % rid, log)
        [rec] = json.loads(test_recovery.manage(
            cloud, 'hosts', 'history', 'host1', '--format', 'json'))
        rows = {i['server']: i for i in rec['instances']}
        self.assertEqual(set(vms), set(rows))
        for vm in vms:
            action, = [a for a in cloud.client.instance_action.list(vm)
                       if a.action == 'evacuate']
            self.assertEqual(('host1', cloud.server(vm).host,
                              action.request_id, 'evacuated'),
                             (rows[vm]['source'], rows[vm]['target'],
                              rows[vm]['request_id'], rows[vm]['result']))
        print('recovery with receivers up: host enabled after %.1f s' % took)

    def test_receivers_gone_recovery_goes_on(self):
        cloud = self.notified_cloud()
        vms = cloud.boot('host1', 2)
        self.receiver.stop()
        self.rabbit.stop()
        took = self.recover(cloud, vms)
        for vm in vms:
            self.assertEqual(1, len(cloud.evacuations(vm)))
            self.assertNotEqual('host1', cloud.server(vm).host)
        with open(os.path.join(cloud.dir, 'service.log')) as f:
            log = f.read()
        self.assertIn('notifier webhook: could not deliver', log)
        self.assertIn('POST %s' % webhook.safe_url(self.receiver.url), log)
        print('recovery with receivers gone: host enabled after %.1f s'
              % took)
