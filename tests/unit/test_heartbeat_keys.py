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

"""Per-host heartbeat keys: derivation, the listener's checks, the command.

Real packets through the listener's ``handle`` (no sockets), real key
files in a temporary directory, the real ``instanceha-manage`` entry.
"""

import os
import stat
import subprocess
import sys
from unittest import mock

import fixtures
import testtools

from instanceha.heartbeat import keys
from instanceha.heartbeat import listener as lst_mod
from tests.unit import test_heartbeat_detector as h

MASTER = b'm' * 32
OLD_MASTER = b'p' * 32


class TestDerivation(testtools.TestCase):

    def test_rfc5869_hkdf_sha256(self):
        # Computed independently with cryptography's HKDF (SHA-256,
        # length 32, salt keys.HKDF_SALT, info b"instanceha host:" + name).
        self.assertEqual(
            b'7b3a67ca05c56df5aa627989551a84e1c731fb2d6dadddd3d12dac2192eda43f',
            keys.derive_host_key(b'master-key-0123456789abcdef', 'compute-1'))

    def test_keys_differ_per_host_and_master(self):
        k1 = keys.derive_host_key(MASTER, 'compute-1')
        self.assertNotEqual(k1, keys.derive_host_key(MASTER, 'compute-2'))
        self.assertNotEqual(k1, keys.derive_host_key(OLD_MASTER,
                                                     'compute-1'))
        self.assertEqual(64, len(k1))


class TestPerHostListener(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.FakeLogger())
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.clock = h.Clock()

    def listener(self, mode, previous=False):
        cur = os.path.join(self.dir, 'master')
        with open(cur, 'wb') as f:
            f.write(MASTER + b'\n')
        prev = None
        if previous:
            prev = os.path.join(self.dir, 'old')
            with open(prev, 'wb') as f:
                f.write(OLD_MASTER + b'\n')
        lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], keys.HostKeys(keys.KeyRing(cur, prev), mode),
            max_clock_skew=15, clock=lambda: self.clock.mono,
            wall=lambda: self.clock.wall)
        lst.start()
        self.addCleanup(lst.stop)
        return lst

    def send(self, lst, host, key):
        return lst.handle(h.Sender(host, self.clock, key).packet(), 'x')

    def test_each_host_signs_only_for_itself(self):
        lst = self.listener(keys.PER_HOST)
        own = keys.derive_host_key(MASTER, 'compute-1')
        self.assertIsNotNone(self.send(lst, 'compute-1', own))
        # compute-1's key cannot keep compute-2 alive.
        self.assertIsNone(self.send(lst, 'compute-2', own))
        self.assertEqual(1, lst.rejects.counts.get('bad_hmac'))
        # Nor can the master key itself (the former shared key).
        self.assertIsNone(self.send(lst, 'compute-2', MASTER))
        self.assertEqual(2, lst.rejects.counts.get('bad_hmac'))
        self.assertIsNone(lst.age('compute-2'))

    def test_rotation_accepts_keys_derived_from_the_previous_master(self):
        lst = self.listener(keys.PER_HOST, previous=True)
        self.assertIsNotNone(self.send(
            lst, 'compute-1', keys.derive_host_key(OLD_MASTER, 'compute-1')))
        self.assertEqual(1, lst.accepted_previous_key)
        self.assertIsNotNone(self.send(
            lst, 'compute-2', keys.derive_host_key(MASTER, 'compute-2')))
        self.assertEqual(1, lst.accepted_previous_key)

    def test_migration_mode_accepts_shared_and_derived(self):
        lst = self.listener(keys.BOTH)
        self.assertIsNotNone(self.send(lst, 'compute-1', MASTER))
        self.assertIsNotNone(self.send(
            lst, 'compute-2', keys.derive_host_key(MASTER, 'compute-2')))

    def test_shared_mode_is_the_former_scheme(self):
        lst = self.listener(keys.SHARED)
        self.assertIsNotNone(self.send(lst, 'compute-1', MASTER))
        self.assertIsNone(self.send(
            lst, 'compute-2', keys.derive_host_key(MASTER, 'compute-2')))

    def test_unknown_host_costs_no_derivation(self):
        lst = self.listener(keys.PER_HOST)
        lst.set_known_hosts(['compute-1'])
        ring = lst._host_ring
        with mock.patch.object(ring, 'for_host',
                               wraps=ring.for_host) as for_host:
            self.assertIsNone(self.send(
                lst, 'intruder', keys.derive_host_key(MASTER, 'intruder')))
            for_host.assert_not_called()
        self.assertEqual(1, lst.rejects.counts.get('unknown_host'))

    def test_bad_mode_is_refused(self):
        ring = keys.KeyRing(self.write('k', MASTER))
        exc = self.assertRaises(ValueError, keys.HostKeys, ring, 'open')
        self.assertIn("'open'", str(exc))

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, 'wb') as f:
            f.write(data)
        return path


class TestDeriveKeyCommand(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.master = os.path.join(self.dir, 'master.key')
        with open(self.master, 'wb') as f:
            f.write(MASTER + b'\n')
        self.conf = os.path.join(self.dir, 'instanceha.conf')
        with open(self.conf, 'w') as f:
            f.write('[heartbeat]\nkey_file = %s\n' % self.master)

    def run_manage(self, *args):
        res = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.manage', '--config-file',
             self.conf, 'heartbeat', 'derive-key', *args],
            capture_output=True, text=True, timeout=60)
        return res.returncode, res.stdout, res.stderr

    def test_writes_the_hosts_key_readable_by_its_owner_only(self):
        out = os.path.join(self.dir, 'compute-1.key')
        rc, stdout, _ = self.run_manage('compute-1', '--out', out)
        self.assertEqual(0, rc)
        self.assertEqual(0o600, stat.S_IMODE(os.stat(out).st_mode))
        with open(out, 'rb') as f:
            key = f.read()
        self.assertEqual(keys.derive_host_key(MASTER, 'compute-1') + b'\n',
                         key)
        # The key is never printed, nor the master.
        self.assertNotIn(key.strip().decode(), stdout)
        self.assertNotIn(MASTER.decode(), stdout)
        # The agent reads it back as its key.
        self.assertEqual((key.strip(),), keys.KeyRing(out).keys)

    def test_existing_file_needs_force(self):
        out = os.path.join(self.dir, 'k')
        with open(out, 'w') as f:
            f.write('old\n')
        os.chmod(out, 0o644)
        rc, _, err = self.run_manage('compute-1', '--out', out)
        self.assertEqual(1, rc)
        self.assertIn('exists; use --force', err)
        rc, _, _ = self.run_manage('compute-1', '--out', out, '--force')
        self.assertEqual(0, rc)
        self.assertEqual(0o600, stat.S_IMODE(os.stat(out).st_mode))

    def test_bad_master_names_the_option(self):
        with open(self.master, 'wb') as f:
            f.write(b'short\n')
        rc, _, err = self.run_manage('compute-1', '--out',
                                     os.path.join(self.dir, 'x'))
        self.assertEqual(2, rc)
        self.assertIn('[heartbeat] key_file', err)
        self.assertNotIn('short', err.replace('shorter', ''))
