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

"""Metal3 BareMetalHost power control through the Kubernetes API.

Fencing sets ``spec.online: false`` and the reboot annotation
``reboot.metal3.io/instanceha: {"mode": "hard"}`` (the baremetal-operator
then powers the host off at once, without a soft shutdown, and keeps it
off while the annotation exists); it is proven when ``status.poweredOn``
turns false. Unfencing removes the annotation and sets ``spec.online:
true``, and waits for ``status.poweredOn`` true.

Plain HTTPS with ``requests`` (two verbs on one resource do not need a
Kubernetes client library). Credentials come from, in order: ``api_url``
with ``token``/``token_file``; a kubeconfig file (``kubeconfig``; token
or client certificate users; exec plugins are not supported); the pod's
service account when running in-cluster.
"""

import base64
import json
import os
import tempfile

import requests
import yaml

from instanceha.adapters import kubernetes as kube
from instanceha.plugins.fencing import base

GROUP_PATH = '/apis/metal3.io/v1alpha1'
ANNOTATION = 'reboot.metal3.io/instanceha'
HARD = json.dumps({'mode': 'hard'})


class BmhFencing(base.FencingDriver):
    description = ('Metal3 BareMetalHost via the Kubernetes API: '
                   'spec.online + reboot annotation, polls '
                   'status.poweredOn.')

    PARAMS = {
        'baremetalhost': base.Param('Name of the BareMetalHost',
                                    required=True),
        'namespace': base.Param('Namespace of the BareMetalHost',
                                required=True),
        'api_url': base.Param('Kubernetes API URL (with token); default: '
                              'from kubeconfig or in-cluster'),
        'token': base.Param('Bearer token for api_url', secret=True),
        'kubeconfig': base.Param('kubeconfig file to take the API URL and '
                                 'credentials from'),
        'context': base.Param('kubeconfig context (default: the current '
                              'one)'),
        'ca_file': base.Param('CA bundle to verify the API server'),
        'verify': base.Param('Verify the API server certificate',
                             convert=base.to_bool, default=True),
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._session: requests.Session | None = None
        self._api: str | None = None
        self._token_file: str | None = None
        self._tmpfiles: list[str] = []

    def describe_target(self) -> str:
        return 'bmh %s/%s' % (self.params.get('namespace'),
                              self.params.get('baremetalhost'))

    @property
    def url(self) -> str:
        return '%s%s/namespaces/%s/baremetalhosts/%s' % (
            self._api, GROUP_PATH, self.params['namespace'],
            self.params['baremetalhost'])

    # -- credentials ----------------------------------------------------------

    def validate(self) -> None:
        super().validate()
        if self.params.get('token') and not self.params.get('api_url'):
            self._fail("parameter 'token' needs 'api_url'")
        if self.params.get('api_url'):
            if not self.params['api_url'].startswith(('http://',
                                                      'https://')):
                self._fail("parameter 'api_url': %r needs a scheme"
                           % self.params['api_url'])
            self._session = self._new_session()
            self._api = self.params['api_url'].rstrip('/')
            if self.params.get('token'):
                self._session.headers['Authorization'] = 'Bearer %s' % (
                    self.params['token'])
        elif self.params.get('kubeconfig'):
            self._from_kubeconfig()
        elif kube.in_cluster():
            self._session = self._new_session()
            self._api = kube.in_cluster_api()
            self._token_file = kube.SA_TOKEN
            ca = kube.in_cluster_ca()
            if self._session.verify is True and ca:
                self._session.verify = ca
        else:
            self._fail('no Kubernetes credentials: set api_url and token, '
                       'or kubeconfig, or run in-cluster')

    def _new_session(self) -> requests.Session:
        session = requests.Session()
        session.headers['Accept'] = 'application/json'
        session.verify = self.params['verify']
        if session.verify and self.params.get('ca_file'):
            session.verify = self.params['ca_file']
        return session

    def _kubeconfig_file(self, item: dict, key: str) -> str | None:
        """A path for item[key] or item[key-data] (written to a temp file)."""
        if item.get(key):
            path = os.path.expanduser(str(item[key]))
            return path if os.path.isabs(path) else os.path.join(
                os.path.dirname(os.path.abspath(self.params['kubeconfig'])),
                path)
        data = item.get(key + '-data')
        if not data:
            return None
        fd, path = tempfile.mkstemp(prefix='instanceha-bmh-')
        with os.fdopen(fd, 'wb') as f:
            f.write(base64.b64decode(data))
        self._tmpfiles.append(path)
        return path

    def _from_kubeconfig(self) -> None:
        path = self.params['kubeconfig']
        try:
            with open(path) as f:
                cfg = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            self._fail("parameter 'kubeconfig': cannot read %s: %s"
                       % (path, getattr(exc, 'strerror', None) or exc))

        def named(section: str, name: str) -> dict:
            for item in cfg.get(section) or []:
                if item.get('name') == name:
                    return item.get(section[:-1]) or {}
            self._fail("kubeconfig %s: no %s named %r" % (
                path, section[:-1], name))

        ctx_name = self.params.get('context') or cfg.get('current-context')
        if not ctx_name:
            self._fail("kubeconfig %s has no current-context; set 'context'"
                       % path)
        ctx = named('contexts', ctx_name)
        cluster = named('clusters', ctx.get('cluster'))
        user = named('users', ctx.get('user'))
        if not cluster.get('server'):
            self._fail('kubeconfig %s: cluster of context %r has no server'
                       % (path, ctx_name))
        if user.get('exec') or user.get('auth-provider'):
            self._fail('kubeconfig %s: user of context %r uses an exec or '
                       'auth-provider plugin, which is not supported; use a '
                       'token or a client certificate' % (path, ctx_name))
        session = self._new_session()
        self._api = str(cluster['server']).rstrip('/')
        if cluster.get('insecure-skip-tls-verify'):
            session.verify = False
        elif session.verify is True:
            ca = self._kubeconfig_file(cluster, 'certificate-authority')
            session.verify = ca or True
        token = user.get('token')
        if not token and user.get('tokenFile'):
            self._token_file = user['tokenFile']
        if token:
            self._secrets.append(str(token))
            session.headers['Authorization'] = 'Bearer %s' % token
        cert = self._kubeconfig_file(user, 'client-certificate')
        key = self._kubeconfig_file(user, 'client-key')
        if cert:
            session.cert = (cert, key) if key else cert
        self._session = session

    def stop(self) -> None:
        for path in self._tmpfiles:
            try:
                os.unlink(path)
            except OSError:
                pass
        self._tmpfiles = []

    # -- requests -------------------------------------------------------------

    def _request(self, method: str, deadline: float, what: str,
                 body: dict | None = None) -> dict:
        timeout = self.remaining(deadline)
        if timeout <= 0:
            raise base.DeviceTimeoutError(self, 'no time left for %s' % what)
        headers = {}
        if self._token_file:
            # Service account tokens rotate: read it for every request.
            try:
                token = kube.read_token(self._token_file)
            except OSError as exc:
                raise base.AuthError(self, 'cannot read token file %s: %s'
                                     % (self._token_file, exc.strerror)
                                     ) from None
            if token not in self._secrets:
                self._secrets.append(token)
            headers['Authorization'] = 'Bearer %s' % token
        if body is not None:
            headers['Content-Type'] = 'application/merge-patch+json'
        try:
            # verify passed explicitly: requests would otherwise let
            # REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace our CA.
            resp = self._session.request(
                method, self.url, headers=headers, timeout=min(timeout, 30),
                verify=self._session.verify,
                data=json.dumps(body) if body is not None else None)
        except requests.exceptions.Timeout:
            raise base.DeviceTimeoutError(self, 'no answer from the '
                                          'Kubernetes API to %s' % what
                                          ) from None
        except requests.exceptions.SSLError as exc:
            raise base.DeviceError(self, 'TLS failed for %s (check ca_file '
                                   'or verify): %s' % (what, exc)) from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc).lower()
            if 'name or service not known' in text or 'resolve' in text:
                raise base.UnknownAddressError(
                    self, 'Kubernetes API host %s does not resolve'
                    % self._api) from None
            raise base.UnreachableError(self, 'cannot connect to the '
                                        'Kubernetes API %s for %s'
                                        % (self._api, what)) from None
        if resp.status_code == 401:
            raise base.AuthError(self, 'the Kubernetes API rejected the '
                                 'token for %s (HTTP 401)' % what)
        if resp.status_code == 403:
            raise base.AuthError(self, 'forbidden to %s the BareMetalHost '
                                 '(HTTP 403): grant get/patch on '
                                 'baremetalhosts.metal3.io' % method.lower())
        if resp.status_code == 404:
            raise base.UnknownAddressError(
                self, 'BareMetalHost %s/%s not found' % (
                    self.params['namespace'], self.params['baremetalhost']))
        if resp.status_code >= 400:
            raise base.DeviceError(self, '%s failed: HTTP %d %s' % (
                what, resp.status_code, resp.text[:200]))
        try:
            return resp.json()
        except ValueError:
            raise base.DeviceError(self, '%s: the answer is not JSON'
                                   % what) from None

    def _request_power(self, state: base.PowerState, deadline: float
                       ) -> None:
        if state is base.PowerState.OFF:
            patch = {'metadata': {'annotations': {ANNOTATION: HARD}},
                     'spec': {'online': False}}
        else:
            patch = {'metadata': {'annotations': {ANNOTATION: None}},
                     'spec': {'online': True}}
        self._request('PATCH', deadline, 'power %s' % state.value, patch)

    def _read_power(self, deadline: float) -> base.PowerState:
        bmh = self._request('GET', deadline, 'power status')
        powered = (bmh.get('status') or {}).get('poweredOn')
        if powered is True:
            return base.PowerState.ON
        if powered is False:
            return base.PowerState.OFF
        return base.PowerState.UNKNOWN
