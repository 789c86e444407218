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

"""The simulated world: hosts, their BMCs, and Nova's view of them.

The world keeps the *physical* truth (is a host powered, is its kernel
running, is its network cut, where does each guest really run) apart from
*Nova's* view (service state from heartbeats, server records, migration
records), exactly the gap instanceha exists to bridge. That is what lets
the invariants be checked against the truth rather than against what the
engine believes:

- no instance running on two hosts,
- no evacuation from a host whose fencing was not confirmed,
- no instance evacuated twice for one failure,
- no fencing or evacuation of a host a gate blocked,
- no destructive action from a copy of the service that is not leader.

Nova's behaviour follows the real API closely where the engine depends on
it: heartbeats every ``report_interval`` seconds, ``down`` after
``service_down_time`` or when forced down, evacuate refused (409) while
the source service is up or the server is busy, migration records going
accepted -> pre-migrating -> done (or error when nothing can take the
server, failed when the rebuild fails), evacuated ACTIVE and ERROR
servers ending ACTIVE and SHUTOFF ones SHUTOFF (compute microversion
2.94), and a compute that comes back cleaning up its evacuated guests
(migrations done -> completed).

Simplifications, on purpose: the scheduler picks the up, enabled host with
the most free vCPUs; a rebuild on a destination whose nova-compute is not
running fails (real Nova would leave it queued until that compute comes
back); a job of the service sees the world as it is at each of its steps.

What the service sees of it goes through :mod:`instanceha.sim.cloud`
(Nova's API) and :mod:`instanceha.sim.listeners` (heartbeats and
fence_kdump messages).
"""

from collections.abc import Callable
import dataclasses
import datetime
import heapq
import itertools
import math

from instanceha.engine import model
from instanceha import exceptions
from instanceha.sim import clock as sim_clock
from instanceha.sim import events as sim_events

#: BMC behaviours a scenario can switch on.
BEHAVIOURS = ('ok', 'error', 'timeout', 'wrong-password', 'stuck-on',
              'slow', 'unreachable')
#: A device that lies: it carries requests out but always reads "on"
#: (kept out of BEHAVIOURS, whose order random timelines draw from).
LIES_ON = 'lies-on'
ALL_BEHAVIOURS = BEHAVIOURS + (LIES_ON,)

#: Kinds of Nova API call a scenario can make fail (``nova fail``).
NOVA_CALLS = ('snapshot', 'update_service', 'evacuate', 'migrations',
              'get_server', 'lock', 'stop', 'reset_state', 'live_migrate',
              'cold_migrate', 'confirm_resize', 'metadata', 'any',
              'services', 'capacity', 'start', 'actions', 'stopped',
              'locked')
#: How an injected Nova fault looks: an HTTP error the call did not get
#: past, or a timeout after Nova carried the call out (the answer is lost).
NOVA_ERRORS = ('500', '503', 'timeout', '409')


@dataclasses.dataclass
class NovaFault:
    """The next ``count`` calls of ``kind`` fail with ``error``."""

    kind: str
    count: int
    error: str = '500'
    #: Matching calls let through before the first failure.
    skip: int = 0


class DeviceFault(Exception):
    """A simulated device failed; ``kind`` says how."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


class ScenarioError(exceptions.ConfigurationError):
    """A scenario names something that does not exist or makes no sense."""


@dataclasses.dataclass
class Timing:
    """How long things take in the simulated world (seconds)."""

    report_interval: float = 10.0
    service_down_time: float = 60.0
    boot_time: float = 90.0
    schedule_time: float = 2.0
    rebuild_time: float = 20.0
    bmc_off_delay: float = 4.0
    bmc_on_delay: float = 4.0
    bmc_slow_delay: float = 90.0
    kdump_interval: float = 10.0
    agent_interval: float = 5.0
    live_migration_time: float = 30.0
    #: A dead guest is stopped in Nova by nova-compute's power sync.
    power_sync_time: float = 2.0
    #: The hosts' heartbeats spread evenly over ``report_interval`` (each
    #: nova-compute of a real cloud started at its own moment); False: all
    #: report at the same moments.
    heartbeat_spread: bool = False
    #: A start (os-start) takes this long to run the guest.
    start_time: float = 5.0
    #: A clean shutdown: from the end of the agent's stop to power-off
    #: (or to the start of the reboot).
    shutdown_time: float = 10.0
    #: A guest asked to shut down (an isolation response) is off after.
    guest_shutdown_time: float = 10.0


@dataclasses.dataclass
class Host:
    name: str
    id: str
    zone: str | None = None
    vcpus: int = 64
    status: str = model.ENABLED
    disabled_reason: str | None = None
    forced_down: bool = False
    # --- physical truth ---
    chassis_on: bool = True
    #: Devices feeding power (outlets): name -> on. Empty: BMC only.
    outlets: dict[str, bool] = dataclasses.field(default_factory=dict)
    #: The kernel runs (False after a crash or while booting).
    os_running: bool = True
    compute_running: bool = True
    network_ok: bool = True
    #: Only the link to Nova's control plane (isolate): nova-compute's
    #: heartbeats stop, the host's own heartbeat agent still gets through.
    nova_link_ok: bool = True
    #: The heartbeat agent sends since (None: silent); last packet.
    agent_since: float | None = 0.0
    agent_last: float | None = None
    #: Heartbeating since (None: not heartbeating).
    hb_since: float | None = 0.0
    #: Last heartbeat Nova received (when not heartbeating).
    last_hb: float | None = None
    #: Nova's last write of its service record through the API (when
    #: :attr:`World.stamps_writes`): it stamps updated_at too.
    written_at: float | None = None
    kdump_start: float | None = None
    kdump_end: float | None = None
    #: A fencing device confirmed this host off since it last booted.
    fence_proof: bool = False
    #: The run its watchdog guarded ended (the watchdog's reset, a
    #: crash, power lost), and its agent has not heard the service
    #: since (see instanceha.sim.watchdogs).
    self_fenced: bool = False
    #: When the current failure episode began (for "evacuated twice").
    episode: int = 0
    boot_token: int = 0
    #: Boots completed (a watchdog device is disarmed by each).
    boots: int = 0
    #: The heartbeat agent runs (False once stopped by a clean shutdown,
    #: until the next boot); each start is a new agent run (boot id).
    agent_running: bool = True
    agent_boot: int = 0
    #: The heartbeat agent hangs (``watchdog HOST hang``): it sends
    #: nothing and feeds no watchdog, the host runs on; until it reboots.
    agent_hung: bool = False
    #: The heartbeat agent was killed (``agent HOST kill``): it sends
    #: nothing and leaves its watchdog armed, until started again.
    agent_killed: bool = False
    #: The link between the host and the service's copies (``partition``):
    #: heartbeats and answers; the host keeps its network otherwise.
    service_link_ok: bool = True
    #: The service's answers reach its agent (``agent HOST answers-lost``:
    #: lost one way, its heartbeats still arrive).
    answers_ok: bool = True
    #: Its isolation addresses answer when it has its network (``addresses
    #: HOST down``: they do not).
    addresses_ok: bool = True
    #: Since when its isolation addresses answer (None: they do not).
    addresses_since: float | None = 0.0
    #: The agent's latest shutdown announcement (instanceha.sim.announce).
    announcement: object | None = None

    @property
    def powered(self) -> bool:
        return self.chassis_on and (not self.outlets
                                    or any(self.outlets.values()))

    @property
    def agent_alive(self) -> bool:
        return self.powered and self.os_running and self.network_ok

    @property
    def beating(self) -> bool:
        return (self.agent_alive and self.compute_running
                and self.nova_link_ok)


@dataclasses.dataclass
class Server:
    id: str
    name: str
    host: str | None
    status: str
    flavor: str
    image_id: str | None = None
    task_state: str | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    locked: bool = False
    locked_reason: str | None = None
    project_id: str | None = 'demo'
    #: Hosts where the guest really runs (the truth, not Nova's view).
    running_on: set = dataclasses.field(default_factory=set)
    #: Simulated time of Nova's last change of it (its updated_at).
    changed_at: float = 0.0


@dataclasses.dataclass
class Flavor:
    name: str
    vcpus: int = 1
    extra_specs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Migration:
    id: str
    server_id: str
    source_host: str
    dest_host: str | None
    status: str
    created_at: float
    updated_at: float
    #: The source host's failure episode the evacuation belongs to.
    episode: int = 0
    requested_dest: str | None = None
    #: Listed by the API from this time on (``nova delay-migrations``).
    visible_at: float = float('-inf')
    #: Nova's migration_type: evacuation, live-migration, migration.
    kind: str = 'evacuation'


@dataclasses.dataclass
class Device:
    """A fencing device: a host's BMC, or a PDU outlet feeding it."""

    name: str
    host: str
    kind: str = 'bmc'
    behaviour: str = 'ok'
    #: A requested power state and when the device reaches it.
    pending: tuple[str, float] | None = None
    #: Hardware conditions it reports (``health`` timeline command).
    conditions: tuple[model.HardwareCondition, ...] = ()


@dataclasses.dataclass
class RebuildFailure:
    server: str
    target: str | None
    times: int | None


class World:
    """Hosts, devices and Nova, on one simulated clock."""

    def __init__(self, clock: sim_clock.SimClock, log: sim_events.EventLog,
                 timing: Timing | None = None):
        self.clock = clock
        self.log = log
        self.timing = timing or Timing()
        self.hosts: dict[str, Host] = {}
        self.devices: dict[str, Device] = {}
        self.servers: dict[str, Server] = {}
        self.flavors: dict[str, Flavor] = {}
        self.images: dict[str, model.Image] = {}
        self.aggregates: dict[str, model.Aggregate] = {}
        self.migrations: list[Migration] = []
        self.rebuild_failures: list[RebuildFailure] = []
        self.violations: list[str] = []
        #: The copy of the service acting now (set by the simulation).
        self.actor: str | None = None
        #: actor -> is it leader now? (set by the simulation)
        self.is_leader: Callable[[str], bool] = lambda actor: True
        #: actor -> hosts its gates blocked in its latest cycle.
        self.blocked: dict[str, set[str]] = {}
        self._queue: list = []
        self._seq = itertools.count()
        self._mig_ids = itertools.count(1)
        self._usage: dict[str, int] = {}
        #: (-free vCPUs, host): the scheduler's candidates, most room
        #: first; entries whose free count is stale are skipped.
        self._free_heap: list[tuple[int, str]] = []
        self._server_cache: dict[str, model.Server] = {}
        self.verbose_nova = True
        #: Nova refuses to clear forced_down while done evacuation records
        #: of the host remain, until its nova-compute starts and completes
        #: them (Nova's API from microversion 2.53 does; ``simulation:
        #: {nova_checks_unforce: true}``; off by default, as the stories
        #: written before it).
        self.unforce_checked = False
        #: Nova stamps a service's updated_at on every write through its
        #: API too, not only with nova-compute's reports (its state
        #: follows the reports alone: ``last_seen_up``), as real Nova
        #: does (``simulation: {nova_stamps_writes: true}``; off by
        #: default, as the stories written before it).
        self.stamps_writes = False
        #: Injected Nova API faults, oldest first.
        self.nova_faults: list[NovaFault] = []
        #: Nova's API cannot be reached at all (``nova down``).
        self.nova_down = False
        #: Evacuation records appear in listings this long after the
        #: call (``nova delay-migrations``).
        self.migration_delay = 0.0
        #: Servers their users deleted (``delete-instance``), by id: a
        #: changes-since listing still shows them, as Nova does.
        self.deleted_servers: dict[str, Server] = {}
        #: Hosts whose compute service record was deleted from Nova.
        self.deleted_services: set[str] = set()
        #: Seconds the instanceha machines' clock runs ahead of Nova's
        #: (negative: behind); ``clock skew``. The world runs on Nova's.
        self.clock_skew = 0.0
        #: server id -> its instance actions (see instanceha.sim.moves).
        self.instance_actions: dict[str, list] = {}
        #: server id -> its guest's crash loop (see instanceha.sim.guests).
        self.crash_loops: dict[str, object] = {}
        #: The copies' heartbeat listeners: what an agent announcing its
        #: shutdown hears back (see instanceha.sim.announce).
        self.heartbeat_listeners: list = []
        #: copy -> its newest heartbeat listener, which answers the
        #: agents while that copy leads (see instanceha.sim.watchdogs).
        self.answering: dict = {}
        #: The hosts' watchdogs (instanceha.sim.watchdogs), if any.
        self.watchdogs = None
        #: Heartbeats through the real protocol (instanceha.sim.wire), when
        #: the scenario says ``simulation: {wire: true}``.
        self.wire = None
        #: The filters that keep instances for recovery (the latest copy
        #: started): the isolation response's invariant (sim.hostside).
        self.recovery_filters: list | None = None

    # --- scheduling world events -------------------------------------

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (t, next(self._seq), fn))

    def next_event(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def run_due(self) -> None:
        while self._queue and self._queue[0][0] <= self.clock.world_t:
            _, _, fn = heapq.heappop(self._queue)
            fn()

    def say(self, source: str, event: str, host: str | None = None,
            **details) -> None:
        self.log.record(source, event, host, **details)

    def violate(self, what: str) -> None:
        self.violations.append('t=%g %s' % (self.clock.t, what))
        self.say('CHECK', 'invariant_violated', None, what=what)

    # --- lookups -------------------------------------------------------

    @staticmethod
    def _named(table: dict, name: str, what: str):
        """``table[name]``, or an error listing the names there are."""
        try:
            return table[name]
        except KeyError:
            raise ScenarioError('unknown %s %r; %ss: %s' % (
                what, name, what, ', '.join(sorted(table))))

    def host(self, name: str) -> Host:
        return self._named(self.hosts, name, 'host')

    def server(self, name_or_id: str) -> Server:
        srv = self.servers.get(name_or_id)
        if srv is None:
            for s in self.servers.values():
                if s.name == name_or_id:
                    return s
            raise ScenarioError('unknown instance %r' % name_or_id)
        return srv

    def device(self, name: str) -> Device:
        return self._named(self.devices, name, 'fencing device')

    def add_host(self, h: Host) -> None:
        """Add a compute host, with its BMC (a device named after it)."""
        self.hosts[h.name] = h
        self.devices[h.name] = Device(name=h.name, host=h.name)
        self.capacity_changed(h.name)

    def add_server(self, srv: Server) -> None:
        self.servers[srv.id] = srv
        if srv.host:
            self.use(srv.host, self.flavors[srv.flavor].vcpus)
            if srv.status == 'ACTIVE' and self.hosts[srv.host].powered:
                srv.running_on.add(srv.host)

    def _changed(self, srv: Server) -> None:
        self._server_cache.pop(srv.id, None)
        srv.changed_at = self.clock.t

    # --- physical events ------------------------------------------------

    def _stop_heartbeat(self, h: Host) -> None:
        if h.hb_since is not None:
            h.last_hb = self._updated_at(h)
            h.hb_since = None

    def _refresh(self, h: Host) -> None:
        """Start or stop heartbeats after a change of the truth."""
        if not h.beating:
            self._stop_heartbeat(h)
        elif h.hb_since is None:
            h.hb_since = self.clock.t
        if not (h.agent_alive and h.agent_running and not h.agent_hung
                and not h.agent_killed and h.service_link_ok):
            if h.agent_since is not None:
                h.agent_last = self.agent_last(h)
                h.agent_since = None
        elif h.agent_since is None:
            h.agent_since = self.clock.t

    def agent_last(self, h: Host) -> float | None:
        """When the host's heartbeat agent last got a packet through."""
        if h.agent_since is None:
            return h.agent_last
        ai = self.timing.agent_interval
        return h.agent_since + math.floor(
            (self.clock.t - h.agent_since) / ai) * ai

    def _guests_stop(self, h: Host) -> None:
        for srv in self.servers.values():
            if h.name in srv.running_on:
                srv.running_on.discard(h.name)
        if self.watchdogs is not None:
            self.watchdogs.run_ended(h.name)

    def _power_changed(self, h: Host, was_powered: bool) -> None:
        if was_powered and not h.powered:
            h.os_running = False
            if h.kdump_start is not None:
                h.kdump_end = min(h.kdump_end or self.clock.t, self.clock.t)
            self._guests_stop(h)
            h.boot_token += 1
        elif h.powered and not was_powered:
            h.fence_proof = False
            token = h.boot_token = h.boot_token + 1
            self.at(self.clock.t + self.timing.boot_time,
                    lambda: self._booted(h, token))
        self._refresh(h)

    def _booted(self, h: Host, token: int) -> None:
        if token != h.boot_token or not h.powered:
            return
        h.os_running = True
        h.compute_running = True
        # A new boot starts a new agent run (a new boot id).
        h.agent_running = True
        h.agent_hung = False
        h.agent_killed = False
        h.agent_boot += 1
        h.boots += 1
        h.episode += 1
        self._register(h)
        # nova-compute's init_host: evacuated guests are destroyed, and
        # the power-state sync stops the ones whose guest did not survive.
        for mig in self.migrations:
            if mig.source_host == h.name and mig.status == 'done':
                mig.status = 'completed'
                mig.updated_at = self.clock.t
        for srv in self.servers.values():
            # A paused guest lived in memory only: it is gone as well.
            if (srv.host == h.name and srv.status in ('ACTIVE', 'PAUSED')
                    and not srv.task_state):
                srv.status = 'SHUTOFF'
                self._changed(srv)
                self.say('nova', 'power_synced', h.name, server=srv.name,
                         status='SHUTOFF')
        self._refresh(h)
        self.say('host', 'booted', h.name)

    def set_power(self, host: str, on: bool) -> None:
        h = self.host(host)
        was = h.powered
        h.chassis_on = on
        if on:
            for name in h.outlets:
                h.outlets[name] = True
        self._power_changed(h, was)

    def crash(self, host: str) -> None:
        """A kernel panic: powered, but nothing runs."""
        h = self.host(host)
        h.os_running = False
        h.boot_token += 1
        self._guests_stop(h)
        self._refresh(h)

    def set_agent_hung(self, host: str, hung: bool) -> None:
        """The host's heartbeat agent hangs (or runs again)."""
        h = self.host(host)
        h.agent_hung = hung
        self._refresh(h)

    def reset(self, host: str) -> None:
        """A reset (a watchdog's): nothing runs, then the host boots."""
        h = self.host(host)
        self.crash(host)
        token = h.boot_token
        self.at(self.clock.t + self.timing.boot_time,
                lambda: self._booted(h, token))

    def start_kdump(self, host: str, duration: float) -> None:
        h = self.host(host)
        self.crash(host)
        h.kdump_start = self.clock.t + 2
        h.kdump_end = self.clock.t + duration
        token = h.boot_token

        def reboot():
            # kdump's default action once the dump is written: reboot.
            if h.boot_token == token and h.powered:
                self.say('host', 'kdump_finished_rebooting', host)
                h.boot_token += 1
                new = h.boot_token
                self.at(self.clock.t + self.timing.boot_time,
                        lambda: self._booted(h, new))
        self.at(h.kdump_end, reboot)

    def local(self, t: float) -> datetime.datetime:
        """World time ``t`` on the instanceha machines' (skewed) clock."""
        return self.clock.at(t + self.clock_skew)

    def kdump_last_message(self, host: str) -> datetime.datetime | None:
        """When instanceha's listener got the last message (its clock)."""
        h = self.hosts.get(host)
        if not h or h.kdump_start is None or not h.network_ok:
            return None
        now = self.clock.t
        end = now if h.kdump_end is None else min(now, h.kdump_end)
        if end < h.kdump_start:
            return None
        n = math.floor((end - h.kdump_start) / self.timing.kdump_interval)
        if (h.kdump_end is not None and h.kdump_start
                + n * self.timing.kdump_interval >= h.kdump_end):
            # The dump ended (or the host lost power) at that very moment:
            # no message is sent once the dump is over.
            n -= 1
            if n < 0:
                return None
        return self.local(h.kdump_start + n * self.timing.kdump_interval)

    def in_kdump(self, h: Host) -> bool:
        return (h.kdump_start is not None and h.powered
                and self.clock.t >= h.kdump_start
                and (h.kdump_end is None or self.clock.t < h.kdump_end))

    def set_network(self, host: str, ok: bool) -> None:
        h = self.host(host)
        h.network_ok = ok
        self._addresses_changed(h)
        self._refresh(h)

    def addresses_answer(self, host: str) -> bool:
        """Whether ``host``'s isolation addresses answer it now."""
        h = self.hosts[host]
        return h.network_ok and h.addresses_ok

    def _addresses_changed(self, h: Host) -> None:
        if not self.addresses_answer(h.name):
            h.addresses_since = None
        elif h.addresses_since is None:
            h.addresses_since = self.clock.t

    def set_addresses(self, host: str, ok: bool) -> None:
        h = self.host(host)
        h.addresses_ok = ok
        self._addresses_changed(h)

    def set_partition(self, host: str, partitioned: bool) -> None:
        """The host loses (or regains) its link to the control plane.

        The service and Nova; its own network and isolation addresses
        still work.
        """
        h = self.host(host)
        h.service_link_ok = h.nova_link_ok = not partitioned
        self._refresh(h)

    def set_agent(self, host: str, action: str) -> None:
        """The host's heartbeat agent is killed or started alone.

        ``kill``: the agent dies (its watchdog stays armed); ``start``: a
        new agent run on the running host (a new boot id).
        """
        h = self.host(host)
        if action == 'kill':
            h.agent_killed = True
        elif h.agent_killed and h.os_running and h.powered:
            h.agent_killed = False
            h.agent_boot += 1
        else:
            raise ScenarioError('agent %s start: its agent runs, or the host '
                                'does not' % host)
        self._refresh(h)

    def set_nova_link(self, host: str, ok: bool) -> None:
        h = self.host(host)
        h.nova_link_ok = ok
        self._refresh(h)

    def set_compute(self, host: str, running: bool) -> None:
        h = self.host(host)
        h.compute_running = running
        if running and h.powered and h.os_running:
            self._register(h)
        self._refresh(h)

    def _register(self, h: Host) -> None:
        """A starting nova-compute registers a new service record.

        (Only if ``nova delete-service`` deleted its record: Nova makes
        it anew, enabled, with nothing of the old one.)
        """
        if h.name in self.deleted_services:
            self.deleted_services.discard(h.name)
            h.status, h.disabled_reason, h.forced_down = (
                model.ENABLED, None, False)
            self.say('nova', 'service_recreated', h.name)

    # --- Nova's view ----------------------------------------------------

    def _updated_at(self, h: Host) -> float | None:
        if h.hb_since is None:
            return h.last_hb
        ri = self.timing.report_interval
        return h.hb_since + math.floor((self.clock.t - h.hb_since) / ri) * ri

    def service_state(self, h: Host) -> str:
        ts = self._updated_at(h)
        if (h.forced_down or ts is None
                or self.clock.t - ts > self.timing.service_down_time):
            return model.DOWN
        return model.UP

    def stamp_write(self, h: Host) -> None:
        """A write of ``h``'s service record through Nova's API."""
        if self.stamps_writes:
            h.written_at = self.clock.t

    def service_model(self, h: Host) -> model.Service:
        ts = self._updated_at(h)
        if h.written_at is not None and (ts is None or h.written_at > ts):
            ts = h.written_at  # updated_at only; the state follows reports
        return model.Service(
            id=h.id, host=h.name, state=self.service_state(h),
            status=h.status, forced_down=h.forced_down,
            updated_at=None if ts is None else self.clock.at(ts),
            updated_at_raw=None if ts is None else self.clock.at(
                ts).strftime('%Y-%m-%dT%H:%M:%S.000000'),
            disabled_reason=h.disabled_reason, zone=h.zone)

    def server_model(self, srv: Server) -> model.Server:
        cached = self._server_cache.get(srv.id)
        if cached is None:
            fl = self.flavors[srv.flavor]
            cached = model.Server(
                id=srv.id, name=srv.name, host=srv.host,
                # Nova shows the task, not the vm_state, while rebuilding.
                status=('REBUILD' if srv.task_state == 'rebuilding'
                        else srv.status),
                flavor=model.Flavor(fl.name, dict(fl.extra_specs),
                                    vcpus=fl.vcpus),
                image_id=srv.image_id, task_state=srv.task_state,
                metadata=dict(srv.metadata), locked=srv.locked,
                locked_reason=srv.locked_reason if srv.locked else None,
                project_id=srv.project_id)
            self._server_cache[srv.id] = cached
        return cached

    def migration_model(self, mig: Migration) -> model.Migration:
        return model.Migration(
            id=mig.id, server_id=mig.server_id, source_host=mig.source_host,
            dest_host=mig.dest_host, status=mig.status,
            migration_type=mig.kind,
            created_at=self.clock.at(mig.created_at),
            updated_at=self.clock.at(mig.updated_at))

    def free(self, host: str) -> int:
        return self.hosts[host].vcpus - self._usage.get(host, 0)

    def use(self, host: str, vcpus: int) -> None:
        """Claim (or, negative, release) capacity on a host."""
        self._usage[host] = self._usage.get(host, 0) + vcpus
        self.capacity_changed(host)

    def capacity_changed(self, host: str) -> None:
        heapq.heappush(self._free_heap, (-self.free(host), host))

    # --- invariants -----------------------------------------------------

    def check_actor(self, action: str, host: str | None) -> None:
        actor = self.actor
        if actor is not None and not self.is_leader(actor):
            self.violate('%s %s by %s, which is not the leader'
                         % (action, host or '', actor))

    def check_gate(self, action: str, host: str) -> None:
        if host in self.blocked.get(self.actor, ()):
            self.violate('%s %s although a gate blocked it'
                         % (action, host))

    def confirm_fenced(self, host: str) -> None:
        h = self.hosts.get(host)
        if h is not None and not h.powered:
            h.fence_proof = True

    def check_self_fenced(self, host: str) -> None:
        """A watchdog level counted ``host`` off: it must have reset."""
        h = self.hosts[host]
        if h.powered and h.os_running and not h.self_fenced:
            self.violate('%s counted off by its watchdog, but it runs and '
                         'its watchdog did not reset it' % host)

    def check_guests(self, srv: Server) -> None:
        if len(srv.running_on) > 1:
            self.violate('instance %s running on %s at once'
                         % (srv.name, ' and '.join(sorted(srv.running_on))))

    # --- fencing devices (used by the "sim" fencing driver) ------------

    def device_power(self, dev: Device) -> str:
        h = self.hosts[dev.host]
        on = h.outlets[dev.name] if dev.kind == 'outlet' else h.chassis_on
        return 'on' if on else 'off'

    def _device_set(self, dev: Device, on: bool) -> None:
        h = self.hosts[dev.host]
        was = h.powered
        if dev.kind == 'outlet':
            h.outlets[dev.name] = on
            if on and not was:
                # Power restore policy "always on": power back at the
                # outlet boots the server.
                h.chassis_on = True
        else:
            h.chassis_on = on
        self._power_changed(h, was)

    def _apply_pending(self, dev: Device, due: float) -> None:
        """The device reaches the state it was asked for (a world event)."""
        if dev.pending and dev.pending[1] == due:
            on = dev.pending[0] == 'on'
            dev.pending = None
            before = self.device_power(dev)
            self._device_set(dev, on)
            if self.device_power(dev) != before:
                self.say('bmc', 'now_%s' % ('on' if on else 'off'),
                         dev.host, device=dev.name)
            if not on and dev.behaviour != LIES_ON:
                # (A lying device confirms nothing: it reads "on".)
                self.confirm_fenced(dev.host)

    def _fault(self, dev: Device, remaining: float) -> None:
        """Fail the way a misbehaving device fails, after its delay."""
        b = dev.behaviour
        if b == 'timeout':
            self.clock.sleep(remaining)
            raise DeviceFault('timeout', 'no answer within %gs' % remaining)
        if b == 'unreachable':
            self.clock.sleep(min(remaining, 5.0))
            raise DeviceFault('unreachable', 'no route to the device')
        self.clock.sleep(0.5)
        if b == 'error':
            raise DeviceFault('error', 'the device answered with an error')
        if b == 'wrong-password':
            raise DeviceFault('auth', 'the device refused the credentials')

    def device_read(self, name: str, remaining: float) -> str:
        """The power state a device reports (time passes in the job)."""
        dev = self.device(name)
        self._fault(dev, remaining)
        state = 'on' if dev.behaviour == LIES_ON else self.device_power(dev)
        if state == 'off':
            self.confirm_fenced(dev.host)
        return state

    def device_health(self, name: str, remaining: float
                      ) -> tuple[model.HardwareCondition, ...]:
        """The hardware conditions a device reports (proactive checks)."""
        dev = self.device(name)
        self._fault(dev, remaining)
        return dev.conditions

    def device_request(self, name: str, state: str,
                       remaining: float) -> None:
        """Ask a device for ``state``; it gets there after a delay.

        Who asks is judged when the request leaves the service: this
        world's coordination backend ends every lease the moment it fails
        (a real one's lease runs on, and the engine bounds each device
        operation by it), so a request a leader sent just before would be
        judged against nobody's leadership when it reaches the device.
        """
        dev = self.device(name)
        host = dev.host
        self.check_actor('power %s' % state, host)
        self._fault(dev, remaining)
        if state == 'off':
            self.check_gate('fence', host)
        self.say('bmc', 'power_%s' % state, host, device=name)
        if dev.behaviour == 'stuck-on' and state == 'off':
            return
        t = self.timing
        delay = (t.bmc_slow_delay if dev.behaviour == 'slow' else
                 t.bmc_off_delay if state == 'off' else t.bmc_on_delay)
        due = self.clock.t + delay
        dev.pending = (state, due)
        self.at(due, lambda: self._apply_pending(dev, due))

    # --- Nova API (used through SimCloud) -------------------------------

    def api_evacuate(self, server_id: str, host: str | None) -> None:
        srv = self.servers.get(server_id)
        if srv is None:
            raise exceptions.CloudError(
                'evacuate %s: instance not found (HTTP 404)' % server_id,
                status=404)
        source = self.hosts[srv.host]
        self.check_actor('evacuate from', source.name)
        if srv.task_state:
            raise exceptions.CloudError(
                "evacuate %s: Cannot 'evacuate' instance while it is in "
                "task_state %s (HTTP 409)" % (srv.name, srv.task_state),
                status=409)
        if srv.status not in model.EVACUABLE_STATUSES:
            raise exceptions.CloudError(
                "evacuate %s: Cannot 'evacuate' instance while it is in "
                "vm_state %s (HTTP 409)" % (srv.name, srv.status.lower()),
                status=409)
        if self.service_state(source) == model.UP:
            raise exceptions.CloudError(
                'evacuate %s: Compute service of %s is still in use. '
                '(HTTP 409)' % (srv.name, source.name), status=409)
        if host is not None:
            if host not in self.hosts:
                raise exceptions.CloudError(
                    'evacuate %s: Compute host %s could not be found. '
                    '(HTTP 404)' % (srv.name, host), status=404)
            if host == source.name:
                raise exceptions.CloudError(
                    "evacuate %s: The target host can't be the same one. "
                    "(HTTP 400)" % srv.name, status=400)
        # The request is valid: now judge the engine for making it.
        self.check_gate('evacuate from', source.name)
        if (not source.fence_proof and not self.in_kdump(source)
                and not source.self_fenced):
            self.violate('evacuate %s from %s, which no fencing device '
                         'confirmed off' % (srv.name, source.name))
        if source.name in srv.running_on:
            self.violate('evacuate %s from %s, where its guest still runs'
                         % (srv.name, source.name))
        for mig in self.migrations:
            # (A live or cold migration away and back, e.g. for
            # maintenance, is no evacuation.)
            if (mig.server_id == srv.id and mig.source_host == source.name
                    and mig.episode == source.episode
                    and mig.kind == 'evacuation'
                    and mig.status not in ('error', 'failed')):
                self.violate('instance %s evacuated twice from %s in one '
                             'failure' % (srv.name, source.name))
                break
        now = self.clock.t
        # Nova records the host asked for as the record's destination in
        # the call itself (dest_compute): a "No valid host" on it keeps it.
        mig = Migration(id=str(next(self._mig_ids)), server_id=srv.id,
                        source_host=source.name, dest_host=host,
                        status='accepted', created_at=now, updated_at=now,
                        episode=source.episode, requested_dest=host,
                        visible_at=now + self.migration_delay)
        self.migrations.append(mig)
        srv.task_state = 'rebuilding'
        self._changed(srv)
        self.at(now + self.timing.schedule_time,
                lambda: self._schedule(mig))

    def _pick(self, srv: Server, mig: Migration) -> str | None:
        """Nova's scheduler, simplified: the most free vCPUs wins.

        Only up, enabled hosts other than the source with room; ties go
        to the first host by name.
        """
        need = self.flavors[srv.flavor].vcpus

        def ok(h: Host) -> bool:
            return (h.name != mig.source_host and h.status == model.ENABLED
                    and self.service_state(h) == model.UP
                    and self.free(h.name) >= need)
        if mig.requested_dest:
            h = self.hosts[mig.requested_dest]
            return h.name if ok(h) else None
        heap, skipped, found = self._free_heap, [], None
        while heap:
            neg_free, name = heap[0]
            if -neg_free != self.free(name):
                heapq.heappop(heap)         # stale entry
                continue
            if -neg_free < need:
                break                       # nobody has room
            heapq.heappop(heap)
            skipped.append((neg_free, name))
            if ok(self.hosts[name]):
                found = name
                break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def _schedule(self, mig: Migration) -> None:
        srv = self.servers[mig.server_id]
        dest = self._pick(srv, mig)
        mig.updated_at = self.clock.t
        if dest is None:
            mig.status = 'error'
            srv.task_state = None
            srv.status = 'ERROR'
            self._changed(srv)
            self.say('nova', 'evacuation_error', mig.source_host,
                     server=srv.name, reason='No valid host was found')
            return
        mig.dest_host = dest
        mig.status = 'pre-migrating'
        need = self.flavors[srv.flavor].vcpus
        self.use(dest, need)
        self.at(self.clock.t + self.timing.rebuild_time,
                lambda: self._rebuilt(mig))

    def _take_failure(self, srv: Server, dest: str) -> bool:
        for f in self.rebuild_failures:
            if f.server in (srv.id, srv.name) and f.target in (None, dest):
                if f.times is not None:
                    f.times -= 1
                    if f.times <= 0:
                        self.rebuild_failures.remove(f)
                return True
        return False

    def _rebuilt(self, mig: Migration) -> None:
        srv = self.servers[mig.server_id]
        dest = self.hosts[mig.dest_host]
        need = self.flavors[srv.flavor].vcpus
        mig.updated_at = self.clock.t
        srv.task_state = None
        self._changed(srv)
        if self._take_failure(srv, dest.name) or not dest.beating:
            self.use(dest.name, -need)
            mig.status = 'failed'
            srv.status = 'ERROR'
            self.say('nova', 'rebuild_failed', mig.source_host,
                     server=srv.name, dest=dest.name)
            return
        mig.status = 'done'
        self.use(mig.source_host, -need)
        srv.host = dest.name
        if srv.status == 'ERROR':
            srv.status = 'ACTIVE'
        if srv.status == 'ACTIVE':
            srv.running_on.add(dest.name)
            self.check_guests(srv)
        if self.verbose_nova:
            self.say('nova', 'rebuilt', mig.source_host, server=srv.name,
                     dest=dest.name, status=srv.status)

    def api_update_service(self, host: str, status, disabled_reason,
                           forced_down) -> model.Service:
        h = self.hosts.get(host)
        if h is None or host in self.deleted_services:
            raise exceptions.CloudError(
                'compute service of %s not found (HTTP 404)' % host,
                status=404)
        self.check_actor('update service', host)
        if (forced_down is False and self.unforce_checked and any(
                    m.source_host == host and m.status == 'done' and
                    m.kind == 'evacuation' for m in self.migrations)):
            raise exceptions.CloudError(
                'update compute service of %s: HTTP 400 from Nova: Unable '
                'to force up host %s as `done` evacuation migration records '
                'remain associated with the host.' % (host, host),
                status=400)
        if forced_down and not h.forced_down:
            self.check_gate('force down', host)
        if status is not None:
            h.status = status
            if status == model.ENABLED:
                h.disabled_reason = None
        if disabled_reason is not None:
            h.disabled_reason = disabled_reason
        if forced_down is not None:
            h.forced_down = forced_down
        self.stamp_write(h)
        return self.service_model(h)
