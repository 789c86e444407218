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

"""KeystonePeer: a real keystone on sqlite, in a subprocess."""

import os
import secrets
import time

import requests

from tests.functional.peers import base

REGION = 'RegionOne'


class KeystonePeer(base.Peer):
    """Real keystone (fernet tokens, sqlite) on a loopback port.

    Start it before a ``NovaPeer(keystone=...)``: nova's auth_token
    middleware needs auth_url and the admin credentials at start-up, and
    NovaPeer registers its ``compute`` service and endpoints here once
    its port is known (:meth:`register_compute`), removing them in its
    cleanup.

    Attributes: ``auth_url`` (…/v3), ``admin_user``, ``admin_password``
    (random per fixture), ``admin_project``, ``user_domain`` /
    ``project_domain`` (``Default``), ``region`` (RegionOne).
    """

    start_timeout = 60

    def __init__(self, max_lifetime=3600):
        super().__init__()
        self.admin_user = 'admin'
        self.admin_project = 'admin'
        self.admin_password = secrets.token_urlsafe(16)
        self.user_domain = self.project_domain = 'Default'
        self.region = REGION
        self.max_lifetime = max_lifetime
        self._compute_service_id = None
        self._admin_session = None

    def _setUp(self):
        super()._setUp()
        started = time.monotonic()
        ready_file = os.path.join(self.tmpdir, 'keystone-ready.json')
        cfg_path = os.path.join(self.tmpdir, 'keystone-helper.json')
        fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        base.write_json_file(cfg_path, {
            'dir': self.tmpdir,
            'admin_user': self.admin_user,
            'admin_password': self.admin_password,
            'admin_project': self.admin_project,
            'ready_file': ready_file,
            'max_lifetime': self.max_lifetime,
        })
        self.process = self.python_helper('keystone', 'keystone_server.py',
                                          [cfg_path])
        ready = self.process.wait_ready(
            lambda: base.read_json_file(ready_file), self.start_timeout,
            what='keystone ready file')
        self.port = ready['port']
        self.url = 'http://%s:%d' % (base.LOOPBACK, self.port)
        self.auth_url = self.url + '/v3'
        self.process.wait_ready(
            lambda: requests.get(self.auth_url, timeout=5).ok, 10,
            what='keystone to answer')
        self.setup_seconds = time.monotonic() - started

    # -- clients ----------------------------------------------------------

    def session(self, username=None, password=None, project=None):
        """keystoneauth session for a user (default: the admin)."""
        from keystoneauth1.identity import v3
        from keystoneauth1 import session
        auth = v3.Password(
            auth_url=self.auth_url,
            username=username or self.admin_user,
            password=password or self.admin_password,
            project_name=project or self.admin_project,
            user_domain_name=self.user_domain,
            project_domain_name=self.project_domain)
        return session.Session(auth=auth)

    def token(self, **kwargs):
        """A fresh token for a user (default: the admin)."""
        return self.session(**kwargs).get_token()

    def _admin(self, method, path, body=None):
        """Call keystone's v3 API as the admin; returns the JSON body."""
        if self._admin_session is None:
            self._admin_session = self.session()
        resp = self._admin_session.request(
            self.auth_url + path, method, json=body, raise_exc=False)
        if resp.status_code >= 400:
            raise base.PeerError('keystone %s %s: HTTP %s %s' % (
                method, path, resp.status_code, resp.text[:300]))
        return resp.json() if resp.content else {}

    # -- catalog ----------------------------------------------------------

    def register_compute(self, url):
        """Register a ``compute`` service with endpoints at url."""
        svc = self._admin('POST', '/services', {'service': {
            'type': 'compute', 'name': 'nova', 'enabled': True}})
        self._compute_service_id = svc['service']['id']
        for interface in ('public', 'internal', 'admin'):
            self._admin('POST', '/endpoints', {'endpoint': {
                'service_id': self._compute_service_id,
                'interface': interface, 'url': url,
                'region_id': self.region, 'enabled': True}})

    def unregister_compute(self):
        """Remove the compute service and its endpoints (idempotent)."""
        if not self._compute_service_id or not self.process.running:
            return
        eps = self._admin('GET', '/endpoints?service_id=%s'
                          % self._compute_service_id)
        for ep in eps['endpoints']:
            self._admin('DELETE', '/endpoints/%s' % ep['id'])
        self._admin('DELETE', '/services/%s' % self._compute_service_id)
        self._compute_service_id = None

    # -- users ------------------------------------------------------------

    def create_user(self, name=None, roles=('member', 'reader'),
                    project=None):
        """Create a user with roles on a project (default: admin project).

        The default roles make a member-only user: nova's policy refuses
        it the admin APIs (e.g. os-services → 403). Returns
        ``(name, password)``.
        """
        name = name or 'user-%s' % secrets.token_hex(4)
        password = secrets.token_urlsafe(16)
        project = project or self.admin_project
        user = self._admin('POST', '/users', {'user': {
            'name': name, 'password': password, 'domain_id': 'default',
            'enabled': True}})['user']
        proj = self._admin('GET', '/projects?name=%s' % project)
        project_id = proj['projects'][0]['id']
        for role_name in roles:
            found = self._admin('GET', '/roles?name=%s' % role_name)['roles']
            if found:
                role_id = found[0]['id']
            else:
                role_id = self._admin('POST', '/roles', {
                    'role': {'name': role_name}})['role']['id']
            self._admin('PUT', '/projects/%s/users/%s/roles/%s'
                        % (project_id, user['id'], role_id))
        return name, password
