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

"""A real libvirtd serving libvirt's test driver on a private socket.

``test:///default`` opened in-process lives as long as its connection:
every ``virsh`` run would see a fresh world. A daemon keeps one world
for all its clients, as long as one connection stays open: this fixture
keeps ``virsh event --loop`` connected for that. The daemon loads no
hypervisor driver modules (``LIBVIRT_DRIVER_DIR`` names an empty
directory): no KVM, no QEMU user, nothing of the machine's libvirt.

Guests are defined with the UUIDs the test chooses (Nova names a
guest's domain with its instance's UUID).
"""

import os
import subprocess

from tests.functional.peers import base

DOMAIN = '''<domain type="test">
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type>hvm</type></os>
</domain>
'''


class LibvirtPeer(base.Peer):
    """libvirtd with the test driver; ``uri`` is what virsh connects to."""

    start_timeout = 20

    def _setUp(self):
        super()._setUp()
        drivers = os.path.join(self.tmpdir, 'no-drivers')
        os.mkdir(drivers)
        conf = os.path.join(self.tmpdir, 'libvirtd.conf')
        with open(conf, 'w') as f:
            f.write('unix_sock_dir = "%s"\nauth_unix_rw = "none"\n'
                    'auth_unix_ro = "none"\n' % self.tmpdir)
        env = dict(os.environ, LIBVIRT_DRIVER_DIR=drivers)
        self.socket = os.path.join(self.tmpdir, 'libvirt-sock')
        self.uri = 'test+unix:///default?socket=%s' % self.socket
        self.daemon = self.spawn('libvirtd', [
            'libvirtd', '-f', conf, '-p', os.path.join(self.tmpdir, 'pid')],
            env=env)
        self.daemon.wait_ready(lambda: os.path.exists(self.socket),
                               self.start_timeout, 'libvirtd socket')
        # Keeps the test driver's world alive between virsh runs.
        self.keeper = self.spawn('virsh-keeper', [
            'virsh', '-c', self.uri, 'event', '--all', '--loop'])
        self.daemon.wait_ready(lambda: self.virsh('list', '--all').ok,
                               self.start_timeout, 'virsh list')
        # The driver's own example guest is not ours.
        self.virsh('destroy', 'test')
        self.virsh('undefine', 'test')

    def virsh(self, *args):
        done = subprocess.run(['virsh', '-c', self.uri, *args],
                              capture_output=True, text=True, timeout=30,
                              check=False)
        done.ok = done.returncode == 0
        return done

    def add_guest(self, name, uuid):
        """Define and start a guest with this UUID."""
        xml = os.path.join(self.tmpdir, '%s.xml' % name)
        with open(xml, 'w') as f:
            f.write(DOMAIN % {'name': name, 'uuid': uuid})
        for args in (('define', xml), ('start', name)):
            done = self.virsh(*args)
            if not done.ok:
                raise base.PeerError('virsh %s: %s' % (args[0], done.stderr))

    def state(self, name):
        return self.virsh('domstate', name).stdout.strip()
