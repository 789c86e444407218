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

"""The bmh fencing driver against a small Kubernetes API stand-in.

No real Kubernetes API server (nor Metal3's baremetal-operator) can run
on this machine, so this test serves the slice of the API the driver
uses -- GET and JSON merge-PATCH of one BareMetalHost resource, bearer
token authentication, 401/403/404/415 answers as the API server gives
them -- over real HTTP on 127.0.0.1, with a thread playing the
baremetal-operator: it sets ``status.poweredOn`` to match ``spec.online``
(off while a ``reboot.metal3.io`` annotation is present) after a delay.
"""

import http.server
import json
import os
import re
import ssl
import threading
import time

import fixtures
import yaml

from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import bmh
from instanceha.plugins.fencing import config
from tests.functional.peers import base as peers_base
from tests.functional import test_fencing

TOKEN = 'k8s-token-0123456789abcdef'
READER = 'k8s-reader-token-abcdef0123'
PATH = re.compile(r'^/apis/metal3\.io/v1alpha1/namespaces/([^/]+)/'
                  r'baremetalhosts/([^/]+)$')
EVENTS = re.compile(r'^/api/v1/namespaces/([^/]+)/events$')


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class KubeApiStandIn(fixtures.Fixture):
    """BareMetalHost resources behind a loopback HTTP server."""

    def __init__(self, hosts, delay=0.3, tls_files=None):
        super().__init__()
        self.delay = delay
        self.tls_files = tls_files
        self.stuck = False
        self.lock = threading.Lock()
        self.patches = []
        #: core/v1 Events created (the kubernetes notifier's).
        self.events = []
        self.objects = {
            ('metal3', h): {
                'apiVersion': 'metal3.io/v1alpha1', 'kind': 'BareMetalHost',
                'metadata': {'name': h, 'namespace': 'metal3',
                             'annotations': {}},
                'spec': {'online': True},
                'status': {'poweredOn': True}} for h in hosts}
        self.changed = {}

    def _setUp(self):
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def status(self, code, reason, message):
                self.reply(code, {'kind': 'Status', 'apiVersion': 'v1',
                                  'status': 'Failure', 'reason': reason,
                                  'message': message, 'code': code})

            def handle_verb(self, verb):
                auth = self.headers.get('Authorization', '')
                if auth not in ('Bearer ' + TOKEN, 'Bearer ' + READER):
                    return self.status(401, 'Unauthorized', 'Unauthorized')
                match = PATH.match(self.path)
                if not match:
                    return self.status(404, 'NotFound', 'no such path')
                key = match.groups()
                if verb == 'PATCH' and auth != 'Bearer ' + TOKEN:
                    return self.status(403, 'Forbidden', 'cannot patch')
                with api.lock:
                    obj = api.objects.get(key)
                    if obj is None:
                        return self.status(404, 'NotFound',
                                           'baremetalhosts "%s" not found'
                                           % key[1])
                    if verb == 'PATCH':
                        ctype = self.headers.get('Content-Type')
                        if ctype != 'application/merge-patch+json':
                            return self.status(415, 'UnsupportedMediaType',
                                               ctype or 'none')
                        length = int(self.headers['Content-Length'])
                        patch = json.loads(self.rfile.read(length))
                        api.patches.append(patch)
                        obj = merge_patch(obj, patch)
                        api.objects[key] = obj
                        api.changed[key] = time.monotonic()
                    body = json.loads(json.dumps(obj))
                self.reply(200, body)

            def do_GET(self):
                self.handle_verb('GET')

            def do_PATCH(self):
                self.handle_verb('PATCH')

            def do_POST(self):
                """Create a core/v1 Event (what the notifier needs)."""
                auth = self.headers.get('Authorization', '')
                if auth not in ('Bearer ' + TOKEN, 'Bearer ' + READER):
                    return self.status(401, 'Unauthorized', 'Unauthorized')
                match = EVENTS.match(self.path)
                if not match:
                    return self.status(404, 'NotFound', 'no such path')
                if auth != 'Bearer ' + TOKEN:
                    return self.status(403, 'Forbidden', 'cannot create')
                length = int(self.headers['Content-Length'])
                event = json.loads(self.rfile.read(length))
                if (event.get('kind') != 'Event' or
                        event['metadata'].get('namespace') != match.group(1)
                        or not event.get('involvedObject')):
                    return self.status(422, 'Invalid', 'not an Event here')
                with api.lock:
                    event['metadata']['name'] = 'instanceha-%d' % len(
                        api.events)
                    api.events.append(event)
                self.reply(201, event)

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.port = self.server.server_address[1]
        scheme = 'http'
        if self.tls_files:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls_files)
            self.server.socket = ctx.wrap_socket(self.server.socket,
                                                 server_side=True)
            scheme = 'https'
        self.url = '%s://127.0.0.1:%d' % (scheme, self.port)
        self.done = threading.Event()
        threads = [threading.Thread(target=self.server.serve_forever,
                                    daemon=True),
                   threading.Thread(target=self._operator, daemon=True)]
        for t in threads:
            t.start()
        self.addCleanup(self._stop, threads)

    def _stop(self, threads):
        self.done.set()
        self.server.shutdown()
        self.server.server_close()
        for t in threads:
            t.join(5)

    def _operator(self):
        """The baremetal-operator's power reconciliation, in short."""
        while not self.done.wait(0.05):
            with self.lock:
                for key, obj in self.objects.items():
                    annotations = obj['metadata'].get('annotations') or {}
                    rebooting = any(a.startswith('reboot.metal3.io')
                                    for a in annotations)
                    want = bool(obj['spec'].get('online')) and not rebooting
                    since = time.monotonic() - self.changed.get(key, 0)
                    if (obj['status'].get('poweredOn') != want
                            and since >= self.delay and not self.stuck):
                        obj['status']['poweredOn'] = want

    def powered_on(self, host):
        with self.lock:
            return self.objects[('metal3', host)]['status']['poweredOn']


class TestBmh(test_fencing.FencingTestBase):

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.EnvironmentVariable(
            'KUBERNETES_SERVICE_HOST'))
        self.api = self.useFixture(KubeApiStandIn(['worker-0', 'worker-1']))
        self.token_file = self.secret_file('token', TOKEN)

    def driver(self, **params) -> base.FencingDriver:
        dev = {'driver': 'bmh', 'baremetalhost': 'worker-0',
               'namespace': 'metal3', 'api_url': self.api.url,
               'token_file': self.token_file, 'timeout': 5}
        dev.update(params)
        dev = {k: v for k, v in dev.items() if v is not None}
        path = self.fencing_file({'compute-0': dev})
        [[drv]] = config.load(self.conf, path).hosts['compute-0'].levels
        return drv

    def test_off_then_on(self):
        drv = self.driver()
        self.assertEqual(base.PowerState.ON, drv.power_status())
        drv.power_off()
        self.assertFalse(self.api.powered_on('worker-0'))
        obj = self.api.objects[('metal3', 'worker-0')]
        self.assertFalse(obj['spec']['online'])
        self.assertEqual({'mode': 'hard'}, json.loads(
            obj['metadata']['annotations'][bmh.ANNOTATION]))
        self.assertTrue(self.api.powered_on('worker-1'))
        drv.power_on()
        obj = self.api.objects[('metal3', 'worker-0')]
        self.assertTrue(obj['spec']['online'])
        self.assertNotIn(bmh.ANNOTATION, obj['metadata']['annotations'])
        self.assertTrue(self.api.powered_on('worker-0'))
        self.assertNotIn(TOKEN, self.log.output)

    def test_kubeconfig_credentials(self):
        kubeconfig = os.path.join(self.tmp, 'kubeconfig')
        with open(kubeconfig, 'w') as f:
            yaml.safe_dump({
                'apiVersion': 'v1', 'kind': 'Config',
                'current-context': 'lab',
                'clusters': [{'name': 'c', 'cluster': {
                    'server': self.api.url}}],
                'users': [{'name': 'u', 'user': {'token': TOKEN}}],
                'contexts': [{'name': 'lab', 'context': {
                    'cluster': 'c', 'user': 'u'}}]}, f)
        drv = self.driver(api_url=None, token_file=None,
                          kubeconfig=kubeconfig, baremetalhost='worker-1')
        drv.power_off()
        self.assertFalse(self.api.powered_on('worker-1'))
        bad = dict(context='nope')
        exc = self.assertRaises(exceptions.ConfigurationError, self.driver,
                                api_url=None,
                                token_file=None, kubeconfig=kubeconfig,
                                **bad)
        self.assertIn("no context named 'nope'", str(exc))

    def test_wrong_token_forbidden_and_unknown_host(self):
        wrong = self.secret_file('wrong', 'not-the-token-at-all')
        exc = self.assertRaises(base.AuthError,
                                self.driver(token_file=wrong).power_off)
        self.assertIn('rejected the token', str(exc))
        self.assertNotIn('not-the-token-at-all', str(exc))
        reader = self.secret_file('reader', READER)
        exc = self.assertRaises(base.AuthError,
                                self.driver(token_file=reader).power_off)
        self.assertIn('forbidden to patch', str(exc))
        exc = self.assertRaises(
            base.UnknownAddressError,
            self.driver(baremetalhost='worker-9').power_status)
        self.assertIn('BareMetalHost metal3/worker-9 not found', str(exc))
        self.assertTrue(self.api.powered_on('worker-0'))

    def test_operator_never_powers_off(self):
        self.api.stuck = True
        exc = self.assertRaises(base.NotConfirmedError,
                                self.driver(timeout=1).power_off)
        self.assertIn('accepted power off but still reports on', str(exc))

    def test_api_unreachable(self):
        url = 'http://127.0.0.1:%d' % peers_base.free_port()
        exc = self.assertRaises(base.UnreachableError,
                                self.driver(api_url=url).power_status)
        self.assertIn('cannot connect to the Kubernetes API', str(exc))


class TestBmhInCluster(test_fencing.FencingTestBase):
    """Running in a pod: service account token and CA, API over HTTPS."""

    def test_service_account_credentials(self):
        sa_dir = os.path.join(self.tmp, 'serviceaccount')
        os.mkdir(sa_dir)
        cert, key = peers_base.self_signed_cert(self.tmp, 'kube-api')
        with open(os.path.join(sa_dir, 'ca.crt'), 'w') as f, \
                open(cert) as src:
            f.write(src.read())
        token_path = os.path.join(sa_dir, 'token')
        with open(token_path, 'w') as f:
            f.write(TOKEN)
        api = self.useFixture(KubeApiStandIn(['worker-0'],
                                             tls_files=(cert, key)))
        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.adapters.kubernetes.SA_TOKEN', token_path))
        self.useFixture(fixtures.MonkeyPatch(
            'instanceha.adapters.kubernetes.SA_CA',
            os.path.join(sa_dir, 'ca.crt')))
        self.useFixture(fixtures.EnvironmentVariable(
            'KUBERNETES_SERVICE_HOST', '127.0.0.1'))
        self.useFixture(fixtures.EnvironmentVariable(
            'KUBERNETES_SERVICE_PORT', str(api.port)))
        path = self.fencing_file({'compute-0': {
            'driver': 'bmh', 'baremetalhost': 'worker-0',
            'namespace': 'metal3', 'timeout': 5}})
        [[drv]] = config.load(self.conf, path).hosts['compute-0'].levels
        drv.power_off()
        self.assertFalse(api.powered_on('worker-0'))
        # The token is read again for every request (it rotates).
        with open(token_path, 'w') as f:
            f.write('rotated-but-wrong-token')
        exc = self.assertRaises(base.AuthError, drv.power_on)
        self.assertNotIn('rotated-but-wrong-token', str(exc))
        self.assertNotIn(TOKEN, self.log.output)
