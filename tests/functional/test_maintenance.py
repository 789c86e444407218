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

"""Planned maintenance (R18) against a real nova: live migration away and
back, no fencing. Nova's fake virt driver live-migrates for real as far
as Nova is concerned (scheduler, conductor, both computes, placement,
migration records); only the hypervisor copy is faked.
"""

import datetime
import json
import os
import subprocess
import sys

import testtools

from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha import exceptions
from instanceha.ops import maintenance
from tests.functional import peers
from tests.functional import test_nova_cloud as helpers
from tests.functional import test_plan

D = plan_mod.Decision
NOW = datetime.datetime(2026, 11, 29, 22, 0, tzinfo=datetime.timezone.utc)


class TestMaintenance(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.peer = self.useFixture(peers.NovaPeer(hosts=3))
        self.nova = self.peer.client()
        self.moving = self.peer.create_servers(2, host='host1', name='web',
                                               client=self.nova)
        self.off = self.peer.create_servers(1, host='host1', name='off',
                                            client=self.nova)[0]
        self.nova.servers.stop(self.off.id)
        self.peer.wait_for_server(self.off.id, 'SHUTOFF', client=self.nova)
        self.peer.create_servers(1, host='host2', name='other',
                                 client=self.nova)
        self.cloud = helpers.make_cloud(self, self.peer)
        test_plan.wait_for_heartbeats(self.cloud)
        self.lines = []
        self.maint = maintenance.Maintenance(self.cloud,
                                             out=self.lines.append, poll=0.2)

    def hosts_of(self):
        snap = self.cloud.snapshot()
        return {s.name: s.host for s in snap.servers}, snap

    def test_start_status_down_end_return(self):
        out = self.maint.start('host1', NOW, note='ticket 42', wait=True,
                               timeout=60)
        text = '\n'.join(self.lines)
        self.assertEqual({'web-0': 'moved', 'web-1': 'moved',
                          'off-0': 'left'},
                         {o.server.name: o.result for o in out}, text)
        where, snap = self.hosts_of()
        self.assertNotIn(where['web-0'], ('host1', None))
        self.assertNotIn(where['web-1'], ('host1', None))
        self.assertEqual('host1', where['off-0'])
        svc = snap.service('host1')
        self.assertEqual(model.DISABLED, svc.status)
        self.assertEqual(reasons.Maintenance(NOW, 'ticket 42'),
                         reasons.read(svc.disabled_reason).maintenance)
        self.assertIsNone(reasons.read(svc.disabled_reason).marker)
        for server in snap.servers:
            if server.name.startswith('web'):
                self.assertEqual('host1',
                                 server.metadata[maintenance.HOME_KEY])
                self.assertEqual('ACTIVE', server.status)
        self.assertIn('[1/2]', text)
        live = self.cloud.migrations(source_host='host1',
                                     migration_type='live-migration')
        self.assertEqual(2, len(live))
        self.assertEqual({'completed'}, {m.status for m in live})

        status = self.maint.status('host1')
        self.assertTrue(status['maintenance'])
        self.assertEqual(['off-0'], [s['name'] for s in status['on_host']])
        self.assertEqual(['web-0', 'web-1'],
                         [s['name'] for s in status['away']])

        # In maintenance the host is out of scope: even down, the plan
        # neither fences nor evacuates it.
        _snap, plan = test_plan.plan_once(self.cloud)
        self.assertEqual(D.IGNORED, plan.decision('host1').decision)
        self.peer.control.kill('host1')
        self.peer.wait_for_service('host1', 'down')
        _snap, plan = test_plan.plan_once(self.cloud)
        d = plan.decision('host1')
        self.assertEqual(D.IGNORED, d.decision, plan.lines())
        self.assertIn('disabled by an operator (reason: '
                      'instanceha-maintenance 2026-11-29T22:00:00Z ticket '
                      '42)', d.reasons)
        self.assertEqual([], plan.to_recover())

        # end --return refuses while the host is down
        e = self.assertRaises(exceptions.InstanceHAError, self.maint.end,
                              'host1', back=True)
        self.assertIn('host host1 is down', str(e))
        self.peer.control.revive('host1')
        self.peer.wait_for_service('host1', 'up')

        out = self.maint.end('host1', back=True, wait=True, timeout=60)
        self.assertEqual({'web-0': 'moved', 'web-1': 'moved'},
                         {o.server.name: o.result for o in out},
                         '\n'.join(self.lines))
        where, snap = self.hosts_of()
        self.assertEqual('host1', where['web-0'])
        self.assertEqual('host1', where['web-1'])
        self.assertEqual(model.ENABLED, snap.service('host1').status)
        for server in snap.servers:
            self.assertNotIn(maintenance.HOME_KEY, server.metadata)
        e = self.assertRaises(exceptions.InstanceHAError, self.maint.end,
                              'host1')
        self.assertIn('host host1 is not in maintenance', str(e))

    def test_refuses_down_and_recovering_hosts(self):
        snap = self.cloud.snapshot()
        marker = marker_mod.Marker(states.HostState.FENCED, NOW).render()
        self.cloud.update_service(snap.service('host3'),
                                  status=model.DISABLED,
                                  disabled_reason=marker)
        e = self.assertRaises(exceptions.InstanceHAError, self.maint.start,
                              'host3', NOW)
        self.assertIn('host host3 is being recovered by instanceha '
                      '(marker fenced', str(e))

        self.peer.control.kill('host2')
        self.peer.wait_for_service('host2', 'down')
        path = helpers.write_conf(self, helpers.conf_text(self.peer))
        env = dict(os.environ, no_proxy='127.0.0.1', NO_PROXY='127.0.0.1')
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', 'maintenance',
             'start', 'host2', '--wait', '--config-file', path],
            capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(1, proc.returncode, proc.stderr)
        self.assertIn('host host2 is down (Nova state down): its instances '
                      'cannot be live-migrated; a down host needs the '
                      'failure path', proc.stderr)
        svc = self.cloud.snapshot().service('host2')
        self.assertEqual(model.ENABLED, svc.status)

        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', 'maintenance',
             'status', 'host1', '--json', '--config-file', path],
            capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(0, proc.returncode, proc.stderr)
        row = json.loads(proc.stdout)
        self.assertFalse(row['maintenance'])
        self.assertEqual(['off-0', 'web-0', 'web-1'],
                         [s['name'] for s in row['on_host']])

    def test_failed_migration_names_server_and_novas_error(self):
        # Nowhere to go: the others are disabled, the scheduler finds no
        # host after nova accepted the request (202).
        snap = self.cloud.snapshot()
        for host in ('host2', 'host3'):
            self.cloud.update_service(snap.service(host),
                                      status=model.DISABLED,
                                      disabled_reason='spare')
        out = self.maint.start('host1', NOW, wait=True, timeout=60,
                               concurrency=1)
        failed = {o.server.name: o.detail for o in out
                  if o.result == 'failed'}
        self.assertEqual({'web-0', 'web-1'}, set(failed),
                         '\n'.join(self.lines))
        detail = failed['web-0']
        self.assertIn('still on host1, ACTIVE', detail)
        self.assertIn('No valid host', detail)
        self.assertIn('instance action request id req-', detail)
        self.assertIn('conductor_live_migrate_instance: No valid host', detail)
        self.assertIn('status error', detail)
        self.assertIn('web-0 (%s): failed' % self.moving[0].id,
                      '\n'.join(self.lines))
        where, _snap = self.hosts_of()
        self.assertEqual('host1', where['web-0'])

    def test_shutoff_cold_migrated_on_request(self):
        out = self.maint.start('host1', NOW, wait=True, timeout=60,
                               shutoff='cold')
        self.assertEqual({'web-0': 'moved', 'web-1': 'moved',
                          'off-0': 'moved'},
                         {o.server.name: o.result for o in out},
                         '\n'.join(self.lines))
        server = self.cloud.get_server(self.off.id)
        self.assertEqual('SHUTOFF', server.status)
        self.assertNotEqual('host1', server.host)
        self.assertEqual([], self.maint.status('host1')['on_host'])

    def cli(self, *args):
        path = helpers.write_conf(self, helpers.conf_text(self.peer))
        env = dict(os.environ, no_proxy='127.0.0.1', NO_PROXY='127.0.0.1')
        return subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', 'maintenance']
            + list(args) + ['--config-file', path],
            capture_output=True, text=True, timeout=120, env=env)

    def test_cli_start_status_end(self):
        proc = self.cli('start', 'host1', '--wait', '--reason', 'CHG-7')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('summary: 1 left, 2 moved', proc.stdout)
        self.assertIn('off-0 (%s): left: SHUTOFF' % self.off.id,
                      proc.stdout)
        proc = self.cli('status', 'host1')
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertRegex(proc.stdout, r'host host1: in maintenance since '
                         r'\S+Z \(CHG-7\)')
        self.assertIn('instances away from home: 2', proc.stdout)
        proc = self.cli('end', 'host1', '--return', '--wait')
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        self.assertIn('summary: 2 moved', proc.stdout)
        where, _snap = self.hosts_of()
        self.assertEqual({'host1'}, {where['web-0'], where['web-1']})
