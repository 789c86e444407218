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

"""instanceha-manage fencing: validate the fencing file, fence by hand.

``fencing validate`` checks the fencing file and asks every device of
every level of every host for its power state (nothing is powered off),
printing one line per host: ``OK`` with each device's state, ``DEGRADED``
when a level is broken but another works (naming both), ``FAILED`` when
no level works, or the precise problem (invalid entry, unknown host).
With ``--nova`` it also asks Nova for its compute hosts and reports
those without an entry (never evacuated) and entries naming no compute.
Run it after every change of the file and of a BMC password: a broken
fencing device is found now, not during an outage.

Exit status of ``validate`` (:data:`EXIT_CODES`): 0 every host OK, 1 a
host FAILED (or invalid, unknown, not configured), 2 the file itself
cannot be used, 3 no host FAILED but at least one DEGRADED.

``fencing status|off|on HOST`` are in :mod:`manage_fencing_power`.
"""

from concurrent import futures
import dataclasses
import logging

from oslo_config import cfg

from instanceha.cmd import common
from instanceha.cmd import manage_fencing_power
from instanceha.ops import manual_fencing as manual
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import topology

#: ``fencing validate`` exit status, shown by ``--help`` and the docs.
EXIT_CODES = (
    (0, 'every host OK'),
    (1, 'at least one host FAILED (no level works), INVALID, unknown or '
        'not configured'),
    (2, 'the fencing file (or the command line) cannot be used'),
    (3, 'no host FAILED, but at least one DEGRADED (a level broken, '
        'another works)'),
)


@dataclasses.dataclass(frozen=True)
class Row:
    """One host's line: OK, DEGRADED, FAILED or another problem."""

    host: str
    status: str
    text: str

    @property
    def ok(self) -> bool:
        return self.status == manual.OK


def check_host(entry: config.HostEntry) -> tuple[bool, str]:
    """(ok, text) for one host: every device's power status."""
    status, text = manual.verdict(manual.read_levels(entry))
    return status == manual.OK, text


def validate_hosts(conf: cfg.ConfigOpts, path: str | None = None,
                   host: str | None = None, parallel: int = 8
                   ) -> list[Row]:
    """One :class:`Row` per entry of the file (or one host), in order."""
    fencing = config.load(conf, path, strict=False, only=host)
    if host is not None and not fencing.names():
        return [Row(host, manual.FAILED, 'unknown host: no entry in the '
                    'fencing file %s' % fencing.path)]
    rows = {key: Row(key, manual.INVALID, 'INVALID: %s' % msg)
            for key, msg in fencing.errors.items()}
    with futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        jobs = {key: pool.submit(manual.read_levels, entry)
                for key, entry in fencing.hosts.items()}
        for key, job in jobs.items():
            rows[key] = Row(key, *manual.verdict(job.result()))
    topology.Topology(conf, fencing).stop()
    return [rows[key] for key in sorted(rows)]


def validate_file(conf: cfg.ConfigOpts, path: str | None = None,
                  host: str | None = None, parallel: int = 8
                  ) -> list[tuple[str, bool, str]]:
    """[(host, ok, text)] for the file (or one host), in host order."""
    return [(r.host, r.ok, r.text)
            for r in validate_hosts(conf, path, host, parallel)]


def compare_with_nova(conf: cfg.ConfigOpts, rows: list[Row],
                      path: str | None) -> list[Row]:
    """Add Nova's view: computes without an entry, entries without a compute.

    A compute host without an entry is never evacuated; an entry that
    names no compute (a typo, a renamed host) protects nobody.
    """
    from instanceha.adapters import nova

    services = nova.NovaCloud(conf).list_services()
    computes = sorted({s.host for s in services})
    assigned, problems = config.assign_hosts([r.host for r in rows],
                                             computes, path or '')
    used = set(assigned.values())
    result = []
    for row in rows:
        named = [h for h in computes if config.same_host(h, row.host)]
        if row.host not in used and named:
            row = Row(row.host, 'AMBIGUOUS', 'AMBIGUOUS entry: it matches '
                      'Nova hosts %s and serves none of them; device check: '
                      '%s' % (', '.join(named), row.text))
        elif row.host not in used:
            row = Row(row.host, 'UNKNOWN', 'unknown host: no nova-compute '
                      'service of that name (entry protects nothing); '
                      'device check: ' + row.text)
        result.append(row)
    for host in computes:
        if host in problems:
            result.append(Row(host, 'AMBIGUOUS', 'AMBIGUOUS: %s; it cannot '
                              'be fenced and is never evacuated'
                              % problems[host]))
        elif host not in assigned:
            result.append(Row(host, 'NOT CONFIGURED', 'NOT CONFIGURED: Nova '
                              'compute host without a fencing entry: it is '
                              'never evacuated'))
    return sorted(result, key=lambda r: r.host)


def exit_code(rows: list[Row]) -> int:
    """The documented exit status (:data:`EXIT_CODES`) of these rows."""
    if not rows or any(r.status not in (manual.OK, manual.DEGRADED)
                       for r in rows):
        return 1
    return 3 if any(r.status == manual.DEGRADED for r in rows) else 0


def quiet_sushy(conf: cfg.ConfigOpts) -> None:
    """Silence sushy below CRITICAL (unless --debug).

    sushy logs its own retries and fall-backs at WARNING/ERROR; the
    lines these commands print say what matters.
    """
    if not conf.debug:
        logging.getLogger('sushy').setLevel(logging.CRITICAL)


def _validate(conf: cfg.ConfigOpts) -> int:
    quiet_sushy(conf)
    # dest names that no oslo option uses: the parsed arguments share
    # the option namespace.
    args = conf.command
    rows = validate_hosts(conf, args.fencing_file, args.fencing_host,
                          args.fencing_parallel)
    if args.fencing_nova and args.fencing_host is None:
        rows = compare_with_nova(conf, rows, args.fencing_file)
    if not rows:
        print('%s: no hosts' % (args.fencing_file
                                or conf.fencing.config_file))
    for row in rows:
        print('%s: %s' % (row.host, row.text))
    return exit_code(rows)


def exit_codes_help(codes) -> str:
    return 'Exit status: ' + '; '.join('%d %s' % c for c in codes) + '.'


def add_parsers(subparsers) -> None:
    fencing = subparsers.add_parser('fencing', help='fencing devices')
    sub = fencing.add_subparsers(dest='action', required=True)
    parser = sub.add_parser(
        'validate', help='check the fencing file and query the power state '
        'of every device (powers nothing off); one line per host: OK, '
        'DEGRADED (a level broken, another works) or FAILED (no level '
        'works)', description='Check the fencing file and ask every device '
        'for its power state; nothing is powered off. ' +
        exit_codes_help(EXIT_CODES))
    parser.add_argument('--host', dest='fencing_host', help='check only this host (short or '
                        'fully qualified name)')
    parser.add_argument('--file', dest='fencing_file', help='fencing file to check (default: '
                        '[fencing] config_file)')
    parser.add_argument('--parallel', dest='fencing_parallel',
                        type=common.positive_int, default=8,
                        help='hosts checked at the same time (default 8)')
    parser.add_argument('--nova', dest='fencing_nova', action='store_true',
                        help='also list Nova compute hosts without an entry '
                        'and entries naming no Nova compute host (reads '
                        'the [nova] options)')
    parser.set_defaults(func=_validate)
    manage_fencing_power.add_parsers(sub)
