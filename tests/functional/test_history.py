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

"""hosts history / instances history against the real nova.

A host is killed, marked with a recovery marker and its instances
evacuated through the real API (as the service does); the commands, run
as separate processes with only the configuration, must find each
instance's source, target and the request id Nova recorded for the
evacuation.
"""

import datetime
import json
import os
import subprocess
import sys

import testtools

from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import states
from tests.functional import peers
from tests.functional import test_nova_cloud as helpers
from tests.functional import test_plan

RID = '3b2f6c1e-8d4a-4e7b-9c0d-1a2b3c4d5e6f'


class TestHistory(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.peer = self.useFixture(peers.NovaPeer(hosts=3))
        self.nova = self.peer.client()
        self.servers = self.peer.create_servers(2, host='host1', name='web',
                                                client=self.nova)
        self.cloud = helpers.make_cloud(self, self.peer)
        test_plan.wait_for_heartbeats(self.cloud)

    def recover_host1(self):
        """What the service does, through the same Nova port."""
        self.peer.control.kill('host1')
        self.peer.wait_for_service('host1', 'down', client=self.nova)
        now = datetime.datetime.now(datetime.timezone.utc)
        mark = marker.Marker(state=states.HostState.EVACUATING, when=now,
                             fenced_at=now, recovery=RID)
        svc = self.cloud.snapshot().service('host1')
        self.cloud.update_service(svc, status=model.DISABLED,
                                  forced_down=True,
                                  disabled_reason=mark.render())
        for srv in self.servers:
            self.cloud.evacuate(srv.id)
        return {srv.id: self.peer.wait_for_evacuation(
            srv.id, client=self.nova)[0] for srv in self.servers}

    def cli(self, *args):
        path = helpers.write_conf(self, helpers.conf_text(self.peer))
        env = dict(os.environ, no_proxy='127.0.0.1', NO_PROXY='127.0.0.1')
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage'] + list(args) +
            ['--config-file', path], capture_output=True, text=True,
            timeout=120, env=env)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        return proc.stdout

    def evacuate_request_id(self, server_id):
        actions = [a for a in self.nova.instance_action.list(server_id)
                   if a.action == 'evacuate']
        self.assertEqual(1, len(actions))
        return actions[0].request_id

    def test_host_history_names_source_target_and_request_id(self):
        migrations = self.recover_host1()
        [rec] = json.loads(self.cli('hosts', 'history', 'host1',
                                    '--format', 'json'))
        self.assertEqual((RID, 'evacuating', 'host1'),
                         (rec['recovery_id'], rec['state'], rec['host']))
        got = {i['server']: i for i in rec['instances']}
        self.assertEqual({s.id for s in self.servers}, set(got))
        for srv in self.servers:
            row = got[srv.id]
            self.assertEqual('host1', row['source'])
            self.assertEqual(migrations[srv.id].dest_compute,
                             row['target'])
            self.assertIn(row['target'], ('host2', 'host3'))
            self.assertEqual(self.evacuate_request_id(srv.id),
                             row['request_id'])
            self.assertTrue(row['request_id'].startswith('req-'))
            self.assertEqual((1, 'evacuated'),
                             (row['attempts'], row['result']))
        table = self.cli('hosts', 'history', 'host1')
        self.assertIn('recovery %s of host1: evacuating' % RID, table)
        for srv in self.servers:
            self.assertIn(self.evacuate_request_id(srv.id), table)
        future = (datetime.datetime.now(datetime.timezone.utc) +
                  datetime.timedelta(days=1)).strftime('%Y-%m-%d')
        # Only the running recovery's marker is left after --since.
        [later] = json.loads(self.cli('hosts', 'history', 'host1',
                                      '--since', future, '--format',
                                      'json'))
        self.assertEqual([], later['instances'])

    def test_instance_history(self):
        migrations = self.recover_host1()
        srv = self.servers[0]
        [move] = json.loads(self.cli('instances', 'history', srv.id,
                                     '--format', 'json'))
        self.assertEqual(('evacuation', 'host1',
                          migrations[srv.id].dest_compute,
                          self.evacuate_request_id(srv.id), 'evacuated'),
                         (move['kind'], move['source'], move['target'],
                          move['request_id'], move['result']))
        self.assertIsNotNone(move['user'])
        table = self.cli('instances', 'history', srv.id)
        self.assertIn('evacuation', table)
        self.assertIn(self.evacuate_request_id(srv.id), table)

    def test_a_host_never_recovered(self):
        self.assertEqual([], json.loads(self.cli(
            'hosts', 'history', 'host2', '--format', 'json')))
        self.assertIn("no recovery or emptying of host2", self.cli(
            'hosts', 'history', 'host2'))
