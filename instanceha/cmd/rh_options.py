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

"""Red Hat InstanceHA's ``config:`` options, and what each becomes here.

Every option of Red Hat InstanceHA's configuration template is listed in
``OPTIONS`` with the type, default and range its service reads it with
(an out-of-range value is clamped there, a malformed one replaced by the
default). ``convert`` turns each into our options or reports it, in one
of these kinds:

* ``mapped``: written to an option that means the same;
* ``changed``: written, but the meaning differs as the text says;
* ``replaced``: no option needed, instanceha does this another way;
* ``unused``: the value has no effect (off, or not read by its service);
* ``unconverted``: behaviour that is lost; the import refuses it unless
  the operator accepts the loss (``--allow-unconverted``).

An option this module does not know is ``unconverted``: a new Red Hat
InstanceHA option is never dropped silently.
"""

import dataclasses
from typing import Any
from typing import Protocol

from oslo_log import log


@dataclasses.dataclass(frozen=True)
class RhOption:
    """How Red Hat InstanceHA reads one option."""

    kind: str
    default: Any
    low: int | None = None
    high: int | None = None


_I = RhOption
OPTIONS: dict[str, RhOption] = {
    'DISABLED': _I('bool', False), 'LOGLEVEL': _I('str', 'INFO'),
    'SSL_VERIFY': _I('bool', True),
    'POLL': _I('int', 45, 15, 600), 'DELTA': _I('int', 30, 10, 300),
    'THRESHOLD': _I('int', 50, 0, 100),
    'MAX_HOSTS_PER_CYCLE': _I('int', 10, 1, 200),
    'K8S_API_CHECK_INTERVAL': _I('int', 15, 5, 120),
    'CHECK_HEARTBEAT': _I('bool', False),
    'HEARTBEAT_TIMEOUT': _I('int', 120, 30, 600),
    'HEARTBEAT_CLIFF_THRESHOLD': _I('int', 50, 10, 100),
    'HEARTBEAT_CLIFF_MAX_CYCLES': _I('int', 3, 1, 20),
    'CHECK_KDUMP': _I('bool', False), 'KDUMP_TIMEOUT': _I('int', 30, 5, 300),
    'FENCING_TIMEOUT': _I('int', 30, 5, 120),
    # In the template only: its service does not read it.
    'WATCHDOG_TIMEOUT': _I('int', 60),
    'WORKERS': _I('int', 4, 1, 100),
    'SMART_EVACUATION': _I('bool', False),
    'ORCHESTRATED_RESTART': _I('bool', False),
    'DELAY': _I('int', 0, 0, 300),
    'EVACUATION_MAX_THREADS': _I('int', 32, 1, 512),
    'EVACUATION_RETRIES': _I('int', 5, 1, 20),
    'EVACUATION_STAGGER': _I('int', 0, 0, 60),
    'EVACUATION_TIMEOUT': _I('int', 300, 60, 3600),
    'EVACUABLE_TAG': _I('str', 'evacuable'),
    'TAGGED_IMAGES': _I('bool', True), 'TAGGED_FLAVORS': _I('bool', True),
    'TAGGED_AGGREGATES': _I('bool', True),
    'SKIP_SERVERS_WITH_NAME': _I('list', []),
    'RESERVED_HOSTS': _I('bool', False),
    'FORCE_RESERVED_HOST_EVACUATION': _I('bool', False),
    'FORCE_ENABLE': _I('bool', False), 'LEAVE_DISABLED': _I('bool', False),
    'HASH_INTERVAL': _I('int', 60, 30, 300),
}

#: Red Hat InstanceHA's words for true (anything else is false).
TRUE_WORDS = ('true', '1', 'yes', 'on', 'enabled')

#: Option -> (our group, our option, what changed meaning or None).
SIMPLE = {
    'EVACUABLE_TAG': ('tagging', 'evacuable_tag', None),
    'DELTA': ('DEFAULT', 'delta', None),
    'POLL': ('DEFAULT', 'poll', None),
    'THRESHOLD': ('DEFAULT', 'threshold', (
        'counted over the hosts the filters keep (eligible hosts), and a '
        'blocked cycle is logged and retried every poll')),
    'WORKERS': ('DEFAULT', 'workers', None),
    'SMART_EVACUATION': ('DEFAULT', 'smart_evacuation', None),
    'LEAVE_DISABLED': ('DEFAULT', 'leave_disabled', (
        'the host is also left powered off, not powered back on')),
    'FORCE_ENABLE': ('DEFAULT', 'force_enable', (
        'never re-enables a host smart evacuation marked FAILED: an '
        'operator clears it ("instanceha-manage hosts clear")')),
    'KDUMP_TIMEOUT': ('kdump', 'kdump_timeout', None),
    'DISABLED': ('DEFAULT', 'disabled', None),
    'FENCING_TIMEOUT': ('fencing', 'device_timeout', (
        'seconds each device may take to confirm a power change; the whole '
        'fencing of a host is bounded by [fencing] chain_timeout')),
    'TAGGED_IMAGES': ('tagging', 'tagged_images', None),
    'TAGGED_FLAVORS': ('tagging', 'tagged_flavors', None),
    'TAGGED_AGGREGATES': ('tagging', 'tagged_aggregates', None),
    'MAX_HOSTS_PER_CYCLE': ('gates', 'max_hosts_per_cycle', (
        'the hosts started in one cycle are taken in host name order (Red '
        'Hat InstanceHA: in the order Nova lists them); the others wait for '
        'the next cycle')),
    'EVACUATION_RETRIES': ('evacuation', 'retries', None),
    'EVACUATION_TIMEOUT': ('evacuation', 'timeout', None),
    'EVACUATION_MAX_THREADS': ('evacuation', 'max_in_flight', (
        'one cap over all hosts being recovered; Red Hat InstanceHA divided '
        'it by WORKERS into a share per host')),
    'SKIP_SERVERS_WITH_NAME': ('filters', 'skip_instance_names', None),
    'HEARTBEAT_TIMEOUT': ('heartbeat', 'timeout', None),
    'HEARTBEAT_CLIFF_THRESHOLD': ('heartbeat', 'mass_loss_share', None),
    'HEARTBEAT_CLIFF_MAX_CYCLES': ('heartbeat', 'mass_loss_hold_cycles',
                                   None),
}

#: Options instanceha covers another way: nothing to convert or lose.
REPLACED = {
    'HASH_INTERVAL': (
        'the liveness hash of its pod; instanceha answers liveness and '
        'readiness probes on its health endpoint (/livez, /readyz, '
        '[health] port): point the probes there'),
    'K8S_API_CHECK_INTERVAL': (
        'Red Hat InstanceHA stops fencing when it cannot reach the '
        'Kubernetes API (a sign it is cut off); instanceha fences only while '
        'it holds the leadership of [coordination] backend_url, which a copy '
        'cut off from the backend loses within [coordination] lease_time: '
        'use a backend (redis, etcd) that a cut-off copy cannot reach'),
    'WATCHDOG_TIMEOUT': (
        'not read by Red Hat InstanceHA\'s service; instanceha counts a host '
        'as off only when one of its fencing devices confirms it'),
}


class Report(Protocol):
    """Where conversions are written and reported (manage_import.Result)."""

    def set(self, group: str, option: str, value: Any) -> str: ...

    def note(self, kind: str, source: str, text: str) -> None: ...


def read_value(name: str, raw: Any, report: Report) -> Any:
    """An option's value as Red Hat InstanceHA reads it (type, clamping)."""
    option = OPTIONS[name]
    if option.kind == 'bool':
        return str(raw).strip().lower() in TRUE_WORDS
    if option.kind == 'list':
        items = raw if isinstance(raw, list) else str(raw or '').split(',')
        return [str(v).strip() for v in items if str(v).strip()]
    if option.kind == 'str':
        return str(raw)
    try:
        value = int(str(raw).strip())
    except ValueError:
        report.note('changed', name, 'not an integer (%r): Red Hat '
                    'InstanceHA used its default %d, so does this import'
                    % (raw, option.default))
        return option.default
    low = value if option.low is None else option.low
    high = value if option.high is None else option.high
    clamped = min(max(value, low), high)
    if clamped != value:
        report.note('changed', name, '%d is outside %d-%d: Red Hat '
                    'InstanceHA used %d, so does this import'
                    % (value, low, high, clamped))
    return clamped


def convert(config: dict, report: Report) -> dict[str, Any]:
    """``config:`` -> our options and the report. Returns effective values.

    An option that is not given behaves as Red Hat InstanceHA's default
    there, which is written explicitly where ours differs.
    """
    given = {str(k).upper(): v for k, v in config.items()}
    for name in sorted(set(given) - set(OPTIONS)):
        report.note('unconverted', name, 'not a Red Hat InstanceHA option '
                    'known to this importer (a newer version?): find out '
                    'what it does; nothing was written for it')
    values = {name: (read_value(name, given[name], report) if name in given
                     else opt.default) for name, opt in OPTIONS.items()}
    for name in sorted(OPTIONS):
        source = name if name in given else '%s (unset)' % name
        if name in SIMPLE:
            group, option, changed = SIMPLE[name]
            setting = report.set(group, option, values[name])
            report.note('mapped', source, setting)
            if changed and values[name] is not False:
                report.note('changed', name, '%s: %s' % (setting, changed))
        elif name in REPLACED and name in given:
            report.note('replaced', name, REPLACED[name])
    _tagging(values, report)
    _kdump(values, given, report)
    _reserved(values, given, report)
    _orchestrated(values, given, report)
    _not_converted(values, given, report)
    if not values['SSL_VERIFY']:
        report.note('changed', 'SSL_VERIFY', 'false: verify: false on every '
                    'redfish and bmh device, whose certificates are then '
                    'not checked (Nova\'s are, as in Red Hat InstanceHA)')
    elif 'SSL_VERIFY' in given:
        report.note('mapped', 'SSL_VERIFY', 'true: the certificates of '
                    'redfish and bmh devices are checked (their default)')
    _loglevel(values, given, report)
    return values


def _tagging(values: dict, report: Report) -> None:
    tagged = [n for n in ('TAGGED_IMAGES', 'TAGGED_FLAVORS',
                          'TAGGED_AGGREGATES') if values[n]]
    if tagged:
        report.note('changed', ', '.join(tagged), '%s: kept Red Hat '
                    'InstanceHA\'s rule that when nothing carries the tag '
                    'every instance is evacuated; set it to false to '
                    'evacuate only tagged instances' % report.set(
                        'tagging', 'all_when_none_tagged', True))


def _kdump(values: dict, given: dict, report: Report) -> None:
    if values['CHECK_KDUMP']:
        report.note('mapped', 'CHECK_KDUMP', '%s and %s' % (
            report.set('kdump', 'check_kdump', True),
            report.set('detection', 'detectors', ['nova', 'kdump'])))
    elif 'CHECK_KDUMP' in given:
        report.note('mapped', 'CHECK_KDUMP', report.set(
            'kdump', 'check_kdump', False))


def _reserved(values: dict, given: dict, report: Report) -> None:
    if not values['RESERVED_HOSTS']:
        if 'RESERVED_HOSTS' in given:
            report.note('mapped', 'RESERVED_HOSTS', report.set(
                'reservation', 'strategy', 'none'))
        if 'FORCE_RESERVED_HOST_EVACUATION' in given:
            report.note('unused', 'FORCE_RESERVED_HOST_EVACUATION',
                        'RESERVED_HOSTS is off')
        return
    report.note('mapped', 'RESERVED_HOSTS', report.set(
        'reservation', 'strategy', 'reserved-hosts'))
    report.note('changed', 'RESERVED_HOSTS', '%s: a spare is a disabled host '
                'whose disabled_reason starts with "reserved" (Red Hat '
                'InstanceHA: contains it)' % report.set(
                    'reservation', 'reserved_reason', 'reserved'))
    report.note('mapped', 'FORCE_RESERVED_HOST_EVACUATION', report.set(
        'reservation', 'evacuate_to_spare',
        values['FORCE_RESERVED_HOST_EVACUATION']))
    report.note('changed', 'RESERVED_HOSTS', '%s: a spare is looked for in '
                'the failed host\'s aggregate or zone first, then anywhere'
                % report.set('reservation', 'same_domain_only', False))


def _orchestrated(values: dict, given: dict, report: Report) -> None:
    if not values['ORCHESTRATED_RESTART']:
        if 'ORCHESTRATED_RESTART' in given:
            report.note('mapped', 'ORCHESTRATED_RESTART', 'off: the '
                        'evacuation strategy follows SMART_EVACUATION')
        return
    setting = report.set('evacuation', 'strategy', 'orchestrated')
    if values['SMART_EVACUATION']:
        # Orchestrated follows every rebuild as smart does; our
        # smart_evacuation names the smart strategy only.
        setting += ' (and %s)' % report.set('DEFAULT', 'smart_evacuation',
                                            False)
    report.note('mapped', 'ORCHESTRATED_RESTART', setting)
    report.note('changed', 'ORCHESTRATED_RESTART', (
        '%s: instances are restarted by priority, highest first, read from '
        'the flavor\'s extra specs (missing: 0). Red Hat InstanceHA read '
        'the server metadata instanceha:restart_priority (1-1000, missing: '
        '500) and kept instanceha:restart_group members together; groups '
        'are not supported. Put the priorities on the flavors, or add '
        '"server" to [evacuation] priority_sources to read the server '
        'metadata as before (tenants can then steer the order)'
        % report.set('evacuation', 'priority_key',
                     'instanceha:restart_priority')))


def _not_converted(values: dict, given: dict, report: Report) -> None:
    lost = {
        'DELAY': (values['DELAY'] > 0, (
            'Red Hat InstanceHA waited %d s after fencing a host before '
            'evacuating it. instanceha evacuates as soon as a fencing device '
            'confirms the host is off, with no extra wait and no option for '
            'one: if the wait gave shared storage time to release the '
            'host\'s locks, make sure it releases them on power-off'
            % values['DELAY'])),
        'EVACUATION_STAGGER': (values['EVACUATION_STAGGER'] > 0, (
            'Red Hat InstanceHA started one instance\'s evacuation every '
            '%d s. instanceha starts as many as [evacuation] max_in_flight '
            'allows at once: lower max_in_flight to spread the load'
            % values['EVACUATION_STAGGER'])),
        'CHECK_HEARTBEAT': (values['CHECK_HEARTBEAT'], (
            'Red Hat InstanceHA confirmed failures with heartbeats from its '
            'own senders, which instanceha cannot read. instanceha\'s '
            'heartbeat detector needs instanceha-heartbeat-agent on every '
            'compute host and a shared key: deploy them (see the operations '
            'guide, heartbeat detector), '
            'then add heartbeat to [detection] detectors and set '
            '[heartbeat] key_file; the HEARTBEAT_* values are already '
            'written to [heartbeat]')),
    }
    for name, (is_lost, text) in lost.items():
        if is_lost:
            report.note('unconverted', name, text)
        elif name in given:
            report.note('unused', name, 'off (%s)' % _ini_word(values[name]))
    if not values['CHECK_HEARTBEAT']:
        for name in ('HEARTBEAT_TIMEOUT', 'HEARTBEAT_CLIFF_THRESHOLD',
                     'HEARTBEAT_CLIFF_MAX_CYCLES'):
            if name in given:
                report.note('unused', name, 'CHECK_HEARTBEAT is off (written '
                            'to [heartbeat] for when the heartbeat detector '
                            'is on)')


def _ini_word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_LEVELS = ('DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL')


def _loglevel(values: dict, given: dict, report: Report) -> None:
    level = str(values['LOGLEVEL']).strip().upper()
    if level not in _LEVELS:
        report.note('unconverted', 'LOGLEVEL', '%r is not a log level (Red '
                    'Hat InstanceHA refuses to start with it): choose one of '
                    '%s' % (values['LOGLEVEL'], ', '.join(_LEVELS)))
    elif level == 'DEBUG':
        report.note('mapped', 'LOGLEVEL', report.set('DEFAULT', 'debug',
                                                     True))
    elif level != 'INFO':
        report.set('DEFAULT', 'default_log_levels',
                   log.get_default_log_levels() + ['instanceha=%s' % level])
        report.note('mapped', 'LOGLEVEL', '[DEFAULT] default_log_levels = '
                    '(oslo.log\'s defaults),instanceha=%s' % level)
    elif 'LOGLEVEL' in given:
        report.note('mapped', 'LOGLEVEL', 'INFO (instanceha\'s default)')
