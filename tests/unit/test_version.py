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

"""Every console script answers --version with pbr's version."""

import configparser
import os
import subprocess
import sys

import testtools

from instanceha import version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def console_scripts() -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    lines = parser.get('entry_points', 'console_scripts').splitlines()
    return dict((part.strip() for part in line.split('=', 1))
                for line in lines if line.strip())


class TestVersion(testtools.TestCase):

    def test_every_console_script_prints_the_version(self):
        expected = version.version_string()
        self.assertRegex(expected, r'^\d+\.\d+')
        scripts = console_scripts()
        self.assertIn('instanceha-service', scripts)
        for name, target in sorted(scripts.items()):
            module, func = target.split(':')
            code = ('import sys; from %s import %s as main; '
                    'sys.argv[0] = %r; sys.exit(main(["--version"]))'
                    % (module, func, name))
            proc = subprocess.run([sys.executable, '-c', code],
                                  capture_output=True, text=True,
                                  timeout=120, cwd=ROOT)
            self.assertEqual(0, proc.returncode,
                             '%s --version: %s' % (name, proc.stderr))
            self.assertEqual(expected, proc.stdout.strip(), name)
