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

"""Detect and decide against a real nova: the plan, end to end."""

import datetime
import json
import os
import subprocess
import sys
import time

import testtools

from instanceha.engine import decide
from instanceha.engine import plan as plan_mod
from instanceha.plugins import loader
from tests.functional import peers
from tests.functional import test_nova_cloud as helpers

D = plan_mod.Decision


def plan_once(cloud):
    drivers = loader.load_deciders(cloud.conf)
    snap = cloud.snapshot(**decide.snapshot_needs(drivers))
    return snap, decide.make_plan(snap, drivers, cloud.conf, snap.taken_at)


def decisions(plan):
    return {d.host: d.decision for d in plan.decisions}


def wait_for_heartbeats(cloud):
    """Nova leaves updated_at empty until a compute's first report."""
    peers.base.wait_until(
        lambda: all(s.updated_at for s in cloud.list_services()), 60,
        interval=0.5, what='a first heartbeat from every compute')


class TestDetection(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.peer = self.useFixture(peers.NovaPeer(hosts=3))
        for host in self.peer.hosts:
            self.peer.create_servers(1, host=host, name='vm-' + host)

    def test_killed_compute_detected_within_delta_plus_one_poll(self):
        # Nova heartbeats every 2 s and says "down" after 6 s; delta = 4 s
        # lets the staleness rule win, so this checks our own rule.
        delta, poll = 4, 0.5
        cloud = helpers.make_cloud(
            self, self.peer, extra='[DEFAULT]\ndelta = %d\n' % delta)
        wait_for_heartbeats(cloud)
        snap, plan = plan_once(cloud)
        self.assertEqual({h: D.HEALTHY for h in self.peer.hosts},
                         decisions(plan), plan.lines())

        self.peer.control.kill('host2')
        history = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snap, plan = plan_once(cloud)
            history.append((snap, plan))
            if plan.decision('host2').decision is not D.HEALTHY:
                break
            time.sleep(poll)
        snap, plan = history[-1]
        self.assertEqual(D.RECOVER, plan.decision('host2').decision,
                         plan.lines())
        self.assertEqual(D.HEALTHY, plan.decision('host1').decision)
        self.assertEqual(D.HEALTHY, plan.decision('host3').decision)
        (srv,) = plan.decision('host2').servers
        self.assertEqual('vm-host2-0', srv.name)

        # Detected at the first poll after delta expired: every earlier
        # poll saw a heartbeat no older than delta, so the failure was
        # reported within delta plus one poll interval of the last one.
        last_beat = snap.service('host2').updated_at
        print('host2 reported failed %.1f s after its last heartbeat '
              '(delta %d s, %d polls)' % (
                  (snap.taken_at - last_beat).total_seconds(), delta,
                  len(history)))
        self.assertGreater((snap.taken_at - last_beat).total_seconds(),
                           delta)
        if len(history) > 1:
            prev = history[-2][0]
            self.assertLessEqual(
                (prev.taken_at - prev.service('host2').updated_at
                 ).total_seconds(), delta)
            interval = (snap.taken_at - prev.taken_at).total_seconds()
            self.assertLessEqual(
                (snap.taken_at - last_beat).total_seconds(),
                delta + interval)

        # A second failure among 3 hosts is a mass failure at 50%.
        self.peer.control.kill('host3')
        self.peer.wait_for_service('host3', 'down')
        snap, plan = plan_once(cloud)
        self.assertEqual({'host1': D.HEALTHY, 'host2': D.BLOCKED,
                          'host3': D.BLOCKED}, decisions(plan))
        self.assertEqual(1, len(plan.blocked_by))
        self.assertIn('threshold: 2 of 3 monitored hosts unhealthy',
                      plan.blocked_by[0])

    def test_disabled_host_is_ignored(self):
        cloud = helpers.make_cloud(self, self.peer)
        snap, _plan = plan_once(cloud)
        cloud.update_service(snap.service('host1'), status='disabled',
                             disabled_reason='kernel upgrade')
        self.peer.control.kill('host1')
        self.peer.wait_for_service('host1', 'down')
        snap, plan = plan_once(cloud)
        d = plan.decision('host1')
        self.assertEqual(D.IGNORED, d.decision)
        self.assertIn('disabled by an operator (reason: kernel upgrade)',
                      d.reasons)
        self.assertIn('nova: state down', d.reasons[0])
        self.assertEqual([], plan.to_recover())


class TestTagging(testtools.TestCase):
    """tagged-images/flavors/aggregates on real Nova data."""

    def test_tagging_selects_hosts_and_instances(self):
        peer = self.useFixture(peers.NovaPeer(hosts=3))
        nova = peer.client()
        tagged = peer.create_flavor('tagged', extra_specs={
            'evacuable': 'True'}, client=nova)
        untagged = peer.create_flavor('plain', extra_specs={
            'evacuable': 'false'}, client=nova)
        # Nova's test stack serves images from an in-process fake Glance,
        # reachable only through Nova's image proxy (microversion 2.35).
        other_image = 'a2459075-d96c-40d5-893e-577ff92e721c'
        cloud = helpers.make_cloud(self, peer, extra=(
            '[DEFAULT]\nthreshold = 100\n'
            '[tagging]\ntagged_images = true\ntagged_flavors = true\n'
            'tagged_aggregates = true\n'))
        cloud.image_proxy.post('/images/%s/metadata' % other_image,
                               json={'metadata': {'evacuable': 'yes'}})
        peer.create_aggregate('ha', hosts=['host1', 'host3'],
                              metadata={'evacuable': 'true'}, client=nova)
        peer.create_aggregate('noha', hosts=['host2'], client=nova)
        by_flavor = peer.create_servers(1, host='host1', flavor=tagged,
                                        name='by-flavor', client=nova)[0]
        nova.servers.create('by-image', other_image, untagged,
                            nics='none', availability_zone='nova:host1')
        peer.create_servers(1, host='host1', flavor=untagged,
                            name='untagged', client=nova)
        peer.create_servers(1, host='host2', flavor=tagged,
                            name='wrong-aggregate', client=nova)
        peer.create_servers(1, host='host3', flavor=untagged,
                            name='nothing-tagged', client=nova)
        by_image = nova.servers.find(name='by-image')
        peer.wait_for_server(by_image.id, client=nova)

        for host in peer.hosts:
            peer.control.kill(host)
        for host in peer.hosts:
            peer.wait_for_service(host, 'down')
        snap, plan = plan_once(cloud)
        self.assertEqual({'host1': D.RECOVER, 'host2': D.IGNORED,
                          'host3': D.IGNORED}, decisions(plan),
                         plan.lines())
        host1 = plan.decision('host1')
        self.assertEqual({by_flavor.id, by_image.id},
                         {s.id for s in host1.servers})
        self.assertIn("not evacuated: untagged-0", host1.reasons[-1])
        self.assertIn("flavor plain not tagged 'evacuable'",
                      host1.reasons[-1])
        self.assertIn("in no aggregate tagged 'evacuable'",
                      plan.decision('host2').reasons)
        self.assertIn('no eligible instance: nothing-tagged-0',
                      plan.decision('host3').reasons[-1])


class TestApiCallsFlat(testtools.TestCase):
    """The number of API calls per cycle does not grow with hosts."""

    def calls_per_cycle(self, hosts):
        peer = self.useFixture(peers.NovaPeer(hosts=hosts,
                                              driver='fake.FakeDriver'))
        for host in peer.hosts:
            peer.create_servers(1, host=host, name='vm-' + host)
        cloud = helpers.make_cloud(self, peer,
                                   extra='[tagging]\ntagged_images = true\n')
        drivers = loader.load_deciders(cloud.conf)
        since = datetime.datetime.now(datetime.timezone.utc)
        cloud.api_calls = 0
        snap = cloud.snapshot(migrations_since=since,
                              **decide.snapshot_needs(drivers))
        self.assertEqual(hosts, len(snap.services))
        self.assertEqual(hosts, len(snap.servers))
        return cloud.api_calls

    def test_calls_flat_from_3_to_12_hosts(self):
        small = self.calls_per_cycle(3)
        large = self.calls_per_cycle(12)
        print('API calls per snapshot: 3 hosts: %d, 12 hosts: %d'
              % (small, large))
        # services, servers, aggregates, images, evacuation records.
        self.assertEqual(5, small)
        self.assertEqual(small, large)


class TestManagePlanCli(testtools.TestCase):
    """instanceha-manage plan as an operator runs it, on real keystone."""

    def setUp(self):
        super().setUp()
        self.keystone = self.useFixture(peers.KeystonePeer())
        self.peer = self.useFixture(peers.NovaPeer(hosts=3,
                                                   keystone=self.keystone))
        nova = self.peer.client()
        for host in self.peer.hosts:
            self.peer.create_servers(1, host=host, name='vm-' + host,
                                     client=nova)

    def cli(self, extra='', password=None, fmt='json'):
        path = helpers.write_conf(self, helpers.conf_text(
            self.peer, self.keystone, password=password, extra=extra))
        env = dict(os.environ, no_proxy='127.0.0.1', NO_PROXY='127.0.0.1')
        proc = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', 'plan',
             '--config-file', path, '--format', fmt],
            capture_output=True, text=True, timeout=120, env=env)
        return proc.returncode, proc.stdout, proc.stderr

    def decisions(self, extra=''):
        rc, out, err = self.cli(extra)
        self.assertEqual(0, rc, err)
        rows = json.loads(out)
        for row in rows:
            self.assertEqual({'host', 'decision', 'verdict', 'reasons',
                              'servers', 'recovery_state'}, set(row))
        return {r['host']: r for r in rows}

    def test_plan_command(self):
        self.peer.control.kill('host3')
        self.peer.wait_for_service('host3', 'down')

        rows = self.decisions()
        self.assertEqual({'host1': 'healthy', 'host2': 'healthy',
                          'host3': 'recover'},
                         {h: r['decision'] for h, r in rows.items()})
        self.assertEqual({'host1': 'alive', 'host2': 'alive',
                          'host3': 'failed'},
                         {h: r['verdict'] for h, r in rows.items()})
        self.assertEqual(['vm-host3-0'],
                         [s['name'] for s in rows['host3']['servers']])

        rows = self.decisions('[DEFAULT]\nthreshold = 10\n')
        self.assertEqual('blocked', rows['host3']['decision'])
        self.assertIn('gate threshold: 1 of 3 monitored hosts unhealthy',
                      rows['host3']['reasons'][-1])

        rc, out, err = self.cli(fmt='table')
        self.assertEqual(0, rc, err)
        self.assertIn('host3  recover   failed', out)

        nova = self.peer.client()
        (svc,) = nova.services.list(host='host3', binary='nova-compute')
        nova.services.disable_log_reason(svc.id, 'hardware repair')
        rows = self.decisions()
        self.assertEqual(('ignored', 'failed'), (rows['host3']['decision'],
                                                 rows['host3']['verdict']))
        self.assertIn('disabled by an operator (reason: hardware repair)',
                      rows['host3']['reasons'])

        wrong = 'Not-The-Password-%d' % os.getpid()
        rc, out, err = self.cli(password=wrong)
        self.assertEqual(1, rc)
        # JSON asked for: the failure is JSON too (and said on stderr).
        self.assertEqual(1, json.loads(out)['exit_code'])
        self.assertIn('list nova-compute services: keystone refused the '
                      'credentials', json.loads(out)['error'])
        self.assertIn('instanceha-manage: error: list nova-compute '
                      'services: keystone refused the credentials', err)
        for text in (out, err):
            self.assertNotIn(wrong, text)
            self.assertNotIn(self.keystone.admin_password, text)

        port = peers.base.free_port()
        rc, out, err = self.cli(extra='[nova]\nauth_url = '
                                'http://127.0.0.1:%d/v3\n' % port)
        self.assertEqual(1, rc)
        self.assertIn('cannot connect', err)
        self.assertIn('127.0.0.1:%d' % port, err)
        self.assertNotIn(self.keystone.admin_password, err)
