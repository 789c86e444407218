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

"""RedisPeer and EtcdPeer: real tooz backends from Debian's binaries."""

import os
import shutil
import socket

import requests

from tests.functional.peers import base


class _BackendPeer(base.Peer):
    """A key-value server a test can take away (stop) and bring back."""

    start_timeout = 30
    binary = None
    package = None

    def _setUp(self):
        path = shutil.which(self.binary) or os.path.join('/usr/bin',
                                                         self.binary)
        if not os.access(path, os.X_OK):
            raise base.PeerError('%s not found: install the Debian package '
                                 '%s' % (self.binary, self.package))
        self.binary_path = path
        super()._setUp()
        self.process, self.ports = self.spawn_on_free_ports(
            self.binary, self._argv, self._ready, nports=self.nports)
        self.port = self.ports[0]

    def stop(self):
        """Take the backend away (SIGTERM; the port is released)."""
        self.process.stop()

    def kill(self):
        """SIGKILL the backend, like a crash."""
        self.process.kill()

    def start(self):
        """Bring the backend back on the same port(s)."""
        self.process.start()
        self.process.wait_ready(lambda: self._ready(self.ports),
                                self.start_timeout)

    def pause(self):
        """Freeze the backend: clients hang until resume()."""
        self.process.pause()

    def resume(self):
        self.process.resume()


class RedisPeer(_BackendPeer):
    """redis-server on 127.0.0.1, no persistence (a restart loses keys).

    ``url`` is the tooz backend URL ``redis://127.0.0.1:PORT``.
    """

    binary = 'redis-server'
    package = 'redis-server'
    nports = 1

    def _argv(self, ports):
        return [self.binary_path, '--port', str(ports[0]),
                '--bind', base.LOOPBACK, '--dir', self.tmpdir,
                '--save', '', '--appendonly', 'no', '--daemonize', 'no',
                '--protected-mode', 'yes', '--logfile', '']

    def _ready(self, ports):
        with socket.create_connection((base.LOOPBACK, ports[0]),
                                      timeout=2) as s:
            s.sendall(b'PING\r\n')
            return s.recv(64).startswith(b'+PONG')

    @property
    def url(self):
        return 'redis://%s:%d' % (base.LOOPBACK, self.port)


class EtcdPeer(_BackendPeer):
    """A single-member etcd (v3 API) on 127.0.0.1; data kept on restart.

    ``url`` is the tooz backend URL ``etcd3+http://127.0.0.1:PORT``
    (tooz's etcd3gw driver, through etcd's HTTP gateway).
    """

    binary = 'etcd'
    package = 'etcd-server'
    nports = 2  # client, peer

    def _argv(self, ports):
        client = 'http://%s:%d' % (base.LOOPBACK, ports[0])
        peer = 'http://%s:%d' % (base.LOOPBACK, ports[1])
        return [self.binary_path, '--name', 'default',
                '--data-dir', os.path.join(self.tmpdir, 'etcd'),
                '--listen-client-urls', client,
                '--advertise-client-urls', client,
                '--listen-peer-urls', peer,
                '--initial-advertise-peer-urls', peer,
                '--initial-cluster', 'default=%s' % peer,
                '--heartbeat-interval', '50', '--election-timeout', '300',
                '--log-level', 'warn']

    def _ready(self, ports):
        resp = requests.get('http://%s:%d/health' % (base.LOOPBACK, ports[0]),
                            timeout=2)
        return resp.ok and resp.json().get('health') == 'true'

    @property
    def url(self):
        return 'etcd3+http://%s:%d' % (base.LOOPBACK, self.port)
