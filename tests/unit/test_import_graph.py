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

"""The engine decides and imports nothing above it.

Every import statement in ``instanceha/engine`` (at the top of a module or
inside a function) is read from the source; none may reach the outside
systems' modules, the health endpoint, the production wiring or the
simulator. The check runs on the text, so a lazy import cannot hide.
"""

import ast
import pathlib

import fixtures
import testtools

import instanceha

PACKAGE = pathlib.Path(instanceha.__file__).parent

#: Modules the engine must never import (their sub-modules neither).
FORBIDDEN = ('instanceha.adapters', 'instanceha.daemon', 'instanceha.ops',
             'instanceha.sim', 'instanceha.cmd')


def imported(path: pathlib.Path) -> set[str]:
    """Every module name an import statement of ``path`` names."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            # "from instanceha.adapters import coordination" names a module too.
            names.update('%s.%s' % (node.module, alias.name)
                         for alias in node.names)
    return names


def violations(package: pathlib.Path) -> list[str]:
    found = []
    for path in sorted((package / 'engine').rglob('*.py')):
        for name in sorted(imported(path)):
            if any(name == bad or name.startswith(bad + '.')
                   for bad in FORBIDDEN):
                found.append('%s imports %s' % (
                    path.relative_to(package.parent), name))
    return found


class TestEngineImports(testtools.TestCase):

    def test_engine_imports_nothing_above_it(self):
        self.assertEqual([], violations(PACKAGE))

    def test_ports_are_a_floor(self):
        # The interfaces build on the model alone: the guard, the power
        # proof and the environment's assembly build on them, never the
        # reverse (no circle through the engine).
        ours = {name for name in imported(PACKAGE / 'engine' / 'ports.py')
                if name.startswith('instanceha')}
        self.assertEqual({'instanceha.engine', 'instanceha.engine.model'},
                         ours)

    def test_the_check_can_fail(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        engine = pathlib.Path(tmp, 'pkg', 'engine')
        engine.mkdir(parents=True)
        (engine / 'bad.py').write_text(
            'def f():\n    from instanceha.adapters import coordination\n'
            '    import instanceha.sim.world\n')
        self.assertEqual(
            ['pkg/engine/bad.py imports instanceha.adapters',
             'pkg/engine/bad.py imports instanceha.adapters.coordination',
             'pkg/engine/bad.py imports instanceha.sim.world'],
            violations(pathlib.Path(tmp, 'pkg')))
