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

"""The per-host fencing file: schema, secrets, loading, host look-up.

The file named by ``[fencing] config_file`` is YAML with two top-level
keys (etc/instanceha/fencing.yaml.sample is a commented example)::

    devices:                 # optional: named templates shared by hosts
      pdu-a:
        driver: fence-agent
        agent: fence_apc_snmp
        ip: pdu-a.example.com
        password_file: secrets/pdu-a     # relative to this file
    hosts:                   # required: one entry per compute host
      compute-0.example.com: # shorthand: one level with one device
        driver: ipmi
        address: 10.0.0.10
        username: admin
        password_file: /etc/instanceha/secrets/compute-0
      compute-1:             # fencing topology: levels tried in order
        levels:
          - driver: ipmi     # level 1: a single device (a mapping)
            address: 10.0.0.11
            username: admin
            password_file: /etc/instanceha/secrets/compute-1
          - - template: pdu-a     # level 2: a list of devices that must
              plug: 3             # ALL succeed (both PDU outlets)
            - template: pdu-b
              plug: 3

A device is a mapping with ``driver`` (an ``instanceha.fencing`` entry
point: ipmi, redfish, fence-agent, bmh, noop) and that driver's
parameters (``instanceha-manage drivers list`` and each driver's
``PARAMS``), plus the common keys ``name`` (label in logs), ``template``
(start from an entry of ``devices``), ``timeout`` and ``retries``
(override ``[fencing] device_timeout`` / ``device_retries``). A secret
parameter (``password``, ``token``) may instead be given as
``<name>_file``: the file's content (one trailing newline removed) is the
value, so the YAML file itself can be world-readable while the secrets
are not.

Host keys match Nova's host names in short or fully qualified form: an
entry ``compute-0.example.com`` serves host ``compute-0`` and vice versa;
an exact match always wins, and a name that matches two entries is an
error rather than a guess. Ambiguity is judged against Nova's host names
too: an entry ``compute-1`` while Nova has both ``compute-1.az1`` and
``compute-1.az2`` serves neither (powering off the wrong machine is the
worst thing a fencing file can do), and a host whose only match is an
entry written exactly for another Nova host gets nothing. Such a host
cannot be fenced, so it is never evacuated, and the reason says so.

Everything is checked at load time: an unknown key, a missing parameter,
an unreadable secret file each raise a ConfigurationError naming the
file, the host, the level, the device and the key.
"""

from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses
import os
from typing import Any

from oslo_config import cfg
import yaml

from instanceha.conf import _secrets as secret_check
from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import devices as devices_mod

_TOP_KEYS = ('devices', 'hosts')


@dataclasses.dataclass
class HostEntry:
    """One host's fencing levels, drivers built and validated."""

    #: The host name as written in the file.
    key: str
    #: Levels in order; each a list of devices that must all succeed.
    levels: list[list[base.FencingDriver]]


@dataclasses.dataclass
class FencingFile:
    path: str
    hosts: dict[str, HostEntry]
    #: Hosts whose entry is broken, with the reason (lenient loading).
    errors: dict[str, str]
    #: Accepted but unsafe: secrets written in the file or kept in files
    #: others can read (``config validate`` prints them).
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: Every Nova compute host name seen so far (None: not known yet).
    #: Names are only ever added: a host whose service record was deleted
    #: still makes a short key ambiguous, since its machine still exists.
    nova_hosts: frozenset[str] | None = None

    def names(self) -> list[str]:
        return sorted([*self.hosts, *self.errors])

    def learn_hosts(self, hosts: Iterable[str]) -> None:
        """Add Nova's compute host names (ambiguity is judged on them)."""
        self.nova_hosts = (self.nova_hosts or frozenset()) | frozenset(hosts)

    def find(self, host: str) -> str | None:
        """The key of ``host``'s entry (short/FQDN aware), or None.

        :raises ConfigurationError: when the match is ambiguous, among the
            entries or among Nova's hosts.
        """
        return match_host(host, self.names(), self.path, self.nova_hosts)


def same_host(name: str, key: str) -> bool:
    """Whether ``key`` names ``name`` exactly or in short/FQDN form."""
    name, key = name.lower(), key.lower()
    if name == key:
        return True
    return (name.split('.', 1)[0] == key.split('.', 1)[0]
            and ('.' not in name or '.' not in key))


def match_host(host: str, keys: Iterable[str], path: str = '',
               nova_hosts: Iterable[str] | None = None) -> str | None:
    """Which of ``keys`` names ``host``; short and FQDN forms match.

    An exact (case-insensitive) match always wins. Otherwise the one key
    whose short or FQDN form names ``host``, unless it is ambiguous: two
    keys name the host, or (when ``nova_hosts`` is given) the key also
    names another Nova host. An ambiguous key serves no host at all.

    :raises ConfigurationError: naming the host, the entries and the
        other Nova hosts when the match is ambiguous.
    """
    keys = list(keys)
    if host in keys:
        return host
    folded = {k.lower(): k for k in keys}
    if host.lower() in folded:
        return folded[host.lower()]
    found = sorted(k for k in keys if same_host(host, k))
    if len(found) > 1:
        raise exceptions.ConfigurationError(
            'fencing file %s: host %s matches several entries (%s); name it '
            'exactly' % (path, host, ', '.join(found)))
    if not found or nova_hosts is None:
        return found[0] if found else None
    key = found[0]
    others = sorted(h for h in set(nova_hosts)
                    if h.lower() != host.lower() and same_host(h, key))
    owner = [h for h in others if h.lower() == key.lower()]
    if owner:
        raise exceptions.ConfigurationError(
            'fencing file %s: host %s has no entry of its own: entry %s '
            'names Nova host %s exactly; give host %s an entry with its '
            'exact name' % (path, host, key, owner[0], host))
    if others:
        raise exceptions.ConfigurationError(
            'fencing file %s: entry %s is ambiguous: it matches Nova hosts '
            '%s; it serves none of them. Give host %s an entry with its '
            'exact name' % (path, key, ', '.join(sorted(others + [host])),
                            host))
    if '.' not in key and '.' in host:
        # A short key for a full name guesses the domain. Where Nova's
        # hosts have several domains, the other host of that short name
        # may exist unseen (its service record deleted before this copy
        # started): the guess could power off the wrong machine.
        domains = sorted({h.split('.', 1)[1].lower() for h in nova_hosts
                          if '.' in h})
        if len(domains) > 1:
            raise exceptions.ConfigurationError(
                'fencing file %s: entry %s is a short name, and Nova\'s '
                'hosts are in several domains (%s): it cannot tell which '
                'host of that name it powers; it serves none. Give host %s '
                'an entry with its exact name' % (
                    path, key, ', '.join(domains), host))
    return key


def assign_hosts(keys: Iterable[str], nova_hosts: Iterable[str],
                 path: str = '') -> tuple[dict[str, str], dict[str, str]]:
    """Which entry serves each Nova host, as the service will decide it.

    Returns ``(assigned, problems)``: Nova host -> key for the hosts with
    a unique entry, and Nova host -> why for the hosts whose match is
    ambiguous (they cannot be fenced). Hosts in neither have no entry.
    """
    keys, nova_hosts = list(keys), sorted(set(nova_hosts))
    assigned: dict[str, str] = {}
    problems: dict[str, str] = {}
    for host in nova_hosts:
        try:
            key = match_host(host, keys, path, nova_hosts)
        except exceptions.ConfigurationError as exc:
            problems[host] = str(exc)
            continue
        if key is not None:
            assigned[host] = key
    return assigned, problems


def _read_yaml(path: str) -> Mapping:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise exceptions.ConfigurationError(
            'option [fencing] config_file: cannot read %s: %s'
            % (path, exc.strerror or exc)) from None
    except yaml.YAMLError as exc:
        raise exceptions.ConfigurationError(
            'fencing file %s is not valid YAML: %s'
            % (path, str(exc).replace('\n', ' '))) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise exceptions.ConfigurationError(
            'fencing file %s: expected a mapping with keys %s at the top, '
            'got %s' % (path, ', '.join(_TOP_KEYS), type(data).__name__))
    unknown = sorted(str(k) for k in data if k not in _TOP_KEYS)
    if unknown:
        raise exceptions.ConfigurationError(
            'fencing file %s: unknown top-level key(s) %s; expected %s'
            % (path, ', '.join(unknown), ', '.join(_TOP_KEYS)))
    for key in _TOP_KEYS:
        if not isinstance(data.get(key) or {}, Mapping):
            raise exceptions.ConfigurationError(
                'fencing file %s: "%s" must be a mapping of names to '
                'entries' % (path, key))
    return data


class _Builder:
    """Turns one host's YAML entry into validated drivers."""

    def __init__(self, conf: cfg.ConfigOpts, path: str,
                 templates: Mapping, devices: devices_mod.DeviceFactory):
        self.conf = conf
        self.devices = devices
        self.path = path
        self.base_dir = os.path.dirname(os.path.abspath(path))
        self.templates = templates
        self.warnings: list[str] = []

    def fail(self, where: str, message: str) -> None:
        exc = exceptions.ConfigurationError(
            'fencing file %s: %s: %s' % (self.path, where, message))
        # Without file and host, for per-host listings.
        exc.detail = '%s: %s' % (where.split(' ', 2)[2] if where.count(' ')
                                 >= 2 else 'entry', message)
        raise exc

    def host(self, key: str, entry: Any) -> HostEntry:
        where = 'host %s' % key
        if not isinstance(entry, Mapping):
            self.fail(where, 'expected a device mapping or "levels", got %s'
                      % type(entry).__name__)
        if 'levels' in entry:
            extra = sorted(str(k) for k in entry if k != 'levels')
            if extra:
                self.fail(where, '"levels" cannot be combined with device '
                          'keys (%s); put the device in a level'
                          % ', '.join(extra))
            specs = entry['levels']
            if not isinstance(specs, list) or not specs:
                self.fail(where, '"levels" must be a non-empty list')
        else:
            specs = [entry]
        levels = []
        labels: set[str] = set()
        for index, spec in enumerate(specs, 1):
            lwhere = '%s level %d' % (where, index)
            devices = spec if isinstance(spec, list) else [spec]
            if not devices:
                self.fail(lwhere, 'a level needs at least one device')
            levels.append([self.device(key, lwhere, d, labels)
                           for d in devices])
        return HostEntry(key=key, levels=levels)

    def device(self, host: str, where: str, spec: Any,
               labels: set[str]) -> base.FencingDriver:
        if not isinstance(spec, Mapping):
            self.fail(where, 'a device must be a mapping with "driver" or '
                      '"template", got %s' % type(spec).__name__)
        params: dict[str, Any] = {}
        template = spec.get('template')
        if template is not None:
            if template not in self.templates:
                self.fail(where, 'template %r is not defined under '
                          '"devices" (defined: %s)' % (template, ', '.join(
                              sorted(map(str, self.templates))) or 'none'))
            params.update(self.templates[template])
            params.pop('name', None)
        params.update(spec)
        driver = params.get('driver')
        if not driver:
            self.fail(where, 'missing required key "driver"')
        label = str(params.get('name') or template or driver)
        unique, n = label, 1
        while unique in labels:
            n += 1
            unique = '%s-%d' % (label, n)
        labels.add(unique)
        where = '%s device %s' % (where, unique)
        cls = self.devices.driver_class(str(driver),
                                        'fencing file %s: %s: driver'
                                        % (self.path, where))
        self._secret_files(where, cls, params)
        drv = self.devices.create(cls, self.conf, host, params, unique)
        drv.name = str(driver)
        try:
            drv.validate()
        except exceptions.ConfigurationError as exc:
            self.fail(where, getattr(exc, 'detail', str(exc)))
        return drv

    def _secret_files(self, where: str, cls: type,
                      params: dict[str, Any]) -> None:
        for key, param in cls.PARAMS.items():
            fkey = key + '_file'
            if (param.secret and fkey not in params
                    and params.get(key) not in (None, '')):
                self.warnings.append(
                    'fencing file %s: %s: secret %r is written in the file; '
                    'put it in a file of mode 0600 named by %r'
                    % (self.path, where, key, fkey))
            if not param.secret or fkey not in params:
                continue
            if params.get(key) not in (None, ''):
                self.fail(where, 'give either %r or %r, not both'
                          % (key, fkey))
            fname = os.path.join(self.base_dir,
                                 os.path.expanduser(str(params.pop(fkey))))
            try:
                with open(fname) as f:
                    value = f.read()
            except OSError as exc:
                self.fail(where, '%s %s: cannot read: %s'
                          % (fkey, fname, exc.strerror or exc))
            unsafe = secret_check.exposed(fname, 'secret file of %s' % fkey)
            if unsafe:
                self.warnings.append('fencing file %s: %s: %s'
                                     % (self.path, where, unsafe))
            value = value[:-1] if value.endswith('\n') else value
            value = value[:-1] if value.endswith('\r') else value
            if not value:
                self.fail(where, '%s %s is empty' % (fkey, fname))
            params[key] = value


def load(conf: cfg.ConfigOpts, path: str | None = None, *,
         strict: bool = True, only: str | None = None,
         devices: devices_mod.DeviceFactory | None = None) -> FencingFile:
    """Read, check and build the fencing file.

    :param strict: raise on the first broken host entry (the service
        fails fast); otherwise collect per-host errors in ``errors`` (for
        ``instanceha-manage fencing validate``).
    :param only: build only the entry of this host (short/FQDN aware);
        the result is empty when it has none.
    :raises ConfigurationError: for a file that cannot be read or parsed
        at all, or (strict) for a broken host entry.
    :param devices: builds the devices (default: the installed drivers on
        the wall clock; the simulator passes its own).
    """
    path = path or conf.fencing.config_file
    data = _read_yaml(path)
    templates = data.get('devices') or {}
    for name, tmpl in templates.items():
        if not isinstance(tmpl, Mapping):
            raise exceptions.ConfigurationError(
                'fencing file %s: device template %s must be a mapping'
                % (path, name))
        if 'template' in tmpl or 'levels' in tmpl:
            raise exceptions.ConfigurationError(
                'fencing file %s: device template %s cannot use "template" '
                'or "levels"' % (path, name))
    builder = _Builder(conf, path, templates,
                       devices or devices_mod.DeviceFactory())
    result = FencingFile(path=path, hosts={}, errors={},
                         warnings=builder.warnings)
    hosts = {str(k): v for k, v in (data.get('hosts') or {}).items()}
    if only is not None:
        wanted = match_host(only, list(hosts), path)
        hosts = {wanted: hosts[wanted]} if wanted else {}
    for key, entry in hosts.items():
        try:
            result.hosts[key] = builder.host(key, entry)
        except exceptions.ConfigurationError as exc:
            if strict:
                raise
            result.errors[key] = getattr(exc, 'detail', str(exc))
    return result
