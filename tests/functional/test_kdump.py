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

"""The real fence_kdump_send (ClusterLabs fence-agents) against our listener.

Debian's fence-agents package installs the sender in
/usr/libexec/fence-agents; .ci/run installs the package.
"""

import datetime
import os
import shutil
import socket
import subprocess
import time

import fixtures
import testtools

from instanceha import conf as ha_conf
from instanceha.engine import model
from instanceha.heartbeat import kdump
from instanceha.heartbeat import listener as lst_mod
from instanceha.plugins.detectors import base
from instanceha.plugins.detectors import kdump as kd_det
from tests import conf_fixture
from tests.functional import test_heartbeat

CANDIDATES = ('/usr/libexec/fence-agents/fence_kdump_send',
              '/usr/lib/fence-agents/fence_kdump_send',
              '/usr/sbin/fence_kdump_send')


def find_sender() -> str | None:
    for path in CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which('fence_kdump_send')


def wait_for(predicate, what):
    return test_heartbeat.wait_for(predicate, 20, what)


class KdumpCase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.sender = find_sender()
        if self.sender is None:
            self.skipTest('fence_kdump_send not found (Debian package '
                          'fence-agents)')
        self.log = self.useFixture(fixtures.FakeLogger())

    def send(self, port, *args, target='127.0.0.1', count=1):
        res = subprocess.run(
            [self.sender, '-p', str(port), '-c', str(count), '-i', '1',
             *args, target], capture_output=True, text=True, timeout=60)
        self.assertEqual(0, res.returncode, res.stderr)

    def listener(self, endpoints=(('127.0.0.1', 0),), **kwargs):
        lst = lst_mod.KdumpListener(list(endpoints), **kwargs)
        lst.start()
        self.addCleanup(lst.stop)
        return lst


class TestRealFenceKdumpSend(KdumpCase):

    def test_mapped_ipv4_sender(self):
        lst = self.listener(address_map={'127.0.0.1': 'compute-1'},
                            reverse_dns=False)
        before = datetime.datetime.now(datetime.timezone.utc)
        self.send(lst.addresses[0][1], count=2)
        rec = wait_for(lambda: (lst.record('compute-1') or None)
                       and lst.record('compute-1').count == 2
                       and lst.record('compute-1'), 'two messages')
        self.assertEqual('127.0.0.1', rec.address)
        self.assertGreaterEqual(lst.last_message('compute-1'), before)
        self.assertGreater(rec.last, rec.first)
        self.assertEqual({}, lst.rejects.counts)
        self.assertIn('host compute-1 (127.0.0.1) is writing a crash dump',
                      self.log.output)

    def test_ipv6_sender(self):
        if not test_heartbeat.ipv6_loopback():
            self.skipTest('no IPv6 loopback on this machine')
        lst = self.listener([('::1', 0)],
                            address_map={'::1': 'compute-6'},
                            reverse_dns=False)
        self.send(lst.addresses[0][1], '-f', 'ipv6', target='::1')
        wait_for(lambda: lst.last_message('compute-6'), 'v6 message')

    def test_reverse_dns_fallback(self):
        # The real resolver: /etc/hosts names 127.0.0.1 "localhost".
        try:
            name = socket.gethostbyaddr('127.0.0.1')[0].split('.')[0]
        except OSError:
            self.skipTest('127.0.0.1 has no reverse name here')
        lst = self.listener(known_hosts=[name, 'other'])
        self.send(lst.addresses[0][1])
        wait_for(lambda: lst.last_message(name), 'message via rDNS')

    def test_unknown_sender_is_rejected(self):
        lst = self.listener(address_map={'192.0.2.1': 'elsewhere'},
                            reverse_dns=False)
        self.send(lst.addresses[0][1])
        wait_for(lambda: lst.rejects.counts.get(kdump.UNKNOWN_SENDER),
                 'rejection')
        self.assertIsNone(lst.last_message('elsewhere'))
        self.assertIn('127.0.0.1 is not in [kdump] address_map',
                      self.log.output)

    def test_garbage_on_the_kdump_port_is_harmless(self):
        lst = self.listener(address_map={'127.0.0.1': 'compute-1'},
                            reverse_dns=False)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(tx.close)
        for data in (b'', b'\x40\x2a', b'x' * 9000, b'\0' * 8,
                     kdump.encode(5)):
            tx.sendto(data, lst.addresses[0])
        wait_for(lambda: lst.rejects.total == 5, 'five rejections')
        self.assertIsNone(lst.last_message('compute-1'))
        self.send(lst.addresses[0][1])
        wait_for(lambda: lst.last_message('compute-1'), 'then a real one')


class TestKdumpDetectorWithRealSender(KdumpCase):

    def conf(self, **kdump_opts):
        opts = {'listen_addresses': ['127.0.0.1'], 'port': 0,
                'address_map': ['127.0.0.1=compute-1'],
                'reverse_dns': False, 'check_kdump': True}
        opts.update(kdump_opts)
        conf = self.useFixture(conf_fixture.ConfFixture(
            kdump=opts, detection={'detectors': ['nova', 'kdump']})).conf
        ha_conf.validate(conf)
        return conf

    def test_detector_started_like_the_service_does(self):
        det = kd_det.KdumpDetector(self.conf())
        det.validate()
        det.start()
        self.addCleanup(det.stop)
        port = det.listener.addresses[0][1]
        snap = model.Snapshot(
            taken_at=datetime.datetime.now(datetime.timezone.utc),
            services=(model.Service('1', 'compute-1', model.DOWN,
                                    model.ENABLED),
                      model.Service('2', 'compute-2', model.UP,
                                    model.ENABLED)))
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertEqual({}, det.detect(snap, now))
        self.send(port)
        wait_for(lambda: det.last_message('compute-1'), 'message')
        now = datetime.datetime.now(datetime.timezone.utc)
        ev = det.detect(snap, now)
        self.assertEqual(['compute-1'], list(ev))
        self.assertEqual(base.Verdict.FAILED, ev['compute-1'].verdict)
        self.assertTrue(det.is_dumping('compute-1', now))
        # Once it stops sending for message_timeout, it is no longer
        # dumping (checked at a later "now", not by sleeping that long).
        later = now + datetime.timedelta(seconds=31)
        self.assertFalse(det.is_dumping('compute-1', later))
        self.assertEqual({}, det.detect(snap, later))
        det.stop()
        det.stop()
        self.assertIsNone(det.last_message('compute-1'))

    def test_sender_stopping_is_seen(self):
        det = kd_det.KdumpDetector(self.conf())
        det.start()
        self.addCleanup(det.stop)
        self.send(det.listener.addresses[0][1], count=2)
        wait_for(lambda: (det.listener.record('compute-1') or None)
                 and det.listener.record('compute-1').count == 2, 'two')
        last = det.last_message('compute-1')
        time.sleep(0.5)
        self.assertEqual(last, det.last_message('compute-1'))
