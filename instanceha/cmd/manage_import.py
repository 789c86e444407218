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

It prints, option by option, what was mapped, what changed meaning, what
instanceha does another way and what is lost (``rh_options`` has the
list of Red Hat InstanceHA's options). Nothing is written when an input
is unusable, or when behaviour would be lost and ``--allow-unconverted``
is not given; no secret is ever printed.
"""

import dataclasses
import os
import sys
from typing import Any

import yaml

from instanceha.cmd import rh_options
from instanceha import exceptions

PROG = 'instanceha-manage import rh-instanceha'


@dataclasses.dataclass
class Result:
    """What an import produces, before anything is written."""

    conf: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = dataclasses.field(
        default_factory=dict)
    fencing: dict[str, dict] = dataclasses.field(default_factory=dict)
    #: {relative path under --out: content}
    secret_files: dict[str, str] = dataclasses.field(default_factory=dict)
    #: (kind, source, text): kind is one of rh_options' kinds.
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


def convert_clouds(clouds: dict, secure: dict | None, name: str | None,
                   path: str, result: Result) -> None:
    """clouds.yaml (+ secure.yaml) -> [nova] options and the secret."""
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
    secret_auth = dict(((secure or {}).get('clouds') or {}).get(name, {})
                       .get('auth') or {})
    # An application credential (as Red Hat InstanceHA can log in with)
    # or a password.
    credential = bool(auth.get('application_credential_id') or secret_auth.get(
        'application_credential_id') or 'applicationcredential' in str(
            cloud.get('auth_type') or ''))
    secret_key = ('application_credential_secret' if credential
                  else 'password')
    secret = secret_auth.get(secret_key) or auth.pop(secret_key, None)
    auth_type = 'v3applicationcredential' if credential else 'password'
    result.set('nova', 'auth_type', auth_type)
    keys = (('auth_url', 'application_credential_id',
             'application_credential_name', 'username', 'user_id',
             'user_domain_name', 'user_domain_id') if credential else
            ('auth_url', 'username', 'user_id', 'project_name', 'project_id',
             'user_domain_name', 'user_domain_id', 'project_domain_name',
             'project_domain_id'))
    for key in keys:
        value = auth.get(key) or secret_auth.get(key)
        if value:
            result.set('nova', key, value)
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
                '%s with %s' % (auth_type, ', '.join(
                    sorted(k for k in result.conf['nova']
                           if k != 'auth_type'))))
    if secret:
        result.secrets.setdefault('nova', {})[secret_key] = str(secret)
        result.note('mapped', 'secure.yaml %s %s' % (name, secret_key),
                    '[nova] %s in secrets.conf (mode 0600)' % secret_key)
    else:
        result.note('todo', 'secure.yaml', 'no %s for cloud %s: add [nova] '
                    '%s to secrets.conf' % (secret_key, name, secret_key))


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
    true_words = rh_options.TRUE_WORDS
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
            # Red Hat InstanceHA: port 443 unless given, even over http.
            scheme = ('https' if str(entry.get('tls', 'false')).lower()
                      in true_words else 'http')
            address = '%s://%s:%s' % (scheme, entry.get('ipaddr'),
                                      entry.get('ipport') or 443)
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
    values = rh_options.convert(config, result)
    if clouds_path:
        secure = _load_yaml(secure_path, 'secure file') if secure_path \
            else None
        convert_clouds(_load_yaml(clouds_path, 'clouds file'), secure, cloud,
                       clouds_path, result)
    else:
        result.note('todo', 'clouds.yaml', 'not given: add the [nova] auth '
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


#: Report sections, in the order they are printed.
_TITLES = {'mapped': 'mapped', 'changed': 'changed meaning',
           'replaced': 'done another way (nothing to convert)',
           'unused': 'without effect', 'todo': 'left for you to do',
           'unconverted': 'NOT CONVERTED (behaviour that is lost)'}


def print_report(result: Result) -> None:
    """The report, section by section: option, then what became of it."""
    for kind, title in _TITLES.items():
        rows = [(s, t) for k, s, t in result.report if k == kind]
        if rows:
            print('%s:' % title)
            for source, text in rows:
                print('  %s: %s' % (source, text))


def _run(conf) -> int:
    args = conf.command
    try:
        result = convert(args.import_config, args.import_fencing,
                         args.import_clouds, args.import_secure,
                         args.import_cloud)
        lost = [s for k, s, _t in result.report if k == 'unconverted']
        if lost and not args.import_allow_unconverted:
            print_report(result)
            raise exceptions.ConfigurationError(
                '%d option(s) not converted: %s (see NOT CONVERTED above); '
                'nothing was written. Rerun with --allow-unconverted to '
                'accept the loss' % (len(lost), ', '.join(lost)))
        written = write(result, args.import_out)
    except exceptions.ConfigurationError as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 2
    print_report(result)
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
    rh.add_argument('--allow-unconverted', dest='import_allow_unconverted',
                    action='store_true',
                    help='write the files although some options could not '
                         'be converted (the report names each, with what '
                         'is lost); without it such an import writes '
                         'nothing and exits 2')
    rh.set_defaults(func=_run)
