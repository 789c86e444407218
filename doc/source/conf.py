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

"""Sphinx configuration of instanceha's documentation (tox -e docs).

The guides stay the Markdown files in doc/: each page under guides/
includes one of them (myst-parser), so there is one source. The option
reference and the sample file are generated from the options themselves
(oslo.config's Sphinx extensions).
"""

project = 'instanceha'
copyright = 'instanceha developers'

extensions = [
    'myst_parser',
    'sphinxcontrib.mermaid',
    'oslo_config.sphinxext',
    'oslo_config.sphinxconfiggen',
]

source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build']

# The host lifecycle picture is a Mermaid block in doc/host-lifecycle.md.
myst_fence_as_directive = ['mermaid']
# Headings are linked from the guides' own tables of contents.
myst_heading_anchors = 3
# A link in a guide is resolved by the standard domain only (a link to a
# source file, e.g. ../instanceha/engine/states.py, is not a Python or
# oslo.config object).
myst_ref_domains = ['std']
# Links from the guides to files of the repository outside the documents
# (source files, samples) have no page to point to here; those links, and
# every other, are checked by tests/unit/test_docs.py (test_links_resolve).

# etc/instanceha/instanceha.conf.sample, regenerated from the options.
config_generator_config_file = (
    '../../etc/instanceha/instanceha-config-generator.conf')
sample_config_basename = '_static/instanceha'

html_theme = 'alabaster'
html_static_path = ['_static']

#: Markdown files outside doc/ that the guides link to, and the page of
#: the site that includes each (guides/<page>.md). The guides keep the
#: repository paths, which work where they are read as files.
INCLUDED_ELSEWHERE = {
    '../tests/scenarios/README.md': 'scenarios.md',
    '../tests/functional/peers/README.md': 'test-peers.md',
}


def _link_to_pages(app, relative_path, parent_docname, content):
    """Point links to INCLUDED_ELSEWHERE files at their pages of the site.

    Links to other repository files (code, samples) become downloads
    (``:relative-docs: ../`` on each include resolves them).
    """
    for path, page in INCLUDED_ELSEWHERE.items():
        content[0] = content[0].replace('](%s)' % path, '](%s)' % page)


def setup(app):
    app.connect('include-read', _link_to_pages)
