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

"""instanceha-manage fencing status|off|on HOST: fencing by hand.

``status`` asks every device of every level of the host for its power
state and changes nothing. ``off`` fences the host through its levels in
order, exactly as the service does (same file, drivers, retries and
chain timeout); ``on`` powers it on through its levels in order. Both
ask for a confirmation (``--yes`` answers it; without a terminal and
without ``--yes`` they refuse) and are refused while the service holds
the host in a recovery, which they read from Nova (the marker on the
host's compute service, the ``[nova]`` options), so they give the same
answer on every machine. See :mod:`instanceha.ops.manual_fencing`.
"""

import sys

from oslo_config import cfg

from instanceha import exceptions
from instanceha.ops import manual_fencing as manual
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import topology

#: Exit status of ``status``.
STATUS_EXIT_CODES = (
    (0, 'every device answered'),
    (1, 'at least one device did not answer'),
    (2, 'the host has no usable entry, or the fencing file cannot be '
        'used'),
)
#: Exit status of ``off`` and ``on``.
POWER_EXIT_CODES = (
    (0, 'the host reports the new power state'),
    (1, 'no fencing level powered it off (on), or Nova cannot be read'),
    (2, 'the host has no usable entry, or the fencing file cannot be '
        'used'),
    (3, 'refused: instanceha holds the host in a recovery, or the '
        'operation was not confirmed'),
)


def load_entry(conf: cfg.ConfigOpts, host: str, path: str | None
               ) -> config.FencingFile:
    """The fencing file reduced to ``host``'s entry, built and checked.

    :raises ConfigurationError: no entry, or a broken one (naming it).
    """
    fencing = config.load(conf, path, strict=False, only=host)
    if fencing.errors:
        key, message = next(iter(fencing.errors.items()))
        raise exceptions.ConfigurationError(
            'fencing file %s: host %s: %s' % (fencing.path, key, message))
    if not fencing.hosts:
        raise exceptions.ConfigurationError(
            'host %s has no entry in the fencing file %s' % (
                host, fencing.path))
    return fencing


def _status(conf: cfg.ConfigOpts) -> int:
    from instanceha.cmd import manage_fencing

    manage_fencing.quiet_sushy(conf)
    args = conf.command
    fencing = load_entry(conf, args.fencing_target, args.fencing_file)
    try:
        (key, entry), = fencing.hosts.items()
        levels = manual.read_levels(entry)
    finally:
        topology.Topology(conf, fencing).stop()
    print('%s (fencing entry %s in %s)' % (args.fencing_target, key,
                                           fencing.path))
    for lv in levels:
        print('  level %d:' % lv.index)
        for d in lv.devices:
            if d.problem is not None:
                prefix = 'device %s (%s): ' % (d.device, d.target)
                said = 'FAILED: ' + d.problem.replace(prefix, '', 1)
            else:
                said = d.state + (' (noop: proves nothing)'
                                  if d.proves_nothing else '')
            print('    %s (%s): %s' % (d.device, d.target, said))
    print('  power: %s' % manual.power_summary(levels))
    return 0 if all(lv.works for lv in levels) else 1


def confirm(what: str, yes: bool) -> None:
    """Ask before ``what`` on a terminal, unless ``--yes`` answered it.

    :raises Refused: no terminal and no ``--yes``, or not answered "yes".
    """
    if yes:
        return
    if not sys.stdin.isatty():
        raise manual.Refused('refused: %s needs a confirmation; add --yes '
                             '(there is no terminal to ask on)' % what)
    answer = input('%s: are you sure? Type "yes" to go on: ' % what)
    if answer.strip().lower() != 'yes':
        raise manual.Refused('not confirmed: nothing was done')


def _power(conf: cfg.ConfigOpts, action: str) -> int:
    from instanceha.cmd import manage_fencing
    from instanceha.daemon import service

    manage_fencing.quiet_sushy(conf)
    args = conf.command
    host = args.fencing_target
    fencing = load_entry(conf, host, args.fencing_file)
    topo = topology.Topology(conf, fencing)
    try:
        confirm('powering host %s %s through its fencing levels'
                % (host, action), args.fencing_yes)
        note, names = manual.check_not_held(service.make_cloud(conf), host)
        topo.learn_hosts(names)
        print('host %s: %s; powering it %s' % (host, note, action))
        try:
            result = manual.power(topo, host, action)
        except exceptions.FencingError as exc:
            print('host %s NOT powered %s: %s' % (host, action, exc))
            return 1
    except manual.Refused as exc:
        print(str(exc))
        return 3
    finally:
        topo.stop()
    print('host %s powered %s by fencing level %d (%s)' % (
        host, action, result.level, ', '.join(result.devices)))
    if action == 'off':
        print('note: instanceha sees a powered-off host as failed: unless it '
              'is disabled in Nova (or instance HA is paused), its '
              'instances are evacuated')
    return 0


def _off(conf: cfg.ConfigOpts) -> int:
    return _power(conf, 'off')


def _on(conf: cfg.ConfigOpts) -> int:
    return _power(conf, 'on')


def add_parsers(sub) -> None:
    """``status``, ``off`` and ``on`` under ``instanceha-manage fencing``."""
    from instanceha.cmd import manage_fencing

    status = sub.add_parser(
        'status', help='the power state each fencing device of HOST '
        'reports, level by level (changes nothing)',
        description='Ask every device of every fencing level of HOST for '
        'its power state; nothing is powered off or on. ' +
        manage_fencing.exit_codes_help(STATUS_EXIT_CODES))
    status.set_defaults(func=_status)
    parsers = [status]
    for action, func in (('off', _off), ('on', _on)):
        parser = sub.add_parser(
            action, help='power HOST %s through its fencing levels, as the '
            'service does (asks for a confirmation; refused while '
            'instanceha holds the host in a recovery)' % action,
            description='Power HOST %s through the levels of its entry in '
            'the fencing file, in order, as the service does. Refused while '
            'instanceha holds the host in a recovery (read from the marker '
            'on its compute service in Nova: needs the [nova] options). '
            % action + manage_fencing.exit_codes_help(POWER_EXIT_CODES))
        parser.add_argument('--yes', dest='fencing_yes',
                            action='store_true',
                            help='do not ask for a confirmation')
        parser.set_defaults(func=func)
        parsers.append(parser)
    for parser in parsers:
        parser.add_argument('fencing_target', metavar='HOST',
                            help='compute host (short or fully qualified '
                            'name)')
        parser.add_argument('--file', dest='fencing_file',
                            help='fencing file (default: [fencing] '
                            'config_file)')
