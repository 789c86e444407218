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

"""Signed JSON POSTs to one or more URLs.

The body is the notification's envelope (:meth:`Notification.envelope`).
Like the heartbeat, it is signed with HMAC-SHA256 and a shared secret
read from a file (re-read when the file changes, so it can be rotated),
over the time stamp and the body: ``X-InstanceHA-Timestamp`` (Unix
seconds) and ``X-InstanceHA-Signature`` (``sha256=`` and the hex digest of
``<timestamp>.<body>``). A receiver recomputes it, compares in constant
time and rejects a stale time stamp, so a captured request cannot be
replayed later. TLS certificates are verified unless turned off.

A request that fails (no connection, time-out, HTTP 5xx or 429) is tried
again after ``webhook_retry_interval`` seconds, doubled each time, at
most ``webhook_retries`` times; other 4xx answers are not retried.
"""

import hashlib
import hmac
import json
import time
import urllib.parse

import requests

from instanceha import exceptions
from instanceha.heartbeat import keys
from instanceha.plugins.notifiers import base

SIGNATURE_HEADER = 'X-InstanceHA-Signature'
TIMESTAMP_HEADER = 'X-InstanceHA-Timestamp'
OPTION = '[notifications] webhook_secret_file'


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret, timestamp.encode() + b'.' + body, hashlib.sha256)
    return 'sha256=' + mac.hexdigest()


def safe_url(url: str) -> str:
    """The URL without credentials or query (it may carry a token)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ''
    if parts.port:
        netloc = '%s:%d' % (netloc, parts.port)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, '',
                                    ''))


class WebhookNotifier(base.HttpNotifierDriver):
    description = ('JSON POST to [notifications] webhook_urls, signed with '
                   'HMAC-SHA256, retried with back-off.')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[notifications] webhook_urls': 'where to POST',
                '[notifications] webhook_secret_file': 'the signing secret',
                '[notifications] webhook_timeout': 'per request (s)',
                '[notifications] webhook_retries': 'tries after the first',
                '[notifications] webhook_retry_interval': 'first back-off',
                '[notifications] webhook_verify': 'verify TLS',
                '[notifications] webhook_ca_file': 'CA bundle'}

    def __init__(self, conf):
        super().__init__(conf)
        self.group = conf.notifications
        self._ring: keys.KeyRing | None = None

    def validate(self) -> None:
        group = self.group
        if not group.webhook_urls:
            raise exceptions.ConfigurationError(
                'option [notifications] webhook_urls is empty; the webhook '
                'notifier needs at least one URL')
        for url in group.webhook_urls:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ('http', 'https') or not parts.hostname:
                raise exceptions.ConfigurationError(
                    'option [notifications] webhook_urls: %r is not an '
                    'http:// or https:// URL' % safe_url(url))
        if not group.webhook_secret_file:
            raise exceptions.ConfigurationError(
                'option %s is not set; webhook requests are always signed'
                % OPTION)
        try:
            self._ring = keys.KeyRing(group.webhook_secret_file,
                                      option=OPTION)
        except ValueError as exc:
            raise exceptions.ConfigurationError(str(exc)) from None
        if group.webhook_ca_file and not group.webhook_verify:
            raise exceptions.ConfigurationError(
                'option [notifications] webhook_ca_file is set but '
                'webhook_verify is false')

    @property
    def _verify(self):
        if not self.group.webhook_verify:
            return False
        return self.group.webhook_ca_file or True

    def notify(self, notification: base.Notification) -> None:
        body = json.dumps(notification.envelope(), sort_keys=True).encode()
        failed = []
        for url in self.group.webhook_urls:
            try:
                self._post(url, body)
            except exceptions.NotifierError as exc:
                failed.append(str(exc))
        if failed:
            raise exceptions.NotifierError('; '.join(failed))

    def _post(self, url: str, body: bytes) -> None:
        tries = self.group.webhook_retries + 1
        wait = self.group.webhook_retry_interval
        for attempt in range(1, tries + 1):
            retry, why = self._post_once(url, body)
            if why is None:
                return
            if not retry or attempt == tries:
                break
            if self.stopping.wait(wait):
                why += ' (service stopping)'
                break
            wait *= 2
        raise exceptions.NotifierError('POST %s failed after %d tr%s: %s'
                                       % (safe_url(url), attempt,
                                          'y' if attempt == 1 else 'ies',
                                          why))

    def _post_once(self, url: str, body: bytes) -> tuple[bool, str | None]:
        """(retry?, why it failed or None)."""
        self._ring.reload()
        stamp = str(int(time.time()))
        headers = {'Content-Type': 'application/json',
                   TIMESTAMP_HEADER: stamp,
                   SIGNATURE_HEADER: sign(self._ring.keys[0], stamp, body)}
        try:
            resp = self.session.post(url, data=body, headers=headers,
                                     timeout=self.group.webhook_timeout,
                                     verify=self._verify, allow_redirects=False)
        except requests.exceptions.SSLError:
            return False, ('TLS verification failed (check '
                           '[notifications] webhook_ca_file)')
        except requests.exceptions.Timeout:
            return True, 'no answer within %g s' % self.group.webhook_timeout
        except requests.exceptions.ConnectionError:
            return True, 'cannot connect'
        if resp.status_code < 300:
            return False, None
        retry = resp.status_code >= 500 or resp.status_code == 429
        return retry, 'HTTP %d' % resp.status_code
