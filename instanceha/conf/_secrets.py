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

"""Secrets kept where others can read them, wherever a secret can live.

One rule for every secret: the file that holds it must not be readable
by group or others. It applies to a config file that sets a secret
option (``[nova] password``, oslo.messaging's ``transport_url``), to the
files options name for a secret (heartbeat keys, the webhook secret, a
bearer token, the health endpoint's TLS key), and -- in the fencing
plugin, with the same words -- to the fencing file's ``*_file`` secrets.
Each finding is a warning; ``config validate --strict`` refuses it.
"""

import importlib.metadata
import os

from oslo_config import cfg

from instanceha.conf import _unknown

#: Options naming a file that holds a secret: (group, option, the
#: detector or notifier that reads it, or None when any setting counts).
SECRET_FILES = (
    ('heartbeat', 'key_file', 'heartbeat'),
    ('heartbeat', 'previous_key_file', 'heartbeat'),
    ('notifications', 'webhook_secret_file', None),
    ('notifications', 'kubernetes_token_file', None),
    ('health', 'tls_key_file', None),
)

#: The oslo.config.opts lists whose secret options a config file may set
#: (oslo.messaging's only with the messaging notifier: it is heavy).
_LISTS = ('instanceha', 'oslo.log')


def exposed(path: str, what: str) -> str | None:
    """A warning when ``path`` (holding ``what``) is readable by others.

    None when the file is safe or cannot be read (other checks say so).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return ('%s (%s) is readable by group or others (mode %04o); chmod 600 '
            'it' % (path, what, mode & 0o7777))


def _secret_options(conf: cfg.ConfigOpts) -> set[tuple[str, str]]:
    """(group, option) of every secret option a config file may set."""
    found: set[tuple[str, str]] = set()
    lists = _LISTS + (('oslo.messaging',)
                      if 'messaging' in conf.notifications.drivers else ())
    for ep in importlib.metadata.entry_points(group='oslo.config.opts'):
        if ep.name not in lists:
            continue
        try:
            listed = ep.load()()
        except Exception:  # noqa: a broken optional library lists nothing
            continue
        for group, opts in listed:
            name = group.name if isinstance(group, cfg.OptGroup) else group
            found.update((name or 'DEFAULT', o.dest) for o in opts
                         if o.secret)
    from keystoneauth1 import loading as ks_loading

    try:
        plugin = ks_loading.get_auth_plugin_conf_options(conf.nova.auth_type)
    except Exception:  # noqa: an unknown plugin is [nova]'s own error
        plugin = []
    found.update(('nova', o.dest) for o in plugin if o.secret)
    return found


def _in_config_files(conf: cfg.ConfigOpts) -> list[str]:
    secret = _secret_options(conf)
    messages = []
    for path in _unknown.config_files(conf):
        sections: dict = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue
        names = sorted('[%s] %s' % (group, key.replace('-', '_'))
                       for section, items in sections.items()
                       for group in (_unknown.group_name(section),)
                       for key in items
                       if (group, key.replace('-', '_')) in secret)
        text = exposed(path, 'config file setting %s' % ', '.join(names)) \
            if names else None
        if text:
            messages.append(text + ', or move the secret to a file of its '
                            'own, of mode 0600, given as another '
                            '--config-file')
    return messages


def _secret_files(conf: cfg.ConfigOpts) -> list[str]:
    detectors = set(conf.detection.detectors)
    messages = []
    for group, option, reader in SECRET_FILES:
        path = conf[group][option]
        if not path or (reader and reader not in detectors):
            continue
        text = exposed(path, 'secret file of [%s] %s' % (group, option))
        if text:
            messages.append(text)
    return messages


def find(conf: cfg.ConfigOpts) -> list[str]:
    """One message per secret that others can read, naming the file."""
    return _in_config_files(conf) + _secret_files(conf)
