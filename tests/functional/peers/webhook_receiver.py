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

"""WebhookReceiver: an HTTP(S) server on 127.0.0.1 that checks signatures.

It does what a receiver of instanceha's webhooks must do, written here
independently of the sender's code: recompute HMAC-SHA256 over
``<X-InstanceHA-Timestamp>.<body>`` with the shared secret, compare in
constant time, refuse a time stamp more than ``max_skew`` seconds away.
Valid requests are kept in ``received`` (parsed JSON), refused ones in
``refused`` (the reason). ``fail_next`` answers the next N requests with
HTTP 503; ``stop()`` / ``start()`` take it away and bring it back on the
same port.
"""

import hashlib
import hmac
import http.server
import json
import ssl
import threading
import time

import fixtures

from tests.functional.peers import base


class WebhookReceiver(fixtures.Fixture):

    def __init__(self, secret: bytes, tls: bool = False, max_skew=60,
                 delay: float = 0.0):
        super().__init__()
        self.secret = secret
        self.tls = tls
        self.max_skew = max_skew
        self.delay = delay
        self.received: list[dict] = []
        self.refused: list[str] = []
        self.fail_next = 0
        self.lock = threading.Lock()
        self.server = None
        self.port = 0
        self.cert = None

    def _setUp(self):
        if self.tls:
            tmp = self.useFixture(fixtures.TempDir()).path
            self.cert, self.key = base.self_signed_cert(tmp, 'webhook')
        self.start()
        self.addCleanup(self.stop)

    def check(self, headers, body: bytes) -> str | None:
        """Why a request is refused, or None."""
        stamp = headers.get('X-InstanceHA-Timestamp', '')
        given = headers.get('X-InstanceHA-Signature', '')
        want = 'sha256=' + hmac.new(self.secret, stamp.encode() + b'.' + body,
                                    hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given, want):
            return 'bad signature'
        try:
            if abs(time.time() - int(stamp)) > self.max_skew:
                return 'stale time stamp'
        except ValueError:
            return 'bad time stamp'
        return None

    def start(self):
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers['Content-Length']))
                if receiver.delay:
                    time.sleep(receiver.delay)
                with receiver.lock:
                    if receiver.fail_next > 0:
                        receiver.fail_next -= 1
                        code = 503
                    else:
                        why = receiver.check(self.headers, body)
                        if why:
                            receiver.refused.append(why)
                            code = 401
                        else:
                            receiver.received.append(json.loads(body))
                            code = 204
                self.send_response(code)
                self.send_header('Content-Length', '0')
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(
            (base.LOOPBACK, self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert, self.key)
            self.server.socket = ctx.wrap_socket(self.server.socket,
                                                 server_side=True)
        self.url = '%s://%s:%d/hook' % ('https' if self.tls else 'http',
                                        base.LOOPBACK, self.port)
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)
        self.thread.start()

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)
            self.server = None

    def event_types(self) -> list[str]:
        with self.lock:
            return [n['event_type'] for n in self.received]
