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

"""NovaPeer: a real nova API with fake-virt computes, in a subprocess."""

import os
import time

import requests

from tests.functional.peers import base

#: An image nova's in-process glance fixture always serves.
IMAGE_ID = '155d900f-4e14-4e4c-a73d-069cbf4541e6'

#: Up to 2.94 evacuated servers come back ACTIVE; 2.95+ leaves them SHUTOFF.
DEFAULT_MICROVERSION = '2.94'


class NovaControl(object):
    """Client of the helper's control API (kill/revive hosts, faults).

    This API is not part of nova: it is how a test (or a BMC emulator
    powering a host off) simulates a host failure.
    """

    def __init__(self, url, timeout=30):
        self.url = url.rstrip('/')
        self.timeout = timeout

    def _call(self, method, path, body=None):
        resp = requests.request(method, self.url + path, json=body,
                                timeout=self.timeout)
        if resp.status_code != 200:
            raise base.PeerError('nova control %s %s: HTTP %s %s'
                                 % (method, path, resp.status_code,
                                    resp.text[:300]))
        return resp.json()

    def computes(self):
        """{host: {'running': bool, 'fail_spawn': int}}."""
        return self._call('GET', '/computes')

    def kill(self, host):
        """Stop host's nova-compute: heartbeats stop, instances stay."""
        return self._call('POST', '/computes/%s/kill' % host)

    def revive(self, host):
        """Start host's nova-compute again with its hypervisor state."""
        return self._call('POST', '/computes/%s/revive' % host)

    def fail_spawn(self, host, count=1):
        """Make the next `count` spawns on host raise (boot or rebuild).

        An evacuation to that host then fails (instance ERROR, migration
        'failed'); a boot there is rescheduled elsewhere. 0 clears it.
        """
        return self._call('POST', '/computes/%s/fail-spawn' % host,
                          {'count': count})

    def crash(self, server_id):
        """The server's guest dies; Nova's power sync stops it (no user)."""
        return self._call('POST', '/servers/%s/crash' % server_id)

    def run_periodic(self):
        """Run update_available_resource on live computes now."""
        return self._call('POST', '/periodic')


class NovaPeer(base.Peer):
    """Real nova API + conductor + scheduler + placement, fake computes.

    :param hosts: number of computes (named host1..hostN) or a list of
        names.
    :param keystone: a started KeystonePeer to make nova validate tokens
        for real (its ``compute`` endpoint is registered once nova is up
        and removed in cleanup); None (default) stubs keystone out: any
        token is an admin of one project.
    :param driver: nova fake virt driver; MediumFakeDriver has 10 vCPUs
        and 8 GiB (x4 CPU allocation ratio), FakeDriver is nearly infinite.
    :param shapes: host -> its own size and Placement inventory settings
        (vcpus, memory_mb, local_gb; cpu/ram/disk_allocation_ratio,
        reserved_vcpus, reserved_memory_mb, reserved_disk_gb), applied
        when the stack starts.

    Nova's Placement is served too, at ``placement_endpoint`` (every
    request an admin's).

    ``report_interval=2``/``service_down_time=6``: a killed compute is
    reported ``down`` about 6 s later. Attributes once set up:
    ``endpoint``, ``control`` (NovaControl), ``process`` (PeerProcess),
    ``hosts``, ``setup_seconds``.
    """

    start_timeout = 60

    def __init__(self, hosts=3, keystone=None,
                 driver='fake.MediumFakeDriver', report_interval=2,
                 service_down_time=6, periodic_interval=3, eventlet=True,
                 max_lifetime=3600, shapes=None):
        super().__init__()
        if isinstance(hosts, int):
            hosts = ['host%d' % i for i in range(1, hosts + 1)]
        self.hosts = list(hosts)
        self.keystone = keystone
        self.options = {
            'hosts': self.hosts,
            'driver': driver,
            'auth': 'keystone' if keystone else 'stub',
            'report_interval': report_interval,
            'service_down_time': service_down_time,
            'periodic_interval': periodic_interval,
            'eventlet': eventlet,
            'max_lifetime': max_lifetime,
            'shapes': shapes or {},
        }
        self.report_interval = report_interval
        self.service_down_time = service_down_time

    def _setUp(self):
        super()._setUp()
        started = time.monotonic()
        cfg = dict(self.options)
        cfg['ready_file'] = os.path.join(self.tmpdir, 'nova-ready.json')
        if self.keystone:
            cfg['keystone'] = {
                'auth_url': self.keystone.auth_url,
                'username': self.keystone.admin_user,
                'password': self.keystone.admin_password,
                'project_name': self.keystone.admin_project,
            }
        cfg_path = os.path.join(self.tmpdir, 'nova-stack.json')
        # The file may hold the keystone admin password: owner-only.
        fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        base.write_json_file(cfg_path, cfg)
        self.process = self.python_helper('nova', 'nova_stack.py',
                                          [cfg_path])
        ready = self.process.wait_ready(
            lambda: base.read_json_file(cfg['ready_file']),
            self.start_timeout, what='nova stack ready file')
        self.api_port = ready['api_port']
        self.endpoint = 'http://%s:%d/v2.1' % (base.LOOPBACK,
                                               ready['api_port'])
        #: Nova's own Placement, served on loopback (no auth: admin).
        self.placement_endpoint = 'http://%s:%d' % (base.LOOPBACK,
                                                    ready['placement_port'])
        self.control = NovaControl('http://%s:%d' % (base.LOOPBACK,
                                                     ready['control_port']))
        self.process.wait_ready(
            lambda: requests.get(self.endpoint + '/', timeout=5).ok,
            10, what='nova API to answer')
        if self.keystone:
            self.keystone.register_compute(self.endpoint)
            self.addCleanup(self.keystone.unregister_compute)
        self.setup_seconds = time.monotonic() - started

    # -- clients ----------------------------------------------------------

    def session(self):
        """A keystoneauth session that reaches this nova as admin."""
        from keystoneauth1 import noauth
        from keystoneauth1 import session
        if self.keystone:
            return self.keystone.session()
        return session.Session(auth=noauth.NoAuth(endpoint=self.endpoint))

    def client(self, microversion=DEFAULT_MICROVERSION):
        """python-novaclient Client as admin."""
        from novaclient import client
        return client.Client(microversion, session=self.session(),
                             endpoint_type='public')

    # -- seeding ----------------------------------------------------------

    def create_flavor(self, name, vcpus=1, ram=512, disk=1,
                      extra_specs=None, client=None):
        """Create a flavor, optionally with extra specs; returns it."""
        nova = client or self.client()
        flavor = nova.flavors.create(name, ram, vcpus, disk)
        if extra_specs:
            flavor.set_keys(extra_specs)
        return flavor

    def create_aggregate(self, name, hosts=(), metadata=None, zone=None,
                         client=None):
        """Create an aggregate holding hosts, with metadata; returns it."""
        nova = client or self.client()
        agg = nova.aggregates.create(name, zone)
        for host in hosts:
            nova.aggregates.add_host(agg, host)
        if metadata:
            nova.aggregates.set_metadata(agg, metadata)
        return nova.aggregates.get(agg)

    def create_servers(self, count=1, host=None, flavor=None, name='vm',
                       wait=True, timeout=60, metadata=None, client=None):
        """Boot `count` servers (on `host` if given) and wait ACTIVE.

        Returns the list of servers (refreshed when waited for).
        """
        nova = client or self.client()
        if flavor is None:
            flavor = nova.flavors.find(name='m1.tiny')
        kwargs = {'nics': 'none', 'meta': metadata}
        if host:
            kwargs['availability_zone'] = 'nova:%s' % host
        servers = [nova.servers.create('%s-%d' % (name, i), IMAGE_ID,
                                       flavor, **kwargs)
                   for i in range(count)]
        if wait:
            servers = [self.wait_for_server(s.id, 'ACTIVE', timeout, nova)
                       for s in servers]
        return servers

    # -- waiting ----------------------------------------------------------

    def wait_for_server(self, server_id, status='ACTIVE', timeout=60,
                        client=None):
        """Wait until the server has `status`; fail early on ERROR."""
        nova = client or self.client()

        def check():
            server = nova.servers.get(server_id)
            if server.status == 'ERROR' and status != 'ERROR':
                raise base.PeerError('server %s went ERROR: %s' % (
                    server_id, getattr(server, 'fault', None)))
            return server if server.status == status else None

        return self._wait(check, timeout,
                          'server %s %s' % (server_id, status))

    def wait_for_evacuation(self, server_id, timeout=60, client=None,
                            expect=('done', 'completed')):
        """Wait for the server's latest evacuation migration to finish.

        Don't wait for status ACTIVE instead: nova sets the instance
        ACTIVE (task_state None) *before* it moves instance.host to the
        destination and marks the migration 'done', so a poll can see
        ACTIVE on the failed host mid-evacuation. Raises if the migration
        ends 'failed'/'error' unless that is in `expect`. Returns
        (migration, server).
        """
        nova = client or self.client()
        terminal = set(expect) | {'done', 'completed', 'failed', 'error'}

        def check():
            migs = [m for m in nova.migrations.list(instance_uuid=server_id)
                    if m.migration_type == 'evacuation']
            if not migs:
                return None
            mig = max(migs, key=lambda m: m.id)
            if mig.status not in terminal:
                return None
            if mig.status not in expect:
                raise base.PeerError('evacuation of %s ended %s' % (
                    server_id, mig.status))
            return mig

        mig = self._wait(check, timeout, 'evacuation of %s' % server_id)
        return mig, nova.servers.get(server_id)

    def wait_for_service(self, host, state, timeout=None, client=None):
        """Wait until host's nova-compute service reports state up/down."""
        nova = client or self.client()
        timeout = timeout or self.service_down_time * 3 + 10

        def check():
            svcs = nova.services.list(host=host, binary='nova-compute')
            return svcs[0] if svcs and svcs[0].state == state else None

        return self._wait(check, timeout,
                          'nova-compute on %s %s' % (host, state))

    def _wait(self, check, timeout, what):
        """wait_until that stops early, with the log, if nova died."""
        def guarded():
            if not self.process.running:
                raise base.PeerError('nova helper died; log tail:\n%s'
                                     % self.process.log_tail())
            return check()
        try:
            return base.wait_until(guarded, timeout, interval=0.25,
                                   what=what)
        except base.PeerError as exc:
            if not self.process.running:
                raise base.PeerError('%s; nova helper died; log tail:\n%s'
                                     % (exc, self.process.log_tail()))
            raise
