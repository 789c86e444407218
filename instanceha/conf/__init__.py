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

"""Configuration: one module per option group, found automatically.

Each module in this package defines GROUP ('DEFAULT' or a group
name) and OPTS; it may also define register_opts(conf) and
list_opts() when it needs more than plain options (the [nova] group
adds keystoneauth's), and validate(conf) for checks that involve more
than one option. Adding a group is adding a module: nothing else changes.
"""

import importlib
import pkgutil
from types import ModuleType

from oslo_config import cfg

from instanceha import exceptions

CONF = cfg.CONF

_SKIP = {'opts'}


def _modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name not in _SKIP and not m.name.startswith('_'))
    return [importlib.import_module('%s.%s' % (__name__, n)) for n in names]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every group's options on conf."""
    for mod in _modules():
        if hasattr(mod, 'register_opts'):
            mod.register_opts(conf)
        else:
            group = None if mod.GROUP == 'DEFAULT' else mod.GROUP
            conf.register_opts(mod.OPTS, group=group)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every (group, options) pair, in the form oslo-config-generator wants."""
    result: dict[str, list[cfg.Opt]] = {}
    for mod in _modules():
        pairs = mod.list_opts() if hasattr(mod, 'list_opts') else [
            (mod.GROUP, mod.OPTS)]
        for group, opts in pairs:
            result.setdefault(group, []).extend(opts)
    return sorted(result.items(), key=lambda kv: (kv[0] != 'DEFAULT', kv[0]))


def _check_values(conf: cfg.ConfigOpts) -> None:
    for group, opts in list_opts():
        node = conf if group == 'DEFAULT' else conf[group]
        for opt in opts:
            try:
                getattr(node, opt.dest)
            except (cfg.ConfigFileValueError, ValueError) as exc:
                detail = str(exc).split(' is not valid: ')[-1]
                raise exceptions.ConfigurationError(
                    'invalid value for option [%s] %s: %s'
                    % (group, opt.name, detail)) from None
            except cfg.NoSuchOptError:
                # Auth plugin options are registered only once the plugin
                # is loaded; keystoneauth validates those itself.
                continue


def validate(conf: cfg.ConfigOpts) -> None:
    """Reject malformed, out-of-range and contradictory settings.

    oslo.config checks types and bounds lazily, when an option is first
    read; reading every option here turns a bad value into a start-up
    error naming the option instead of a failure in the middle of an
    outage. Values are never clamped.
    """
    _check_values(conf)
    for mod in _modules():
        if hasattr(mod, 'validate'):
            mod.validate(conf)


def parse_args(argv: list[str], conf: cfg.ConfigOpts = CONF,
               **kwargs) -> None:
    """Register options and logging options, then parse the command line."""
    from oslo_log import log

    from instanceha import version

    register_opts(conf)
    log.register_options(conf)
    kwargs.setdefault('version', version.version_string())
    conf(argv, project='instanceha', **kwargs)
