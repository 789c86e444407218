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

"""An imported Red Hat InstanceHA fencing file, checked on real BMCs.

The Red Hat InstanceHA fencing.yaml is written here in that project's
documented format, pointing at IPMI and Redfish BMC emulators; the
imported file must then pass ``fencing validate`` (every device asked
for its power state) and ``config validate``.
"""

import os

import fixtures
import testtools

from tests.functional import peers
from tests.unit import test_import_rh as helpers


class TestImportedFencingOnRealBmcs(testtools.TestCase):

    def test_imported_file_passes_fencing_validate(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        ipmi = self.useFixture(peers.IpmiBmcPeer(hosts=['compute-1']))
        redfish = self.useFixture(peers.RedfishPeer(hosts=['compute-2']))
        fencing = os.path.join(tmp, 'rh-fencing.yaml')
        with open(fencing, 'w') as f:
            f.write(
                'FencingConfig:\n'
                '  compute-1:\n    agent: fence_ipmilan\n'
                '    ipaddr: 127.0.0.1\n    ipport: "%d"\n'
                '    login: %s\n    passwd: %s\n'
                '  compute-2:\n    agent: fence_redfish\n'
                '    ipaddr: 127.0.0.1\n    ipport: "%d"\n'
                '    login: %s\n    passwd: %s\n    tls: "false"\n'
                '    uuid: %s\n'
                % (ipmi.ports['compute-1'], ipmi.username, ipmi.password,
                   redfish.port, redfish.username, redfish.password,
                   redfish.systems['compute-2']))
        out = os.path.join(tmp, 'out')
        res = helpers.import_rh(out, fencing=fencing)
        self.assertEqual(0, res.returncode, res.stderr)
        for secret in (ipmi.password, redfish.password):
            self.assertNotIn(secret, res.stdout + res.stderr)
        confs = ['--config-file', os.path.join(out, 'instanceha.conf'),
                 '--config-file', os.path.join(out, 'secrets.conf')]
        res = helpers.manage(*confs, 'fencing', 'validate')
        self.assertEqual(0, res.returncode, res.stdout + res.stderr)
        self.assertIn('compute-1: OK', res.stdout)
        self.assertIn('compute-2: OK', res.stdout)
        res = helpers.manage(*confs, 'config', 'validate')
        self.assertEqual(0, res.returncode, res.stderr)
