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

"""An operator's pause, kept in the coordination backend.

Every copy of the service already shares the backend of ``[coordination]
backend_url``, so that is where a pause lives: it survives restarts and
leader changes, and every copy reads the same one at each poll. tooz has
no key-value interface, so this module speaks to the three supported
backends itself, through the client libraries tooz uses:

* ``file://DIR``: the file ``DIR/<group>.pause.json``, replaced
  atomically;
* ``redis://``: the key ``instanceha:<group>:pause``;
* ``etcd3+http(s)://``: the key ``/instanceha/<group>/pause``.

The record is JSON (:meth:`instanceha.engine.pause.Pause.to_dict`). An
expired pause stays stored until the next ``pause`` or ``resume`` (so
``status`` can say when it ended); the engine judges expiry by its clock.
"""

import json
import os
import tempfile
import urllib.parse

from instanceha.engine import pause as pause_mod
from instanceha.engine import ports
from instanceha import exceptions


def _redact(url: str) -> str:
    from instanceha.adapters import coordination
    return coordination.redact_url(url)


class PauseStore(ports.PauseSource):
    """Read, write and delete the pause; subclasses speak to a backend."""

    def __init__(self, url: str, group: str):
        self.url = url
        self.group = group
        self.where = _redact(url)

    def current(self) -> pause_mod.Pause | None:
        raw = self._backend('read the pause from', self._get)
        if raw is None:
            return None
        try:
            return pause_mod.Pause.from_dict(json.loads(raw))
        except ValueError as exc:
            raise exceptions.CoordinationError(
                'the pause stored in %s is unreadable (%s); run '
                '"instanceha-manage resume" to remove it or "pause" to '
                'replace it' % (self.describe(), exc)) from None

    def set(self, pause: pause_mod.Pause) -> None:
        self._backend('write the pause to', self._put,
                      json.dumps(pause.to_dict(), sort_keys=True))

    def clear(self) -> None:
        self._backend('write the pause to', self._delete)

    def describe(self) -> str:
        """Where the pause is kept, for messages."""
        return self.where

    def _backend(self, what: str, fn, *args):
        """``fn(*args)``; a client library's error, named and redacted.

        Whatever the backend's library raises becomes one
        CoordinationError saying what could not be done where (with any
        password in the URL or the library's message masked).
        """
        try:
            return fn(*args)
        except exceptions.InstanceHAError:
            raise
        except Exception as exc:  # noqa: any client library's error
            raise exceptions.CoordinationError(
                'cannot %s %s: %s' % (what, self.where,
                                      _redact(str(exc)))) from None

    def _get(self) -> str | None:
        raise NotImplementedError

    def _put(self, value: str) -> None:
        raise NotImplementedError

    def _delete(self) -> None:
        raise NotImplementedError


class FilePauseStore(PauseStore):
    """``file://DIR``: one JSON file, replaced atomically."""

    def __init__(self, url: str, group: str):
        super().__init__(url, group)
        self.path = os.path.join(urllib.parse.urlsplit(url).path,
                                 '%s.pause.json' % group)

    def describe(self) -> str:
        return self.path

    def _get(self) -> str | None:
        try:
            with open(self.path) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _put(self, value: str) -> None:
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix='.pause-')
        try:
            with os.fdopen(fd, 'w') as f:
                f.write(value)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def _delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class RedisPauseStore(PauseStore):
    """``redis://[:PASSWORD@]HOST[:PORT][/DB]``: one key."""

    def __init__(self, url: str, group: str, timeout: float = 5.0):
        super().__init__(url, group)
        import redis

        parts = urllib.parse.urlsplit(url)
        db = parts.path.strip('/')
        query = urllib.parse.parse_qs(parts.query)
        self.key = 'instanceha:%s:pause' % group
        self.client = redis.Redis(
            host=parts.hostname or 'localhost', port=parts.port or 6379,
            username=parts.username or None, password=parts.password,
            db=int(db) if db.isdigit() else int(query.get('db', ['0'])[0]),
            socket_timeout=timeout, socket_connect_timeout=timeout)

    def _get(self) -> str | None:
        value = self.client.get(self.key)
        return value.decode() if value is not None else None

    def _put(self, value: str) -> None:
        self.client.set(self.key, value)

    def _delete(self) -> None:
        self.client.delete(self.key)


class EtcdPauseStore(PauseStore):
    """``etcd3+http(s)://HOST[:PORT]``: one key, through etcd3gw."""

    def __init__(self, url: str, group: str, timeout: float = 5.0):
        super().__init__(url, group)
        import etcd3gw

        parts = urllib.parse.urlsplit(url)
        query = {k: v[-1] for k, v in
                 urllib.parse.parse_qs(parts.query).items()}
        self.key = '/instanceha/%s/pause' % group
        self.client = etcd3gw.client(
            host=parts.hostname or 'localhost', port=parts.port or 2379,
            protocol='https' if parts.scheme.endswith('https') else 'http',
            ca_cert=query.get('ca_cert'), cert_key=query.get('cert_key'),
            cert_cert=query.get('cert_cert'), timeout=timeout)

    def _get(self) -> str | None:
        values = self.client.get(self.key)
        if not values:
            return None
        value = values[0]
        return value.decode() if isinstance(value, bytes) else value

    def _put(self, value: str) -> None:
        self.client.put(self.key, value)

    def _delete(self) -> None:
        self.client.delete(self.key)


_STORES = {'file': FilePauseStore, 'redis': RedisPauseStore,
           'etcd3+http': EtcdPauseStore, 'etcd3+https': EtcdPauseStore}


#: The backend URL schemes that can keep a pause.
SCHEMES = tuple(sorted(_STORES))


def from_url(url: str, group: str = 'instanceha') -> PauseStore:
    scheme = urllib.parse.urlsplit(url).scheme
    cls = _STORES.get(scheme)
    if cls is None:
        raise exceptions.ConfigurationError(
            'option [coordination] backend_url = %s: pausing instance HA '
            'needs a backend that can keep it: %s' % (
                _redact(url), ', '.join(sorted(_STORES))))
    return cls(url, group)


def from_conf(conf) -> PauseStore:
    return from_url(conf.coordination.backend_url, conf.coordination.group)
