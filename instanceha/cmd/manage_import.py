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

"""instanceha-manage import rh-instanceha: a way in from Red Hat InstanceHA.

Reads Red Hat InstanceHA's files -- ``config.yaml`` (``config:`` with
upper-case options), ``fencing.yaml`` (``FencingConfig:`` one entry per
host), and optionally the ``clouds.yaml`` / ``secure.yaml`` pair of its
Nova credentials -- and writes into ``--out``:

* ``instanceha.conf``: every option that has an equivalent, with Red Hat
  InstanceHA's default made explicit where ours differs, so the service
  behaves as before unless the report says otherwise;
* ``secrets.conf`` (mode 0600): the Nova password, for a second
  ``--config-file``;
* ``fencing.yaml`` with ``*_file`` secrets, and those files under
  ``secrets/`` (mode 0600).

It prints, option by option, what was mapped, what changed meaning and
what has no equivalent. Nothing is written when an input is unusable, and
no secret is ever printed.
"""

import dataclasses
import os
import sys
from typing import Any

import yaml

from instanceha import exceptions

PROG = 'instanceha-manage import rh-instanceha'

#: Red Hat InstanceHA's defaults and clamping ranges: an option it does
#: not find, or finds out of range, behaves like this there.
RH_DEFAULTS: dict[str, Any] = {
    'EVACUABLE_TAG': 'evacuable', 'DELTA': 30, 'POLL': 45, 'THRESHOLD': 50,
    'WORKERS': 4, 'DELAY': 0, 'LOGLEVEL': 'INFO', 'SMART_EVACUATION': False,
    'RESERVED_HOSTS': False, 'FORCE_RESERVED_HOST_EVACUATION': False,
    'TAGGED_IMAGES': True, 'TAGGED_FLAVORS': True, 'TAGGED_AGGREGATES': True,
    'LEAVE_DISABLED': False, 'FORCE_ENABLE': False, 'CHECK_KDUMP': False,
    'KDUMP_TIMEOUT': 30, 'DISABLED': False, 'SSL_VERIFY': True,
    'FENCING_TIMEOUT': 30, 'HASH_INTERVAL': 60,
}
RH_RANGES = {'DELTA': (10, 300), 'POLL': (15, 600), 'THRESHOLD': (0, 100),
             'WORKERS': (1, 50), 'DELAY': (0, 300), 'KDUMP_TIMEOUT': (5, 300),
             'FENCING_TIMEOUT': (5, 120), 'HASH_INTERVAL': (30, 300)}

#: RH option -> (our group, our option, what changed meaning or None).
SIMPLE = {
    'EVACUABLE_TAG': ('tagging', 'evacuable_tag', None),
    'DELTA': ('DEFAULT', 'delta', None),
    'POLL': ('DEFAULT', 'poll', None),
    'THRESHOLD': ('DEFAULT', 'threshold', (
        'counted over the hosts the filters keep (eligible hosts), and a '
        'blocked cycle is logged and retried every poll')),
    'WORKERS': ('DEFAULT', 'workers', (
        'hosts recovered at the same time; evacuation calls in flight are '
        'bounded by [evacuation] max_in_flight, which defaults to it')),
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
}

NO_EQUIVALENT = {
    'DELAY': ('a host is evacuated once its devices prove it off; there is '
              'no fixed wait'),
    'HASH_INTERVAL': ('the health endpoint (/healthz, [health]) reports '
                      'readiness directly'),
}

_BOOLS = ('true', 'yes', 'on', '1')


@dataclasses.dataclass
class Result:
    """What an import produces, before anything is written."""

    conf: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = dataclasses.field(
        default_factory=dict)
    fencing: dict[str, dict] = dataclasses.field(default_factory=dict)
    #: {relative path under --out: content}
    secret_files: dict[str, str] = dataclasses.field(default_factory=dict)
    #: (kind, source, text): kind is mapped, changed or none.
    report: list[tuple[str, str, str]] = dataclasses.field(
        default_factory=list)

    def set(self, group: str, option: str, value: Any) -> str:
        text = _ini(value)
        self.conf.setdefault(group, {})[option] = text
        return '[%s] %s = %s' % (group, option, text)

    def note(self, kind: str, source: str, text: str) -> None:
        self.report.append((kind, source, text))


def _ini(value: Any) -> str:
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (list, tuple)):
        return ','.join(str(v) for v in value)
    return str(value)


def _load_yaml(path: str, what: str) -> Any:
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except OSError as exc:
        raise exceptions.ConfigurationError(
            '%s %s: cannot read: %s' % (what, path, exc.strerror or exc)
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = ' line %d' % (mark.line + 1) if mark else ''
        raise exceptions.ConfigurationError(
            '%s %s%s: not valid YAML' % (what, path, where)) from None


def _section(data: Any, key: str, path: str, what: str) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise exceptions.ConfigurationError(
            '%s %s: expected a top-level mapping "%s:"' % (what, path, key))
    return data[key]


def _value(name: str, raw: Any, result: Result) -> Any:
    """An RH option's value as RH reads it (type, clamping)."""
    default = RH_DEFAULTS.get(name)
    if isinstance(default, bool):
        return str(raw).strip().lower() in _BOOLS
    if isinstance(default, int):
        try:
            value = int(str(raw).strip())
        except ValueError:
            result.note('changed', name, 'not an integer (%r): Red Hat '
                        'InstanceHA used its default %d' % (raw, default))
            return default
        low, high = RH_RANGES.get(name, (value, value))
        clamped = min(max(value, low), high)
        if clamped != value:
            result.note('changed', name, '%d is outside %d-%d: Red Hat '
                        'InstanceHA used %d, so does this import'
                        % (value, low, high, clamped))
        return clamped
    return str(raw)


def convert_config(config: dict, result: Result) -> dict[str, Any]:
    """config.yaml's ``config:`` -> options. Returns the effective values."""
    given = {str(k).upper(): v for k, v in config.items()}
    for name in sorted(set(given) - set(RH_DEFAULTS)):
        result.note('none', name, 'not a Red Hat InstanceHA option known to '
                    'this importer: ignored')
    values = {name: (_value(name, given[name], result) if name in given
                     else default) for name, default in RH_DEFAULTS.items()}
    for name in sorted(RH_DEFAULTS):
        source = name if name in given else '%s (unset)' % name
        value = values[name]
        if name in SIMPLE:
            group, option, changed = SIMPLE[name]
            setting = result.set(group, option, value)
            result.note('mapped', source, setting)
            if changed and value is not False:
                result.note('changed', name, '%s: %s' % (setting, changed))
        elif name in NO_EQUIVALENT:
            if name in given:
                result.note('none', name, NO_EQUIVALENT[name])
    tagged = [n for n in ('TAGGED_IMAGES', 'TAGGED_FLAVORS',
                          'TAGGED_AGGREGATES') if values[n]]
    if tagged:
        result.note('changed', ', '.join(tagged), '%s: kept Red Hat '
                    'InstanceHA\'s rule that when nothing carries the tag '
                    'every instance is evacuated; set it to false to '
                    'evacuate only tagged instances' % result.set(
                        'tagging', 'all_when_none_tagged', True))
    if values['CHECK_KDUMP']:
        result.note('mapped', 'CHECK_KDUMP', '%s and %s' % (
            result.set('kdump', 'check_kdump', True),
            result.set('detection', 'detectors', ['nova', 'kdump'])))
    elif 'CHECK_KDUMP' in given:
        result.note('mapped', 'CHECK_KDUMP', result.set(
            'kdump', 'check_kdump', False))
    _reserved(values, given, result)
    if not values['SSL_VERIFY']:
        result.note('changed', 'SSL_VERIFY', '%s, and verify: false on every '
                    'redfish and bmh device: certificates are not checked' %
                    result.set('nova', 'insecure', True))
    level = str(values['LOGLEVEL']).upper()
    if level == 'DEBUG':
        result.note('mapped', 'LOGLEVEL', result.set('DEFAULT', 'debug',
                                                     True))
    elif 'LOGLEVEL' in given and level != 'INFO':
        result.note('none', 'LOGLEVEL', '%s: instanceha logs at INFO; use '
                    'oslo.log\'s default_log_levels to quieten it' % level)
    return values


def _reserved(values: dict, given: dict, result: Result) -> None:
    if not values['RESERVED_HOSTS']:
        if 'RESERVED_HOSTS' in given:
            result.note('mapped', 'RESERVED_HOSTS', result.set(
                'reservation', 'strategy', 'none'))
        return
    result.note('mapped', 'RESERVED_HOSTS', result.set(
        'reservation', 'strategy', 'reserved-hosts'))
    result.note('changed', 'RESERVED_HOSTS', '%s: a spare is a disabled host '
                'whose disabled_reason starts with "reserved" (Red Hat '
                'InstanceHA: contains it)' % result.set(
                    'reservation', 'reserved_reason', 'reserved'))
    result.note('mapped', 'FORCE_RESERVED_HOST_EVACUATION', result.set(
        'reservation', 'evacuate_to_spare',
        values['FORCE_RESERVED_HOST_EVACUATION']))
    result.note('changed', 'RESERVED_HOSTS', '%s: a spare is looked for in '
                'the failed host\'s aggregate or zone first, then anywhere'
                % result.set('reservation', 'same_domain_only', False))


def convert_clouds(clouds: dict, secure: dict | None, name: str | None,
                   path: str, result: Result) -> None:
    """clouds.yaml (+ secure.yaml) -> [nova] options and the password."""
    entries = _section(clouds, 'clouds', path, 'clouds file')
    if name is None:
        name = os.environ.get('OS_CLOUD') or (
            next(iter(entries)) if len(entries) == 1 else 'overcloud')
    if name not in entries:
        raise exceptions.ConfigurationError(
            'clouds file %s: no cloud %r (has: %s); choose one with --cloud'
            % (path, name, ', '.join(sorted(entries))))
    cloud = entries[name] or {}
    auth = dict(cloud.get('auth') or {})
    secret_auth = ((secure or {}).get('clouds') or {}).get(name) or {}
    password = (secret_auth.get('auth') or {}).get('password') or auth.pop(
        'password', None)
    result.set('nova', 'auth_type', 'password')
    for key in ('auth_url', 'username', 'user_id', 'project_name',
                'project_id', 'user_domain_name', 'user_domain_id',
                'project_domain_name', 'project_domain_id'):
        if auth.get(key):
            result.set('nova', key, auth[key])
    for key in ('region_name',):
        if cloud.get(key):
            result.set('nova', key, cloud[key])
    if cloud.get('interface'):
        result.set('nova', 'valid_interfaces', cloud['interface'])
    if cloud.get('cacert'):
        result.set('nova', 'cafile', cloud['cacert'])
    if cloud.get('verify') is False:
        result.set('nova', 'insecure', True)
    result.note('mapped', 'clouds.yaml %s' % name, '[nova] auth_type = '
                'password with %s' % ', '.join(
                    sorted(k for k in result.conf['nova']
                           if k != 'auth_type')))
    if password:
        result.secrets.setdefault('nova', {})['password'] = str(password)
        result.note('mapped', 'secure.yaml %s password' % name,
                    '[nova] password in secrets.conf (mode 0600)')
    else:
        result.note('none', 'secure.yaml', 'no password for cloud %s: add '
                    '[nova] password to secrets.conf' % name)


def _secret(host: str, key: str, value: Any, device: dict,
            result: Result) -> None:
    rel = os.path.join('secrets', '%s.%s' % (host, key))
    result.secret_files[rel] = str(value)
    device['%s_file' % key] = rel


def convert_fencing(fencing: dict, values: dict, path: str,
                    result: Result) -> None:
    """fencing.yaml's ``FencingConfig:`` -> our hosts, secrets in files."""
    hosts = _section(fencing, 'FencingConfig', path, 'fencing file')
    verify = bool(values.get('SSL_VERIFY', True))
    for host, entry in sorted(hosts.items()):
        host = str(host)
        if not isinstance(entry, dict):
            raise exceptions.ConfigurationError(
                'fencing file %s: host %s: expected a mapping' % (path, host))
        entry = {str(k): v for k, v in entry.items()}
        agent = str(entry.get('agent') or '').lower()
        device: dict[str, Any]
        if 'noop' in agent:
            device = {'driver': 'noop'}
            result.note('changed', 'host %s agent %s' % (host, agent), (
                'driver noop and %s: noop proves nothing, so instanceha '
                'refuses it unless allowed' % result.set(
                    'fencing', 'allow_noop', True)))
        elif 'ipmi' in agent:
            device = {'driver': 'ipmi', 'address': str(entry.get('ipaddr'))}
            if entry.get('ipport'):
                device['port'] = int(str(entry['ipport']))
            device['username'] = str(entry.get('login'))
        elif 'redfish' in agent:
            scheme = ('https' if str(entry.get('tls', 'false')).lower()
                      in _BOOLS else 'http')
            address = '%s://%s' % (scheme, entry.get('ipaddr'))
            if entry.get('ipport'):
                address += ':%s' % entry['ipport']
            device = {'driver': 'redfish', 'address': address,
                      'system_id': str(entry.get('uuid')
                                       or 'System.Embedded.1'),
                      'username': str(entry.get('login'))}
            if not verify:
                device['verify'] = False
        elif 'metal3' in agent or 'bmh' in agent:
            device = {'driver': 'bmh',
                      'baremetalhost': str(entry.get('host')),
                      'namespace': str(entry.get('namespace')),
                      'api_url': 'https://kubernetes.default.svc'}
            if not verify:
                device['verify'] = False
            result.note('changed', 'host %s agent %s' % (host, agent), (
                'api_url https://kubernetes.default.svc (the in-cluster '
                'API Red Hat InstanceHA talks to); set the URL of the '
                'cluster if instanceha runs elsewhere'))
        else:
            device = {'driver': 'fence-agent', 'agent': agent or 'fence_?',
                      'ip': str(entry.get('ipaddr')),
                      'username': str(entry.get('login'))}
            if entry.get('ipport'):
                device['ipport'] = str(entry['ipport'])
            result.note('changed', 'host %s agent %s' % (host, agent), (
                'Red Hat InstanceHA has no driver for it; run as a '
                'ClusterLabs fence agent (driver fence-agent)'))
        if device['driver'] in ('ipmi', 'redfish', 'fence-agent'):
            if entry.get('passwd') is not None:
                _secret(host, 'password', entry['passwd'], device, result)
        if device['driver'] == 'bmh' and entry.get('token') is not None:
            _secret(host, 'token', entry['token'], device, result)
        if entry.get('timeout'):
            device['timeout'] = int(str(entry['timeout']))
        result.fencing[host] = device
        result.note('mapped', 'host %s' % host, 'driver %s%s' % (
            device['driver'], ', secrets in %s' % ', '.join(
                v for k, v in sorted(device.items()) if k.endswith('_file'))
            if any(k.endswith('_file') for k in device) else ''))


def convert(config_path: str, fencing_path: str,
            clouds_path: str | None = None, secure_path: str | None = None,
            cloud: str | None = None) -> Result:
    """Read and convert everything; raise naming the first bad input."""
    result = Result()
    config = _section(_load_yaml(config_path, 'config file'), 'config',
                      config_path, 'config file')
    values = convert_config(config, result)
    if clouds_path:
        secure = _load_yaml(secure_path, 'secure file') if secure_path \
            else None
        convert_clouds(_load_yaml(clouds_path, 'clouds file'), secure, cloud,
                       clouds_path, result)
    else:
        result.note('none', 'clouds.yaml', 'not given: add the [nova] auth '
                    'options (auth_type, auth_url, username, ...) yourself')
    convert_fencing(_load_yaml(fencing_path, 'fencing file'), values,
                    fencing_path, result)
    return result


def _write(path: str, text: str, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, 'w') as f:
        f.write(text)


def _ini_text(sections: dict[str, dict[str, str]], header: str) -> str:
    lines = [header]
    for group in sorted(sections, key=lambda g: (g != 'DEFAULT', g)):
        lines.append('\n[%s]' % group)
        lines.extend('%s = %s' % kv for kv in sorted(sections[group].items()))
    return '\n'.join(lines) + '\n'


def write(result: Result, out: str) -> list[str]:
    """Write the files into ``out`` (refusing to overwrite any)."""
    out = os.path.abspath(out)
    targets = ['instanceha.conf', 'secrets.conf', 'fencing.yaml',
               *result.secret_files]
    taken = [t for t in targets if os.path.lexists(os.path.join(out, t))]
    if taken:
        raise exceptions.ConfigurationError(
            '--out %s: %s already exist(s); nothing was written'
            % (out, ', '.join(taken)))
    os.makedirs(os.path.join(out, 'secrets'), mode=0o700, exist_ok=True)
    result.set('fencing', 'config_file', os.path.join(out, 'fencing.yaml'))
    _write(os.path.join(out, 'instanceha.conf'), _ini_text(
        result.conf, '# Written by "%s" from Red Hat InstanceHA\'s '
        'configuration.\n# Use with --config-file %s/secrets.conf.' % (
            PROG, out)))
    _write(os.path.join(out, 'secrets.conf'), _ini_text(
        result.secrets, '# Secrets of instanceha.conf: keep mode 0600.'),
        mode=0o600)
    for rel, value in result.secret_files.items():
        _write(os.path.join(out, rel), value + '\n', mode=0o600)
    _write(os.path.join(out, 'fencing.yaml'), (
        '# Written by "%s" from Red Hat InstanceHA\'s fencing.yaml.\n'
        '# Secrets are in the files named by *_file (mode 0600).\n' % PROG)
        + yaml.safe_dump({'hosts': result.fencing}, sort_keys=True,
                         default_flow_style=False))
    return targets


_TITLES = {'mapped': 'mapped', 'changed': 'changed meaning',
           'none': 'no equivalent'}


def _run(conf) -> int:
    args = conf.command
    try:
        result = convert(args.import_config, args.import_fencing,
                         args.import_clouds, args.import_secure,
                         args.import_cloud)
        written = write(result, args.import_out)
    except exceptions.ConfigurationError as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 2
    for kind in ('mapped', 'changed', 'none'):
        rows = [(s, t) for k, s, t in result.report if k == kind]
        if rows:
            print('%s:' % _TITLES[kind])
            for source, text in rows:
                print('  %s: %s' % (source, text))
    out = os.path.abspath(args.import_out)
    print('wrote %s in %s' % (', '.join(written), out))
    print('next: instanceha-manage --config-file %s/instanceha.conf '
          '--config-file %s/secrets.conf config validate' % (out, out))
    return 0


def rename_options(argv: list[str]) -> list[str]:
    """``import ... --config F`` -> ``--rh-config F``.

    oslo.config's parser takes ``--config`` for an abbreviation of its own
    ``--config-file``/``--config-dir`` wherever it appears, so the
    documented spelling is renamed before parsing.
    """
    if 'import' not in argv:
        return argv
    start = argv.index('import')
    return argv[:start] + [
        '--rh-config' + arg[len('--config'):]
        if arg == '--config' or arg.startswith('--config=') else arg
        for arg in argv[start:]]


def add_parsers(subparsers) -> None:
    parser = subparsers.add_parser(
        'import', help='import the configuration of another tool')
    sub = parser.add_subparsers(dest='import_from', required=True)
    rh = sub.add_parser(
        'rh-instanceha', help='Red Hat InstanceHA\'s config.yaml, '
        'fencing.yaml and (optionally) clouds.yaml and secure.yaml')
    rh.add_argument('--config', '--rh-config', dest='import_config',
                    required=True, metavar='CONFIG_YAML',
                    help='its config.yaml (the "config:" options)')
    rh.add_argument('--fencing', dest='import_fencing', required=True,
                    metavar='FENCING_YAML',
                    help='its fencing.yaml (FencingConfig, one entry a '
                         'host)')
    rh.add_argument('--clouds', dest='import_clouds', metavar='CLOUDS_YAML',
                    help='the clouds.yaml with its Nova credentials '
                         '(optional)')
    rh.add_argument('--secure', dest='import_secure', metavar='SECURE_YAML',
                    help='the secure.yaml with the password of that cloud '
                         '(optional)')
    rh.add_argument('--cloud', dest='import_cloud', metavar='NAME',
                    help='the cloud of clouds.yaml (default: OS_CLOUD, the '
                         'only cloud, or overcloud)')
    rh.add_argument('--out', dest='import_out', required=True,
                    metavar='DIR', help='directory to write into (created; '
                    'existing files are never overwritten)')
    rh.set_defaults(func=_run)
