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

"""Heartbeat keys, read from files; per-host keys derived from a master.

A key is one line of text (e.g. ``openssl rand -hex 32``). Messages name
the file and the option, never the key.

Per-host keys (``[heartbeat] key_mode = per-host``, the default): the
service holds one master secret; each host's key is derived from it with
HKDF-SHA256 (RFC 5869) over the host name, and the host's agent holds
only its own derived key (``instanceha-manage heartbeat derive-key``).
A compromised compute can then sign heartbeats for itself only, not keep
another, dead host looking alive. ``shared`` is the former scheme (every
agent holds the service's key); ``both`` accepts either during the
migration from one to the other.
"""

import hashlib
import hmac
import logging
import os
import threading

LOG = logging.getLogger(__name__)

#: Shortest key accepted, in bytes: shorter shared secrets can be guessed.
MIN_KEY = 16
#: Largest key file read; a key is a line of text, not a document.
MAX_KEY_FILE = 4096


def load_key(path: str, option: str = 'key_file') -> bytes:
    """Read a shared key from a file (surrounding white space ignored).

    Error messages name the file and the option, never the content.

    :raises OSError: the file cannot be read (caller names the option).
    :raises ValueError: the key is too short or the file too large.
    """
    with open(path, 'rb') as f:
        raw = f.read(MAX_KEY_FILE + 1)
    if len(raw) > MAX_KEY_FILE:
        raise ValueError('option %s: file %s is larger than %d bytes; it '
                         'should hold one key' % (option, path, MAX_KEY_FILE))
    key = raw.strip()
    if len(key) < MIN_KEY:
        raise ValueError('option %s: file %s holds a key of %d bytes; at '
                         'least %d are required (e.g. "openssl rand -hex 32")'
                         % (option, path, len(key), MIN_KEY))
    return key


class KeyRing:
    """The current and optional previous heartbeat keys, from files.

    Files are re-read when their modification time changes, so keys can
    be rotated without restarting the service. A file that becomes
    unreadable or invalid keeps the keys last loaded and is reported.
    """

    def __init__(self, current: str, previous: str | None = None,
                 option: str = '[heartbeat] key_file',
                 previous_option: str = '[heartbeat] previous_key_file'):
        self._files = [(current, option)]
        if previous:
            self._files.append((previous, previous_option))
        self._stamps: list[float | None] = [None] * len(self._files)
        self._keys: list[bytes | None] = [None] * len(self._files)
        self._errors: list[str | None] = [None] * len(self._files)
        self.reload(strict=True)

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(k for k in self._keys if k is not None)

    def reload(self, strict: bool = False) -> None:
        """Re-read changed key files.

        :raises ValueError: when ``strict`` and a file is missing or bad
            (the message names the file and option, never the key).
        """
        for i, (path, option) in enumerate(self._files):
            try:
                stamp = os.stat(path).st_mtime_ns
                if stamp == self._stamps[i]:
                    continue
                self._keys[i] = load_key(path, option)
                self._stamps[i] = stamp
                self._errors[i] = None
                if not strict:
                    LOG.info('heartbeat key reloaded from %s (%s)', path,
                             option)
            except (OSError, ValueError) as exc:
                message = (exc if isinstance(exc, ValueError) else
                           'option %s: file %s cannot be read: %s'
                           % (option, path, exc.strerror or exc))
                if strict:
                    raise ValueError(str(message)) from None
                if str(message) != self._errors[i]:
                    # Once per new problem, not every few seconds.
                    self._errors[i] = str(message)
                    LOG.error('%s; keeping the key loaded before', message)


#: HKDF salt: binds derived keys to this use (a master reused elsewhere
#: yields unrelated keys).
HKDF_SALT = b'instanceha heartbeat host key v1'
#: Key modes of ``[heartbeat] key_mode``.
PER_HOST, SHARED, BOTH = 'per-host', 'shared', 'both'


def derive_host_key(master: bytes, host: str) -> bytes:
    """The heartbeat key of ``host``: HKDF-SHA256(master, info=host).

    Returned as 64 hex characters, the form a key file holds (the agent
    signs with the bytes of its key file's line).
    """
    prk = hmac.new(HKDF_SALT, master, hashlib.sha256).digest()
    info = b'instanceha host:' + host.encode('utf-8')
    okm = hmac.new(prk, info + b'\x01', hashlib.sha256).digest()
    return okm.hex().encode('ascii')


class HostKeys:
    """The keys that may sign a heartbeat from a given host.

    Wraps the master (current and previous) :class:`KeyRing`: in
    ``per-host`` mode a host's heartbeat must be signed with the key
    derived for that host from either master; in ``both`` the masters
    themselves (the former shared key) are accepted too; in ``shared``
    only the masters. Derived keys are cached until a master changes.
    Current keys come first: ``key_index`` 0 is "the current key".
    """

    def __init__(self, ring: KeyRing, mode: str = PER_HOST):
        if mode not in (PER_HOST, SHARED, BOTH):
            raise ValueError('heartbeat key mode %r: expected %s, %s or %s'
                             % (mode, PER_HOST, SHARED, BOTH))
        self.ring = ring
        self.mode = mode
        self._cache: dict[str, tuple[bytes, ...]] = {}
        self._masters: tuple[bytes, ...] = ()
        self._lock = threading.Lock()

    def reload(self) -> None:
        self.ring.reload()

    def for_host(self, host: str) -> tuple[bytes, ...]:
        masters = self.ring.keys
        with self._lock:
            if masters != self._masters:
                self._cache.clear()
                self._masters = masters
            keys = self._cache.get(host)
            if keys is None:
                keys = ()
                if self.mode != SHARED:
                    keys += tuple(derive_host_key(m, host) for m in masters)
                if self.mode != PER_HOST:
                    keys += masters
                if len(self._cache) > 100000:  # names are authenticated
                    self._cache.clear()        # later: bound the memory
                self._cache[host] = keys
            return keys
