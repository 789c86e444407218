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

"""The real heartbeat agent and the listener on loopback sockets.

Each test starts ``instanceha-heartbeat-agent`` as a separate process
(the same entry point operators run) and a listener bound to an
ephemeral loopback port. Waits are bounded polls, never assertions on
durations.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import fixtures
import testtools
from testtools import content

from instanceha.heartbeat import agent as agent_mod
from instanceha.heartbeat import keys
from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol as p
from instanceha.heartbeat import udp as udp_mod


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(('::1', 0))
        return True
    except OSError:
        return False


def wait_for(predicate, timeout=15.0, what='condition'):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError('timed out waiting for %s' % what)


class HeartbeatFixture(testtools.TestCase):
    """Key files, a listener and helpers to run agent processes."""

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.key = self.write_key('current.key', os.urandom(32).hex())

    def write_key(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, 'w') as f:
            f.write(text + '\n')
        return path

    def host_key(self, host):
        """The per-host key file of ``host``, derived from self.key."""
        return self.write_key('%s.key' % host, keys.derive_host_key(
            keys.load_key(self.key), host).decode())

    def listener(self, endpoints=(('127.0.0.1', 0),), previous=None,
                 **kwargs):
        lst = lst_mod.HeartbeatListener(
            list(endpoints), keys.KeyRing(self.key, previous),
            max_clock_skew=kwargs.pop('max_clock_skew', 15), **kwargs)
        lst.start()
        self.addCleanup(lst.stop)
        return lst

    def agent(self, host, collectors, key=None, interval=0.05, extra=()):
        path = os.path.join(self.dir, 'agent-%s.log' % host)
        out = open(path, 'ab')
        self.addCleanup(out.close)
        # Read at clean-up, before the temporary directory goes away.
        self.addCleanup(lambda: self.addDetail(
            'agent-%s.log' % host, content.content_from_file(
                path, buffer_now=True)))
        args = [sys.executable, '-m', 'instanceha.cmd.heartbeat_agent',
                '--host', host, '--key-file', key or self.key,
                '--interval', str(interval), *extra]
        for address, port in collectors:
            args += ['--collector', ('[%s]:%d' if ':' in address
                                     else '%s:%d') % (address, port)]
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

        def reap():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        self.addCleanup(reap)
        return proc

    @staticmethod
    def stop(proc):
        proc.send_signal(signal.SIGTERM)
        return proc.wait(10)


class TestAgentAndListener(HeartbeatFixture):

    def test_agent_to_listener_ipv4(self):
        lst = self.listener()
        proc = self.agent('compute-1', lst.addresses)
        rec = wait_for(lambda: (lst.record('compute-1') or None)
                       and lst.record('compute-1').sequence >= 3
                       and lst.record('compute-1'), what='3 heartbeats')
        self.assertEqual('127.0.0.1', rec.address)
        self.assertEqual(0, lst.rejects.total)
        self.assertEqual(0, self.stop(proc))
        # Stopped: nothing newer arrives, its age only grows.
        seq = lst.record('compute-1').sequence
        age = lst.age('compute-1')
        time.sleep(0.3)
        self.assertEqual(seq, lst.record('compute-1').sequence)
        self.assertGreater(lst.age('compute-1'), age)

    def test_agent_to_listener_ipv6_and_ipv4_together(self):
        if not ipv6_loopback():
            self.skipTest('no IPv6 loopback on this machine')
        lst = self.listener([('127.0.0.1', 0), ('::1', 0)])
        self.agent('compute-6', lst.addresses)
        wait_for(lambda: lst.accepted >= 3, what='heartbeats')
        # The same packet reaches both sockets: one is accepted, the other
        # is a quiet duplicate (or, if reordered, an older sequence).
        wait_for(lambda: lst.rejects.counts.get(p.DUPLICATE), what='dup')
        self.assertEqual(set(), set(lst.rejects.counts) - {p.DUPLICATE,
                                                           p.REPLAY})
        v6 = self.listener([('::1', 0)])
        self.agent('compute-v6only', v6.addresses)
        rec = wait_for(lambda: v6.record('compute-v6only'), what='v6')
        self.assertEqual('::1', rec.address)

    def test_replayed_captured_packet_is_rejected(self):
        lst = self.listener()
        # A second "collector" that is really an eavesdropper.
        spy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(spy.close)
        spy.bind(('127.0.0.1', 0))
        spy.settimeout(10)
        self.agent('compute-2', lst.addresses + [spy.getsockname()])
        captured, _ = spy.recvfrom(2048)
        self.assertEqual('compute-2', p.decode(captured, (
            keys.load_key(self.key),)).host)
        wait_for(lambda: (lst.record('compute-2') or None)
                 and lst.record('compute-2').sequence > 2, what='beats')
        before = lst.record('compute-2')
        attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(attacker.close)
        attacker.sendto(captured, lst.addresses[0])
        wait_for(lambda: lst.rejects.counts.get(p.REPLAY), what='replay')
        self.assertEqual(before.boot_id, lst.record('compute-2').boot_id)
        self.assertIn('replay: host compute-2 sequence', self.log.output)

    def test_agent_restart_is_accepted(self):
        lst = self.listener()
        proc = self.agent('compute-3', lst.addresses)
        first = wait_for(lambda: lst.record('compute-3'), what='first boot')
        self.stop(proc)
        self.agent('compute-3', lst.addresses)
        second = wait_for(lambda: (lst.record('compute-3').boot_id
                                   != first.boot_id)
                          and lst.record('compute-3'), what='second boot')
        self.assertNotEqual(first.boot_id, second.boot_id)
        self.assertEqual({}, {k: v for k, v in lst.rejects.counts.items()
                              if k != p.DUPLICATE})

    def test_key_rotation(self):
        old = self.key
        new = self.write_key('new.key', os.urandom(32).hex())
        agent_key = self.write_key('agent.key', open(old).read().strip())
        # The service moved to the new key and still accepts the old one.
        self.key = new
        lst = self.listener(previous=old)
        self.agent('compute-4', lst.addresses, key=agent_key)
        wait_for(lambda: lst.accepted_previous_key >= 2, what='old key')
        # The agent's key file is replaced: it re-reads it, no restart.
        tmp = agent_key + '.tmp'
        with open(tmp, 'w') as f:
            f.write(open(new).read())
        os.replace(tmp, agent_key)
        count = lst.accepted_previous_key
        wait_for(lambda: lst.accepted - lst.accepted_previous_key >= 2,
                 what='new key')
        self.assertEqual(0, lst.rejects.counts.get(p.BAD_HMAC, 0))
        self.assertLessEqual(count, lst.accepted_previous_key)

    def test_agent_with_a_wrong_key_is_rejected(self):
        lst = self.listener()
        wrong = self.write_key('wrong.key', os.urandom(32).hex())
        self.agent('compute-5', lst.addresses, key=wrong)
        wait_for(lambda: lst.rejects.counts.get(p.BAD_HMAC, 0) >= 3,
                 what='rejections')
        self.assertIsNone(lst.record('compute-5'))
        self.assertEqual(1, self.log.output.count('bad_hmac'))

    def test_agent_refuses_bad_arguments(self):
        short = self.write_key('short.key', 'abc')
        res = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.heartbeat_agent',
             '--key-file', short, '--collector', '127.0.0.1'],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(2, res.returncode)
        self.assertIn('option --key-file: file %s holds a key of 3 bytes'
                      % short,
                      res.stderr)
        res = subprocess.run(
            [sys.executable, '-m', 'instanceha.cmd.heartbeat_agent',
             '--key-file', self.key, '--collector', '[::1'],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(2, res.returncode)
        self.assertIn("--collector: bad address '[::1'", res.stderr)

    def test_agent_needs_no_openstack_library(self):
        res = subprocess.run(
            [sys.executable, '-c',
             'import sys, instanceha.cmd.heartbeat_agent; print(sorted('
             '{m.split(".")[0] for m in sys.modules if m.startswith(('
             '"oslo", "nova", "keystone", "stevedore", "tooz"))}))'],
            capture_output=True, text=True, timeout=60, check=True)
        self.assertEqual('[]', res.stdout.strip())

    def test_agent_count_and_unreachable_collector(self):
        lst = self.listener()
        # A collector nobody listens on must not stop the others.
        dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dead.bind(('127.0.0.1', 0))
        dead_addr = dead.getsockname()
        dead.close()
        proc = self.agent('compute-7', [dead_addr] + lst.addresses,
                          extra=['--count', '5'])
        self.assertEqual(0, proc.wait(30))
        wait_for(lambda: lst.accepted == 5, what='5 heartbeats')


class TestListenerRobustness(HeartbeatFixture):

    def test_bad_packets_over_the_wire_are_counted_and_harmless(self):
        lst = self.listener(max_clock_skew=5)
        key = keys.load_key(self.key)
        boot = p.new_boot_id()
        good = p.encode('compute-9', boot, 10, time.time(), key)
        bad = {
            p.TRUNCATED: [b'', good[:50], good[:-1]],
            p.OVERSIZED: [good + b'x', os.urandom(60000)],
            p.BAD_MAGIC: [b'XXXX' + good[4:]],
            p.BAD_VERSION: [good[:4] + b'\x07' + good[5:]],
            p.BAD_HMAC: [p.encode('compute-9', boot, 11, time.time(),
                                  b'x' * 32)],
            p.STALE: [p.encode('compute-9', boot, 12, time.time() - 60,
                               key)],
            p.FUTURE: [p.encode('compute-9', boot, 13, time.time() + 60,
                                key)],
        }
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(tx.close)
        tx.sendto(good, lst.addresses[0])
        wait_for(lambda: lst.record('compute-9'), what='good packet')
        for packets in bad.values():
            for data in packets:
                tx.sendto(data, lst.addresses[0])
        tx.sendto(good, lst.addresses[0])  # exact duplicate
        tx.sendto(p.encode('compute-9', boot, 9, time.time(), key),
                  lst.addresses[0])  # older sequence: replay
        expected = {r: len(v) for r, v in bad.items()}
        expected.update({p.DUPLICATE: 1, p.REPLAY: 1})
        wait_for(lambda: lst.rejects.counts == expected,
                 what='rejections %s, have %s' % (expected,
                                                  lst.rejects.counts))
        lst.set_known_hosts(['compute-9'])
        tx.sendto(p.encode('stranger', boot, 1, time.time(), key),
                  lst.addresses[0])
        wait_for(lambda: lst.rejects.counts.get(p.UNKNOWN_HOST),
                 what='unknown host')
        # Still listening after all that.
        tx.sendto(p.encode('compute-9', boot, 20, time.time(), key),
                  lst.addresses[0])
        wait_for(lambda: lst.record('compute-9').sequence == 20,
                 what='listener alive')

    def test_flood_of_garbage_does_not_stop_the_listener(self):
        lst = self.listener()
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(tx.close)
        for i in range(5000):
            tx.sendto(os.urandom(i % 400), lst.addresses[0])
        key = keys.load_key(self.key)
        wait_for(lambda: lst.rejects.total > 0, what='garbage seen')
        tx.sendto(p.encode('compute-8', p.new_boot_id(), 1, time.time(),
                           key), lst.addresses[0])
        wait_for(lambda: lst.record('compute-8'), what='valid after flood')
        self.assertTrue(lst.udp.running)
        # Logged at a bounded rate: a handful of lines, not thousands.
        self.assertLess(self.log.output.count('rejected a packet'), 10)

    def test_handler_bug_does_not_kill_the_thread(self):
        calls = []

        def handle(data, sender):
            calls.append(data)
            if data == b'boom':
                raise RuntimeError('bug')

        udp = udp_mod.UdpListener('test', [('127.0.0.1', 0)], handle, 100)
        udp.start()
        self.addCleanup(udp.stop)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(tx.close)
        tx.sendto(b'boom', udp.addresses[0])
        tx.sendto(b'fine', udp.addresses[0])
        wait_for(lambda: b'fine' in calls, what='second datagram')
        self.assertEqual({'internal_error': 1}, udp.errors.counts)
        udp.stop()
        udp.stop()
        self.assertFalse(udp.running)


class TestParseEndpoint(testtools.TestCase):

    def test_forms(self):
        parse = agent_mod.parse_endpoint
        self.assertEqual(('10.0.0.1', 7411), parse('10.0.0.1', 7411))
        self.assertEqual(('10.0.0.1', 99), parse('10.0.0.1:99', 7411))
        self.assertEqual(('fd00::1', 7411), parse('fd00::1', 7411))
        self.assertEqual(('fd00::1', 5), parse('[fd00::1]:5', 7411))
        self.assertEqual(('ctl.example', 7411), parse('ctl.example', 7411))
        for bad in ('', ':5', 'a:b', '[::1', '[::1]x', 'h:70000'):
            self.assertRaises(ValueError, parse, bad, 7411)
