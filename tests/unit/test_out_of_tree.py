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

"""doc/driver-authors.md's distribution, installed and used as a reader would.

The files are written out exactly as the page shows them, pip builds and
installs the distribution (offline, ``--target`` a temporary directory
put on ``PYTHONPATH``: beside instanceha, not into its environment), and
then, each in its own process: ``instanceha-manage drivers list`` shows
its fencing driver and placement strategy, its fencing contract test
passes against its emulator, and its simulator scenario fences the
failed host through the third-party driver and rebuilds every instance
on the host the third-party strategy chose. A few seconds; no network.
"""

import os
import re
import subprocess
import sys

import fixtures
import testtools

from tests.unit import test_docs

BIN = os.path.dirname(sys.executable)
_LINE = re.compile(r'^\s*[\d.]+ (\S+) (\S+) (\S+) ?(.*)$')


def _details(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', text))


class TestOutOfTreeDistribution(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.Timeout(240, gentle=True))
        tmp = self.useFixture(fixtures.TempDir()).path
        self.src = os.path.join(tmp, 'instanceha-acme')
        site = os.path.join(tmp, 'site')
        with open(os.path.join(test_docs.DOC, 'driver-authors.md')) as f:
            files = dict(test_docs._FILE.findall(f.read()))
        for name, text in files.items():
            path = os.path.join(self.src, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(text)
        self.env = dict(os.environ, PYTHONPATH=site,
                        OS_NOVA_DISABLE_EVENTLET_PATCHING='true',
                        PIP_DISABLE_PIP_VERSION_CHECK='1')
        self.run_ok([sys.executable, '-m', 'pip', 'install', '-q',
                     '--no-deps', '--no-build-isolation', '--no-index',
                     '--target', site, self.src])

    def run_ok(self, argv: list[str], cwd: str | None = None) -> str:
        done = subprocess.run(argv, env=self.env, cwd=cwd or self.src,
                              capture_output=True, text=True, timeout=180)
        self.assertEqual(0, done.returncode, '%s failed:\n%s\n%s' % (
            ' '.join(argv), done.stdout[-3000:], done.stderr[-3000:]))
        return done.stdout

    def tool(self, name: str) -> list[str]:
        path = os.path.join(BIN, name)
        if os.path.exists(path):
            return [path]
        module = {'instanceha-manage': 'manage',
                  'instanceha-simulate': 'simulate'}[name]
        return [sys.executable, '-c', 'import sys; from instanceha.cmd '
                'import %s; sys.exit(%s.main())' % (module, module)]

    def test_installed_listed_contract_and_scenario(self):
        listed = self.run_ok(self.tool('instanceha-manage') +
                             ['drivers', 'list'])
        for name in ('acme-pdu', 'acme-pack'):
            self.assertRegex(listed, r'(?m)^\s+%s\s+\S' % name)
        self.assertNotIn('BROKEN', listed)

        self.run_ok([sys.executable, '-m', 'unittest', '-q',
                     'acme_ha.tests.test_pdu'], cwd=os.path.dirname(
                         self.src))

        log = self.run_ok(self.tool('instanceha-simulate') +
                          ['--log', os.path.join(self.src, 'scenario')])
        requested, rebuilt, fenced_by = {}, {}, None
        for line in log.splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            source, host, event, rest = m.groups()
            details = _details(rest)
            if event == 'evacuate_requested':
                requested[details['server']] = details['target']
            elif source == 'nova' and event == 'rebuilt':
                rebuilt[details['server']] = details['dest']
            elif (event == 'host_state' and host == 'compute-1'
                  and details.get('new') == 'fenced'):
                fenced_by = details.get('devices')
        self.assertIn('violations=0', log)
        self.assertEqual('acme-pdu', fenced_by)
        # The strategy chose every target (none left to Nova) and Nova
        # rebuilt every instance exactly there.
        self.assertEqual({'web-1', 'web-2', 'batch-1'}, set(requested))
        self.assertEqual(requested, rebuilt)
        self.assertEqual({'compute-2'}, set(requested.values()))
