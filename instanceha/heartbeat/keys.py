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

"""Shared heartbeat keys, read from files.

A key is one line of text (e.g. ``openssl rand -hex 32``); the agent and
the service read the same bytes. Messages name the file and the option,
never the key.
"""

import logging
import os

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
