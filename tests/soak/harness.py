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
wired to it (a power-off kills the host's nova-compute), a real etcd for
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
import statistics
import time

import fixtures

from instanceha.adapters import nova as nova_adapter
from instanceha import conf as ha_conf
from tests.functional import peers
from tests.functional import test_ha
from tests.functional import test_recovery
from tests.soak import audit

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
}
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
                 seed: int = 0, log=print):
        super().__init__()
        self.host_count = hosts
        self.per_host = per_host
        self.copy_count = copies
        self.rng = random.Random(seed)
        self.seed = seed
        self.log = log
        self.faults: list[Fault] = []
        self.breaches: list[str] = []
        self.held: dict[str, str] = {}
        self.lying: dict[str, list] = collections.defaultdict(list)
        self.pauses: list[list] = []
        self.own_power_offs: list[tuple] = []
        self.leader_changes = 0
        #: (name, pid) of the leading copy last seen.
        self._leader: tuple | None = None

    # --- assembly ----------------------------------------------------------

    def _setUp(self):
        self.etcd = self.useFixture(peers.EtcdPeer())
        options = dict(OPTIONS)
        options['coordination.backend_url'] = self.etcd.url
        self.cloud = self.useFixture(test_recovery.Cloud(
            hosts=self.host_count, options=options))
        self.nova = self.cloud.nova
        self.proxy = self.useFixture(peers.FaultProxy(self.nova.endpoint))
        behind = os.path.join(self.cloud.dir, 'behind-proxy.conf')
        with open(behind, 'w') as f:
            f.write('[nova]\nendpoint = %s\n' % self.proxy.endpoint)
        self._behind = behind
        for host in self.nova.hosts:
            self.cloud.boot(host, self.per_host, name='soak')
        self.copies = {}
        for i in range(self.copy_count):
            self._start_copy('copy-%d' % i)
        test_ha.wait_for(lambda: self.leader() is not None, 60,
                         'a copy to lead')
        self.reader = self._reader()

    def _start_copy(self, name: str) -> None:
        self.copies[name] = test_ha.Copy(self, self.cloud, name,
                                         [self._behind])

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

    # --- faults --------------------------------------------------------------

    def _hosts_down(self) -> set:
        return {f.target for f in self.faults if f.recovered_at is None
                and f.kind in HOST_FAULTS}

    def _healthy_host(self) -> str | None:
        busy = self._hosts_down() | set(self.held) | {
            f.target.split(':')[0] for f in self.faults
            if f.recovered_at is None and f.kind == 'bmc_fault'}
        free = [h for h in self.nova.hosts if h not in busy]
        return self.rng.choice(free) if free else None

    def _host_back(self, host: str):
        """Whether ``host``'s failure is over.

        Seen failed, then enabled and up again, not forced down, and every
        instance that was on it ACTIVE (there or elsewhere).
        """
        seen = {'failed': False}
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

    def power_off(self, host: str) -> Fault:
        proc = self.cloud.bmc.ipmitool(host, 'chassis', 'power', 'off')
        assert proc.returncode == 0, proc.stderr
        self.own_power_offs.append((time.time(), host))
        return Fault('power_off', host, time.time(), done=self._host_back(
            host))

    def kill_compute(self, host: str) -> Fault:
        self.nova.control.kill(host)
        return Fault('compute_death', host, time.time(),
                     done=self._host_back(host))

    def crash_guest(self, _host: str) -> Fault | None:
        servers = [s for s in self.reader.list_servers()
                   if s.status == 'ACTIVE' and s.host not in
                   self._hosts_down() and not self._crashed_lately(s.id)]
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
        self.etcd.stop()
        time.sleep(self.rng.uniform(1, 5))
        self.etcd.start()
        return Fault('backend_restart', 'etcd', time.time(),
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

    def bmc_fault(self, host: str) -> Fault:
        mode = self.rng.choice(('silent', 'error', 'stuck', 'lying'))
        seconds = self.rng.uniform(10, 30)
        self.cloud.bmc.set_mode(host, mode)
        start = time.time()
        if mode == 'lying':
            self.lying[host].append([start, None])
        state = {'open': True}

        def done():
            if state['open'] and time.time() >= start + seconds:
                self.cloud.bmc.set_mode(host, 'ok')
                if mode == 'lying':
                    self.lying[host][-1][1] = time.time()
                state['open'] = False
            return not state['open']
        return Fault('bmc_' + mode, '%s:%.0fs' % (host, seconds), start,
                     done=done)

    def operator_pause(self, _host: str) -> Fault:
        seconds = self.rng.uniform(5, 20)
        test_recovery.manage(self.cloud, 'pause', '--for', '%ds' % seconds,
                             '--reason', 'soak')
        self.pauses.append([time.time(), time.time() + seconds])
        end = time.time() + seconds
        return Fault('operator_pause', '%.0fs' % seconds, time.time(),
                     done=lambda: time.time() >= end)

    def operator_disable(self, host: str) -> Fault:
        reason = 'soak operator %d' % self.rng.randrange(10 ** 6)
        svc = self.reader.read_services().service(host)
        self.reader.update_service(svc, status='disabled',
                                   disabled_reason=reason)
        self.held[host] = reason
        seconds = self.rng.uniform(10, 30)
        start = time.time()

        def done():
            if time.time() < start + seconds:
                return False
            if self.held.pop(host, None) is not None:
                self.reader.update_service(
                    self.reader.read_services().service(host),
                    status='enabled')
            return True
        return Fault('operator_disable', host, start, done=done)

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
        return audit.Truth(
            power={h: self.cloud.bmc.power_history(h)
                   for h in self.nova.hosts},
            evacuations=evacuations, servers=servers, services=services,
            held=dict(self.held), lying=dict(self.lying),
            pauses=list(self.pauses), own_power_offs=list(self.own_power_offs))

    def _audit(self, final: bool = False) -> None:
        found = audit.check(self.truth(), final=final)
        if found:
            self.breaches.extend(found)
            raise Breach(self.report_breach(found))

    def report_breach(self, found: list) -> str:
        t0 = self.faults[0].at if self.faults else time.time()
        return ('soak breach (seed %d):\n  %s\ntimeline:\n  %s' % (
            self.seed, '\n  '.join(found),
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
        if kind in HOST_FAULTS and len(self._hosts_down()) >= max(
                1, self.host_count // 4):
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
            self.cloud.bmc.set_mode(host, 'ok')
        self._repair()
        while time.time() < deadline:
            if not audit.settled(self.truth()):
                break
            time.sleep(2.0)
        self._audit(final=True)
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
        for host in self.nova.hosts:
            if self.cloud.bmc.power_state(host) == 'off':
                self.log('repair: power on %s' % host)
                self.cloud.power_on(host)
            elif not computes[host]['running']:
                self.log('repair: start nova-compute on %s' % host)
                self.nova.control.revive(host)

    def _state(self, target: str) -> str:
        """What Nova shows of a fault's host (or instance), for a breach."""
        try:
            svc = self.reader.read_services().service(target)
        except Exception:  # not a host: an instance, a copy, a window
            svc = None
        if svc is None:
            return 'see the service copies\' logs'
        servers = ', '.join('%s %s' % (s.name, s.status)
                            for s in self.reader.list_servers(target))
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
        return {'seed': self.seed, 'faults': rows,
                'nova_calls': sum(self.proxy.calls.values()),
                'leader_changes': self.leader_changes,
                'breaches': len(self.breaches)}


def _epoch(text: str) -> float:
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


#: Faults that take a host out (at most a quarter of the hosts at once).
HOST_FAULTS = frozenset({'power_off', 'compute_death'})
#: Faults aimed at one healthy host.
NEEDS_HOST = HOST_FAULTS | {'bmc_fault', 'operator_disable'}
#: Every fault kind the soak injects: name -> Soak method(host).
FAULTS = {
    'power_off': Soak.power_off,
    'compute_death': Soak.kill_compute,
    'guest_crash': Soak.crash_guest,
    'kill_leader': lambda s, _h: s.kill_copy(leader=True),
    'kill_follower': lambda s, _h: s.kill_copy(leader=False),
    'backend_restart': Soak.restart_backend,
    'nova_api': Soak.nova_fault,
    'bmc_fault': Soak.bmc_fault,
    'operator_pause': Soak.operator_pause,
    'operator_disable': Soak.operator_disable,
}


def table(figures: dict) -> str:
    """The figures as an operator reads them."""
    lines = ['%-18s %8s %9s %7s %7s %7s %7s' % (
        'FAULT', 'INJECTED', 'RECOVERED', 'MIN', 'MEDIAN', 'P95', 'MAX')]

    def s(v):
        return '-' if v is None else '%.1f' % v
    for kind, row in figures['faults'].items():
        lines.append('%-18s %8d %9d %7s %7s %7s %7s' % (
            kind, row['injected'], row['recovered'], s(row['min']),
            s(row['median']), s(row['p95']), s(row['max'])))
    lines.append('nova calls %d, leader changes %d, breaches %d (seed %d)'
                 % (figures['nova_calls'], figures['leader_changes'],
                    figures['breaches'], figures['seed']))
    return '\n'.join(lines)
