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

"""instanceha-manage maintenance: planned maintenance of a compute host.

``start HOST`` disables the host with a maintenance reason (the running
service then leaves it alone: no fencing, no evacuation, even if it goes
down) and live-migrates its instances away; ``status HOST`` shows what
is left; ``end HOST [--return]`` enables it and optionally brings the
instances home. See :mod:`instanceha.ops.maintenance`.
"""

import sys

from oslo_config import cfg

from instanceha.cmd import common
from instanceha.ops import maintenance


def _maint(conf) -> maintenance.Maintenance:
    from instanceha.daemon import service

    def out(text: str) -> None:
        print(text, flush=True)

    return maintenance.Maintenance(service.make_cloud(conf), out=out)


def _summary(outcomes: list[maintenance.Outcome]) -> int:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.result] = counts.get(o.result, 0) + 1
    parts = ['%d %s' % (n, r) for r, n in sorted(counts.items())]
    print('summary: %s' % (', '.join(parts) or 'nothing to move'))
    bad = [o for o in outcomes if o.result in ('failed', 'unknown')]
    for o in bad:
        print('NOT MOVED: %s' % o.line(), file=sys.stderr)
    return 1 if bad else 0


def _start(conf: cfg.ConfigOpts) -> int:
    from instanceha.adapters import clock
    from instanceha.conf import filters
    c = conf.command
    if 'enabled' not in filters.names(conf):
        # Without it the service would treat a host in maintenance that
        # goes down as failed: fence it and evacuate its instances.
        print('WARNING: [filters] enabled does not list "enabled": the '
              'running service does not leave hosts in maintenance alone '
              '(a host going down during maintenance would be fenced and '
              'evacuated)', file=sys.stderr, flush=True)
    return _summary(_maint(conf).start(
        c.host, clock.SystemClock().now(), note=c.reason or '',
        wait=c.wait, timeout=c.timeout, concurrency=c.concurrency,
        shutoff=c.shutoff))


def _status(conf: cfg.ConfigOpts) -> int:
    row = _maint(conf).status(conf.command.host)
    if conf.command.json:
        common.print_json(row)
        return 0
    if row['maintenance']:
        print('host %s: in maintenance since %s%s' % (
            row['host'], row['since'],
            ' (%s)' % row['note'] if row['note'] else ''))
    else:
        print('host %s: not in maintenance (status %s, state %s)' % (
            row['host'], row['status'], row['state']))
    print('nova-compute: %s, %s' % (row['status'], row['state']))
    print('instances still on the host: %d' % len(row['on_host']))
    for s in row['on_host']:
        print('  %s (%s) %s%s' % (s['name'], s['id'], s['status'],
                                  ' task %s' % s['task_state']
                                  if s['task_state'] else ''))
    print('instances away from home: %d' % len(row['away']))
    for s in row['away']:
        print('  %s (%s) on %s, %s' % (s['name'], s['id'], s['host'],
                                       s['status']))
    for m in row['migrating']:
        print('live migration %s of %s: %s -> %s' % (
            m['id'], m['server'], m['status'], m['dest'] or '?'))
    return 0


def _end(conf: cfg.ConfigOpts) -> int:
    c = conf.command
    return _summary(_maint(conf).end(
        c.host, back=c.back, wait=c.wait, timeout=c.timeout,
        concurrency=c.concurrency))


def _waiting(parser) -> None:
    parser.add_argument('--wait', action='store_true',
                        help='follow every migration to its end and exit '
                             '1 if any failed (without it the requests '
                             'are sent and Nova queues them)')
    parser.add_argument('--timeout', type=common.positive_int, default=600,
                        help='seconds to follow one migration (with '
                             '--wait; default 600)')
    parser.add_argument('--concurrency', type=common.positive_int, default=2,
                        help='migrations followed at once (with --wait; '
                             'default 2)')


def add_parsers(subparsers) -> None:
    m = subparsers.add_parser(
        'maintenance', help='planned maintenance of a compute host: live '
        'migration away, no fencing')
    sub = m.add_subparsers(dest='action', required=True)
    start = sub.add_parser(
        'start', help='disable HOST for maintenance and live-migrate its '
        'instances away')
    start.add_argument('host', help='compute host name as Nova lists it')
    start.add_argument('--reason', help='note added to the disabled '
                       'reason (e.g. a ticket)')
    start.add_argument('--shutoff', choices=maintenance.SHUTOFF_CHOICES,
                       default='leave',
                       help='SHUTOFF instances: leave them on the host '
                            '(default; they do not run, nothing is '
                            'disrupted) or cold-migrate them')
    _waiting(start)
    start.set_defaults(func=_start)
    status = sub.add_parser('status', help='maintenance state of HOST, '
                            'instances left and away')
    status.add_argument('host', help='compute host name as Nova lists it')
    common.json_flag(status, 'one JSON object')
    status.set_defaults(func=_status)
    end = sub.add_parser('end', help='enable HOST again')
    end.add_argument('host', help='compute host name as Nova lists it')
    end.add_argument('--return', dest='back', action='store_true',
                     help='live-migrate the instances that left HOST '
                          'back to it')
    _waiting(end)
    end.set_defaults(func=_end)
