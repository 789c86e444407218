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

"""The docs under doc/ must not drift from the code they describe.

The state diagram is generated from ``states.TRANSITIONS``; options,
``instanceha-manage`` commands and metrics named in the docs must exist.
"""

import argparse
import datetime
import glob
import importlib
import importlib.util
import os
import re
import sys
import types

import fixtures
import testtools
import yaml

from instanceha.adapters import coordination
from instanceha.cmd import manage
from instanceha import conf as ha_conf
from instanceha.daemon import health
from instanceha.daemon import metrics as metrics_mod
from instanceha.engine import pause as pause_mod
from instanceha.engine import ports
from instanceha.engine import states

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, 'doc')
LIFECYCLE = os.path.join(DOC, 'host-lifecycle.md')

#: Inline code spans and fenced code blocks: where names are written.
_FENCED = re.compile(r'^```.*?^```', re.M | re.S)
_INLINE = re.compile(r'`([^`]+)`')
_OPTION = re.compile(r'^\[(\w+)\]\s+(\w+)')
_MANAGE = re.compile(r'instanceha-manage(?:\s+--config-file\s+\S+)?'
                     r'\s+([a-z]+)(?:\s+([a-z][a-z-]*))?')
_LINK = re.compile(r'\]\(([^)#\s]*)(?:#([^)\s]+))?\)')
_METRIC = re.compile(r'(?<![\w./:-])(instanceha_[a-z_]+)')


def _tool():
    spec = importlib.util.spec_from_file_location(
        'gen_state_diagram', os.path.join(ROOT, 'tools',
                                          'gen-state-diagram.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _docs() -> dict[str, str]:
    result = {}
    for path in sorted(glob.glob(os.path.join(DOC, '*.md'))):
        with open(path) as f:
            result[os.path.basename(path)] = f.read()
    return result


def _code(text: str) -> list[str]:
    """Every code block and inline code span of a Markdown text."""
    blocks = _FENCED.findall(text)
    rest = _FENCED.sub('', text)
    return blocks + _INLINE.findall(rest)


class _Listener:
    """A detector with listener counters, as heartbeat and kdump have."""

    name = 'heartbeat'

    def stats(self):
        return {'accepted': 1, 'rejected': {'replay': 1}, 'hosts': 1}


class _Coordinator(ports.Coordinator):
    """Just enough of a coordinator for the scrape-time gauges."""

    def is_leader(self) -> bool:
        return True

    def host_lock(self, host: str):
        raise NotImplementedError

    def status(self) -> coordination.Status:
        return coordination.Status(
            member_id='m', backend='file:///x', connected=True, leader=True,
            error=None, last_loss=None, members=1, elections_won=1,
            stopping=False)


class TestStateDiagram(testtools.TestCase):

    def test_diagram_matches_the_table(self):
        tool = _tool()
        with open(LIFECYCLE) as f:
            found = tool.current_block(f.read())
        self.assertIsNotNone(found, 'doc/host-lifecycle.md lost its '
                             'state-diagram markers')
        self.assertEqual(
            tool.block(), found,
            'doc/host-lifecycle.md does not match '
            'instanceha.engine.states.TRANSITIONS; run: %s'
            % tool.REGENERATE)

    def test_every_state_is_explained(self):
        with open(LIFECYCLE) as f:
            text = f.read()
        for state in states.HostState:
            self.assertIn('| `%s` |' % state.value, text,
                          'doc/host-lifecycle.md: no row for state %s'
                          % state.value)

    def test_a_missing_label_is_an_error(self):
        tool = _tool()
        del tool.LABELS[('healthy', 'suspect')]
        self.assertRaisesRegex(ValueError, 'no label for healthy -> suspect',
                               tool.transitions)


class TestNamesInDocs(testtools.TestCase):
    """Every option, command and metric the docs name exists."""

    def test_options_exist(self):
        known = {(group, opt.dest) for group, opts in ha_conf.list_opts()
                 for opt in opts}
        known |= {(group, opt.name) for group, opts in ha_conf.list_opts()
                  for opt in opts}
        bad = []
        for name, text in _docs().items():
            for span in _code(text):
                m = _OPTION.match(span)
                if m and m.groups() not in known:
                    bad.append('%s: [%s] %s' % (name, *m.groups()))
        self.assertEqual([], bad, 'options named in doc/ that do not exist')

    def test_manage_commands_exist(self):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        for module in manage.COMMAND_MODULES:
            importlib.import_module(module).add_parsers(sub)
        commands = {}
        for name, cmd in sub.choices.items():
            actions = [a for a in cmd._actions
                       if isinstance(a, argparse._SubParsersAction)]
            commands[name] = set(actions[0].choices) if actions else None
        bad = []
        for doc, text in _docs().items():
            for span in _code(text):
                for group, action in _MANAGE.findall(span):
                    if group not in commands:
                        bad.append('%s: instanceha-manage %s' % (doc, group))
                    elif commands[group] is not None and (
                            action not in commands[group]):
                        bad.append('%s: instanceha-manage %s %s'
                                   % (doc, group, action))
        self.assertEqual([], bad, 'commands named in doc/ that do not exist')

    def test_metrics_exist(self):
        metrics = metrics_mod.Metrics()
        monitor = health.Monitor(metrics, stuck_after=60,
                                 coordinator=_Coordinator())
        monitor.listeners = [_Listener()]
        pause = types.SimpleNamespace(current=lambda: pause_mod.Pause(
            reason='r', since=datetime.datetime.now(datetime.timezone.utc),
            until=datetime.datetime.now(datetime.timezone.utc)))
        metrics.registry.register(metrics_mod.PauseCollector(pause))
        text = metrics.render().decode()
        families = set(re.findall(r'^# TYPE (\S+) ', text, re.M))
        with open(os.path.join(DOC, 'operations.md')) as f:
            spans = _code(f.read())
        named = {name for s in spans for name in _METRIC.findall(s)}
        self.assertTrue(named, 'doc/operations.md names no metric')
        self.assertEqual(set(), named - families,
                         'metrics named in doc/operations.md that '
                         '/metrics does not serve')


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r'[^\w\- ]', '', heading.strip().lower())
    return text.replace(' ', '-')


class TestLinks(testtools.TestCase):

    def test_links_resolve(self):
        docs = _docs()
        anchors = {name: {_slug(h) for h in re.findall(
            r'^#+ (.+)$', _FENCED.sub('', text), re.M)}
            for name, text in docs.items()}
        bad = []
        for name, text in docs.items():
            for target, anchor in _LINK.findall(_FENCED.sub('', text)):
                if target.startswith(('http://', 'https://')):
                    continue
                path = os.path.normpath(os.path.join(DOC, target or name))
                if not os.path.exists(path):
                    bad.append('%s: %s' % (name, target))
                elif anchor and anchor not in anchors.get(
                        os.path.basename(path) if os.path.dirname(path) ==
                        DOC else '', set()):
                    bad.append('%s: %s#%s' % (name, target, anchor))
        self.assertEqual([], bad, 'broken links in doc/')


_FILE = re.compile(r'^File `([^`]+)`:\n\n```[a-z]*\n(.*?)^```\n', re.M | re.S)


class TestDriverAuthorsKit(testtools.TestCase):
    """doc/driver-authors.md's example distribution is real code.

    The files are written out exactly as the page shows them and loaded:
    every entry point names a class of the right kind, each driver is
    built and validated against a real configuration. (Installing the
    distribution and running its contract test and scenario is what a
    reader does; the release check does it too.)
    """

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(DOC, 'driver-authors.md')) as f:
            self.files = dict(_FILE.findall(f.read()))
        for name, text in self.files.items():
            path = os.path.join(self.dir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as f:
                f.write(text)
        self.useFixture(fixtures.PythonPathEntry(self.dir))
        self.addCleanup(self._forget)

    @staticmethod
    def _forget():
        for name in [n for n in sys.modules if n.split('.')[0] ==
                     'acme_ha']:
            del sys.modules[name]

    def test_every_entry_point_loads_a_driver_of_its_kind(self):
        try:
            import tomllib
        except ImportError:  # Python 3.10
            self.skipTest('tomllib needs Python 3.11')
        from instanceha.plugins.detectors import base as detectors
        from instanceha.plugins.evacuation import base as evacuation
        from instanceha.plugins.fencing import base as fencing
        from instanceha.plugins.gates import base as gates

        kinds = {'instanceha.fencing': fencing.FencingDriver,
                 'instanceha.evacuation': evacuation.EvacuationStrategy,
                 'instanceha.gates': gates.Gate,
                 'instanceha.detectors': detectors.Detector}
        project = tomllib.loads(self.files['pyproject.toml'])['project']
        points = project['entry-points']
        self.assertEqual(set(kinds), set(points))
        conf = ha_conf.CONF.__class__()
        ha_conf.register_opts(conf)
        conf([], default_config_files=[])
        for namespace, entries in points.items():
            for name, target in entries.items():
                self.assertTrue(name.startswith('acme-'), name)
                module, _, cls_name = target.partition(':')
                cls = getattr(importlib.import_module(module), cls_name)
                self.assertTrue(issubclass(cls, kinds[namespace]), target)
                self.assertTrue(cls.description, target)
                if namespace != 'instanceha.fencing':
                    cls(conf)

    def test_the_scenario_is_complete(self):
        for name in ('topology.yaml', 'fencing.yaml', 'instanceha.conf',
                     'timeline'):
            self.assertIn('scenario/' + name, self.files)
        fencing = yaml.safe_load(self.files['scenario/fencing.yaml'])
        self.assertIn('acme-pdu', {h['driver'] for h in
                                   fencing['hosts'].values()})
