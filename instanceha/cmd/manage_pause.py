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

"""instanceha-manage pause / resume / status: disarm instance HA for a while.

``pause --reason TEXT --for 30m`` stores a pause in the coordination
backend; every copy of the service reads it at its next poll and, while
it lasts, keeps watching and planning but fences, marks and evacuates
nothing new (recoveries already past fencing finish). A pause must have
an end (``--for``) unless ``--indefinite`` says on purpose that it has
none: while paused, nothing is protected. ``resume`` lifts it; ``status``
shows it. Exit status 0 on success, 1 when the backend cannot be reached,
2 for a bad command line.
"""

import datetime
import getpass
import json
import re
import socket

from oslo_config import cfg

from instanceha.adapters import pause_store
from instanceha.engine import pause as pause_mod
from instanceha import exceptions

_UNITS = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400}
_DURATION = re.compile(r'(\d+(?:\.\d+)?)([smhd])')


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``30m``, ``2h``, ``1h30m`` or ``1d``."""
    text = (text or '').strip().lower()
    if re.fullmatch(r'\d+(\.\d+)?', text):
        seconds = float(text)
    elif text and _DURATION.sub('', text) == '':
        seconds = sum(float(n) * _UNITS[u] for n, u in
                      _DURATION.findall(text))
    else:
        raise ValueError('--for %r: expected a duration such as 90s, 30m, '
                         '2h or 1h30m' % text)
    if seconds <= 0:
        raise ValueError('--for %r: a pause must last more than 0 s' % text)
    return seconds


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(
        microsecond=0)


def _nova_skew(conf: cfg.ConfigOpts) -> float | None:
    """Seconds this machine's clock is ahead of Nova's; None: unknown.

    One read of the compute services (Nova's ``Date`` header). A pause
    kept on Nova's clock ends at the same moment for every copy of the
    service, whatever their clocks say; without Nova (not configured
    here, or unreachable) it is kept on this machine's clock.
    """
    from instanceha.daemon import service
    try:
        cloud = service.make_cloud(conf)
        cloud.read_services()
    except (exceptions.InstanceHAError, cfg.Error) as exc:
        print('Nova\'s time could not be read (%s): the pause is kept on '
              'this machine\'s clock' % exc)
        return None
    return getattr(cloud, 'clock_skew', None) or 0.0


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: no user name in this environment
        user = 'unknown'
    return '%s@%s' % (user, socket.gethostname())


def describe(pause: pause_mod.Pause | None,
             now: datetime.datetime) -> dict:
    """The pause as ``status`` shows it."""
    if pause is None:
        return {'paused': False}
    row = dict(pause.to_dict(), paused=not pause.expired(now),
               expired=pause.expired(now))
    if pause.until is not None:
        row['remaining'] = max(0, int((pause.until - now).total_seconds()))
    return row


def _pause(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    if not (args.reason or '').strip():
        raise exceptions.ConfigurationError(
            '--reason is required: say why instance HA is paused (it is '
            'shown in the log and by status)')
    if args.duration and args.indefinite:
        raise exceptions.ConfigurationError(
            'give either --for DURATION or --indefinite, not both')
    if not args.duration and not args.indefinite:
        raise exceptions.ConfigurationError(
            'a pause needs an end: --for DURATION (e.g. --for 30m); nothing '
            'is protected while paused. Use --indefinite to pause with no '
            'end on purpose')
    until = None
    skew = _nova_skew(conf)
    now = _now()
    if skew is not None:
        now = (now - datetime.timedelta(seconds=skew)).replace(microsecond=0)
    if args.duration:
        try:
            until = now + datetime.timedelta(
                seconds=parse_duration(args.duration))
        except ValueError as exc:
            raise exceptions.ConfigurationError(str(exc)) from None
    pause = pause_mod.Pause(reason=args.reason.strip(), since=now,
                            until=until, by=_who(),
                            nova_clock=skew is not None)
    store = pause_store.from_conf(conf)
    store.set(pause)
    print('instance HA %s (stored in %s); every copy obeys it at its next '
          'poll' % (pause.describe(), store.describe()))
    return 0


def _resume(conf: cfg.ConfigOpts) -> int:
    store = pause_store.from_conf(conf)
    before = store.current()
    store.clear()
    if before is None:
        print('instance HA was not paused; nothing to resume')
    else:
        print('instance HA resumed (was %s); the leader acts again at its '
              'next poll' % before.describe())
    return 0


def _status(conf: cfg.ConfigOpts) -> int:
    store = pause_store.from_conf(conf)
    row = describe(store.current(), _now())
    row['backend'] = store.describe()
    if conf.command.format == 'json':
        print(json.dumps(row, sort_keys=True))
        return 0
    if row.get('paused'):
        end = ('until %s (%d s left)' % (row['until'], row['remaining'])
               if row.get('until') else 'with no end (--indefinite)')
        print('PAUSED %s since %s by %s: %s' % (
            end, row['since'], row['by'] or 'unknown', row['reason']))
        print('  nothing new is fenced or evacuated; run "instanceha-manage '
              'resume" to lift it')
    elif row.get('expired'):
        print('ACTIVE: the pause "%s" ended at %s'
              % (row['reason'], row['until']))
    else:
        print('ACTIVE: instance HA is not paused')
    print('  pause kept in %s' % row['backend'])
    return 0


def add_parsers(subparsers) -> None:
    parser = subparsers.add_parser(
        'pause', help='Pause instance HA on every copy: keep watching, but '
        'fence and evacuate nothing new (needs --for or --indefinite).')
    parser.add_argument('--reason', required=False, default='',
                        help='why (shown in the log and by status)')
    parser.add_argument('--for', dest='duration', metavar='DURATION',
                        help='how long, e.g. 90s, 30m, 2h, 1h30m; the pause '
                        'lifts itself then')
    parser.add_argument('--indefinite', action='store_true',
                        help='pause with no end, until "resume"')
    parser.set_defaults(func=_pause)
    parser = subparsers.add_parser(
        'resume', help='Lift the pause: the leader acts again at its next '
        'poll.')
    parser.set_defaults(func=_resume)
    parser = subparsers.add_parser(
        'status', help='Whether instance HA is paused, until when, and '
        'why.')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.set_defaults(func=_status)
