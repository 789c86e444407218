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

"""RabbitPeer: a private node of Debian's rabbitmq-server.

Its own node name, AMQP, distribution and epmd ports (all free ones) and
its own data, log and cookie directory, so it never meets the system's
node or another test's. Started as the real broker script (as root it runs
the node as root: the Debian wrapper would switch to the rabbitmq user
and lose the private environment). Stopped with ``rabbitmqctl stop``, and
its epmd with ``epmd -kill``.
"""

import os
import subprocess

from tests.functional.peers import base

SBIN = '/usr/lib/rabbitmq/bin'


class RabbitPeer(base.Peer):
    """``url`` is the oslo.messaging transport URL (guest on loopback)."""

    start_timeout = 60

    def _setUp(self):
        if not os.access(os.path.join(SBIN, 'rabbitmq-server'), os.X_OK):
            raise base.PeerError('rabbitmq-server not found: install the '
                                 'Debian package rabbitmq-server')
        super()._setUp()
        for d in ('mnesia', 'log'):
            os.makedirs(os.path.join(self.tmpdir, d), exist_ok=True)
        plugins = os.path.join(self.tmpdir, 'enabled_plugins')
        with open(plugins, 'w') as f:
            f.write('[].\n')
        self.env = None
        self.process, self.ports = self.spawn_on_free_ports(
            'rabbitmq', self._argv, self._ready, nports=3)
        self.port = self.ports[0]
        self.url = 'rabbit://guest:guest@%s:%d/' % (base.LOOPBACK, self.port)
        self.addCleanup(self.stop)

    def _env_for(self, ports):
        node_port, dist_port, epmd_port = ports
        env = base.helper_env(self.tmpdir, {
            'HOME': self.tmpdir,
            'RABBITMQ_NODENAME': 'instanceha%d@localhost' % node_port,
            'RABBITMQ_NODE_IP_ADDRESS': base.LOOPBACK,
            'RABBITMQ_NODE_PORT': str(node_port),
            'RABBITMQ_DIST_PORT': str(dist_port),
            'ERL_EPMD_PORT': str(epmd_port),
            'ERL_EPMD_ADDRESS': base.LOOPBACK,
            'RABBITMQ_MNESIA_BASE': os.path.join(self.tmpdir, 'mnesia'),
            'RABBITMQ_LOG_BASE': os.path.join(self.tmpdir, 'log'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': os.path.join(
                self.tmpdir, 'enabled_plugins')})
        return env

    def _argv(self, ports):
        # The environment depends on the ports, so it goes through env(1):
        # a retry with new ports gets a matching one.
        env = self._env_for(ports)
        self.env = env
        return ['env', '-i'] + ['%s=%s' % kv for kv in sorted(env.items())] \
            + [os.path.join(SBIN, 'rabbitmq-server')]

    def _ready(self, ports):
        return base.port_open(ports[0])

    def ctl(self, *args, timeout=30):
        """Run rabbitmqctl against this node; returns its output."""
        out = subprocess.run([os.path.join(SBIN, 'rabbitmqctl')] +
                             list(args), env=self.env, capture_output=True,
                             text=True, timeout=timeout)
        if out.returncode:
            raise base.PeerError('rabbitmqctl %s failed: %s' % (
                ' '.join(args), out.stderr.strip() or out.stdout.strip()))
        return out.stdout

    def stop(self):
        """Stop the node (the port is released) and its epmd."""
        if self.process.running:
            try:
                self.ctl('stop', timeout=30)
            except (base.PeerError, subprocess.TimeoutExpired):
                pass
            self.process.stop()
        subprocess.run(['epmd', '-kill'], env=self.env,
                       capture_output=True, timeout=10)

    def start(self):
        """Start the node again on the same ports."""
        self.process.start()
        self.process.wait_ready(lambda: self._ready(self.ports),
                                self.start_timeout)
