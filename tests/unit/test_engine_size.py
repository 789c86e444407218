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

"""The engine stays readable in one sitting: files and functions bounded.

No engine module over 500 lines and no function over 60: a module that
grows past that holds more than one concern, and is split by concern
(see doc/architecture.md), not by line count.
"""

import ast
import pathlib

import fixtures
import testtools

import instanceha

ENGINE = pathlib.Path(instanceha.__file__).parent / 'engine'
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60


def oversized(folder: pathlib.Path) -> list[str]:
    found = []
    for path in sorted(folder.glob('*.py')):
        text = path.read_text()
        if text.count('\n') > MAX_FILE_LINES:
            found.append('%s: %d lines' % (path.name, text.count('\n')))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    found.append('%s: %s() %d lines' % (path.name,
                                                        node.name, size))
    return found


class TestEngineSize(testtools.TestCase):

    def test_files_and_functions_within_bounds(self):
        self.assertEqual([], oversized(ENGINE))

    def test_the_check_can_fail(self):
        tmp = pathlib.Path(self.useFixture(fixtures.TempDir()).path)
        body = ''.join('    x%d = %d\n' % (i, i) for i in range(61))
        (tmp / 'big.py').write_text('def f():\n' + body)
        self.assertEqual(['big.py: f() 62 lines'], oversized(tmp))
