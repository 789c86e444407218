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

"""Pins what redfish.ConnectorControl relies on inside sushy.

sushy has no public interface for a client certificate or for a timeout
that changes between requests; ConnectorControl reaches into its
Connector for both. These tests fail if a sushy release stops honouring
them, instead of the driver silently ignoring a setting.
"""

import http.server
import os
import threading
import time
from unittest import mock

import fixtures
import requests
from sushy import connector
from sushy import exceptions as sushy_exc
import testtools

from instanceha.plugins.fencing import redfish


class _Slow(http.server.BaseHTTPRequestHandler):

    def do_GET(self):
        time.sleep(3)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


class TestConnectorControl(testtools.TestCase):

    def connector(self):
        server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _Slow)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return connector.Connector(
            'http://127.0.0.1:%d' % server.server_address[1],
            default_request_timeout=30,
            # One attempt, as the driver makes them.
            server_side_retries=1, server_side_retries_delay=1)

    def test_bound_requests_applies_to_the_next_request(self):
        conn = self.connector()
        redfish.ConnectorControl(conn).bound_requests(0.5)
        started = time.monotonic()
        self.assertRaises(sushy_exc.ConnectionError, conn.get, '/redfish/v1')
        self.assertLess(time.monotonic() - started, 2.5)

    def test_client_cert_is_presented_on_requests(self):
        conn = self.connector()
        tmp = self.useFixture(fixtures.TempDir()).path
        cert = (os.path.join(tmp, 'c.pem'), os.path.join(tmp, 'k.pem'))
        for path in cert:
            open(path, 'w').close()
        redfish.ConnectorControl(conn).use_client_cert(cert)
        seen = []
        real = requests.Session.request

        def request(session, *args, **kwargs):
            seen.append(session.cert)
            kwargs['timeout'] = 0.2
            return real(session, *args, **kwargs)

        with mock.patch.object(requests.Session, 'request', request):
            self.assertRaises(sushy_exc.ConnectionError, conn.get, '/')
        self.assertEqual([cert], seen[:1])
