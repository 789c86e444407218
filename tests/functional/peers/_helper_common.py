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

"""Code shared by the helper-process scripts (not by the fixtures).

Imported by the scripts as a sibling module, so it must stay free of
imports that would defeat nova's eventlet monkey patching (no requests,
no testtools): only the standard library, imported lazily where it
matters.
"""

import json
import os
import sys
import threading
import time


def log(msg, *args):
    """One time-stamped line on stdout (the fixture's log file)."""
    sys.stdout.write('%s %s\n' % (time.strftime('%H:%M:%S'), msg % args))
    sys.stdout.flush()


class NovaHook(object):
    """Kill/revive a host's nova-compute, in order, off the BMC's threads.

    A BMC emulator answers from one loop (pyghmi) or request threads
    (sushy-tools): a slow revive must not delay its answers, so the calls
    to the nova helper's control API go through a worker thread.
    """

    def __init__(self, control_url):
        import queue
        self.control_url = control_url.rstrip('/')
        self.jobs = queue.Queue()
        threading.Thread(target=self._run, daemon=True,
                         name='nova-hook').start()

    def submit(self, host, action):
        """Queue ``action`` ('kill' or 'revive') for ``host``."""
        self.jobs.put((host, action))

    def _run(self):
        import urllib.request
        while True:
            host, action = self.jobs.get()
            url = '%s/computes/%s/%s' % (self.control_url, host, action)
            try:
                req = urllib.request.Request(url, data=b'{}', method='POST')
                with urllib.request.urlopen(req, timeout=60) as resp:
                    log('nova %s %s: HTTP %s', action, host, resp.status)
            except Exception as exc:  # noqa: BLE001 - logged, loop goes on
                log('nova %s %s failed: %r', action, host, exc)


def make_wsgi_server(app, port=0, host='127.0.0.1', tls=None):
    """A threaded wsgiref server bound on loopback (port 0 = pick one).

    Binding port 0 inside the helper and reporting the real port avoids
    the race of choosing a "free" port in the parent. tls: optional
    (certfile, keyfile) to serve HTTPS.
    """
    import socketserver
    from wsgiref import simple_server

    class Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 64

    class Handler(simple_server.WSGIRequestHandler):
        def log_message(self, fmt, *args):
            # Keep the log readable: one line per request, no headers.
            sys.stdout.write('%s http %s\n' % (time.strftime('%H:%M:%S'),
                                               fmt % args))

    if tls:
        import ssl

        class TLSServer(Server):
            def get_request(self):
                # Handshake in the request thread: a stalled client must
                # not block accept() for everyone else.
                sock, addr = self.socket.accept()
                return ctx.wrap_socket(sock, server_side=True,
                                       do_handshake_on_connect=False), addr

            def process_request_thread(self, request, client_address):
                try:
                    request.settimeout(30)
                    request.do_handshake()
                except (OSError, ssl.SSLError):
                    self.shutdown_request(request)
                    return
                super().process_request_thread(request, client_address)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        Server = TLSServer  # noqa: N806
    server = simple_server.make_server(host, port, app, server_class=Server,
                                       handler_class=Handler)
    if tls:
        server.base_environ['HTTPS'] = 'on'
        server.base_environ['wsgi.url_scheme'] = 'https'
    return server


def serve_in_thread(server, name):
    """Serve forever on a daemon thread (green thread when patched)."""
    t = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    t.start()
    return t


def write_ready(path, data):
    """Tell the parent fixture we are up (atomic JSON file)."""
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(data, f)
    os.replace(tmp, path)


def run_until_orphaned(max_lifetime, poll=1.0):
    """Block the main thread until the parent dies or max_lifetime passes.

    A helper must never outlive its test run: if the runner is killed the
    helper exits on its own at the latest `max_lifetime` seconds later.
    """
    parent = os.getppid()
    deadline = time.monotonic() + max_lifetime
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(poll)
    sys.stdout.write('helper exiting: %s\n' % (
        'parent gone' if os.getppid() != parent else 'max lifetime'))
    sys.stdout.flush()
    os._exit(0)


def json_app(routes):
    """A tiny JSON WSGI app for the helpers' control APIs.

    routes maps (METHOD, path pattern tuple, '*' matches one part) to a
    handler called with (parts, body_dict) returning (status, payload).
    """
    def app(environ, start_response):
        method = environ['REQUEST_METHOD']
        parts = [p for p in environ.get('PATH_INFO', '').split('/') if p]
        try:
            length = int(environ.get('CONTENT_LENGTH') or 0)
        except ValueError:
            length = 0
        raw = environ['wsgi.input'].read(length) if length else b''
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        handler = None
        for (m, pattern), fn in routes.items():
            if m == method and len(pattern) == len(parts) and all(
                    want in ('*', got) for want, got in zip(pattern, parts)):
                handler = fn
                break
        if handler is None:
            status, payload = 404, {'error': 'no route %s %s'
                                    % (method, '/'.join(parts))}
        else:
            try:
                status, payload = handler(parts, body)
            except KeyError as exc:
                status, payload = 404, {'error': 'unknown %s' % exc}
            except Exception as exc:  # noqa: BLE001 - reported to client
                import traceback
                traceback.print_exc(file=sys.stdout)
                status, payload = 500, {'error': repr(exc)}
        data = json.dumps(payload).encode()
        reasons = {200: 'OK', 202: 'Accepted', 400: 'Bad Request',
                   404: 'Not Found', 409: 'Conflict',
                   500: 'Internal Server Error'}
        start_response('%d %s' % (status, reasons.get(status, 'Status')),
                       [('Content-Type', 'application/json'),
                        ('Content-Length', str(len(data)))])
        return [data]
    return app
