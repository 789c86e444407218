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

"""Helper process: a real nova on loopback, for functional tests.

Runs nova's own API, conductor, scheduler and placement plus N fake-virt
computes (host1..hostN) in this one process, using the machinery nova
ships for its functional tests (``_IntegratedTestBase``), and serves the
real nova WSGI application on 127.0.0.1. A second small JSON "control"
API (not part of nova) lets tests and BMC emulators kill and revive a
host's compute service or make its next spawn fail.

Usage: python nova_stack.py CONFIG.json   (written by NovaPeer)
"""

import json
import os
import sys
import threading
import time
import traceback

# Our directory holds modules named like real packages (nova_peer, ...):
# look in it last, only for _helper_common.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]
sys.path.append(_HERE)

# The helper must not inherit a test runner's timeouts or output capture.
for _var in ('OS_TEST_TIMEOUT', 'OS_STDOUT_CAPTURE', 'OS_STDERR_CAPTURE',
             'OS_LOG_CAPTURE'):
    os.environ.pop(_var, None)

with open(sys.argv[1]) as _f:
    CFG = json.load(_f)

# Eventlet mode by default: with native threads nova's test database
# fixtures deadlocked when a dozen servers were booted at once.
os.environ['OS_NOVA_DISABLE_EVENTLET_PATCHING'] = (
    'false' if CFG.get('eventlet', True) else 'true')

# Order matters: this import decides eventlet vs native threading and
# must precede nova.tests.fixtures (and anything importing socket users).
import nova.tests.functional  # noqa: E402,F401,I100

import logging  # noqa: E402
from unittest import mock  # noqa: E402

from nova import context as nova_context  # noqa: E402
from nova import exception  # noqa: E402
from nova.tests.functional import integrated_helpers  # noqa: E402

import _helper_common as common  # noqa: E402

#: Project the stub keystone puts every request in (nova's test project).
STUB_PROJECT_ID = '6f70656e737461636b20342065766572'

LOG = logging.getLogger('nova_stack')


class Stack(integrated_helpers._IntegratedTestBase):
    """nova's integrated test base, set up by hand as a long-lived stack."""

    ADMIN_API = True
    # Keep casts asynchronous, as in production: an evacuate returns
    # before the rebuild has happened.
    CAST_AS_CALL = False
    # oslotest: never time the stack out.
    DEFAULT_TIMEOUT = 0

    def __init__(self, cfg):
        self.cfg = cfg
        self.STUB_KEYSTONE = cfg['auth'] == 'stub'
        super().__init__('runTest')

    def runTest(self):
        """Unused: unittest needs a test method to exist."""

    def _setup_services(self):
        # Runs after nova's ConfFixture reset the config: override here.
        cfg = self.cfg
        self.flags(report_interval=cfg['report_interval'],
                   service_down_time=cfg['service_down_time'],
                   compute_driver=cfg['driver'])
        self.flags(api_paste_config=os.path.join(
            sys.prefix, 'etc', 'nova', 'api-paste.ini'), group='wsgi')
        # nova's default quota (10 instances) stops a larger seed.
        self.flags(instances=-1, cores=-1, ram=-1, key_pairs=-1,
                   server_groups=-1, server_group_members=-1,
                   metadata_items=-1, group='quota')
        if not self.STUB_KEYSTONE:
            self._configure_authtoken(cfg['keystone'])
        super()._setup_services()

    def _configure_authtoken(self, ks):
        """Point keystonemiddleware.auth_token at a real keystone."""
        from keystoneauth1 import loading
        import keystonemiddleware.auth_token  # noqa: F401 - registers opts
        from nova import conf
        group = 'keystone_authtoken'
        conf.CONF.register_opts(
            loading.get_auth_plugin_conf_options('password'), group=group)
        self.flags(www_authenticate_uri=ks['auth_url'],
                   auth_url=ks['auth_url'], auth_type='password',
                   username=ks['username'], password=ks['password'],
                   project_name=ks['project_name'],
                   user_domain_name='Default', project_domain_name='Default',
                   service_token_roles_required=False,
                   group=group)

    def _setup_compute_service(self):
        for host in self.cfg['hosts']:
            self._start_compute(host)
        return self.computes[self.cfg['hosts'][0]]

    # -- host faults ------------------------------------------------------

    def kill_host(self, host):
        """Stop the host's compute service: heartbeats stop, VMs stay."""
        compute = self.computes[host]
        if host in self.dead:
            return False
        compute.stop()
        self.dead.add(host)
        return True

    def revive_host(self, host):
        """Start a new compute service for the host, keeping its VMs.

        Like restart_compute_service(keep_hypervisor_state=True) but
        without stopping an already stopped service a second time.
        """
        compute = self.computes[host]
        if host not in self.dead:
            return False
        cell_name = self.host_mappings[host].cell_mapping.name
        with mock.patch('nova.virt.driver.load_compute_driver',
                        return_value=compute.manager.driver):
            self.computes[host] = self.start_service(
                'compute', host=host, cell_name=cell_name)
        self.dead.discard(host)
        return True

    def crash_guest(self, server_id):
        """The guest dies under a running nova-compute, as qemu would.

        The fake driver's record of the instance says it is shut down,
        and the compute manager is handed the hypervisor's "stopped"
        lifecycle event, exactly what libvirt sends when a guest dies:
        Nova's power-state sync then stops the instance itself, in an
        admin context without a user (its instance action ``stop`` has
        no user_id). Returns the host, or None if no live compute has it.
        """
        from nova.compute import power_state
        from nova.virt import event as virt_event
        for host, compute in self.computes.items():
            if host in self.dead:
                continue
            driver = compute.manager.driver
            if server_id not in getattr(driver, 'instances', {}):
                continue
            driver.instances[server_id].state = power_state.SHUTDOWN
            compute.manager.handle_lifecycle_event(virt_event.LifecycleEvent(
                server_id, virt_event.EVENT_LIFECYCLE_STOPPED))
            return host
        return None

    def shape_hosts(self, shapes):
        """Give hosts their own size, allocation ratios and reserved.

        ``shapes``: host -> any of vcpus, memory_mb, local_gb (the fake
        driver's hardware) and cpu/ram/disk_allocation_ratio,
        reserved_vcpus, reserved_memory_mb, reserved_disk_gb (what
        Placement is told, as an operator's nova.conf would per host).
        Pushed to Placement at once.
        """
        for host, shape in shapes.items():
            driver = self.computes[host].manager.driver
            for attr in ('vcpus', 'memory_mb', 'local_gb'):
                if attr in shape:
                    setattr(driver, attr, shape[attr])
            driver.update_provider_tree = _shaped_inventory(
                driver.update_provider_tree, shape)
        self.update_resources()

    def update_resources(self):
        """The periodic task the test fixtures switch off.

        Without it a host re-enabled after restart keeps the
        COMPUTE_STATUS_DISABLED trait and later evacuations fail with
        NoValidHost.
        """
        ctx = nova_context.get_admin_context()
        for host, compute in list(self.computes.items()):
            if host in self.dead:
                continue
            cell = self.host_mappings[host].cell_mapping
            with nova_context.target_cell(ctx, cell) as cctxt:
                compute.manager.update_available_resource(cctxt)


#: Inventory fields a host's shape may set, by resource class.
_SHAPED = (('VCPU', 'cpu_allocation_ratio', 'reserved_vcpus'),
           ('MEMORY_MB', 'ram_allocation_ratio', 'reserved_memory_mb'),
           ('DISK_GB', 'disk_allocation_ratio', 'reserved_disk_gb'))


def _shaped_inventory(original, shape):
    """The driver's update_provider_tree with the shape's ratios applied."""
    def update_provider_tree(provider_tree, nodename, allocations=None):
        original(provider_tree, nodename, allocations=allocations)
        inventory = provider_tree.data(nodename).inventory
        for rc, ratio, reserved in _SHAPED:
            if ratio in shape:
                inventory[rc]['allocation_ratio'] = shape[ratio]
            if reserved in shape:
                inventory[rc]['reserved'] = shape[reserved]
        provider_tree.update_inventory(nodename, inventory)
    return update_provider_tree


def placement_app(token='admin'):
    """Nova's in-process Placement (a wsgi-intercept), as a WSGI app.

    Served on its own loopback port so that clients outside this process
    read the same Placement nova's scheduler writes. Its fixture runs it
    with noauth2: every request is made an admin's.
    """
    import wsgi_intercept
    for (_, _), (create, script) in wsgi_intercept._wsgi_intercept.items():
        if script == '/placement':
            app = create()
            break
    else:
        raise RuntimeError('nova\'s placement fixture is not installed')

    def wrapper(environ, start_response):
        environ['HTTP_X_AUTH_TOKEN'] = token
        return app(environ, start_response)
    return wrapper


class SpawnFaults(object):
    """Make the next N spawns (boot or evacuation rebuild) fail on a host."""

    def __init__(self):
        self.pending = {}
        self.lock = threading.Lock()

    def install(self, driver_cls):
        original = driver_cls.spawn
        faults = self

        def spawn(driver, context, instance, *args, **kwargs):
            if faults.take(driver._host):
                raise exception.NovaException(
                    'instanceha test: injected spawn failure on %s'
                    % driver._host)
            return original(driver, context, instance, *args, **kwargs)

        driver_cls.spawn = spawn

    def take(self, host):
        with self.lock:
            left = self.pending.get(host, 0)
            if left:
                self.pending[host] = left - 1
                return True
            return False


def stub_keystone(app):
    """Stand-in for keystone: every request is an admin of one project.

    Headers a client sets itself win, so a test can still ask for e.g.
    ``X-Roles: reader`` to see nova's policy refuse it.
    """
    def wrapper(environ, start_response):
        environ.setdefault('HTTP_X_AUTH_USER', 'admin')
        environ.setdefault('HTTP_X_AUTH_PROJECT_ID', STUB_PROJECT_ID)
        environ.setdefault('HTTP_X_ROLES', 'admin,member,reader')
        return app(environ, start_response)
    return wrapper


def control_app(stack, faults, lock):
    """The JSON control API of the helper.

    kill/revive are serialised: concurrent compute restarts gave HTTP 500s
    and a host that never came back.
    """

    def computes(parts, body):
        with faults.lock:
            pending = dict(faults.pending)
        return 200, {h: {'running': h not in stack.dead,
                         'fail_spawn': pending.get(h, 0)}
                     for h in stack.cfg['hosts']}

    def kill(parts, body):
        host = _known(parts[1])
        with lock:
            changed = stack.kill_host(host)
        return 200, {'host': host, 'running': False, 'changed': changed}

    def revive(parts, body):
        host = _known(parts[1])
        with lock:
            changed = stack.revive_host(host)
        return 200, {'host': host, 'running': True, 'changed': changed}

    def fail_spawn(parts, body):
        host = _known(parts[1])
        count = int(body.get('count', 1))
        with faults.lock:
            faults.pending[host] = count
        return 200, {'host': host, 'fail_spawn': count}

    def crash(parts, body):
        with lock:
            host = stack.crash_guest(parts[1])
        if host is None:
            return 404, {'error': 'no running compute holds %s' % parts[1]}
        return 200, {'server': parts[1], 'host': host}

    def periodic(parts, body):
        with lock:
            stack.update_resources()
        return 200, {}

    def _known(host):
        if host not in stack.computes:
            raise KeyError(host)
        return host

    return common.json_app({
        ('GET', ('health',)): lambda p, b: (200, {'ok': True}),
        ('GET', ('computes',)): computes,
        ('POST', ('computes', '*', 'kill')): kill,
        ('POST', ('computes', '*', 'revive')): revive,
        ('POST', ('computes', '*', 'fail-spawn')): fail_spawn,
        ('POST', ('periodic',)): periodic,
        ('POST', ('servers', '*', 'crash')): crash,
    })


def periodic_loop(stack, lock, interval):
    """update_available_resource on live computes every few seconds."""
    while True:
        time.sleep(interval)
        try:
            with lock:
                stack.update_resources()
        except Exception:  # noqa: BLE001 - keep the loop alive, log it
            LOG.exception('periodic update_available_resource failed')


def quiet_logging(log_level):
    """Send nova's logs to our stdout (the fixture's log file).

    nova's StandardLogging keeps every record in memory and formats all
    DEBUG records; for a long-lived helper on 2 cores that is wasted
    memory and CPU.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.__stdout__)
    handler.setFormatter(logging.Formatter(
        '%(asctime)s %(levelname)s [%(name)s] %(message)s'))
    root.addHandler(handler)
    root.setLevel(log_level)


def main():
    started = time.monotonic()
    cfg = CFG
    stack = Stack(cfg)
    try:
        stack.setUp()
    except BaseException:
        # oslotest captured stderr; print where the fixture can see it.
        traceback.print_exc(file=sys.__stderr__)
        sys.__stderr__.flush()
        os._exit(3)
    quiet_logging(getattr(logging, cfg.get('log_level', 'INFO')))
    stack.dead = set()

    if cfg.get('shapes'):
        stack.shape_hosts(cfg['shapes'])

    faults = SpawnFaults()
    faults.install(type(stack.computes[cfg['hosts'][0]].manager.driver))
    lock = threading.RLock()

    app = stack.api_fixture.app()
    if stack.STUB_KEYSTONE:
        app = stub_keystone(app)
    api = common.make_wsgi_server(app)
    control = common.make_wsgi_server(control_app(stack, faults, lock))
    common.serve_in_thread(api, 'nova-api')
    common.serve_in_thread(control, 'nova-control')
    placement = common.make_wsgi_server(placement_app())
    common.serve_in_thread(placement, 'placement-api')
    threading.Thread(target=periodic_loop, daemon=True, name='periodic',
                     args=(stack, lock, cfg['periodic_interval'])).start()

    common.write_ready(cfg['ready_file'], {
        'api_port': api.server_port,
        'control_port': control.server_port,
        'placement_port': placement.server_port,
        'pid': os.getpid(),
        'setup_seconds': round(time.monotonic() - started, 2),
    })
    LOG.info('nova stack ready: api %s control %s',
             api.server_port, control.server_port)
    common.run_until_orphaned(cfg['max_lifetime'])


if __name__ == '__main__':
    main()
