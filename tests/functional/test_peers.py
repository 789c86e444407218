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

"""Each real-peer fixture starts, answers like the real thing, and stops.

These tests prove the fixtures other functional tests build on; each one
asserts behaviour of the real peer (nova API, keystone, ipmitool,
fence agents, Redfish, tooz backends), not of a mock.
"""

import shutil
import subprocess
import sys

import fixtures
import redis
import requests
import testtools
from tooz import coordination

from tests.functional import peers
from tests.functional.peers import base


class TestPeerProcess(testtools.TestCase):
    """A peer that fails to start is reported with its output."""

    def test_early_exit_reports_log_tail(self):
        peer = self.useFixture(base.Peer())
        proc = peer.spawn('broken', [
            sys.executable, '-c',
            'import sys; sys.stderr.write("boom: no config\\n"); '
            'sys.exit(4)'])
        exc = self.assertRaises(base.PeerError, proc.wait_ready,
                                lambda: False, 10)
        self.assertIn('rc=4', str(exc))
        self.assertIn('boom: no config', str(exc))

    def test_timeout_reports_log_tail(self):
        peer = self.useFixture(base.Peer())
        proc = peer.spawn('slow', [
            sys.executable, '-c',
            'import time; print("still starting", flush=True); '
            'time.sleep(60)'])
        exc = self.assertRaises(base.PeerError, proc.wait_ready,
                                lambda: False, 1)
        self.assertIn('timed out', str(exc))
        self.assertIn('still starting', str(exc))
        proc.stop()
        self.assertFalse(proc.running)


class TestNovaPeer(testtools.TestCase):
    """The nova helper serves the real API and simulates host failures."""

    def test_kill_evacuate_revive(self):
        peer = self.useFixture(peers.NovaPeer(hosts=3))
        nova = peer.client()
        services = {s.host: s.state
                    for s in nova.services.list(binary='nova-compute')}
        self.assertEqual({'host1': 'up', 'host2': 'up', 'host3': 'up'},
                         services)
        server, = peer.create_servers(1, host='host1')
        self.assertEqual('host1', getattr(server, 'OS-EXT-SRV-ATTR:host'))

        peer.control.kill('host1')
        self.assertFalse(peer.control.computes()['host1']['running'])
        peer.wait_for_service('host1', 'down')
        svc = nova.services.list(host='host1', binary='nova-compute')[0]
        nova.services.force_down(svc.id, True)
        nova.servers.evacuate(server.id)
        migration, moved = peer.wait_for_evacuation(server.id)
        self.assertEqual('done', migration.status)
        self.assertEqual('ACTIVE', moved.status)
        self.assertNotEqual('host1', getattr(moved, 'OS-EXT-SRV-ATTR:host'))

        peer.control.revive('host1')
        nova.services.force_down(svc.id, False)
        peer.wait_for_service('host1', 'up')
        self.assertTrue(peer.control.computes()['host1']['running'])
        # The restarted compute cleans up the evacuated instance.
        base.wait_until(
            lambda: nova.migrations.list(
                instance_uuid=server.id)[0].status == 'completed',
            30, what='evacuation migration completed')

    def test_fail_spawn_fails_the_evacuation(self):
        peer = self.useFixture(peers.NovaPeer(hosts=2))
        nova = peer.client()
        flavor = peer.create_flavor('ha', extra_specs={'ha:enabled': 'true'})
        self.assertEqual({'ha:enabled': 'true'}, flavor.get_keys())
        agg = peer.create_aggregate('ha-hosts', hosts=['host1', 'host2'],
                                    metadata={'evacuable': 'true'})
        self.assertEqual({'evacuable': 'true'}, agg.metadata)
        server, = peer.create_servers(1, host='host1', flavor=flavor)

        peer.control.kill('host1')
        svc = nova.services.list(host='host1', binary='nova-compute')[0]
        nova.services.force_down(svc.id, True)
        peer.control.fail_spawn('host2')
        self.assertEqual(1, peer.control.computes()['host2']['fail_spawn'])
        nova.servers.evacuate(server.id)
        migration, _ = peer.wait_for_evacuation(server.id,
                                                expect=('failed',))
        self.assertEqual('failed', migration.status)
        failed = peer.wait_for_server(server.id, 'ERROR', timeout=10)
        self.assertIn('injected spawn failure', failed.fault['message'])
        self.assertEqual(0, peer.control.computes()['host2']['fail_spawn'])

    def test_start_failure_is_reported(self):
        peer = peers.NovaPeer(hosts=1, driver='fake.NoSuchDriver')
        exc = self.assertRaises(fixtures.MultipleExceptions, peer.setUp)
        error = exc.args[0][1]
        self.assertIsInstance(error, base.PeerError)
        self.assertIn('nova exited with rc=3', str(error))
        self.assertIn('load_compute_driver', str(error))
        self.assertFalse(peer.process.running)


class TestKeystonePeer(testtools.TestCase):
    """Keystone issues real tokens; nova behind it validates them."""

    def test_nova_validates_tokens(self):
        keystone = self.useFixture(peers.KeystonePeer())
        nova = self.useFixture(peers.NovaPeer(hosts=1, keystone=keystone))
        services = nova.client().services.list(binary='nova-compute')
        self.assertEqual(['host1'], [s.host for s in services])

        url = nova.endpoint + '/os-services'
        bad = requests.get(url, headers={'X-Auth-Token': 'not-a-token'},
                           timeout=30)
        self.assertEqual(401, bad.status_code)
        name, password = keystone.create_user()
        member = requests.get(url, timeout=30, headers={
            'X-Auth-Token': keystone.token(username=name,
                                           password=password)})
        self.assertEqual(403, member.status_code)
        admin = requests.get(url, headers={'X-Auth-Token': keystone.token()},
                             timeout=30)
        self.assertEqual(200, admin.status_code)


class TestIpmiBmcPeer(testtools.TestCase):
    """The real ipmitool and fence_ipmilan drive the pyghmi BMCs."""

    def test_power_and_misbehaviour(self):
        bmcs = self.useFixture(peers.IpmiBmcPeer(hosts=2))
        status = bmcs.ipmitool('host1', 'chassis', 'power', 'status')
        self.assertEqual((0, 'Chassis Power is on'),
                         (status.returncode, status.stdout.strip()))
        self.assertEqual(0, bmcs.ipmitool(
            'host1', 'chassis', 'power', 'off').returncode)
        self.assertEqual('off', bmcs.power_state('host1'))
        self.assertEqual('on', bmcs.power_state('host2'))
        wrong = bmcs.ipmitool('host1', 'chassis', 'power', 'status',
                              password='wrong')
        self.assertEqual(1, wrong.returncode)

        bmcs.set_mode('host2', 'stuck')
        self.assertEqual(0, bmcs.ipmitool(
            'host2', 'chassis', 'power', 'off').returncode)
        self.assertEqual('on', bmcs.power_state('host2'))
        bmcs.set_mode('host2', 'error')
        self.assertNotEqual(0, bmcs.ipmitool(
            'host2', 'chassis', 'power', 'off').returncode)
        bmcs.set_mode('host2', 'silent')
        self.assertNotEqual(0, bmcs.ipmitool(
            'host2', 'chassis', 'power', 'status').returncode)
        # The other BMC in the same process still answers.
        self.assertEqual(0, bmcs.ipmitool(
            'host1', 'chassis', 'power', 'status').returncode)

        port = bmcs.ports['host1']
        bmcs.stop()
        self.assertNotEqual(0, bmcs.ipmitool(
            'host1', 'chassis', 'power', 'status').returncode)
        bmcs.start()
        self.assertEqual(port, bmcs.ports['host1'])
        status = bmcs.ipmitool('host1', 'chassis', 'power', 'status')
        self.assertEqual('Chassis Power is off', status.stdout.strip())

    @testtools.skipUnless(shutil.which('fence_ipmilan'),
                          'fence-agents (Debian) not installed')
    def test_fence_ipmilan_with_nova_hook(self):
        nova = self.useFixture(peers.NovaPeer(hosts=2))
        bmcs = self.useFixture(peers.IpmiBmcPeer(hosts=nova.hosts,
                                                 nova=nova))

        def fence(action):
            return subprocess.run(
                ['fence_ipmilan', '--ip', '127.0.0.1', '--lanplus',
                 '--ipport', str(bmcs.ports['host1']),
                 '--username', bmcs.username, '--password-script',
                 'echo %s' % bmcs.password, '--action', action],
                capture_output=True, text=True, timeout=60,
                stdin=subprocess.DEVNULL)

        status = fence('status')
        self.assertEqual(0, status.returncode, status.stderr)
        self.assertIn('Status: ON', status.stdout)
        off = fence('off')
        self.assertEqual(0, off.returncode, off.stderr)
        self.assertEqual('off', bmcs.power_state('host1'))
        base.wait_until(
            lambda: not nova.control.computes()['host1']['running'], 10,
            what='power off to kill nova-compute on host1')
        nova.wait_for_service('host1', 'down')
        on = fence('on')
        self.assertEqual(0, on.returncode, on.stderr)
        base.wait_until(
            lambda: nova.control.computes()['host1']['running'], 30,
            what='power on to revive nova-compute on host1')
        nova.wait_for_service('host1', 'up')


class TestRedfishPeer(testtools.TestCase):
    """sushy-tools answers Redfish, with auth and delayed power changes."""

    def test_auth_reset_and_hook(self):
        nova = self.useFixture(peers.NovaPeer(hosts=2))
        rf = self.useFixture(peers.RedfishPeer(hosts=nova.hosts, nova=nova,
                                               power_delay=(1, 2)))
        self.assertEqual(401, requests.get(rf.system_url('host1'),
                                           timeout=10).status_code)
        by_name = requests.get(rf.url + '/redfish/v1/Systems/host1',
                               auth=(rf.username, rf.password),
                               allow_redirects=False, timeout=10)
        self.assertEqual(307, by_name.status_code)
        self.assertEqual('On', rf.power_state('host1'))
        self.assertEqual(501, rf.reset('host1', 'Nonsense').status_code)

        self.assertEqual(204, rf.reset('host1', 'ForceOff').status_code)
        rf.wait_for_power('host1', 'Off')
        base.wait_until(
            lambda: not nova.control.computes()['host1']['running'], 10,
            what='power off to kill nova-compute on host1')
        self.assertEqual(204, rf.reset('host1', 'On').status_code)
        rf.wait_for_power('host1', 'On')
        base.wait_until(
            lambda: nova.control.computes()['host1']['running'], 30,
            what='power on to revive nova-compute on host1')
        # The physical truth: the start, then every change that landed.
        history = rf.power_histories()
        self.assertEqual(['on', 'off', 'on'],
                         [p for _, p in history['host1']])
        self.assertEqual(['on'], [p for _, p in rf.power_history('host2')])
        times = [t for t, _ in history['host1']]
        self.assertEqual(sorted(times), times)

    @testtools.skipUnless(shutil.which('fence_redfish'),
                          'fence-agents (Debian) not installed')
    def test_fence_redfish_status(self):
        rf = self.useFixture(peers.RedfishPeer(hosts=1, tls=True))
        self.assertTrue(rf.url.startswith('https://'))
        result = subprocess.run(
            ['fence_redfish', '--ip', '127.0.0.1', '--ipport', str(rf.port),
             '--ssl-insecure',
             '--username', rf.username, '--password-script',
             'echo %s' % rf.password, '--systems-uri',
             '/redfish/v1/Systems/%s' % rf.systems['host1'],
             '--action', 'status'],
            capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL)
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertIn('Status: ON', result.stdout)


class _ToozBackendTests(object):
    """tooz locks work, the backend can go away, they work once it's back."""

    peer_class = None

    def test_lock_stop_start(self):
        peer = self.peer = self.useFixture(self.peer_class())
        coord = coordination.get_coordinator(peer.url, b'member-1')
        coord.start(start_heart=False)
        self.addCleanup(self._stop_quietly, coord)
        self.assertTrue(self._try_lock(coord, b'before'))

        peer.stop()
        self.assertFalse(base.port_open(peer.port))
        self.assert_backend_unusable(coord)

        peer.start()
        self.assertTrue(self._try_lock(coord, b'after'))

    def assert_backend_unusable(self, coord):
        self.assertRaises(coordination.ToozError, self._try_lock, coord,
                          b'during')

    @staticmethod
    def _try_lock(coord, name):
        lock = coord.get_lock(b'instanceha-test-' + name)
        ok = lock.acquire(blocking=False)
        if ok:
            lock.release()
        return ok

    @staticmethod
    def _stop_quietly(coord):
        try:
            coord.stop()
        except coordination.ToozError:
            pass


class TestRedisPeer(_ToozBackendTests, testtools.TestCase):
    peer_class = peers.RedisPeer

    def assert_backend_unusable(self, coord):
        # tooz's redis driver retries a refused connection 15 times with
        # redis-py's own backoff: ToozConnectionError comes only after
        # ~60 s. Prove the outage with a client that does not retry.
        client = redis.Redis(host=base.LOOPBACK, port=self.peer.port,
                             retry=None, socket_connect_timeout=2)
        self.assertRaises(redis.exceptions.ConnectionError, client.ping)


class TestEtcdPeer(_ToozBackendTests, testtools.TestCase):
    peer_class = peers.EtcdPeer
