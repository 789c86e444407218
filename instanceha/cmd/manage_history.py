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

"""instanceha-manage hosts history / instances history.

"What happened to host X" and "where is my VM, and why did it move",
answered from Nova's own records (see :mod:`instanceha.ops.history`), so it
works from any machine with the configuration, whichever copy of the
service was leader, after any restart.
"""

import datetime
import re

from oslo_config import cfg

from instanceha.cmd import common
from instanceha import exceptions
from instanceha.ops import history

_RELATIVE = re.compile(r'^(\d+)([mhd])$')
_UNITS = {'m': 'minutes', 'h': 'hours', 'd': 'days'}


def parse_since(text: str, now: datetime.datetime) -> datetime.datetime:
    """``--since``: a UTC time (2026-11-30T12:00:00Z) or an age (12h)."""
    m = _RELATIVE.match(text.strip())
    if m:
        return now - datetime.timedelta(**{_UNITS[m.group(2)]:
                                           int(m.group(1))})
    for fmt in ('%Y-%m-%dT%H:%M:%SZ', '%Y-%m-%dT%H:%M:%S', '%Y-%m-%d'):
        try:
            return datetime.datetime.strptime(text.strip(), fmt).replace(
                tzinfo=datetime.timezone.utc)
        except ValueError:
            continue
    raise exceptions.ConfigurationError(
        '--since %r: give a UTC time such as 2026-11-30T12:00:00Z or '
        '2026-11-30, or an age such as 90m, 12h or 7d' % text)


def _ts(when) -> str | None:
    return when.strftime('%Y-%m-%dT%H:%M:%SZ') if when else None


MOVE_HEADER = ('SERVER', 'SOURCE', 'TARGET', 'REQUEST ID', 'ATTEMPTS',
               'RESULT', 'STARTED', 'FINISHED')


def _move_row(m: history.InstanceMove) -> tuple:
    return (m.server, m.source, m.target, m.request_id, m.attempts,
            m.result, _ts(m.started), _ts(m.finished))


def format_host(host: str, recoveries: list[history.Recovery]) -> str:
    if not recoveries:
        return 'no recovery or emptying of %s in Nova\'s records' % host
    out = []
    for rec in recoveries:
        if rec.kind == 'emptied':
            out.append('%s emptied by live migration: %s, started %s, %d '
                       'instance(s)%s' % (
                           host, 'in maintenance' if rec.state else
                           'finished', _ts(rec.started) or '-',
                           len(rec.instances),
                           ' (%s)' % rec.note if rec.note else ''))
        else:
            out.append('recovery %s of %s: %s, started %s, %d instance(s)'
                       % (rec.recovery_id or '-', host,
                          rec.state or 'finished', _ts(rec.started) or '-',
                          len(rec.instances)))
        if rec.instances:
            out.append(common.table(
                MOVE_HEADER + ('BY',), [_move_row(m) + (m.user,)
                                        for m in rec.instances]))
        out.append('')
    return '\n'.join(out).rstrip()


def format_instance(server: str, moves: list[history.InstanceMove]) -> str:
    if not moves:
        return ('no evacuation or migration of %s in Nova\'s records'
                % server)
    return common.table(
        ('MOVE',) + MOVE_HEADER[1:] + ('BY',),
        [(m.kind,) + _move_row(m)[1:] + (m.user,) for m in moves])


def _cloud(conf):
    from instanceha.daemon import service
    return service.make_cloud(conf)


def _hosts_history(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    since = None
    if args.since:
        since = parse_since(args.since,
                            datetime.datetime.now(datetime.timezone.utc))
    recoveries = history.host_history(_cloud(conf), args.host, since=since)
    if args.format == 'json':
        common.print_json([r.as_dict() for r in recoveries])
    else:
        print(format_host(args.host, recoveries))
    return 0


def _instances_history(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    moves = history.instance_history(_cloud(conf), args.server)
    if args.format == 'json':
        common.print_json([m.as_dict() for m in moves])
    else:
        print(format_instance(args.server, moves))
    return 0


def _format_arg(parser) -> None:
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table', help='output format')


def add_host_parser(sub) -> None:
    """``hosts history`` (called by the ``hosts`` group)."""
    hist = sub.add_parser('history', help='past and running recoveries of '
                          'a host, and the times it was emptied by live '
                          'migration (maintenance, proactive evacuation): '
                          'each instance\'s source, target, Nova request '
                          'id, attempts, result and who asked')
    hist.add_argument('host', help='compute host name as Nova lists it')
    hist.add_argument('--since', help='only from this UTC time '
                      '(2026-11-30T12:00:00Z, 2026-11-30) or age (12h, 7d)')
    _format_arg(hist)
    hist.set_defaults(func=_hosts_history)


def add_parsers(subparsers) -> None:
    """Nothing of its own: ``hosts`` and ``instances`` add its commands."""


def add_instance_parser(sub) -> None:
    """``instances history`` (called by the ``instances`` group)."""
    hist = sub.add_parser('history', help='every evacuation and migration '
                          'of an instance, with Nova request ids')
    hist.add_argument('server', help='server id (UUID)')
    _format_arg(hist)
    hist.set_defaults(func=_instances_history)
