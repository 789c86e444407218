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

"""The Sphinx documentation builds, with warnings as errors.

What ``tox -e docs`` runs, minus the HTML writing: the guides (the
Markdown files of doc/, included), the option reference and the sample
file generated from the options. test-requirements.txt installs Sphinx
(doc/requirements.txt), so CI never skips this.
"""

import glob
import importlib.util
import os
import re
import subprocess
import sys

import fixtures
import testtools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class TestSphinxDocs(testtools.TestCase):

    def test_docs_build_without_warnings(self):
        for module in ('sphinx', 'myst_parser', 'sphinxcontrib.mermaid'):
            if importlib.util.find_spec(module.split('.')[0]) is None or (
                    '.' in module and importlib.util.find_spec(module)
                    is None):
                self.skipTest('%s is not installed (doc/requirements.txt)'
                              % module)
        out = self.useFixture(fixtures.TempDir()).path
        proc = subprocess.run(
            [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-E',
             '-q', '-b', 'dummy', os.path.join(ROOT, 'doc', 'source'), out],
            capture_output=True, text=True, timeout=600, cwd=ROOT)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        sample = os.path.join(ROOT, 'doc', 'source', '_static',
                              'instanceha.conf.sample')
        with open(sample) as f:
            self.assertIn('[DEFAULT]', f.read())


class TestSiteIsWhole(testtools.TestCase):
    """Every guide is in the site; no warning category is silenced."""

    def test_every_guide_is_included(self):
        source = os.path.join(ROOT, 'doc', 'source')
        included = set()
        for page in glob.glob(os.path.join(source, '**', '*.md'),
                              recursive=True):
            with open(page) as f:
                for target in re.findall(r'```\{include\} (\S+)', f.read()):
                    included.add(os.path.normpath(os.path.join(
                        os.path.dirname(page), target)))
        # doc/README.md is the table of contents the site's index replaces.
        guides = {p for p in glob.glob(os.path.join(ROOT, 'doc', '*.md'))
                  if os.path.basename(p) != 'README.md'}
        self.assertEqual(set(), guides - included)
        with open(os.path.join(source, 'index.rst')) as f:
            index = f.read()
        for page in glob.glob(os.path.join(source, 'guides', '*.md')):
            self.assertIn('guides/%s\n' % os.path.basename(page)[:-3], index)

    def test_no_warning_is_suppressed(self):
        with open(os.path.join(ROOT, 'doc', 'source', 'conf.py')) as f:
            self.assertNotIn('suppress_warnings', f.read())
