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

"""The recovery workflow against real peers.

A real nova (API, conductor, scheduler, placement, fake-virt computes;
NovaPeer) and real IPMI BMC emulators driven by the real ipmitool
(IpmiBmcPeer, wired to nova: powering a host off at its BMC kills its
nova-compute, powering it on revives it). The engine runs with the
production environment of :mod:`instanceha.daemon.service` (NovaCloud,
the fencing topology with the ipmi driver, tooz with a file:// backend,
a thread pool), in this process so the test can see its events; the last
tests run the real ``instanceha-service`` process.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import fixtures
from oslo_config import cfg
import testtools
import testtools.content
import testtools.content_type

from instanceha import conf as ha_conf
from instanceha.daemon import service as service_mod
from instanceha.engine import events
from instanceha.engine import reasons
from instanceha.engine import runner
from instanceha.engine import states
from instanceha.plugins import loader
from tests.functional import peers
from tests.functional.peers import base as peer_base
from tests.functional.peers import ipmi_peer

#: Generous bound for one whole recovery (detection ~8 s, fence, rebuilds,
#: power on, compute restart, enable): the test fails, never hangs.
RECOVERY_TIMEOUT = 120


def wait_for(predicate, timeout, what):
    return peer_base.wait_until(predicate, timeout, interval=0.25, what=what)


class Cloud(fixtures.Fixture):
    """NovaPeer + IpmiBmcPeer + instanceha config files."""

    def __init__(self, hosts=3, options=None, fencing=None,
                 max_lifetime=3600, keystone=None):
        super().__init__()
        self.hosts = hosts
        self.options = options or {}
        self.fencing = fencing
        #: Seconds nova and the BMCs live at most (a long soak needs more).
        self.max_lifetime = max_lifetime
        #: A started KeystonePeer: nova validates tokens and instanceha
        #: authenticates with a password (None: no authentication).
        self.keystone = keystone

    def _setUp(self):
        self.nova = self.useFixture(peers.NovaPeer(
            hosts=self.hosts, max_lifetime=self.max_lifetime,
            keystone=self.keystone))
        self.bmc = self.useFixture(ipmi_peer.IpmiBmcPeer(
            hosts=self.nova.hosts, nova=self.nova,
            max_lifetime=self.max_lifetime))
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.client = self.nova.client()
        secret = os.path.join(self.dir, 'bmc-password')
        with open(secret, 'w') as f:
            f.write(self.bmc.password)
        os.chmod(secret, 0o600)
        lines = ['hosts:']
        for host in self.nova.hosts:
            if self.fencing and host in self.fencing:
                entry = self.fencing[host]
            else:
                entry = {'driver': 'ipmi', 'address': '127.0.0.1',
                         'port': self.bmc.ports[host],
                         'username': self.bmc.username,
                         'password_file': secret}
            if entry is None:
                continue
            lines.append('  %s:' % host)
            lines.extend('    %s: %s' % kv for kv in sorted(entry.items()))
        self.fencing_file = os.path.join(self.dir, 'fencing.yaml')
        with open(self.fencing_file, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        groups = {
            'DEFAULT': {'poll': 2, 'delta': 8, 'tick_interval': 0.2,
                        'fence_retry_interval': 2,
                        'fence_retry_max_interval': 4, 'debug': False},
            'nova': self._nova_access(),
            'fencing': {'config_file': self.fencing_file,
                        'device_timeout': 20},
            'coordination': {'backend_url': 'file://%s/coord' % self.dir,
                             'heartbeat_interval': 0.5, 'lease_time': 3},
            'health': {'port': peer_base.free_port()},
            # Nova's own service_down_time, as an operator tells it.
            'detection': {
                'nova_service_down_time': self.nova.service_down_time},
        }
        for key, value in self.options.items():
            group, _, name = key.rpartition('.')
            groups.setdefault(group or 'DEFAULT', {})[name] = value
        self.config_file = os.path.join(self.dir, 'instanceha.conf')
        with open(self.config_file, 'w') as f:
            for group, opts in groups.items():
                f.write('[%s]\n' % group)
                for name, value in opts.items():
                    if isinstance(value, (list, tuple)):
                        value = ','.join(value)
                    f.write('%s = %s\n' % (name, value))

    def _nova_access(self):
        if self.keystone is None:
            return {'auth_type': 'none', 'endpoint': self.nova.endpoint}
        ks = self.keystone
        return {'auth_type': 'password', 'auth_url': ks.auth_url,
                'username': ks.admin_user, 'password': ks.admin_password,
                'project_name': ks.admin_project,
                'user_domain_name': ks.user_domain,
                'project_domain_name': ks.project_domain,
                'region_name': ks.region, 'valid_interfaces': 'public'}

    # -- helpers ----------------------------------------------------------

    def boot(self, host, count=1, name='vm', metadata=None):
        return [s.id for s in self.nova.create_servers(
            count, host=host, name='%s-%s' % (name, host), metadata=metadata,
            client=self.client)]

    def stop_server(self, server_id):
        self.client.servers.stop(server_id)
        self.nova.wait_for_server(server_id, 'SHUTOFF', client=self.client)

    def service(self, host):
        return self.client.services.list(host=host, binary='nova-compute')[0]

    def server(self, server_id):
        server = self.client.servers.get(server_id)
        server.host = getattr(server, 'OS-EXT-SRV-ATTR:host')
        return server

    def evacuations(self, server_id):
        return [m for m in self.client.migrations.list(
            instance_uuid=server_id)
            if getattr(m, 'migration_type', 'evacuation') == 'evacuation']

    def power_off(self, host):
        """A host failure: power cut at its BMC, its compute dies."""
        proc = self.bmc.ipmitool(host, 'chassis', 'power', 'off')
        assert proc.returncode == 0, proc.stderr

    def power_on(self, host):
        proc = self.bmc.ipmitool(host, 'chassis', 'power', 'on')
        assert proc.returncode == 0, proc.stderr

    def recovered(self, host):
        svc = self.service(host)
        return (svc.status == 'enabled' and svc.state == 'up' and
                not svc.forced_down)


def manage(cloud, *args):
    """Run the real instanceha-manage; its output (fails on rc != 0)."""
    script = os.path.join(os.path.dirname(sys.executable),
                          'instanceha-manage')
    proc = subprocess.run([script, '--config-file', cloud.config_file] +
                          list(args), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def start_service(test, cloud, name='service', extra_config=()):
    """Start the real instanceha-service on the cloud's config file.

    Its output goes to ``<cloud.dir>/<name>.log``, attached to the test
    result as ``<name>-log``; it is killed at clean-up if still running.
    ``extra_config``: more ``--config-file`` paths, read after the
    cloud's.
    """
    path = os.path.join(cloud.dir, '%s.log' % name)
    log = open(path, 'ab')
    test.addCleanup(log.close)

    def attach():
        # Read now: the cloud's temporary directory is removed before the
        # test runner would read a lazy detail, which crashes the subunit
        # worker. The tail only: a long run logs a lot.
        with open(path, errors='replace') as f:
            tail = f.read()[-200000:]
        test.addDetail('%s-log' % name,
                       testtools.content.text_content(tail))
    test.addCleanup(attach)
    script = os.path.join(os.path.dirname(sys.executable),
                          'instanceha-service')
    args = [script, '--config-file', cloud.config_file]
    for extra in extra_config:
        args += ['--config-file', extra]
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING='true'))

    def reap():
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # Clean-ups run last-in first-out: reaped before the log is attached.
    test.addCleanup(reap)
    return proc


class EngineRunner(fixtures.Fixture):
    """The production environment and engine, ticked in a thread."""

    def __init__(self, config_file):
        super().__init__()
        self.config_file = config_file

    def _setUp(self):
        self.conf = cfg.ConfigOpts()
        ha_conf.parse_args(['--config-file', self.config_file], self.conf,
                           default_config_files=[])
        ha_conf.validate(self.conf)
        self.drivers = loader.load_configured(self.conf)
        self.record = events.RecordingEventSink()
        self.addDetail('engine-events', testtools.content.Content(
            testtools.content_type.UTF8_TEXT,
            lambda: ['\n'.join(self.record.lines()).encode()]))
        self.service = service_mod.build(
            self.conf, self.drivers, event_sink=events.FanOutEventSink(
                events.LogEventSink(), self.record))
        self.engine = self.service.engine
        self.coordinator = self.service.env.coordinator
        self.coordinator.start()
        self._stopped = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        self.addCleanup(self.stop)

    def _loop(self):
        while not self.service.stop.is_set():
            # As the service's loop: the observers (the shutdown policy's
            # handler) hear of every tick.
            runner.tick_once(self.engine, self.service.observers)
            self.service.stop.wait(self.conf.tick_interval)

    def stop(self, clean=True):
        """Stop ticking.

        ``clean``: Engine.shutdown (as on SIGTERM); otherwise the engine
        is abandoned like a killed process (running jobs still end).
        """
        if self._stopped:
            return
        self._stopped = True
        self.service.stop.set()
        self.thread.join(30)
        if clean:
            self.engine.shutdown(10)
        self.service.executor.shutdown(wait=True)
        self.coordinator.stop()

    def state(self, host):
        return self.engine.host_states().get(host)


class RecoveryTestBase(testtools.TestCase):

    def cloud(self, **kw):
        return self.useFixture(Cloud(**kw))

    def engine(self, cloud):
        return self.useFixture(EngineRunner(cloud.config_file))

    def assert_whole_recovery(self, eng, host='host1'):
        """The workflow ended after every step of a recovery, in order."""
        wait_for(lambda: eng.state(host) is None, 10, 'workflow done')
        news = [d['new'] for d in eng.record.named(events.HOST_STATE, host)]
        self.assertEqual(['suspect', 'fencing', 'fenced', 'evacuating',
                          'evacuated', 'powering_on', 'waiting_up',
                          'enabling', 'healthy'], news)

    def fail_and_recover(self, cloud, host='host1'):
        """Power ``host`` off; wait until it is marked, then handed back."""
        cloud.power_off(host)
        wait_for(lambda: cloud.service(host).forced_down,
                 RECOVERY_TIMEOUT, '%s forced down' % host)
        wait_for(lambda: cloud.recovered(host), RECOVERY_TIMEOUT,
                 '%s enabled, up, not forced down' % host)


class TestRecovery(RecoveryTestBase):

    def test_host_failure_fenced_evacuated_powered_on_enabled(self):
        cloud = self.cloud()
        active = cloud.boot('host1', 2)
        off, = cloud.boot('host1', 1, name='off')
        cloud.stop_server(off)
        err, = cloud.boot('host1', 1, name='err')
        cloud.client.servers.reset_state(err, 'error')
        other, = cloud.boot('host2', 1)
        eng = self.engine(cloud)
        t0 = time.monotonic()
        cloud.power_off('host1')
        wait_for(lambda: cloud.service('host1').forced_down,
                 RECOVERY_TIMEOUT, 'host1 forced down')
        t_fenced = time.monotonic() - t0
        svc = cloud.service('host1')
        self.assertEqual('disabled', svc.status)
        parsed = reasons.read(svc.disabled_reason).marker
        self.assertIsNotNone(parsed, svc.disabled_reason)
        want = dict.fromkeys(active, 'ACTIVE')
        want[off] = 'SHUTOFF'
        want[err] = 'ERROR'

        def rebuilt():
            servers = {s: cloud.server(s) for s in want}
            return all(srv.host != 'host1' and srv.status == want[s] and
                       not srv.locked and not getattr(
                           srv, 'OS-EXT-STS:task_state', None)
                       for s, srv in servers.items())

        wait_for(rebuilt, RECOVERY_TIMEOUT,
                 'instances rebuilt elsewhere in their power state, '
                 'unlocked')
        t_rebuilt = time.monotonic() - t0
        wait_for(lambda: cloud.recovered('host1'), RECOVERY_TIMEOUT,
                 'host1 enabled, up, not forced down')
        # Numbers, not a timed assertion (service_down_time 6 s, poll 2 s).
        print('recovery: forced down after %.1f s, instances rebuilt after '
              '%.1f s, host enabled after %.1f s'
              % (t_fenced, t_rebuilt, time.monotonic() - t0))
        self.assertIsNone(cloud.service('host1').disabled_reason)
        self.assertEqual('on', cloud.bmc.power_state('host1'))
        for sid in active:
            self.assertEqual('ACTIVE', cloud.server(sid).status)
        self.assertEqual('SHUTOFF', cloud.server(off).status)
        self.assertEqual('ERROR', cloud.server(err).status)
        for sid in active + [off, err]:
            self.assertEqual(1, len(cloud.evacuations(sid)))
            self.assertFalse(cloud.server(sid).locked)
        self.assertEqual('host2', cloud.server(other).host)
        self.assertEqual([], cloud.evacuations(other))
        self.assert_whole_recovery(eng)

    def test_reads_scheduled_by_heartbeats(self):
        # [detection] nova_service_down_time told Nova's own (the peer's
        # 6 s, below delta 8: Nova's verdict comes first): the failure is
        # recovered and the host handed back as with a read every
        # interval, and Nova's real answers (its whole-second stamps, its
        # own clock) never look like a shorter down time than told.
        logs = self.useFixture(fixtures.FakeLogger(
            name='instanceha.engine.watch', level=logging.WARNING))
        cloud = self.cloud(options={'detection.nova_service_down_time': 6})
        cloud.boot('host1', 2)
        eng = self.engine(cloud)
        self.fail_and_recover(cloud)
        self.assert_whole_recovery(eng)
        self.assertNotIn('nova_service_down_time', logs.output)

    def test_leave_disabled(self):
        cloud = self.cloud(options={'leave_disabled': True})
        vms = cloud.boot('host1', 2)
        eng = self.engine(cloud)
        cloud.power_off('host1')
        wait_for(lambda: eng.state('host1') is
                 states.HostState.LEFT_DISABLED, RECOVERY_TIMEOUT,
                 'host1 left disabled')
        svc = cloud.service('host1')
        self.assertEqual('disabled', svc.status)
        self.assertTrue(svc.forced_down)
        self.assertEqual(states.HostState.LEFT_DISABLED,
                         reasons.read(svc.disabled_reason).marker.state)
        self.assertEqual('off', cloud.bmc.power_state('host1'))
        # fire-and-forget moved on once Nova accepted the calls
        wait_for(lambda: all(cloud.server(s).host != 'host1' and
                             not cloud.server(s).locked for s in vms),
                 RECOVERY_TIMEOUT, 'instances rebuilt elsewhere, unlocked')

    def test_fencing_failure_nothing_evacuated(self):
        cloud = self.cloud()
        vms = cloud.boot('host1', 2)
        eng = self.engine(cloud)
        cloud.bmc.set_mode('host1', 'error')
        cloud.nova.control.kill('host1')  # compute dies, BMC misbehaves
        wait_for(lambda: len(eng.record.named(events.FENCE_PENDING,
                                              'host1')) >= 3,
                 RECOVERY_TIMEOUT, 'fencing reported failing 3 cycles')
        # between two attempts, or retrying
        self.assertIn(eng.state('host1'), (states.HostState.FENCE_FAILED,
                                           states.HostState.FENCING))
        # and it never got further, whatever the timing (R9)
        news = {d['new'] for d in eng.record.named(events.HOST_STATE,
                                                   'host1')}
        self.assertLessEqual(news, {'suspect', 'fencing', 'fence_failed'})
        for sid in vms:
            self.assertEqual('host1', cloud.server(sid).host)
            self.assertEqual([], cloud.evacuations(sid))
        svc = cloud.service('host1')
        self.assertFalse(svc.forced_down)
        self.assertEqual('enabled', svc.status)

    def test_smart_failing_rebuild_retried_then_failed(self):
        # A short back-off (1 s, then 2 s) keeps the test quick.
        cloud = self.cloud(options={'evacuation.strategy': 'smart',
                                    'evacuation.retries': 2,
                                    'evacuation.retry_interval': 1,
                                    'evacuation.same_target_retries': 0})
        vm, = cloud.boot('host1', 1)
        for host in ('host2', 'host3'):
            cloud.nova.control.fail_spawn(host, 100)
        eng = self.engine(cloud)
        cloud.power_off('host1')
        wait_for(lambda: eng.state('host1') is states.HostState.FAILED,
                 RECOVERY_TIMEOUT, 'host1 FAILED')
        self.assertEqual(3, len(cloud.evacuations(vm)))
        svc = cloud.service('host1')
        self.assertEqual('disabled', svc.status)
        self.assertTrue(svc.forced_down)
        self.assertIn('FAILED', svc.disabled_reason)
        self.assertIn('instanceha-manage hosts clear host1',
                      svc.disabled_reason)
        self.assertFalse(cloud.server(vm).locked)
        self.assertEqual('off', cloud.bmc.power_state('host1'))
        gave_up = eng.record.named(events.EVACUATE_GAVE_UP, 'host1')
        self.assertEqual([vm], [d['server'] for d in gave_up])
        # The operator's way out: list, fix, power on, clear.
        rows = json.loads(manage(cloud, 'hosts', 'list', '--json'))
        row, = [r for r in rows if r['host'] == 'host1']
        self.assertEqual('failed', row['instanceha'])
        self.assertIn('hosts clear host1', row['action'])
        for host in ('host2', 'host3'):
            cloud.nova.control.fail_spawn(host, 0)
        cloud.power_on('host1')
        print(manage(cloud, 'hosts', 'clear', 'host1'))
        wait_for(lambda: cloud.recovered('host1'), RECOVERY_TIMEOUT,
                 'host1 enabled after "hosts clear"')
        self.assertEqual(3, len(cloud.evacuations(vm)))

        def news():
            return [d['new'] for d in eng.record.named(events.HOST_STATE,
                                                       'host1')]
        # The hand-back follows the state table, step by step.
        wait_for(lambda: news()[-1:] == ['healthy'], RECOVERY_TIMEOUT,
                 'host1 healthy in the engine')
        self.assertEqual(['failed', 'waiting_up', 'enabling', 'healthy'],
                         news()[-4:])

    def test_reserved_host_in_same_aggregate_enabled(self):
        cloud = self.cloud(hosts=5, options={
            'reservation.strategy': 'reserved-hosts',
            'evacuation.strategy': 'smart'})
        vms = cloud.boot('host1', 2)
        for spare in ('host4', 'host5'):
            cloud.client.services.disable_log_reason(
                cloud.service(spare).id, 'instanceha:reserved')
        cloud.nova.create_aggregate('rack-1', hosts=['host1', 'host5'],
                                    client=cloud.client)
        eng = self.engine(cloud)
        self.fail_and_recover(cloud)
        self.assertEqual([{'spare': 'host5'}],
                         eng.record.named(events.SPARE_CLAIMED, 'host1'))
        self.assertEqual('enabled', cloud.service('host5').status)
        self.assertEqual('disabled', cloud.service('host4').status)
        for sid in vms:
            self.assertEqual('host5', cloud.server(sid).host)


class TestOrchestrated(RecoveryTestBase):

    def test_priority_order_on_real_nova(self):
        # Server metadata is tenant-writable, so it is a priority source
        # only when the operator allows it; this test allows it.
        cloud = self.cloud(options={
            'evacuation.strategy': 'orchestrated',
            'evacuation.priority_sources': ['server']})
        key = 'instanceha:priority'
        db, = cloud.boot('host1', 1, name='db', metadata={key: '10'})
        apps = cloud.boot('host1', 2, name='app', metadata={key: '5'})
        rest, = cloud.boot('host1', 1, name='rest')
        eng = self.engine(cloud)
        self.fail_and_recover(cloud)
        lines = [(e, d['server']) for e, _h, d in eng.record.events
                 if e in (events.EVACUATE_REQUESTED, events.EVACUATE_DONE)]
        order = [srv for e, srv in lines]
        self.assertEqual((events.EVACUATE_REQUESTED, db), lines[0])
        # each priority starts only once the higher one is rebuilt
        self.assertLess(order.index(db, 1), order.index(apps[0]))
        last_app_done = max(i for i, (e, srv) in enumerate(lines)
                            if e == events.EVACUATE_DONE and srv in apps)
        self.assertLess(last_app_done, order.index(rest))
        for sid in [db, rest] + apps:
            self.assertEqual(1, len(cloud.evacuations(sid)))
            self.assertNotEqual('host1', cloud.server(sid).host)


class TestRestart(RecoveryTestBase):

    def test_killed_mid_evacuation_evacuates_each_once(self):
        cloud = self.cloud(options={'evacuation.strategy': 'smart',
                                    'evacuation.max_in_flight': 1})
        vms = cloud.boot('host1', 4)
        first = self.engine(cloud)
        cloud.power_off('host1')
        wait_for(lambda: first.record.named(events.EVACUATE_REQUESTED),
                 RECOVERY_TIMEOUT, 'a first evacuation')
        first.stop(clean=False)  # like kill -9: no shutdown step
        requested = len(first.record.named(events.EVACUATE_REQUESTED))
        self.assertLess(requested, len(vms))
        second = self.engine(cloud)
        wait_for(lambda: cloud.recovered('host1'), RECOVERY_TIMEOUT,
                 'host1 recovered by the second engine')
        self.assertEqual([{'state': 'evacuating'}],
                         second.record.named(events.HOST_RESUMED, 'host1'))
        for sid in vms:
            self.assertEqual(1, len(cloud.evacuations(sid)), sid)
            server = cloud.server(sid)
            self.assertNotEqual('host1', server.host)
            self.assertEqual('ACTIVE', server.status)
            self.assertFalse(server.locked)


class TestService(RecoveryTestBase):
    """The real instanceha-service process, end to end."""

    def start_service(self, cloud, name='service'):
        return start_service(self, cloud, name)

    def test_end_to_end_with_restart(self):
        cloud = self.cloud(options={'evacuation.strategy': 'smart',
                                    'evacuation.max_in_flight': 1})
        vms = cloud.boot('host1', 3)
        off, = cloud.boot('host1', 1, name='off')
        cloud.stop_server(off)
        vms.append(off)
        proc = self.start_service(cloud, 'service-1')
        cloud.power_off('host1')
        wait_for(lambda: any(cloud.evacuations(s) for s in vms),
                 RECOVERY_TIMEOUT, 'a first evacuation')
        svc = cloud.service('host1')
        self.assertTrue(svc.forced_down)
        self.assertEqual('disabled', svc.status)
        self.assertIsNotNone(reasons.read(svc.disabled_reason).marker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.start_service(cloud, 'service-2')
        wait_for(lambda: cloud.recovered('host1'), RECOVERY_TIMEOUT,
                 'host1 recovered after the restart')
        self.assertIsNone(cloud.service('host1').disabled_reason)
        for sid in vms:
            self.assertEqual(1, len(cloud.evacuations(sid)), sid)
            server = cloud.server(sid)
            self.assertNotEqual('host1', server.host)
            self.assertFalse(server.locked)
        self.assertEqual('SHUTOFF', cloud.server(off).status)
        with open(os.path.join(cloud.dir, 'service-1.log')) as f:
            first = f.read()
        with open(os.path.join(cloud.dir, 'service-2.log')) as f:
            second = f.read()
        self.assertLess(first.count('evacuate_requested host1'), len(vms))
        self.assertIn('host_resumed host1 state=evacuating', second)
        self.assertIn('host_state host1 enabled=True new=healthy', second)

    def test_killed_mid_fence_then_restarted(self):
        cloud = self.cloud()
        vms = cloud.boot('host1', 2)
        cloud.bmc.set_mode('host1', 'silent')  # fencing hangs
        proc = self.start_service(cloud, 'service-1')
        cloud.nova.control.kill('host1')
        log = os.path.join(cloud.dir, 'service-1.log')

        def fencing():
            with open(log) as f:
                return 'new=fencing' in f.read()

        wait_for(fencing, RECOVERY_TIMEOUT, 'fencing started')
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        svc = cloud.service('host1')
        self.assertFalse(svc.forced_down)  # nothing proven, nothing marked
        for sid in vms:
            self.assertEqual([], cloud.evacuations(sid))
        cloud.bmc.set_mode('host1', 'ok')
        self.start_service(cloud, 'service-2')
        wait_for(lambda: cloud.service('host1').forced_down,
                 RECOVERY_TIMEOUT, 'host1 fenced by the second service')
        wait_for(lambda: cloud.recovered('host1'), RECOVERY_TIMEOUT,
                 'host1 recovered after the restart')
        for sid in vms:
            self.assertEqual(1, len(cloud.evacuations(sid)), sid)
            self.assertNotEqual('host1', cloud.server(sid).host)

    def test_sigterm_stops_cleanly(self):
        cloud = self.cloud()
        proc = self.start_service(cloud)
        # Not a fixed sleep: on a loaded machine the imports alone may
        # take longer, and a SIGTERM before the handler is installed
        # kills the process (exit -15), which is not what is tested.
        log = os.path.join(cloud.dir, 'service.log')

        def running():
            with open(log, errors='replace') as f:
                return 'instanceha-service running' in f.read()
        wait_for(running, 60, 'the service running')
        self.assertIsNone(proc.poll())
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(0, proc.wait(30))
