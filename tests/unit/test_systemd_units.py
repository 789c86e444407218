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

"""The systemd units in etc/systemd: systemd accepts them, they fit us.

``systemd-analyze verify`` is systemd's own check (tools/run-tests
installs systemd from bindep.txt); the rest ties the units to the
options they depend on, so that changing a default breaks this test and
not a deployment.
"""

import os
import shutil
import subprocess

import testtools

from instanceha.conf import coordination as coord_conf
from instanceha.conf import default as default_conf
from instanceha.conf import heartbeat as heartbeat_conf
from tests.unit import test_version

ROOT = test_version.ROOT
UNITS = os.path.join(ROOT, 'etc', 'systemd')
SERVICE = os.path.join(UNITS, 'instanceha.service')
AGENT = os.path.join(UNITS, 'instanceha-heartbeat-agent.service')


def read_unit(path: str) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values]}}: systemd keys may repeat."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in '#;':
                continue
            if line.startswith('['):
                current = sections.setdefault(line.strip('[]'), {})
                continue
            key, value = line.split('=', 1)
            current.setdefault(key, []).append(value)
    return sections


def _default(opts, name):
    return next(o.default for o in opts if o.dest == name)


def _seconds(text: str) -> float:
    units = {'ms': 0.001, 's': 1, 'min': 60}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * factor
    return float(text)


class TestSystemdUnits(testtools.TestCase):

    def test_systemd_analyze_verify_accepts_both(self):
        tool = shutil.which('systemd-analyze')
        if tool is None:
            self.skipTest('systemd-analyze is not installed (bindep.txt '
                          'lists systemd for the tests)')
        proc = subprocess.run([tool, 'verify', SERVICE, AGENT],
                              capture_output=True, text=True, timeout=120)
        ours = [line for line in (proc.stdout + proc.stderr).splitlines()
                if 'instanceha' in line]
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertEqual([], ours)

    def test_service_fits_its_options(self):
        unit = read_unit(SERVICE)
        svc = unit['Service']
        self.assertNotIn(svc['User'][0], ('root', '0'))
        stop = _seconds(svc['TimeoutStopSec'][0])
        self.assertGreater(stop, _default(default_conf.OPTS,
                                          'shutdown_timeout'))
        # The state directory is the default file:// coordination path.
        state = '/var/lib/%s' % svc['StateDirectory'][0]
        self.assertTrue(coord_conf.DEFAULT_BACKEND_URL.startswith(
            'file://' + state + '/'), coord_conf.DEFAULT_BACKEND_URL)
        self.assertEqual(['on-failure'], svc['Restart'])
        self.assertEqual(['mixed'], svc['KillMode'])
        # The sandbox must not take away what ipmitool and the fence
        # agents need: running programs, the network, a /tmp.
        self.assertNotIn('NoExecPaths', svc)
        families = svc['RestrictAddressFamilies'][0].split()
        self.assertIn('AF_INET', families)
        self.assertIn('AF_INET6', families)
        path = dict(e.split('=', 1) for e in svc['Environment'])['PATH']
        self.assertIn('/usr/sbin', path.split(':'))  # fence agents
        self.assertIn('instanceha-service', svc['ExecStart'][0])

    def test_agent_after_network_with_a_root_only_key(self):
        unit = read_unit(AGENT)
        after = ' '.join(unit['Unit']['After']).split()
        self.assertIn('network-online.target', after)
        self.assertIn('network-online.target', unit['Unit']['Wants'])
        svc = unit['Service']
        name, source = svc['LoadCredential'][0].split(':', 1)
        self.assertEqual(_default(heartbeat_conf.OPTS, 'key_file'), source)
        self.assertIn('--key-file ${CREDENTIALS_DIRECTORY}/%s' % name,
                      svc['ExecStart'][0])
        self.assertIn('instanceha-heartbeat-agent', svc['ExecStart'][0])

    def test_agent_announces_before_what_the_drain_needs_stops(self):
        # Stopping in reverse order of starting: the agent stops (and
        # announces, and waits under the migrate policy) while libvirt,
        # nova-compute and the bus still run.
        from instanceha.cmd import heartbeat_agent
        unit = read_unit(AGENT)
        after = ' '.join(unit['Unit']['After']).split()
        for needed in ('libvirtd.service', 'libvirt-guests.service',
                       'nova-compute.service',
                       'openstack-nova-compute.service', 'dbus.service'):
            self.assertIn(needed, after)
        args = heartbeat_agent.build_parser().parse_args(
            ['--collector', '192.0.2.1', '--key-file', 'k'])
        stop = _seconds(unit['Service']['TimeoutStopSec'][0])
        # The stop path: the watchdog's release (one answer_timeout),
        # then the announcement (another, plus the drain).
        self.assertGreater(stop, 2 * args.answer_timeout + args.drain_timeout)
