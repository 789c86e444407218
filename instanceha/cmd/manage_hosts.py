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

"""instanceha-manage hosts: what instanceha did to each compute host.

``hosts list`` reads the markers instanceha writes into each compute
service's ``disabled_reason`` (the durable state of the recovery
workflow) and prints one line per host. ``hosts clear HOST`` hands a host
back after an operator fixed it: a host marked FAILED (an evacuation gave
up, or it could not be powered on) or left disabled (``leave_disabled``)
is never re-enabled automatically. ``clear`` clears ``forced_down`` and
marks it ``waiting_up``: the running service enables it as soon as Nova
reports it up (``--enable`` enables it at once instead).
"""


from oslo_config import cfg

from instanceha.cmd import common
from instanceha.cmd import manage_history
from instanceha.engine import marker
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha import exceptions

S = states.HostState

#: Markers ``clear`` accepts: hosts waiting for an operator, and a host
#: waiting to come up (clearing it again is harmless). The running
#: service follows the table: failed/left_disabled -> waiting_up, or
#: -> healthy with ``--enable``.
CLEARABLE = (S.FAILED, S.LEFT_DISABLED, S.WAITING_UP)


def _cloud(conf):
    from instanceha.daemon import service
    return service.make_cloud(conf)


def describe(service: model.Service) -> dict:
    """One host's row: Nova's view plus the instanceha marker, if any."""
    parsed = reasons.of_service(service).marker
    row = {
        'host': service.host,
        'status': service.status,
        'state': service.state,
        'forced_down': service.forced_down,
        'instanceha': parsed.state.value if parsed else None,
        'since': marker.format_ts(parsed.when) if parsed else None,
        'note': (parsed.details() if parsed
                 else (service.disabled_reason or '')),
    }
    disabled = reasons.of_disabled(service)
    frozen = disabled.frozen
    if disabled.maintenance is not None:
        # In maintenance (by an operator, a shutdown drain, or emptied
        # proactively for its hardware: the note says which and why).
        row.update(instanceha='maintenance',
                   since=marker.format_ts(disabled.maintenance.since),
                   note=disabled.maintenance.note,
                   action='"instanceha-manage maintenance end %s" when done'
                   % service.host)
    elif frozen is not None and frozen.failover:
        # Recorded for failover: recovered once proven off.
        row.update(instanceha='announced',
                   since=marker.format_ts(frozen.since),
                   note='announced a %s; recovered elsewhere once proven '
                   'off (shutdown policy failover)' % frozen.kind)
    elif frozen is not None:
        # Frozen by its announced shutdown (not a recovery marker).
        row.update(instanceha=S.FROZEN.value,
                   since=marker.format_ts(frozen.since),
                   note='announced a %s; expected back by %s%s' % (
                       frozen.kind, marker.format_ts(frozen.until),
                       '; ' + frozen.note if frozen.note else ''))
    if parsed and parsed.recovery:
        row['recovery'] = parsed.recovery
    if parsed and parsed.state is S.FAILED:
        row['action'] = ('fix what the note names, then run '
                         '"instanceha-manage hosts clear %s"'
                         % service.host)
    return row


def _list(conf: cfg.ConfigOpts) -> int:
    snapshot = _cloud(conf).snapshot()
    rows = [describe(s) for s in sorted(snapshot.services,
                                        key=lambda s: s.host)]
    if conf.command.json:
        common.print_json(rows)
        return 0
    header = ('HOST', 'STATUS', 'STATE', 'FORCED', 'INSTANCEHA', 'SINCE',
              'NOTE')
    print(common.table(header, [
        (r['host'], r['status'], r['state'],
         'yes' if r['forced_down'] else 'no', r['instanceha'],
         r['since'], r['note']) for r in rows]))
    return 0


def clear(cloud, host: str, enable: bool, now) -> str:
    """Hand ``host`` back; returns what was done (for the operator)."""
    snapshot = cloud.snapshot()
    service = snapshot.service(host)
    if service is None:
        raise exceptions.InstanceHAError(
            'no nova-compute service on host %r' % host)
    parsed = reasons.of_service(service).marker
    if parsed is None:
        raise exceptions.InstanceHAError(
            'host %s carries no instanceha marker (disabled_reason %r); '
            'nothing to clear' % (host, service.disabled_reason))
    if parsed.state not in CLEARABLE:
        raise exceptions.InstanceHAError(
            'host %s is %s: its recovery is still running; clear only a '
            'host marked %s' % (host, parsed.state.value, ', '.join(
                s.value for s in CLEARABLE[:-1]) + ' or ' +
                CLEARABLE[-1].value))
    try:
        if enable:
            cloud.update_service(service, status=model.ENABLED,
                                 forced_down=False)
            return 'host %s enabled, forced_down cleared' % host
        cloud.update_service(
            service, status=model.DISABLED, forced_down=False,
            # Times on Nova's clock, as the service writes them.
            disabled_reason=parsed.on_nova_clock(snapshot.clock_skew).replace(
                state=S.WAITING_UP,
                when=marker.to_nova(now, snapshot.clock_skew),
                spare=None, gave_up=(),
                stopped=False,
                note='cleared by operator').render())
    except exceptions.CloudError as exc:
        raise exceptions.InstanceHAError(
            'Nova refused to clear host %s: %s (a host whose evacuated '
            'instances were not cleaned up yet must have its nova-compute '
            'running first)' % (host, exc)) from None
    return ('host %s: forced_down cleared; instanceha enables it once Nova '
            'reports it up' % host)


def _clear(conf: cfg.ConfigOpts) -> int:
    from instanceha.adapters import clock
    print(clear(_cloud(conf), conf.command.host, conf.command.enable,
                clock.SystemClock().now()))
    return 0


def add_parsers(subparsers) -> None:
    hosts = subparsers.add_parser(
        'hosts', help='compute hosts and their instanceha state')
    sub = hosts.add_subparsers(dest='action', required=True)
    lst = sub.add_parser('list', help='every compute host with the state '
                         'instanceha recorded in Nova')
    common.json_flag(lst, 'a JSON array with one object per host')
    lst.set_defaults(func=_list)
    clr = sub.add_parser('clear', help='hand a failed, left_disabled or '
                         'waiting_up host back after fixing it')
    clr.add_argument('host', help='compute host name as Nova lists it')
    clr.add_argument('--enable', action='store_true',
                     help='enable it now instead of once Nova reports it '
                          'up')
    clr.set_defaults(func=_clear)
    manage_history.add_host_parser(sub)
