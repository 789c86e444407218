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

"""instanceha-manage fencing validate: is every host fenceable right now?

Checks the fencing file and asks every device of every level of every
host for its power state (nothing is powered off), printing one line per
host: ``OK`` with each device's state, or the precise problem (invalid
entry, authentication failed, unreachable, unknown host, timed out).
With ``--nova`` it also asks Nova for its compute hosts and reports
those without an entry (never evacuated) and entries naming no compute.
Exit status 0 when every host is OK, 1 otherwise, 2 when the file itself
cannot be used. Run it after every change of the file and of a BMC
password: a broken fencing device is found now, not during an outage.
"""

from concurrent import futures
import logging

from oslo_config import cfg

from instanceha import exceptions
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import topology


def check_host(entry: config.HostEntry) -> tuple[bool, str]:
    """(ok, text) for one host: every device's power status."""
    parts, problems = [], []
    for index, level in enumerate(entry.levels, 1):
        states = []
        for drv in level:
            try:
                state = drv.power_status()
            except exceptions.FencingError as exc:
                problems.append('level %d %s' % (index, getattr(
                    exc, 'short', exc)))
                states.append('%s: FAILED' % drv.device)
                continue
            except Exception as exc:  # a driver bug must still be reported
                problems.append('level %d device %s: unexpected %s: %s' % (
                    index, drv.device, type(exc).__name__, drv.redact(
                        str(exc))))
                states.append('%s: FAILED' % drv.device)
                continue
            note = (' (noop: proves nothing)' if drv.name == 'noop' else '')
            states.append('%s %s%s' % (drv.device, state.value, note))
        parts.append('level %d: %s' % (index, ', '.join(states)))
    if problems:
        return False, 'FAILED: %s' % ' | '.join(problems)
    return True, 'OK (%s)' % '; '.join(parts)


def validate_file(conf: cfg.ConfigOpts, path: str | None = None,
                  host: str | None = None, parallel: int = 8
                  ) -> list[tuple[str, bool, str]]:
    """[(host, ok, text)] for the file (or one host), in host order."""
    fencing = config.load(conf, path, strict=False, only=host)
    if host is not None and not fencing.names():
        return [(host, False, 'unknown host: no entry in the fencing file '
                 '%s' % fencing.path)]
    rows = {key: (False, 'INVALID: %s' % msg)
            for key, msg in fencing.errors.items()}
    with futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        jobs = {key: pool.submit(check_host, entry)
                for key, entry in fencing.hosts.items()}
        for key, job in jobs.items():
            rows[key] = job.result()
    topology.Topology(conf, fencing).stop()
    return [(key, *rows[key]) for key in sorted(rows)]


def compare_with_nova(conf: cfg.ConfigOpts,
                      rows: list[tuple[str, bool, str]], path: str | None
                      ) -> list[tuple[str, bool, str]]:
    """Add Nova's view: computes without an entry, entries without a compute.

    A compute host without an entry is never evacuated (R9); an entry
    that names no compute (a typo, a renamed host) protects nobody.
    """
    from instanceha.cloud import nova

    services = nova.NovaCloud(conf).list_services()
    computes = sorted({s.host for s in services})
    keys = [key for key, _, _ in rows]
    assigned, problems = config.assign_hosts(keys, computes, path or '')
    used = set(assigned.values())
    result = []
    for key, ok, text in rows:
        named = [h for h in computes if config.same_host(h, key)]
        if key not in used and named:
            ok, text = False, 'AMBIGUOUS entry: it matches Nova hosts %s ' \
                'and serves none of them; device check: %s' % (
                    ', '.join(named), text)
        elif key not in used:
            ok, text = False, 'unknown host: no nova-compute service of ' \
                'that name (entry protects nothing); device check: ' + text
        result.append((key, ok, text))
    for host in computes:
        if host in problems:
            result.append((host, False, 'AMBIGUOUS: %s; it cannot be '
                           'fenced and is never evacuated' % problems[host]))
        elif host not in assigned:
            result.append((host, False, 'NOT CONFIGURED: Nova compute host '
                           'without a fencing entry: it is never evacuated'))
    return sorted(result)


def _validate(conf: cfg.ConfigOpts) -> int:
    if not conf.debug:
        # sushy logs its own retries and fall-backs at WARNING/ERROR; the
        # one line per host below says what matters.
        logging.getLogger('sushy').setLevel(logging.CRITICAL)
    # dest names that no oslo option uses: the parsed arguments share
    # the option namespace.
    args = conf.command
    rows = validate_file(conf, args.fencing_file, args.fencing_host,
                         args.fencing_parallel)
    if args.fencing_nova and args.fencing_host is None:
        rows = compare_with_nova(conf, rows, args.fencing_file)
    if not rows:
        print('%s: no hosts' % (args.fencing_file
                                or conf.fencing.config_file))
    for key, ok, text in rows:
        print('%s: %s' % (key, text))
    return 0 if rows and all(ok for _, ok, _ in rows) else 1


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def add_parsers(subparsers) -> None:
    fencing = subparsers.add_parser('fencing', help='fencing devices')
    sub = fencing.add_subparsers(dest='action', required=True)
    parser = sub.add_parser(
        'validate', help='check the fencing file and query the power state '
        'of every device (powers nothing off); one line per host')
    parser.add_argument('--host', dest='fencing_host', help='check only this host (short or '
                        'fully qualified name)')
    parser.add_argument('--file', dest='fencing_file', help='fencing file to check (default: '
                        '[fencing] config_file)')
    parser.add_argument('--parallel', dest='fencing_parallel',
                        type=_positive, default=8,
                        help='hosts checked at the same time (default 8)')
    parser.add_argument('--nova', dest='fencing_nova', action='store_true',
                        help='also list Nova compute hosts without an entry '
                        'and entries naming no Nova compute host (reads '
                        'the [nova] options)')
    parser.set_defaults(func=_validate)
