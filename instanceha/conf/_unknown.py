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

"""Options and groups in the config files that nothing reads.

oslo.config ignores a key no code registered, so ``pol = 10`` or a
``[fencng]`` section is silently without effect: the operator believes a
setting that is not applied. This reads the files with oslo.config's own
parser and names every such key, with the closest known name.
"""

import difflib
import glob
import importlib.metadata
import os

from oslo_config import cfg


#: The oslo.config.opts entry points whose options a config file may set.
LISTS = ('instanceha', 'oslo.log')


def _known(conf: cfg.ConfigOpts) -> dict[str, set[str]]:
    """{group: option names (deprecated names too)} known to us."""
    known: dict[str, set[str]] = {'DEFAULT': set()}

    def add(group: str | None, opt: cfg.Opt) -> None:
        group = group or 'DEFAULT'
        names = known.setdefault(group, set())
        names.update({opt.dest, opt.name, opt.name.replace('-', '_')})
        for old in opt.deprecated_opts or ():
            if old.name:
                known.setdefault(old.group or group, set()).add(old.name)

    # The option lists oslo-config-generator reads: ours and oslo.log's.
    listed = []
    for ep in importlib.metadata.entry_points(group='oslo.config.opts'):
        if ep.name in LISTS:
            listed.extend(ep.load()())
    for group, opts in listed:
        name = group.name if isinstance(group, cfg.OptGroup) else group
        for opt in opts:
            add(name, opt)
    # What is registered now: keystoneauth's auth plugin options (after
    # the plugin was loaded), drivers' own groups, CLI options.
    for key in conf:
        try:
            value = conf[key]
        except (cfg.Error, ValueError):  # a bad value: a known option
            value = None
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            known.setdefault(key, set()).update(value)
        else:
            known['DEFAULT'].add(key)
    return known


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files oslo.config read, in order."""
    files = list(getattr(conf, 'config_file', None) or [])
    config_dir = getattr(conf, 'config_dir', None)
    if config_dir:
        files += sorted(glob.glob(os.path.join(config_dir, '*.conf')))
    return files


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1,
                                      cutoff=0.6)
    return '; did you mean %s?' % close[0] if close else ''


def group_name(section: str) -> str:
    """The group a file's ``[section]`` sets, as oslo.config reads it.

    oslo.config matches group names in any case (``[Coordination]`` sets
    ``[coordination]``), except DEFAULT, which must be upper case.
    """
    return section if section == 'DEFAULT' else section.lower()


def find(conf: cfg.ConfigOpts) -> list[str]:
    """One message per unknown group or option, naming file and key."""
    known = _known(conf)
    messages = []
    for path in config_files(conf):
        sections: dict = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue  # oslo.config itself reported it while parsing
        for written, items in sections.items():
            section = group_name(written)
            if section not in known:
                hint = _suggest(section, known)
                hint = hint.replace('mean ', 'mean [').replace('?', ']?')
                messages.append('%s: unknown group [%s] (none of its %d '
                                'option(s) is read)%s'
                                % (path, written, len(items), hint))
                continue
            for key in items:
                if key in known[section]:
                    continue
                elsewhere = sorted(g for g, names in known.items()
                                   if key in names)
                if elsewhere:
                    hint = '; it belongs in [%s]' % elsewhere[0]
                else:
                    hint = _suggest(key, known[section])
                messages.append('%s: unknown option [%s] %s (ignored)%s'
                                % (path, written, key, hint))
    return messages
