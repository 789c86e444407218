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

"""FaultProxy: an HTTP reverse proxy in front of a real API that misbehaves.

Put between instanceha and Nova (``[nova] endpoint_override`` set to
:attr:`FaultProxy.endpoint`), it forwards every request to the real Nova
and answers with Nova's own answer -- unless a fault rule matches, for a
bounded time or number of requests:

* ``status``: answer 500, 503, 409 (or any code) with a body shaped like
  Nova's own faults, without asking Nova (a write is *not* made);
* ``slow``: ask Nova, then hold the answer ``seconds`` before sending it;
* ``timeout``: hold the request ``seconds`` without answering (longer
  than the client's timeout), then drop the connection; Nova is not asked;
* ``reset``: drop the connection at once with a TCP reset; Nova is not
  asked.

A rule matches by method, by a regular expression on the path (with its
query string), and by ``host``: the name standing as a whole word in the
path, the query or the body (``os-services?host=host1``, an evacuation's
target, a ``servers/detail?host=...`` listing); all given parts must
match. Links in Nova's answers (``next`` pages, ``Location``) are
rewritten to point at the proxy, so a client following them stays behind
it.

Every request is counted by route (ids replaced by ``{id}``) in
:attr:`FaultProxy.calls`, and every injected fault kept in
:attr:`FaultProxy.injected`: the figures a soak run prints.
"""

import collections
import dataclasses
import http.client
import http.server
import json
import re
import socket
import struct
import sys
import threading
import time
from urllib import parse

import fixtures

from tests.functional.peers import base

#: Headers a proxy must not forward (RFC 9110 section 7.6.1).
_HOP = frozenset({'connection', 'keep-alive', 'proxy-authenticate',
                  'proxy-authorization', 'te', 'trailer',
                  'transfer-encoding', 'upgrade', 'host',
                  'content-length'})
#: Nova's fault bodies by status code (the key names the fault kind).
_FAULT_KEYS = {400: 'badRequest', 404: 'itemNotFound',
               409: 'conflictingRequest', 429: 'overLimit',
               500: 'computeFault', 503: 'serviceUnavailable'}
_ID = re.compile(r'/(?:[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{32}|\d+)(?=/|$)')
KINDS = ('status', 'slow', 'timeout', 'reset')


def route(method: str, path: str) -> str:
    """``GET /v2.1/servers/{id}``: a request's route, ids and query out."""
    return '%s %s' % (method, _ID.sub('/{id}', parse.urlsplit(path).path))


@dataclasses.dataclass
class Rule:
    """One fault, in force until ``until`` (monotonic) or ``count`` hits."""

    kind: str
    method: str | None = None
    path: re.Pattern | None = None
    host: str | None = None
    status: int = 503
    seconds: float = 0.0
    until: float | None = None
    count: int | None = None
    hits: int = 0

    def live(self, now: float) -> bool:
        return ((self.until is None or now < self.until) and
                (self.count is None or self.hits < self.count))

    def matches(self, method: str, target: str, body: bytes) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and not self.path.search(target):
            return False
        if self.host is not None:
            word = re.compile(r'(?<![\w.-])%s(?![\w.-])' % re.escape(
                self.host))
            text = parse.unquote(target) + ' ' + body.decode('utf-8',
                                                             'replace')
            if not word.search(text):
                return False
        return True


class FaultProxy(fixtures.Fixture):
    """A reverse proxy on 127.0.0.1 in front of ``upstream``.

    :param upstream: the real endpoint, e.g. ``NovaPeer.endpoint``
        (``http://127.0.0.1:PORT/v2.1``); :attr:`endpoint` is the same
        path on the proxy.
    """

    def __init__(self, upstream: str, upstream_timeout: float = 120.0):
        super().__init__()
        self.upstream = upstream.rstrip('/')
        self.upstream_timeout = upstream_timeout
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self.calls: collections.Counter = collections.Counter()
        #: (monotonic time, fault kind, route) of every fault injected.
        self.injected: list[tuple[float, str, str]] = []
        self.server = None
        self.endpoint = ''

    def _setUp(self):
        up = parse.urlsplit(self.upstream)
        self._up_host, self._up_port = up.hostname, up.port or 80
        self._up_base = '%s://%s' % (up.scheme, up.netloc)
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = _Server((base.LOOPBACK, 0), Handler)
        port = self.server.server_address[1]
        self._base = 'http://%s:%d' % (base.LOOPBACK, port)
        self.endpoint = self._base + up.path
        thread = threading.Thread(target=self.server.serve_forever,
                                  name='fault-proxy', daemon=True)
        thread.start()
        self.addCleanup(self._stop, thread)

    def _stop(self, thread):
        self.server.shutdown()
        self.server.server_close()
        thread.join(5)

    # --- faults ------------------------------------------------------------

    def inject(self, kind: str, *, method: str | None = None,
               path: str | None = None, host: str | None = None,
               status: int = 503, seconds: float = 0.0,
               duration: float | None = None,
               count: int | None = None) -> Rule:
        """Add a fault rule; see the module doc. Returns it (to lift it).

        ``duration`` (seconds from now) and ``count`` (requests) bound it;
        with neither it holds until :meth:`lift` or :meth:`clear`.
        """
        if kind not in KINDS:
            raise ValueError('fault kind %r: one of %s' % (kind, KINDS))
        rule = Rule(kind=kind, method=method,
                    path=re.compile(path) if path else None, host=host,
                    status=status, seconds=seconds, count=count,
                    until=(None if duration is None
                           else time.monotonic() + duration))
        with self._lock:
            self._rules.append(rule)
        return rule

    def lift(self, rule: Rule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def _fault_for(self, method: str, target: str, body: bytes
                   ) -> Rule | None:
        now = time.monotonic()
        with self._lock:
            self._rules = [r for r in self._rules if r.live(now)]
            for rule in self._rules:
                if rule.matches(method, target, body):
                    rule.hits += 1
                    self.injected.append((now, rule.kind,
                                          route(method, target)))
                    return rule
        return None

    def count(self, method: str, target: str) -> None:
        with self._lock:
            self.calls[route(method, target)] += 1

    def rewrite(self, data: bytes) -> bytes:
        """Nova's links, pointed at the proxy."""
        return data.replace(self._up_base.encode(), self._base.encode())


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A connection this proxy reset on purpose is no error."""
        if not isinstance(sys.exc_info()[1], (OSError, ValueError)):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    owner: FaultProxy

    def log_message(self, fmt, *args):  # quiet: a soak sends thousands
        pass

    def _any(self):
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else b''
        proxy = self.owner
        proxy.count(self.command, self.path)
        rule = proxy._fault_for(self.command, self.path, body)
        if rule is not None and rule.kind == 'reset':
            return self._reset()
        if rule is not None and rule.kind == 'timeout':
            time.sleep(rule.seconds)
            return self._reset()
        if rule is not None and rule.kind == 'status':
            return self._fault(rule.status)
        try:
            status, headers, data = self._forward(body)
        except OSError as exc:
            return self._fault(502, 'upstream: %s' % exc)
        if rule is not None and rule.kind == 'slow':
            time.sleep(rule.seconds)
        # Nova's own Date (instanceha reads Nova's clock from it) and
        # Server headers, not the proxy's.
        self.send_response_only(status)
        for name, value in headers:
            if name.lower() not in _HOP:
                if name.lower() == 'location':
                    value = proxy.rewrite(value.encode()).decode()
                self.send_header(name, value)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

    def _forward(self, body: bytes):
        proxy = self.owner
        conn = http.client.HTTPConnection(proxy._up_host, proxy._up_port,
                                          timeout=proxy.upstream_timeout)
        try:
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in _HOP}
            conn.request(self.command, self.path, body=body or None,
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheaders(), proxy.rewrite(data)
        finally:
            conn.close()

    def _fault(self, status: int, message: str = 'fault injected by the '
               'test proxy') -> None:
        key = _FAULT_KEYS.get(status, 'computeFault')
        data = json.dumps({key: {'code': status,
                                 'message': message}}).encode()
        self.send_response_only(status)
        self.send_header('Date', self.date_time_string())
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        if status in (429, 503):
            self.send_header('Retry-After', '1')
        self.end_headers()
        self.wfile.write(data)

    def _reset(self) -> None:
        """Drop the connection with a TCP reset (SO_LINGER 0)."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack('ii', 1, 0))
            self.connection.close()
        except OSError:
            pass
