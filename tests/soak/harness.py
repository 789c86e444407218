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

"""A chaos soak on the real peers: many faults, overlapping, audited.

:class:`Soak` assembles what the functional tests already start -- real
nova with N fake computes and servers on every host, IPMI BMC emulators
and (for the last hosts) the Redfish emulator, wired to it (a power-off
kills the host's nova-compute), a real ``instanceha-heartbeat-agent`` on
every host (:mod:`tests.soak.hosts`), a real etcd or redis for
coordination, a fault-injecting proxy in front of Nova's API -- and two
copies of the real ``instanceha-service``. :meth:`Soak.run` injects
faults at random moments from a seeded generator (see :data:`FAULTS`),
audits physical truth after every fault (:mod:`tests.soak.audit`), and
after the last one lifts every fault and waits for the cloud to settle
within a stated bound. Any breach stops the run with the seed and the
timeline that replays it.
"""

import collections
import dataclasses
import datetime
import os
import random
import signal
import socket
import statistics
import time

import fixtures

from instanceha.adapters import nova as nova_adapter
from instanceha import conf as ha_conf
from tests.functional import peers
from tests.functional.peers import base as peer_base
from tests.functional import test_ha
from tests.functional import test_recovery
from tests.soak import audit
from tests.soak import hosts as machines

#: The service's timings: compressed like the functional tests'.
OPTIONS = {
    'poll': 2, 'delta': 8, 'tick_interval': 0.2,
    'fence_retry_interval': 2, 'fence_retry_max_interval': 4,
    'threshold': 50, 'workers': 4, 'shutdown_timeout': 5,
    'nova.timeout': 10,
    'coordination.lease_time': 3, 'coordination.heartbeat_interval': 0.5,
    'evacuation.max_in_flight': 8,
    'instance_failure.stable_time': 30,
    'fencing.device_timeout': 10,
    'evacuation.retries': 5,
    'detection.detectors': ['nova', 'heartbeat'],
    'heartbeat.listen_addresses': ['127.0.0.1'],
    'heartbeat.timeout': 3,
}
#: Coordination backends a run chooses from (by its seed, unless told).
BACKENDS = ('etcd', 'redis')
#: Seconds the cloud gets to settle once the faults stop.
SETTLE_BOUND = 240.0


@dataclasses.dataclass
class Fault:
    """One injected fault and, once seen, its recovery."""

    kind: str
    target: str
    at: float
    recovered_at: float | None = None
    done: object = None  # () -> bool, checked until it holds

    def line(self, t0: float) -> str:
        end = ('recovered after %.1fs' % (self.recovered_at - self.at)
               if self.recovered_at else 'not recovered')
        return '+%7.1fs %-14s %-24s %s' % (self.at - t0, self.kind,
                                           self.target, end)


class Breach(Exception):
    """An audit rule broke: the message says what, with seed and timeline."""


class Soak(fixtures.Fixture):
    """The cloud, the service copies and the soak's own bookkeeping."""

    def __init__(self, hosts: int = 8, per_host: int = 2, copies: int = 2,
                 seed: int = 0, log=print, backend: str | None = None,
                 redfish_hosts: int = 2, max_lifetime: float = 3600):
        super().__init__()
        #: Seconds the peers live at most (they end themselves then).
        self.max_lifetime = int(max_lifetime)
        self.host_count = hosts
        self.per_host = per_host
        self.copy_count = copies
        self.rng = random.Random(seed)
        self.seed = seed
        self.log = log
        self.backend_name = backend or BACKENDS[seed % len(BACKENDS)]
        self.redfish_count = redfish_hosts
        self.faults: list[Fault] = []
        self.breaches: list[str] = []
        #: host -> the reason an operator holds it with (in force).
        self.held: dict[str, str] = {}
        #: host -> [[start, end, reason]]: every operator hold.
        self.holds: dict[str, list] = collections.defaultdict(list)
        #: host -> [[start, end, why]]: its BMC could prove nothing.
        self.unprovable: dict[str, list] = collections.defaultdict(list)
        #: [[start, end, hosts]]: more than the threshold cut off at once.
        self.partitions: list[list] = []
        self.pauses: list[list] = []
        self.leader_changes = 0
        #: The end state was audited (a later truth() says so).
        self._settled = False
        #: (name, pid) of the leading copy last seen.
        self._leader: tuple | None = None

    # --- assembly ----------------------------------------------------------

    def _setUp(self):
        peer = peers.EtcdPeer if self.backend_name == 'etcd' else \
            peers.RedisPeer
        self.backend = self.useFixture(peer())
        self.dir = self.useFixture(fixtures.TempDir()).path
        key = os.path.join(self.dir, 'heartbeat.key')
        with open(key, 'w') as f:
            f.write(os.urandom(32).hex() + '\n')
        options = dict(OPTIONS)
        options['coordination.backend_url'] = self.backend.url
        options['heartbeat.key_file'] = key
        options['heartbeat.port'] = _udp_port()
        self.cloud = self.useFixture(test_recovery.Cloud(
            hosts=self.host_count, options=options,
            max_lifetime=self.max_lifetime))
        self.nova = self.cloud.nova
        redfish_hosts = self.nova.hosts[len(self.nova.hosts) -
                                        self.redfish_count:]
        self.redfish = self.useFixture(peers.RedfishPeer(
            hosts=redfish_hosts, nova=self.nova, power_delay=(0, 2),
            max_lifetime=self.max_lifetime))
        self.machines = machines.Machines(self.cloud, self.redfish,
                                          redfish_hosts, key, self.dir,
                                          self.log)
        self.addCleanup(self.machines.stop)
        self._write_fencing()
        self.proxy = self.useFixture(peers.FaultProxy(self.nova.endpoint))
        behind = os.path.join(self.cloud.dir, 'behind-proxy.conf')
        with open(behind, 'w') as f:
            f.write('[nova]\nendpoint = %s\n' % self.proxy.endpoint)
        self._behind = behind
        for host in self.nova.hosts:
            self.cloud.boot(host, self.per_host, name='soak')
        self.copies = {}
        self._hb_ports = {'copy-%d' % i: _udp_port()
                          for i in range(self.copy_count)}
        self.machines.collectors = list(self._hb_ports.values())
        self.machines.follow()
        for name in self._hb_ports:
            self._start_copy(name)
        test_ha.wait_for(lambda: self.leader() is not None, 60,
                         'a copy to lead')
        self.reader = self._reader()

    def _write_fencing(self) -> None:
        """Every host's BMC with a password file of its own."""
        lines = ['hosts:']
        for host in self.nova.hosts:
            redfish = self.machines.bmc_kind(host) == 'redfish'
            self._set_password(host, self.redfish.password if redfish
                               else self.cloud.bmc.password)
            if redfish:
                entry = {'driver': 'redfish', 'address': self.redfish.url,
                         'system_id': self.redfish.systems[host],
                         'username': self.redfish.username}
            else:
                entry = {'driver': 'ipmi', 'address': '127.0.0.1',
                         'port': self.cloud.bmc.ports[host],
                         'username': self.cloud.bmc.username}
            entry['password_file'] = self._password_file(host)
            lines.append('  %s:' % host)
            lines.extend('    %s: %s' % kv for kv in sorted(entry.items()))
        with open(self.cloud.fencing_file, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def _password_file(self, host: str) -> str:
        return os.path.join(self.dir, 'bmc-password-%s' % host)

    def _set_password(self, host: str, password: str) -> None:
        path = self._password_file(host)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write(password)

    def _start_copy(self, name: str) -> None:
        port = os.path.join(self.cloud.dir, '%s-heartbeat.conf' % name)
        with open(port, 'w') as f:
            f.write('[heartbeat]\nport = %d\n' % self._hb_ports[name])
        self.copies[name] = test_ha.Copy(self, self.cloud, name,
                                         [self._behind, port])

    def _reader(self) -> nova_adapter.NovaCloud:
        """Nova read directly (not through the proxy): the auditor's eyes."""
        from oslo_config import cfg
        conf = cfg.ConfigOpts()
        ha_conf.parse_args(['--config-file', self.cloud.config_file], conf,
                           default_config_files=[])
        return nova_adapter.NovaCloud(conf)

    def leader(self) -> str | None:
        """The leading copy's name (a change of leader is counted)."""
        for name, copy in self.copies.items():
            if copy.proc.poll() is None and copy.leading():
                term = (name, copy.proc.pid)
                if term != self._leader:
                    self.leader_changes += self._leader is not None
                    self._leader = term
                return name
        return None

    def _reload_copies(self) -> None:
        """SIGHUP every running copy: they re-read the fencing file."""
        for copy in self.copies.values():
            if copy.proc.poll() is None:
                copy.proc.send_signal(signal.SIGHUP)

    # --- faults --------------------------------------------------------------

    def _hosts_down(self) -> set:
        return {f.target for f in self.faults if f.recovered_at is None
                and f.kind in HOST_FAULTS}

    def _busy(self) -> set:
        """Hosts an unfinished fault is about (none is chosen again)."""
        return {f.target.split(':')[0] for f in self.faults
                if f.recovered_at is None} | set(self.held) | {
            h for p in self.partitions if p[1] is None for h in p[2]}

    def _healthy_host(self, ipmi: bool = False) -> str | None:
        free = [h for h in self.nova.hosts if h not in self._busy() and (
            not ipmi or self.machines.bmc_kind(h) == 'ipmi')]
        return self.rng.choice(free) if free else None

    def _host_back(self, host: str, servers: list | None = None):
        """Whether ``host``'s failure is over.

        Seen failed, then enabled and up again, not forced down, and every
        instance that was on it ACTIVE (there or elsewhere).
        """
        seen = {'failed': False}
        if servers is None:
            servers = [s.id for s in self.reader.list_servers(host)]

        def done():
            svc = self.reader.read_services().service(host)
            healthy = (svc.status == 'enabled' and svc.state == 'up'
                       and not svc.forced_down)
            if not healthy:
                seen['failed'] = True
                # Nothing on it to recover: the service rightly leaves it
                # down (the soak repairs it once the faults stop).
                return not servers and svc.state == 'down'
            return seen['failed'] and all(
                self.reader.get_server(i).status == 'ACTIVE'
                for i in servers)
        return done

    def _later(self, seconds: float, action, then):
        """A done() that acts once after ``seconds``, then asks ``then``.

        ``action()`` runs once when the time comes; from then on the
        fault is over when ``then()`` holds.
        """
        state = {'at': time.time() + seconds, 'done': False}

        def done():
            if not state['done']:
                if time.time() < state['at']:
                    return False
                action()
                state['done'] = True
            return then()
        return done

    def power_off(self, host: str) -> Fault:
        back = self._host_back(host)
        self.machines.power_off(host)
        return Fault('power_off', host, time.time(), done=back)

    def hang(self, host: str) -> Fault:
        """nova-compute and agent dead, power on: only fencing helps."""
        back = self._host_back(host)
        self.machines.hung.add(host)
        self.machines.kill_agent(host)
        self.nova.control.kill(host)
        return Fault('host_hang', host, time.time(), done=back)

    def kill_compute(self, host: str) -> Fault:
        """nova-compute dies; the host and its agent live on.

        systemd starts nova-compute again 15-40 s later.
        """
        back = self._host_back(host)
        self.nova.control.kill(host)
        return Fault('compute_death', host, time.time(), done=self._later(
            self.rng.uniform(15, 40),
            lambda: self.machines.start_compute(host), back))

    def clean_reboot(self, host: str) -> Fault:
        """A reboot, announced by the agent (SIGTERM).

        The host goes down and boots again 5-20 s later (power stays on).
        """
        back = self._host_back(host)
        self.machines.rebooting.add(host)
        agent = self.machines.stop_agent(host)
        state = {'phase': 'announcing', 'at': time.time() + 10}

        def done():
            if state['phase'] == 'announcing':
                if (agent is not None and agent.poll() is None
                        and time.time() < state['at']):
                    return False
                self.nova.control.kill(host)
                state.update(phase='down',
                             at=time.time() + self.rng.uniform(5, 20))
            if state['phase'] == 'down':
                if time.time() < state['at']:
                    return False
                self.machines.start_compute(host)
                self.machines.rebooting.discard(host)
                state['phase'] = 'up'
            return back()
        return Fault('clean_reboot', host, time.time(), done=done)

    def crash_guest(self, _host: str) -> Fault | None:
        servers = [s for s in self.reader.list_servers()
                   if s.status == 'ACTIVE' and s.host not in
                   self._busy() and not self._crashed_lately(s.id)]
        if not servers:
            return None
        srv = self.rng.choice(servers)
        self.nova.control.crash(srv.id)

        def done():
            return self.reader.get_server(srv.id).status == 'ACTIVE'
        return Fault('guest_crash', srv.id, time.time(), done=done)

    def _crashed_lately(self, server_id: str) -> bool:
        """Crashed within the stable time: a second crash is a loop."""
        return any(f.kind == 'guest_crash' and f.target == server_id and
                   time.time() - f.at < 2 * OPTIONS[
                       'instance_failure.stable_time']
                   for f in self.faults)

    def kill_copy(self, leader: bool) -> Fault | None:
        lead = self.leader()
        names = [n for n, c in self.copies.items()
                 if c.proc.poll() is None and (n == lead) == leader]
        if not names:
            return None
        name = names[0]
        self.copies[name].proc.send_signal(signal.SIGKILL)
        self.copies[name].proc.wait(10)
        self._start_copy(name)
        return Fault('kill_leader' if leader else 'kill_follower', name,
                     time.time(), done=lambda: self.leader() is not None)

    def restart_backend(self, _host: str) -> Fault:
        self.backend.stop()
        time.sleep(self.rng.uniform(1, 5))
        self.backend.start()
        return Fault('backend_restart', self.backend_name, time.time(),
                     done=lambda: self.leader() is not None)

    def nova_fault(self, _host: str) -> Fault:
        kind = self.rng.choice(('status', 'status', 'slow', 'timeout',
                                'reset'))
        status = self.rng.choice((500, 503, 409))
        seconds = self.rng.uniform(5, 20)
        self.proxy.inject(kind, status=status, duration=seconds,
                          seconds=(self.rng.uniform(1, 4) if kind == 'slow'
                                   else 12.0))
        end = time.time() + seconds
        return Fault('nova_api_%s' % kind, '%.0fs' % seconds, time.time(),
                     done=lambda: time.time() >= end)

    def _window(self, host: str, seconds: float, begin, end, why=None,
                fail: bool = False):
        """A BMC fault on a healthy ``host`` for ``seconds``.

        ``why``: the BMC proves nothing meanwhile (the audit then allows
        no evacuation of the host). ``fail``: the host also fails during
        the window (powered off a few seconds into it), so the service
        meets the fault while recovering.
        """
        back = self._host_back(host) if fail else (lambda: True)
        begin()
        start = time.time()
        if why:
            self.unprovable[host].append([start, None, why])
        state = {'open': True, 'failed': not fail,
                 'fail_at': start + self.rng.uniform(1, 4)}

        def done():
            if not state['failed'] and time.time() >= state['fail_at']:
                self.machines.power_off(host)
                state['failed'] = True
            if state['open'] and time.time() >= start + seconds:
                end()
                if why:
                    self.unprovable[host][-1][1] = time.time()
                state['open'] = False
            return state['failed'] and not state['open'] and back()
        return done

    def bmc_fault(self, _host: str) -> Fault | None:
        host = self._healthy_host(ipmi=True)
        if host is None:
            return None
        mode = self.rng.choice(('silent', 'error', 'stuck', 'lying'))
        seconds = self.rng.uniform(10, 30)
        fail = self.rng.random() < 0.5 and self._room_for_a_failure()
        done = self._window(
            host, seconds, lambda: self.cloud.bmc.set_mode(host, mode),
            lambda: self.cloud.bmc.set_mode(host, 'ok'),
            why=mode if mode in ('silent', 'lying') else None, fail=fail)
        return Fault('bmc_' + mode + ('+off' if fail else ''),
                     '%s:%.0fs' % (host, seconds), time.time(), done=done)

    def wrong_password(self, host: str) -> Fault:
        """An operator's reload brings a wrong BMC password for a while."""
        seconds = self.rng.uniform(15, 40)
        fail = self.rng.random() < 0.5 and self._room_for_a_failure()
        right = self._read_password(host)

        def begin():
            self._set_password(host, 'wrong-%s' % right[::-1])
            self._reload_copies()

        def end():
            self._set_password(host, right)
            self._reload_copies()
        done = self._window(host, seconds, begin, end, why='wrong password',
                            fail=fail)
        return Fault('bmc_password' + ('+off' if fail else ''),
                     '%s:%.0fs' % (host, seconds), time.time(), done=done)

    def _read_password(self, host: str) -> str:
        with open(self._password_file(host)) as f:
            return f.read()

    def _room_for_a_failure(self) -> bool:
        return len(self._hosts_down()) < max(1, self.host_count // 4)

    def partition(self, _host: str) -> Fault | None:
        """More than the threshold of the hosts cut off at once.

        Their nova-compute stops and their agents freeze (the control
        plane cannot reach them) for 20-40 s: a mass failure, on which
        nothing may be fenced or evacuated.
        """
        free = [h for h in self.nova.hosts if h not in self._busy()]
        count = self.host_count * OPTIONS['threshold'] // 100 + 1
        if len(free) < count:
            return None
        cut = sorted(self.rng.sample(free, count))
        window = [time.time(), None, cut]
        self.partitions.append(window)
        for host in cut:
            self.machines.freeze_agent(host)
            self.nova.control.kill(host)

        def heal():
            # From the first host back, it is no longer a mass failure:
            # those still out are failed hosts like any other.
            window[1] = time.time()
            for host in cut:
                self.machines.thaw_agent(host)
            for host in cut:
                self.machines.start_compute(host)

        def healed():
            services = self.reader.read_services()
            return all(services.service(h).state == 'up' and
                       services.service(h).status == 'enabled' for h in cut)
        return Fault('partition', ','.join(cut), window[0],
                     done=self._later(self.rng.uniform(20, 40), heal,
                                      healed))

    def operator_pause(self, _host: str) -> Fault:
        seconds = self.rng.uniform(5, 20)
        test_recovery.manage(self.cloud, 'pause', '--for', '%ds' % seconds,
                             '--reason', 'soak')
        self.pauses.append([time.time(), time.time() + seconds])
        end = time.time() + seconds
        return Fault('operator_pause', '%.0fs' % seconds, time.time(),
                     done=lambda: time.time() >= end)

    def _hold(self, host: str, reason: str) -> None:
        self.held[host] = reason
        self.holds[host].append([time.time(), None, reason])

    def _release(self, host: str) -> None:
        self.held.pop(host, None)
        self.holds[host][-1][1] = time.time()

    def operator_disable(self, host: str) -> Fault:
        """An operator disables a host, which may then fail while held.

        Half the time it is powered off: nothing may be done to it until
        the operator enables it again.
        """
        reason = 'soak operator %d' % self.rng.randrange(10 ** 6)
        svc = self.reader.read_services().service(host)
        self.reader.update_service(svc, status='disabled',
                                   disabled_reason=reason)
        self._hold(host, reason)
        fail = self.rng.random() < 0.5 and self._room_for_a_failure()
        seconds = self.rng.uniform(10, 30)
        back = self._host_back(host) if fail else (lambda: True)
        if fail:
            self.machines.power_off(host)

        def enable():
            self._release(host)
            self.reader.update_service(
                self.reader.read_services().service(host), status='enabled')
        return Fault('operator_disable' + ('+off' if fail else ''), host,
                     time.time(), done=self._later(seconds, enable, back))

    def maintenance(self, host: str) -> Fault | None:
        """An operator's maintenance while other recoveries run.

        Instances are live-migrated away; it ends 20-40 s later.
        """
        try:
            test_recovery.manage(self.cloud, 'maintenance', 'start', host,
                                 '--reason', 'soak')
        except AssertionError as exc:  # refused: the host is not healthy
            self.log('maintenance start %s refused: %s' % (host, exc))
            return None
        self._hold(host, self.reader.read_services().service(
            host).disabled_reason)

        def end():
            test_recovery.manage(self.cloud, 'maintenance', 'end', host)
            self._release(host)
        return Fault('maintenance', host, time.time(), done=self._later(
            self.rng.uniform(20, 40), end, lambda: self.reader.read_services(
            ).service(host).status == 'enabled'))

    # --- the run -----------------------------------------------------------

    def truth(self) -> audit.Truth:
        services = self.reader.read_services().services
        evacuations = []
        for mig in self.nova.client().migrations.list():
            if getattr(mig, 'migration_type', None) != 'evacuation':
                continue
            evacuations.append({
                'instance': mig.instance_uuid, 'source': mig.source_compute,
                'dest': mig.dest_compute, 'created': _epoch(mig.created_at)})
        servers = [{'id': s.id, 'name': s.name, 'host': s.host,
                    'status': s.status, 'locked': s.locked,
                    'locked_reason': s.locked_reason}
                   for s in self.reader.list_servers()]
        histories = self.redfish.power_histories()
        power = {h: (histories.get(h, []) if self.machines.bmc_kind(h) ==
                     'redfish' else self.cloud.bmc.power_history(h))
                 for h in self.nova.hosts}
        return audit.Truth(
            power=power, evacuations=evacuations, servers=servers,
            services=[audit.service_dict(s) for s in services],
            held=dict(self.held), unprovable=_copy(self.unprovable),
            pauses=list(self.pauses),
            own_power_offs=list(self.machines.own_power_offs),
            beating=_copy(self.machines.beating),
            partitions=[list(p) for p in self.partitions],
            holds=_copy(self.holds),
            host_faults=self._host_faults(),
            retries=OPTIONS['evacuation.retries'], final=self._settled)

    def _host_faults(self) -> dict:
        """host -> times the soak made something happen to it."""
        out = collections.defaultdict(list)
        for fault in self.faults:
            for host in fault.target.split(':')[0].split(','):
                if host in self.nova.hosts:
                    out[host].append(fault.at)
        for at, host in self.machines.own_power_offs:
            out[host].append(at)
        return {h: sorted(t) for h, t in out.items()}

    def _audit(self, final: bool = False) -> None:
        truth = self.truth()
        truth.final = final
        found = audit.check(truth, final=final)
        if found:
            self.breaches.extend(found)
            raise Breach(self.report_breach(found))

    def report_breach(self, found: list) -> str:
        t0 = self.faults[0].at if self.faults else time.time()
        return ('soak breach (seed %d, backend %s):\n  %s\ntimeline:\n  %s'
                % (self.seed, self.backend_name, '\n  '.join(found),
                   '\n  '.join(f.line(t0) for f in self.faults)))

    def _check_recoveries(self) -> None:
        for fault in self.faults:
            if fault.recovered_at is None:
                try:
                    if fault.done():
                        fault.recovered_at = time.time()
                except Exception:  # Nova unreachable for the moment
                    pass

    def run(self, duration: float, gap: tuple = (4.0, 15.0),
            kinds: tuple | None = None) -> dict:
        """Inject faults for ``duration`` seconds, then settle and audit."""
        kinds = kinds or tuple(FAULTS)
        end = time.time() + duration
        next_at = time.time() + self.rng.uniform(*gap)
        while time.time() < end:
            self._check_recoveries()
            self.leader()
            if time.time() >= next_at:
                self._inject(self.rng.choice(kinds))
                next_at = time.time() + self.rng.uniform(*gap)
                self._audit()
            time.sleep(0.5)
        self._settle()
        return self.figures()

    def _inject(self, kind: str) -> None:
        host = self._healthy_host()
        if kind in HOST_FAULTS and not self._room_for_a_failure():
            return  # stay well below a mass failure
        if host is None and kind in NEEDS_HOST:
            return
        fault = FAULTS[kind](self, host)
        if fault is not None:
            self.faults.append(fault)
            self.log('+%7.1fs %s %s' % (fault.at - self.faults[0].at,
                                        fault.kind, fault.target))

    def _settle(self) -> None:
        """Lift every fault, wait for the cloud to settle, audit the end."""
        self.proxy.clear()
        deadline = time.time() + SETTLE_BOUND
        while time.time() < deadline:
            self._check_recoveries()
            if all(f.recovered_at for f in self.faults):
                break
            time.sleep(1.0)
        for host in self.nova.hosts:
            if self.machines.bmc_kind(host) == 'ipmi':
                self.cloud.bmc.set_mode(host, 'ok')
        self._repair()
        while time.time() < deadline:
            if not audit.settled(self.truth()):
                break
            time.sleep(2.0)
        self._audit(final=True)
        self._settled = True
        late = [f for f in self.faults if f.recovered_at is None]
        if late:
            self.breaches.extend(
                '%s on %s not over %.0fs after the faults stopped: %s' % (
                    f.kind, f.target, SETTLE_BOUND, self._state(f.target))
                for f in late)
            raise Breach(self.report_breach(self.breaches))

    def _repair(self) -> None:
        """What an operator's hands do once the faults stop.

        A host left off (or with a dead nova-compute) because nothing on
        it needed recovering is powered on (its compute started): the
        end state then asks every host to be up. A host the service
        recovered was powered on by the service already.
        """
        computes = self.nova.control.computes()
        powers = self.machines.powers()
        for host in self.nova.hosts:
            if powers[host] == 'off':
                self.log('repair: power on %s' % host)
                self.machines.power_on(host)
            elif not computes[host]['running']:
                self.log('repair: start nova-compute on %s' % host)
                self.nova.control.revive(host)

    def _state(self, target: str) -> str:
        """What Nova shows of a fault's host (or instance), for a breach."""
        try:
            svc = self.reader.read_services().service(target.split(':')[0])
        except Exception:  # not a host: an instance, a copy, a window
            svc = None
        if svc is None:
            return 'see the service copies\' logs'
        servers = ', '.join('%s %s' % (s.name, s.status)
                            for s in self.reader.list_servers(svc.host))
        return ('compute %s/%s%s reason %r; on it: %s' % (
            svc.status, svc.state, ' forced down' if svc.forced_down
            else '', svc.disabled_reason, servers or 'nothing'))

    def figures(self) -> dict:
        by_kind = collections.defaultdict(list)
        for f in self.faults:
            by_kind[f.kind].append(f)
        rows = {}
        for kind, faults in sorted(by_kind.items()):
            times = sorted(f.recovered_at - f.at for f in faults
                           if f.recovered_at)
            rows[kind] = {
                'injected': len(faults), 'recovered': len(times),
                'min': times[0] if times else None,
                'median': statistics.median(times) if times else None,
                'p95': (times[min(len(times) - 1, int(0.95 * len(times)))]
                        if times else None),
                'max': times[-1] if times else None}
        try:
            counts = audit.counts(self.truth())
        except Exception:  # noqa: BLE001 - Nova gone: figures still print
            counts = {}
        return dict({'seed': self.seed, 'backend': self.backend_name,
                     'hosts': {'ipmi': self.host_count - self.redfish_count,
                               'redfish': self.redfish_count},
                     'faults': rows,
                     'nova_calls': sum(self.proxy.calls.values()),
                     'leader_changes': self.leader_changes,
                     'breaches': len(self.breaches)}, **counts)


def _epoch(text: str) -> float:
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _udp_port() -> int:
    return peer_base.free_port(socket.SOCK_DGRAM)


def _copy(spans: dict) -> dict:
    return {k: [list(s) for s in v] for k, v in spans.items()}


#: Faults that take a host out (at most a quarter of the hosts at once).
HOST_FAULTS = frozenset({'power_off', 'host_hang', 'compute_death',
                         'clean_reboot'})
#: Faults aimed at one healthy host.
NEEDS_HOST = HOST_FAULTS | {'operator_disable', 'maintenance',
                            'wrong_password'}
#: Every fault kind the soak injects: name -> Soak method(host).
FAULTS = {
    'power_off': Soak.power_off,
    'host_hang': Soak.hang,
    'compute_death': Soak.kill_compute,
    'clean_reboot': Soak.clean_reboot,
    'guest_crash': Soak.crash_guest,
    'kill_leader': lambda s, _h: s.kill_copy(leader=True),
    'kill_follower': lambda s, _h: s.kill_copy(leader=False),
    'backend_restart': Soak.restart_backend,
    'nova_api': Soak.nova_fault,
    'bmc_fault': Soak.bmc_fault,
    'wrong_password': Soak.wrong_password,
    'partition': Soak.partition,
    'operator_pause': Soak.operator_pause,
    'operator_disable': Soak.operator_disable,
    'maintenance': Soak.maintenance,
}


def table(figures: dict) -> str:
    """The figures as an operator reads them."""
    lines = ['%-22s %8s %9s %7s %7s %7s %7s' % (
        'FAULT', 'INJECTED', 'RECOVERED', 'MIN', 'MEDIAN', 'P95', 'MAX')]

    def s(v):
        return '-' if v is None else '%.1f' % v
    for kind, row in figures['faults'].items():
        lines.append('%-22s %8d %9d %7s %7s %7s %7s' % (
            kind, row['injected'], row['recovered'], s(row['min']),
            s(row['median']), s(row['p95']), s(row['max'])))
    lines.append('backend %s, hosts %d IPMI + %d Redfish, nova calls %d, '
                 'leader changes %d, fencing power-offs %s, evacuations %s, '
                 'breaches %d (seed %d)' % (
                     figures['backend'], figures['hosts']['ipmi'],
                     figures['hosts']['redfish'], figures['nova_calls'],
                     figures['leader_changes'],
                     figures.get('fencing_power_offs', '?'),
                     figures.get('evacuations', '?'),
                     figures['breaches'], figures['seed']))
    return '\n'.join(lines)
