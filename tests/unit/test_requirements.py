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

"""requirements.txt and the pip extras declare exactly what is imported.

A packager installs what requirements.txt says: a library imported but not
declared breaks a fresh install, one declared but never imported is a
dependency for nothing. Imports guarded by ``except ImportError`` are
optional; the coordination backends' client libraries are extras.
"""

import ast
import configparser
import importlib.metadata
import os
import re
import sys

import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, 'instanceha')

#: Imported only where a guard or a driver choice makes them optional.
OPTIONAL = {'greenlet'}


def _norm(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def _requirement_names(lines) -> dict[str, str]:
    """{normalized name: the line} of requirement lines."""
    found = {}
    for line in lines:
        line = line.split('#')[0].strip()
        if not line or line.startswith('-'):
            continue
        name = re.split(r'[<>=!~;\[ ]', line, maxsplit=1)[0]
        found[_norm(name)] = line
    return found


def runtime_requirements() -> dict[str, str]:
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        return _requirement_names(f)


def extras() -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    if not parser.has_section('extras'):
        return {}
    return {name: _requirement_names(value.splitlines())
            for name, value in parser.items('extras')}


def _guarded(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside ``try: ... except ImportError``."""
    lines = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        names = set()
        for handler in node.handlers:
            for sub in ast.walk(handler.type) if handler.type else ():
                if isinstance(sub, ast.Name):
                    names.add(sub.id)
        if names & {'ImportError', 'ModuleNotFoundError'}:
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        lines.add(sub.lineno)
    return lines


def third_party_imports() -> dict[str, set[str]]:
    """{top-level module: files importing it unguarded} for the package."""
    found: dict[str, set[str]] = {}
    for dirpath, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(dirpath, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            guarded = _guarded(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    mods = [node.module]
                else:
                    continue
                if node.lineno in guarded:
                    continue
                for mod in mods:
                    top = mod.split('.')[0]
                    if (top in sys.stdlib_module_names
                            or top == 'instanceha'):
                        continue
                    found.setdefault(top, set()).add(
                        os.path.relpath(path, ROOT))
    return found


class TestRequirements(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dists = importlib.metadata.packages_distributions()

    def _dist(self, module: str) -> str:
        names = self.dists.get(module)
        self.assertTrue(names, 'no installed distribution provides %s'
                        % module)
        return _norm(names[0])

    def test_every_import_is_declared_and_nothing_else(self):
        declared = runtime_requirements()
        in_extras = {n for reqs in extras().values() for n in reqs}
        used = set()
        for module, files in sorted(third_party_imports().items()):
            if module in OPTIONAL:
                continue
            dist = self._dist(module)
            used.add(dist)
            self.assertTrue(
                dist in declared or dist in in_extras,
                '%s (distribution %s) is imported by %s but declared '
                'neither in requirements.txt nor in an extra'
                % (module, dist, ', '.join(sorted(files))))
        # pbr is what setup.py runs; tooz loads its backends by name.
        unused = set(declared) - used - {'pbr'}
        self.assertEqual(set(), unused,
                         'declared in requirements.txt, never imported')

    def test_every_runtime_requirement_has_a_lower_bound(self):
        for name, line in runtime_requirements().items():
            self.assertIn('>=', line, '%s has no lower bound' % name)
        for extra, reqs in extras().items():
            for name, line in reqs.items():
                self.assertIn('>=', line, 'extra %s: %s has no lower bound'
                              % (extra, name))

    def test_coordination_backends_are_extras(self):
        found = extras()
        self.assertIn('redis', found.get('redis', {}))
        self.assertIn('etcd3gw', found.get('etcd', {}))
        # Only backends that keep a pause have an extra.
        from instanceha.adapters import pause_store
        self.assertNotIn('zookeeper', found)
        self.assertEqual({'file', 'redis', 'etcd3+http', 'etcd3+https'},
                         set(pause_store.SCHEMES))
        # And the libraries they need are not forced on everyone.
        for name in ('redis', 'etcd3gw', 'kazoo'):
            self.assertNotIn(name, runtime_requirements())

    def test_messaging_notifier_is_an_extra(self):
        # oslo.messaging brings oslo.service and eventlet: only for the
        # messaging notifier, which names the extra when it is missing.
        self.assertIn('oslo-messaging', extras().get('messaging', {}))
        self.assertNotIn('oslo-messaging', runtime_requirements())

    def test_installed_versions_meet_the_lower_bounds(self):
        from packaging import requirements as pkg_req
        for line in runtime_requirements().values():
            req = pkg_req.Requirement(line)
            version = importlib.metadata.version(req.name)
            self.assertTrue(req.specifier.contains(version,
                                                   prereleases=True),
                            '%s installed, requirements.txt says %s'
                            % (version, line))
