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
faults at random moments from a seeded generator (:mod:`tests.soak.faults`),
audits physical truth after every fault (:mod:`tests.soak.audit`), and
after the last one lifts every fault and waits for the cloud to settle
within a stated bound. Any breach stops the run with the seed and the
timeline that replays it.
"""

import collections
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
from tests.soak import faults
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
#: Every fault kind the soak injects (see tests/soak/faults.py).
FAULTS = faults.FAULTS
Fault = faults.Fault


class Breach(Exception):
    """An audit rule broke: the message says what, with seed and timeline."""


class Soak(faults.Faults, fixtures.Fixture):
    """The cloud, the service copies and the soak's own bookkeeping."""

    options = OPTIONS

    def __init__(self, hosts: int = 8, per_host: int = 2, copies: int = 2,
                 seed: int = 0, log=print, backend: str | None = None,
                 redfish_hosts: int = 2, max_lifetime: float = 3600,
                 keystone: bool = True):
        super().__init__()
        #: Nova validates keystone tokens; the copies log in to keystone.
        self.with_keystone = keystone
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
        keystone = (self.useFixture(peers.KeystonePeer(
            max_lifetime=self.max_lifetime)) if self.with_keystone else None)
        self.cloud = self.useFixture(test_recovery.Cloud(
            hosts=self.host_count, options=options,
            max_lifetime=self.max_lifetime, keystone=keystone))
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
            # Through the proxy: the catalog's endpoint overridden (with
            # keystone), the fixed endpoint replaced (without).
            f.write('[nova]\n%s = %s\n' % (
                'endpoint_override' if self.with_keystone else 'endpoint',
                self.proxy.endpoint))
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

    def _reader(self) -> 'Patient':
        """Nova read directly (not through the proxy): the auditor's eyes."""
        from oslo_config import cfg
        conf = cfg.ConfigOpts()
        ha_conf.parse_args(['--config-file', self.cloud.config_file], conf,
                           default_config_files=[])
        return Patient(nova_adapter.NovaCloud(conf))

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

    # --- the run -----------------------------------------------------------

    def truth(self) -> audit.Truth:
        services = self.reader.read_services().services
        evacuations = []
        for mig in Patient(self.nova.client().migrations).list():
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
        if kind in faults.HOST_FAULTS and not self._room_for_a_failure():
            return  # stay well below a mass failure
        if host is None and kind in faults.NEEDS_HOST:
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
            # A hung host nobody fenced (nothing on it) is rebooted by
            # hand: its agent starts again.
            self.machines.hung.discard(host)

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
        for kind, injected in sorted(by_kind.items()):
            times = sorted(f.recovered_at - f.at for f in injected
                           if f.recovered_at)
            rows[kind] = {
                'injected': len(injected), 'recovered': len(times),
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
                     'keystone': self.with_keystone,
                     'hosts': {'ipmi': self.host_count - self.redfish_count,
                               'redfish': self.redfish_count},
                     'faults': rows,
                     'nova_calls': sum(self.proxy.calls.values()),
                     'leader_changes': self.leader_changes,
                     'breaches': len(self.breaches)}, **counts)


class Patient:
    """An object whose calls are tried again while Nova is slow to answer.

    The soak reads Nova directly, as an auditor; on a loaded machine the
    in-process Nova sometimes takes longer than a client's time-out. A
    read that fails is not a finding: it is tried again, up to a minute.
    """

    ATTEMPTS = 6
    PAUSE = 5.0

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            for attempt in range(self.ATTEMPTS):
                try:
                    return attr(*args, **kwargs)
                except Exception:  # noqa: BLE001 - a slow Nova
                    if attempt == self.ATTEMPTS - 1:
                        raise
                    time.sleep(self.PAUSE)
        return call


def _epoch(text: str) -> float:
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _udp_port() -> int:
    return peer_base.free_port(socket.SOCK_DGRAM)


def _copy(spans: dict) -> dict:
    return {k: [list(s) for s in v] for k, v in spans.items()}


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
