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

"""instanceha-simulate: watch instanceha recover a simulated cloud.

Runs the real engine and drivers against a simulated cloud on a
simulated clock and tells the story in plain words: no cloud, no
credentials, a few seconds. With no argument it runs the built-in demo.
"""

import argparse
import logging
import os
import sys
import textwrap
import time

from instanceha.cmd import common
from instanceha import exceptions
from instanceha.sim import golden
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario
from instanceha.sim import story as sim_story
from instanceha import version

PROG = 'instanceha-simulate'
BUILTIN = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'sim', 'scenarios')
#: Where the test cases live in a source checkout.
CASES = os.path.join('tests', 'scenarios', 'cases')


def builtin_names() -> list[str]:
    return sorted(n for n in os.listdir(BUILTIN)
                  if os.path.isdir(os.path.join(BUILTIN, n)))


def case_names(cases_dir: str = CASES) -> list[str]:
    if not os.path.isdir(cases_dir):
        return []
    return sorted(n for n in os.listdir(cases_dir)
                  if os.path.isdir(os.path.join(cases_dir, n)))


def find(name: str) -> str:
    """A scenario directory from a path, a built-in or a test case name."""
    for path in (name, os.path.join(BUILTIN, name),
                 os.path.join(CASES, name)):
        if os.path.isdir(path) and os.path.exists(
                os.path.join(path, 'instanceha.conf')):
            return path
    raise exceptions.ConfigurationError(
        'no scenario %r: give a scenario directory, or one of the built-in '
        'scenarios (%s)%s' % (name, ', '.join(builtin_names()),
                              ' or a case of %s' % CASES
                              if case_names() else ''))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split('\n\n')[1].replace('\n', ' '),
        epilog='Timeline commands: ' + '; '.join(
            '%s %s' % (k, v[0]) for k, v in sim_scenario.COMMANDS.items()))
    p.add_argument('scenario', nargs='?', default='demo',
                   help='scenario directory, built-in scenario or test '
                        'case name (default: demo)')
    mode = p.add_mutually_exclusive_group()
    mode.add_argument('--log', action='store_true',
                      help='print the raw event log (the golden-log format) '
                           'instead of the story')
    mode.add_argument('--check', action='store_true',
                      help='compare the event log with the scenario\'s '
                           'log.expect; print a diff and exit 1 if they '
                           'differ')
    mode.add_argument('--bless', action='store_true',
                      help='after reading it: accept the current log as '
                           'log.expect (refused if an invariant broke)')
    mode.add_argument('--capacity', action='store_true',
                      help='print the failover capacity of the scenario\'s '
                           'cloud as it starts (what instanceha-manage '
                           'capacity says of a real cloud), without running '
                           'the timeline')
    mode.add_argument('--list', action='store_true',
                      help='list the built-in scenarios and test cases')
    p.add_argument('--quiet', action='store_true',
                   help='with the story: do not print the README first')
    p.add_argument('--speed', type=float, metavar='N',
                   help='with the story: play it at N simulated seconds per '
                        'second (default: as fast as possible)')
    p.add_argument('--verbose', action='store_true',
                   help='also show the service\'s own log messages '
                        '(on standard error)')
    version.add_argument(p)
    return p


def _list() -> int:
    for title, base, names in (('built-in', BUILTIN, builtin_names()),
                               ('test cases', CASES, case_names())):
        if not names:
            continue
        print('%s (%s):' % (title, base))
        for name in names:
            print('  %-34s %s' % (name, _summary(os.path.join(base, name))))
    return 0


def _summary(path: str) -> str:
    try:
        with open(os.path.join(path, 'README.md')) as f:
            first = f.readline().strip('# \n')
    except OSError:
        return ''
    return first.split(':', 1)[-1].strip()


def _capacity(sim: runner.Simulation) -> int:
    """The failover capacity of the simulated cloud at its start."""
    from instanceha.cmd import manage_capacity
    from instanceha.ops import capacity
    from instanceha.plugins import loader

    conf = sim.make_conf()
    drivers = loader.load_configured(conf)
    report = capacity.assess(sim.cloud, drivers.filters, drivers.reservation)
    print(manage_capacity.format_table(report,
                                       conf.capacity.minimum_tolerance))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format='  log: %(levelname)s %(name)s: '
                                   '%(message)s')
    else:
        # The story says what matters; the service's warnings about the
        # simulated failures would only repeat it.
        logging.getLogger().addHandler(logging.NullHandler())

    def body() -> int:
        if args.list:
            return _list()
        path = find(args.scenario)
        if args.check or args.bless:
            if args.bless:
                ok, message = golden.bless(path)
            else:
                out = golden.check(path)
                ok, message = out.ok, out.message or '%s: OK' % out.name
            print(message)
            return 0 if ok else 1
        sc = sim_scenario.load(path)
        sim = runner.Simulation(sc)
        if args.capacity:
            return _capacity(sim)
        if args.log:
            result = sim.run()
            print('\n'.join(result.lines))
        else:
            if not args.quiet and sc.readme:
                print(textwrap.indent(sc.readme.strip(), '  '))
                print()
            sim.log.listeners.append(sim_story.Story(
                multi=sim.multi, speed=args.speed, sleep=time.sleep))
            result = sim.run()
        return 1 if result.violations else 0

    try:
        return common.run(PROG, body)
    except BrokenPipeError:
        # The reader (head, less) went away: not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == '__main__':
    sys.exit(main())
