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

"""instanceha-manage: operator commands.

Each command group lives in its own module under ``instanceha.cmd`` and
offers ``add_parsers(subparsers)``; every parser it adds sets ``func``
(called with the parsed config, returns the exit code). Adding a group is
adding its module name to ``COMMAND_MODULES``.
"""

import importlib
import sys

from oslo_config import cfg

from instanceha.cmd import common

PROG = 'instanceha-manage'

COMMAND_MODULES = [
    'instanceha.cmd.manage_capacity',
    'instanceha.cmd.manage_config',
    'instanceha.cmd.manage_fencing',
    'instanceha.cmd.manage_heartbeat',
    'instanceha.cmd.manage_history',
    'instanceha.cmd.manage_hosts',
    'instanceha.cmd.manage_import',
    'instanceha.cmd.manage_instances',
    'instanceha.cmd.manage_maintenance',
    'instanceha.cmd.manage_pause',
    'instanceha.cmd.manage_plan',
]


def _add_parsers(subparsers) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parsers(subparsers)


#: Options of the program itself that operators also type after the
#: command ("instanceha-manage plan --config-file F"); argparse only
#: accepts them before it, so they are moved there.
_GLOBAL_OPTS = ('--config-file', '--config-dir')


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move --config-file/--config-dir (and their values) to the front."""
    front: list[str] = []
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTS:
            front += [arg, next(args, '')]
        elif arg.split('=', 1)[0] in _GLOBAL_OPTS:
            front.append(arg)
        else:
            rest.append(arg)
    return front + rest


def main(argv: list[str] | None = None) -> int:
    from instanceha.cmd import manage_import

    argv = hoist_global_options(manage_import.rename_options(
        sys.argv[1:] if argv is None else argv))
    conf = cfg.CONF
    conf.register_cli_opt(cfg.SubCommandOpt(
        'command', title='commands', handler=_add_parsers,
        help='Run "%s COMMAND --help" for the options of a command.'
        % PROG))

    def body() -> int:
        common.setup(PROG, argv, conf)
        return conf.command.func(conf)

    return common.run(PROG, body, json_output=common.wants_json(argv))


if __name__ == '__main__':
    sys.exit(main())
