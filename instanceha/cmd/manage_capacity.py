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

"""instanceha-manage capacity: could the cloud absorb a host's loss now?

Reads Nova once (every server) and Placement (each host's inventories
and usages), applies the configured filters and reservation strategy,
and prints, for the cloud, each availability zone and each host
aggregate, how many of its hosts may fail at once with every evacuable
instance finding room (N+k), the hosts whose loss could not be absorbed
and why. Exit 0 when the reading succeeded (whatever the answer), 1
when the cloud could not be read, 2 for a configuration error.
"""

from oslo_config import cfg

from instanceha.cmd import common
from instanceha.engine import capacity
from instanceha.plugins import loader


def n_plus(d: capacity.DomainCapacity) -> str:
    """``N+k``, marked when k is only a lower bound."""
    return 'N+%d%s' % (d.tolerance, '' if d.exact else ' (at least)')


def _whole(loss: capacity.Loss) -> str:
    if loss.absorbed:
        return 'yes'
    return 'no (%d of %d instances without room)' % (
        len(loss.packing.unplaced), loss.instances)


def unabsorbed_lines(report: capacity.Report) -> list[str]:
    """Each host whose loss alone is not absorbed, and why (once each)."""
    lines: list[str] = []
    seen: set[str] = set()
    for d in report.domains:
        for loss in d.unabsorbed:
            if loss.failed in seen:
                continue
            seen.add(loss.failed)
            lines.append('%s: %d of %d instances without room' % (
                ', '.join(loss.failed), len(loss.packing.unplaced),
                loss.instances))
            lines.extend(
                '  %s (%s): %s' % (u.need.name, u.need.server_id, u.why)
                for u in loss.packing.unplaced)
    return lines


def format_table(report: capacity.Report, minimum: int = 0) -> str:
    rows = [(d.domain.name, len(d.domain.hosts), n_plus(d),
             'yes' if not d.unabsorbed else 'no', _whole(d.whole))
            for d in report.domains]
    out = [common.table(('DOMAIN', 'HOSTS', 'TOLERATES', 'EACH HOST',
                         'WHOLE DOMAIN'), rows, right=(1,)), '']
    lines = unabsorbed_lines(report)
    if lines:
        out.append('hosts whose loss could not be absorbed:')
        out.extend('  ' + line for line in lines)
    if report.unread:
        out.append('hosts without a Placement reading (they take '
                   'nothing): %s' % ', '.join(report.unread))
    if minimum:
        short = report.short_of(minimum)
        out.append('minimum N+%d per domain: %s' % (
            minimum, 'met' if not short else 'NOT met in %s' % ', '.join(
                d.domain.name for d in short)))
    out.append('how: %s' % report.method)
    return '\n'.join(out)


def _capacity(conf: cfg.ConfigOpts) -> int:
    from instanceha.adapters import nova
    from instanceha.conf import filters
    from instanceha.ops import capacity as ops_capacity

    filtering = loader.load('instanceha.filters', filters.names(conf),
                            '[filters] enabled', conf)
    reservation = loader.load('instanceha.reservation',
                              [conf.reservation.strategy],
                              '[reservation] strategy', conf)[0]
    cloud = nova.NovaCloud(conf)
    report = ops_capacity.assess(cloud, filtering, reservation)
    minimum = conf.capacity.minimum_tolerance
    if conf.command.json:
        body = report.as_dict()
        body['minimum_tolerance'] = minimum
        body['minimum_met'] = not report.short_of(minimum)
        common.print_json(body)
        return 0
    print(format_table(report, minimum))
    print('%d Nova API call(s), %d Placement call(s)' % (
        cloud.api_calls, cloud.placement.api_calls))
    return 0


def add_parsers(subparsers) -> None:
    parser = subparsers.add_parser(
        'capacity', help='say whether the cloud could absorb the loss of '
                         'each host and failure domain now (N+1, N+k), '
                         'from Placement')
    common.json_flag(parser, 'the same facts as one JSON object '
                             '(always parseable)')
    parser.set_defaults(func=_capacity)
