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

"""The engine's only ways to touch the world.

Like Proxmox ha-manager's environment, everything with side effects sits
behind these interfaces: the production service plugs in Nova, real
fencing devices, tooz and the wall clock; the simulator plugs in a
simulated cloud, simulated BMCs and a simulated clock; the engine code is
the same in both and never imports a client library or a socket.
"""

import abc
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import datetime
import math
import time
from typing import Any

from instanceha.engine import model
from instanceha import exceptions


#: Which hosts' servers a snapshot lists: names, or a function of the
#: services the snapshot read.
HostSelector = (Iterable[str] |
                Callable[[tuple[model.Service, ...]], Iterable[str]])


def select_hosts(hosts: 'HostSelector',
                 services: tuple[model.Service, ...]) -> frozenset[str]:
    """The host names a :data:`HostSelector` stands for."""
    if callable(hosts):
        hosts = hosts(services)
    return frozenset(hosts)


class CloudPort(abc.ABC):
    """Nova, as the engine needs it.

    Every method raises :class:`instanceha.exceptions.CloudError` (with
    Nova's request id where there is one) when the cloud refuses or fails.
    """

    @abc.abstractmethod
    def snapshot(self, *, images: bool = False,
                 migrations_since: datetime.datetime | None = None,
                 hosts: 'HostSelector | None' = None,
                 aggregates: bool = True,
                 services: model.Snapshot | None = None) -> model.Snapshot:
        """Read the cloud in a number of calls that does not grow with it.

        :param images: also read the images the servers use (for image
            tag filters).
        :param migrations_since: also read evacuation records newer than
            this.
        :param hosts: None lists every server of the cloud. Otherwise the
            servers of these hosts only, one bounded listing per host
            (``Snapshot.servers_read`` names them); a callable is given
            the services just read and returns the hosts, so that a host
            found failed by this very read has its servers read too.
        :param aggregates: False leaves the aggregates out (the caller
            keeps them cached).
        :param services: the compute services as the caller read them
            just now (:meth:`read_services`): not listed again; the
            snapshot is taken when they were.
        """

    def read_services(self) -> model.Snapshot:
        """Only the nova-compute services, in one small call.

        Read often between two full snapshots (see
        :mod:`instanceha.engine.watch`); a snapshot with no servers and no
        aggregates. This default takes a whole snapshot: a cloud port
        should override it.
        """
        snap = self.snapshot()
        return model.Snapshot(taken_at=snap.taken_at,
                              services=snap.services,
                              clock_skew=snap.clock_skew)

    @abc.abstractmethod
    def update_service(self, service: model.Service, *,
                       status: str | None = None,
                       disabled_reason: str | None = None,
                       forced_down: bool | None = None) -> model.Service:
        """Change a compute service; returns it as Nova now reports it."""

    @abc.abstractmethod
    def evacuate(self, server_id: str, *, host: str | None = None) -> None:
        """Ask Nova to rebuild the server elsewhere (on ``host`` if given).

        A named host is a request Nova's scheduler still validates, never
        a forced destination: one without room, disabled or down is
        refused (the evacuation's migration record ends in ``error``).
        """

    @abc.abstractmethod
    def get_server(self, server_id: str) -> model.Server:
        """One server as Nova reports it now."""

    def changed_servers(self, since: datetime.datetime
                        ) -> tuple[model.Server, ...]:
        """Every server Nova changed since ``since`` (our clock), in bulk.

        One listing confirms the rebuilds that ended in a step, instead of
        one read per instance. A server missing from it is read alone;
        this default lists nothing, so a port without a bulk read keeps
        reading each one.
        """
        return ()

    @abc.abstractmethod
    def migrations(self, *, server_id: str | None = None,
                   source_host: str | None = None,
                   since: datetime.datetime | None = None,
                   migration_type: str = 'evacuation'
                   ) -> list[model.Migration]:
        """Migration records, newest first (evacuations unless asked).

        :param migration_type: Nova's filter: ``evacuation``,
            ``live-migration``, ``migration`` (cold) or ``resize``.
        """

    @abc.abstractmethod
    def set_server_lock(self, server_id: str, locked: bool,
                        reason: str | None = None) -> None:
        """Lock a server against tenant actions while it is being moved."""

    @abc.abstractmethod
    def stop_server(self, server_id: str) -> None:
        """Power a server off (to restore SHUTOFF after a rebuild)."""

    @abc.abstractmethod
    def reset_server_state(self, server_id: str, state: str) -> None:
        """Nova's reset-state (``error`` or ``active``)."""

    # -- planned moves (maintenance) ---------------------------------------

    @abc.abstractmethod
    def live_migrate(self, server_id: str, host: str | None = None
                     ) -> str | None:
        """Start a live migration; returns Nova's request id.

        ``host`` None lets Nova's scheduler choose; a named host is still
        checked by the scheduler (never forced).
        """

    @abc.abstractmethod
    def cold_migrate(self, server_id: str, host: str | None = None
                     ) -> str | None:
        """Start a cold migration; returns Nova's request id.

        The server ends in VERIFY_RESIZE until :meth:`confirm_resize`.
        """

    @abc.abstractmethod
    def confirm_resize(self, server_id: str) -> None:
        """Confirm a finished cold migration (VERIFY_RESIZE)."""

    @abc.abstractmethod
    def action_errors(self, server_id: str, action: str,
                      request_id: str | None = None
                      ) -> tuple[str | None, list[str]]:
        """Nova's errors of an instance action, e.g. ``live-migration``.

        An asynchronous failure (no valid host) shows only here. Returns
        (the action's request id, "event: details" of each failed event).
        """

    @abc.abstractmethod
    def set_server_metadata(self, server_id: str, key: str,
                            value: str) -> None:
        """Set one metadata item of a server (others are left alone)."""

    @abc.abstractmethod
    def delete_server_metadata(self, server_id: str, key: str) -> None:
        """Remove one metadata item; an absent item is not an error."""

    def host_vcpus(self) -> Mapping[str, model.HostVcpus] | None:
        """Host -> its vCPU capacity and use; None: the cloud cannot say.

        Read only when a placement strategy looks at free room (see
        :mod:`instanceha.engine.placement`). Nova's scheduler checks room
        again when the evacuation is scheduled, so this is advice, never
        a promise. The default says nothing.
        """
        return None

    # -- instance failures (crashed guests) -------------------------------
    # Not abstract: clouds written before instance failures were handled
    # still load; the instance failure loop reports their refusal.

    def start_server(self, server_id: str) -> None:
        """Power a stopped server on (Nova's ``os-start``)."""
        raise exceptions.CloudError('start %s: this cloud cannot start '
                                    'servers' % server_id)

    def server_actions(self, server_id: str
                       ) -> list[model.InstanceAction]:
        """The server's instance actions, newest first."""
        raise exceptions.CloudError('list actions of %s: this cloud cannot '
                                    'list instance actions' % server_id)

    def stopped_servers(self, since: datetime.datetime | None = None
                        ) -> tuple[model.Server, ...]:
        """The servers the instance failure loop watches, in bulk.

        Without ``since``: every server of the cloud that is SHUTOFF or
        VERIFY_RESIZE (not the running majority). With ``since`` (our
        clock): what changed since then, to update such a listing: every
        server Nova changed since ``since`` whatever its status, deleted
        ones included with the status ``DELETED`` (Nova's
        ``changes-since``). This default lists every server both ways (a
        deleted one is then missing: it leaves at the next full listing).
        """
        servers = self.snapshot().servers
        if since is not None:
            return servers
        return tuple(s for s in servers
                     if s.status in ('SHUTOFF', 'VERIFY_RESIZE'))

    def locked_servers(self) -> tuple[model.Server, ...]:
        """Every locked server of the cloud, with its lock reason.

        Read rarely (see :mod:`instanceha.engine.locks`): when a copy
        gains leadership and when an operator takes a host. This default
        lists every server.
        """
        return tuple(s for s in self.snapshot().servers if s.locked)

    #: Calls made to the cloud so far (for benchmarks and tests).
    api_calls: int = 0


class Clock(abc.ABC):
    """Time. Always timezone-aware UTC."""

    @abc.abstractmethod
    def now(self) -> datetime.datetime:
        """The current time."""

    @abc.abstractmethod
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for timeouts."""

    @abc.abstractmethod
    def sleep(self, seconds: float) -> None:
        """Wait."""


@dataclasses.dataclass(frozen=True)
class FenceResult:
    """Proof that a host is off (or, for unfence, on)."""

    host: str
    #: Index (1-based) of the fencing level that succeeded.
    level: int
    #: Names of the devices of that level, for the log.
    devices: tuple[str, ...]
    #: True when the host was found crash-dumping (kdump) rather than
    #: powered off: it is already not running its instances.
    kdump: bool = False
    #: True when the host had announced its shutdown and no power
    #: operation was made: fence found it off by reading its devices,
    #: unfence left it off (see instanceha.engine.shutdown).
    announced: bool = False
    #: What the host announced (``reboot`` or ``poweroff``), also when it
    #: had to be fenced for real after all; None: no announcement.
    shutdown: str | None = None


@dataclasses.dataclass(frozen=True)
class PowerReading:
    """What a host's fencing devices say about its power now."""

    host: str
    #: True only when every device of one level reported off.
    off: bool
    #: True when a device that could tell reported the host on.
    on: bool = False
    #: For the log: which devices said what, or why nothing could be read.
    detail: str = ''
    #: The fencing level whose devices all reported off (0: none/unknown).
    level: int = 0
    #: Seconds from now this reading may prove the host off; None: the
    #: usual :data:`PROOF_TTL` (a crash dump's message proves less: see
    #: :data:`KDUMP_FRESH`).
    valid_for: float | None = None


class Fencer(abc.ABC):
    """Fences and unfences hosts through their configured devices."""

    @abc.abstractmethod
    def configured(self, host: str) -> bool:
        """Whether the host has a usable fencing configuration."""

    @abc.abstractmethod
    def fence(self, host: str) -> FenceResult:
        """Power the host off and confirm it; walks the fencing levels.

        :raises instanceha.exceptions.FencingError: when no level proved
            the host off.
        """

    @abc.abstractmethod
    def unfence(self, host: str) -> FenceResult:
        """Power the host back on through the level that fenced it."""

    def power_state(self, host: str) -> PowerReading:
        """Read the host's power through its fencing devices (no change).

        The engine asks before every evacuation call: the host must be
        proven off *now*, not only when it was fenced. A fencer that
        cannot read power proves nothing.
        """
        return PowerReading(host=host, off=False,
                            detail='this fencer cannot read power state')


class Coordinator(abc.ABC):
    """Leader election and per-host locks: only one copy acts."""

    @abc.abstractmethod
    def is_leader(self) -> bool:
        """True only while this copy holds leadership *now*.

        Checked before every destructive step; must be cheap.
        """

    def proven_for(self) -> float:
        """Seconds from now for which this copy's leadership is proven.

        0 when it is not the leader. A side effect started now must end
        within this time (its time-out is bounded by it), so that it can
        never outlive the lease. Coordinators without leases prove it
        without end.
        """
        return math.inf if self.is_leader() else 0.0

    @abc.abstractmethod
    def host_lock(self, host: str):
        """A context manager keeping other workers off ``host``."""


class EventSink(abc.ABC):
    """Where the engine tells its story.

    The production sink writes log lines and metrics; the simulator
    records events with simulated time and compares them with a golden log.
    """

    @abc.abstractmethod
    def emit(self, event: str, host: str | None = None, **details) -> None:
        """Record one event, e.g. ``emit('fenced', 'host3', level=1)``."""


class Executor(abc.ABC):
    """Runs slow, blocking work (fencing, power-on) off the decision loop.

    Production runs jobs on a pool of ``workers`` threads; the simulator
    runs them deterministically in simulated time. The engine submits a
    job and looks at the future on later ticks; it never blocks on one.
    """

    @abc.abstractmethod
    def submit(self, fn: Callable, *args, **kwargs
               ) -> concurrent.futures.Future:
        """Start ``fn(*args, **kwargs)``; return its future."""

    def run_calls(self, calls: 'list[Callable[[], object]]',
                  limit: int | None = None
                  ) -> 'list[BaseException | None]':
        """Run a job's independent calls (its evacuate calls); wait.

        At most ``limit`` at the same time (None: no bound), the next
        starting as soon as one returns. Returns what each raised (None:
        it returned, or was not started). Once one raised, no call not
        yet started is started. This default runs them one after the
        other (so within any ``limit``), stopping at the first that
        raises: the simulator's deterministic order. The production pool
        runs up to ``limit`` at once (see
        :class:`instanceha.engine.executor.ThreadPoolExecutor`).
        """
        out: list[BaseException | None] = [None] * len(calls)
        for i, call in enumerate(calls):
            try:
                call()
            except Exception as exc:
                out[i] = exc
                break
        return out


class KdumpWatch(abc.ABC):
    """What the fence_kdump listener heard."""

    @abc.abstractmethod
    def last_message(self, host: str) -> datetime.datetime | None:
        """When ``host`` last sent a kdump message; None if never."""


class ListenerFactory(abc.ABC):
    """Makes the listeners through which detectors hear the hosts.

    The service opens UDP sockets; the simulator hands out listeners that
    report what its simulated hosts sent. A detector asks the factory it
    was given (``Detector.listeners``) in ``start()``, so the detector's
    code is the same in both.
    """

    @abc.abstractmethod
    def heartbeat(self, endpoints: list[tuple[str, int]], keyring: Any,
                  max_clock_skew: float, log_interval: float) -> Any:
        """A heartbeat listener, not yet started (``start()``)."""

    @abc.abstractmethod
    def kdump(self, endpoints: list[tuple[str, int]],
              address_map: dict[str, str], reverse_dns: bool) -> Any:
        """A fence_kdump listener, not yet started (``start()``)."""


class PauseSource(abc.ABC):
    """Where the engine reads an operator's pause (the shared backend)."""

    @abc.abstractmethod
    def current(self):
        """The stored :class:`instanceha.engine.pause.Pause` or None.

        Expired or not (the engine judges by its clock).

        :raises instanceha.exceptions.InstanceHAError: when it cannot be
            read now.
        """


# -- the leadership guard ----------------------------------------------------

#: Below this many seconds of proven leadership no side effect starts.
MIN_PROVEN = 0.5

#: (deadline, the clock it is on) of the guarded call being made now.
_call_deadline: contextvars.ContextVar[
    tuple[float, Callable[[], float]] | None] = contextvars.ContextVar(
        'instanceha_call_deadline', default=None)


def call_budget(default: float | None = None) -> float | None:
    """Seconds the side effect being made now may still take.

    Set by :class:`LeaderGuard` around every guarded call; an adapter
    that talks to the world (Nova's HTTP session, a BMC client) bounds
    its time-out by it, so that no call outlives the proven lease.
    ``default`` outside a guarded call.
    """
    current = _call_deadline.get()
    if current is None:
        return default
    deadline, monotonic = current
    return max(0.0, deadline - monotonic())


#: A reading that proved a host off counts this many seconds of the
#: engine's clock, and only inside the evacuation step that read it (the
#: calls of one step follow each other within it; a device read costs
#: time). The fence's own proof, or a previous step's, never counts.
PROOF_TTL = 2.0

#: A fence_kdump message proves the host off for this many seconds after
#: it arrived, and no longer. A message says only that the dump was live
#: when it was sent; the dump may end (and the host reboot) right after
#: it. So an evacuation from a dumping host is made right after a fresh
#: message: the step waits for the next one (see the engine's prover),
#: polling every :data:`KDUMP_POLL` seconds.
KDUMP_FRESH = 0.5
KDUMP_POLL = 0.1


class PowerUnproven(exceptions.FencingError):
    """An evacuate call refused: its host is not proven off now."""

    def __init__(self, reading: PowerReading):
        super().__init__('evacuation from %s refused: it is not proven off '
                         'now (%s)' % (reading.host, reading.detail))
        self.reading = reading


class PowerProof:
    """Proof, read when a call needs it, that one host runs nothing now.

    Made for one evacuation step and installed with
    :meth:`LeaderGuard.proving`; every evacuate call of the cloud port
    asks it first (:meth:`require`), so no code path can evacuate with a
    stale proof or none at all.
    """

    def __init__(self, host: str, read: Callable[[], PowerReading],
                 clock: 'Clock'):
        self.host = host
        self._read = read
        self._clock = clock
        #: Monotonic time of the latest reading that proved the host off.
        self.proven_at: float | None = None
        #: Monotonic time until which that reading proves it.
        self.proven_until: float | None = None

    def require(self) -> None:
        """Return when the host is proven off now; else raise.

        A reading proves the host off for :data:`PROOF_TTL` seconds, or
        for its own shorter ``valid_for`` (a crash dump's message).

        :raises PowerUnproven: with what was read (``on``: it runs).
        """
        if (self.proven_until is not None and
                self._clock.monotonic() <= self.proven_until):
            return
        reading = self._read()
        if not reading.off:
            raise PowerUnproven(reading)
        ttl = PROOF_TTL if reading.valid_for is None else max(
            0.0, min(PROOF_TTL, reading.valid_for))
        self.proven_at = self._clock.monotonic()
        self.proven_until = self.proven_at + ttl


_power_proof: contextvars.ContextVar[PowerProof | None] = \
    contextvars.ContextVar('instanceha_power_proof', default=None)


class LeaderGuard:
    """The one gate every side effect passes (only the leader acts).

    Checked at the moment of the call, not when the step was planned: a
    job queued while this copy led, a fencing chain walking to its next
    level, a shutdown's clean-up all come through here. The call gets
    a budget (:func:`call_budget`) that ends before leadership could.

    The budget is measured on the environment's clock (the one the lease
    is measured on): in the simulator simulated seconds, never the wall
    time the simulation happens to take.
    """

    def __init__(self, coordinator: Coordinator,
                 clock: 'Clock | None' = None):
        self.coordinator = coordinator
        self._monotonic = (clock.monotonic if clock is not None
                           else time.monotonic)
        self._halted: str | None = None

    def halt(self, why: str) -> None:
        """Refuse every side effect from now on (a stopping copy)."""
        self._halted = why

    @property
    def halted(self) -> bool:
        return self._halted is not None

    def check(self, what: str) -> float:
        """Seconds ``what`` may take; raises when it must not happen."""
        if self._halted is not None:
            raise exceptions.CoordinationError(
                '%s refused: this copy is %s' % (what, self._halted))
        proven = self.coordinator.proven_for()
        if proven < MIN_PROVEN or not self.coordinator.is_leader():
            raise exceptions.CoordinationError(
                '%s refused: this copy is not the leader now' % what)
        return proven

    @contextlib.contextmanager
    def effect(self, what: str):
        """Run the body as one guarded side effect with a bounded budget."""
        proven = self.check(what)
        now = self._monotonic()
        current = ((now + proven, self._monotonic) if math.isfinite(proven)
                   else None)
        outer = _call_deadline.get()
        if outer is not None:
            # An outer call's deadline, moved onto this guard's clock.
            left = max(0.0, outer[0] - outer[1]())
            if current is None or now + left < current[0]:
                current = (now + left, self._monotonic)
        token = _call_deadline.set(current)
        try:
            yield proven
        finally:
            _call_deadline.reset(token)

    @contextlib.contextmanager
    def proving(self, proof: PowerProof):
        """Evacuate calls in the body need ``proof`` (read when needed)."""
        token = _power_proof.set(proof)
        try:
            yield proof
        finally:
            _power_proof.reset(token)

    def require_proof(self, what: str) -> None:
        """The host of the evacuation being made is proven off now.

        :raises PowerUnproven: outside :meth:`proving`, or when the
            host's devices do not prove it off.
        """
        proof = _power_proof.get()
        if proof is None:
            raise PowerUnproven(PowerReading(
                host='its host', off=False, detail='%s was made outside an '
                'evacuation step that proves its host off' % what))
        proof.require()

    def device_check(self, host: str, device: str, action: str) -> float:
        """The hook a fencing topology calls before each device operation.

        Returns the seconds the operation may take (its time-out is
        bounded by it).
        """
        return self.check('power %s of %s through %s' % (action, host,
                                                         device))


def _guarded(name: str, what: Callable[..., str]):
    """A port method that passes the guard, then the inner port's."""
    def method(self, *args, **kwargs):
        with self._guard.effect(what(*args, **kwargs)):
            return getattr(self._inner, name)(*args, **kwargs)
    method.__name__ = name
    method.guarded = True
    return method


def _read(name: str):
    def method(self, *args, **kwargs):
        return getattr(self._inner, name)(*args, **kwargs)
    method.__name__ = name
    method.guarded = False
    return method


class _Wrapper:
    _inner: object

    def __getattr__(self, name):
        # Anything that is not a port method (counters, test hooks).
        return getattr(self._inner, name)


class GuardedCloud(_Wrapper, CloudPort):
    """The cloud port with every write behind the leadership guard."""

    def __init__(self, inner: CloudPort, guard: LeaderGuard):
        self._inner = inner
        self._guard = guard

    @property
    def api_calls(self) -> int:  # type: ignore[override]
        return self._inner.api_calls

    snapshot = _read('snapshot')

    def read_services(self) -> model.Snapshot:
        inner = getattr(self._inner, 'read_services', None)
        return inner() if inner else CloudPort.read_services(self)
    read_services.guarded = False  # type: ignore[attr-defined]

    get_server = _read('get_server')
    migrations = _read('migrations')
    host_vcpus = _read('host_vcpus')

    def changed_servers(self, since):
        inner = getattr(self._inner, 'changed_servers', None)
        return inner(since) if inner else ()
    changed_servers.guarded = False  # type: ignore[attr-defined]

    _update_service = _guarded(
        'update_service',
        lambda service, **kw: 'update of the service of %s' % service.host)

    #: Writes of compute services made through this port so far (counted
    #: once each has ended, whatever its outcome): a read begun after
    #: the count moved shows them (see :mod:`instanceha.engine.watch`).
    service_writes = 0

    def update_service(self, service: model.Service, **kwargs
                       ) -> model.Service:
        try:
            return self._update_service(service, **kwargs)
        finally:
            self.service_writes += 1
    update_service.guarded = True  # type: ignore[attr-defined]

    def evacuate(self, server_id: str, *, host: str | None = None) -> None:
        """Evacuate only from a host proven off now, only as the leader.

        The proof is read first (a device read takes time), leadership is
        checked last, at the moment of the call.
        """
        what = 'evacuate %s' % server_id
        self._guard.require_proof(what)
        with self._guard.effect(what):
            return self._inner.evacuate(server_id, host=host)
    evacuate.guarded = True  # type: ignore[attr-defined]

    set_server_lock = _guarded(
        'set_server_lock', lambda server_id, locked, *a, **kw: '%s %s' % (
            'lock' if locked else 'unlock', server_id))
    stop_server = _guarded('stop_server',
                           lambda server_id: 'stop %s' % server_id)
    reset_server_state = _guarded(
        'reset_server_state', lambda server_id, state: 'reset-state %s' %
        server_id)
    action_errors = _read('action_errors')
    server_actions = _read('server_actions')
    stopped_servers = _read('stopped_servers')
    locked_servers = _read('locked_servers')
    start_server = _guarded('start_server',
                            lambda server_id: 'start %s' % server_id)
    live_migrate = _guarded(
        'live_migrate', lambda server_id, *a, **kw: 'live migration of %s'
        % server_id)
    cold_migrate = _guarded(
        'cold_migrate', lambda server_id, *a, **kw: 'cold migration of %s'
        % server_id)
    confirm_resize = _guarded(
        'confirm_resize', lambda server_id: 'confirm-resize %s' % server_id)
    set_server_metadata = _guarded(
        'set_server_metadata', lambda server_id, key, value:
        'metadata %s of %s' % (key, server_id))
    delete_server_metadata = _guarded(
        'delete_server_metadata', lambda server_id, key:
        'metadata %s of %s' % (key, server_id))


class GuardedFencer(_Wrapper, Fencer):
    """The fencer port with every power change behind the guard.

    The whole call is checked, and so is each device operation of each
    level, through the inner fencer's ``device_guard`` hook.
    """

    def __init__(self, inner: Fencer, guard: LeaderGuard):
        self._inner = inner
        self._guard = guard
        if hasattr(inner, 'device_guard'):
            inner.device_guard = guard.device_check

    configured = _read('configured')
    power_state = _read('power_state')
    fence = _guarded('fence', lambda host: 'fencing of %s' % host)
    unfence = _guarded('unfence', lambda host: 'power-on of %s' % host)


#: Port methods that change nothing (everything else must be guarded).
READ_ONLY = {
    CloudPort: frozenset({'snapshot', 'read_services', 'get_server',
                          'changed_servers', 'migrations',
                          'action_errors', 'host_vcpus',
                          'server_actions', 'stopped_servers',
                          'locked_servers'}),
    Fencer: frozenset({'configured', 'power_state'}),
}


@dataclasses.dataclass
class Environment:
    """Everything the engine may use, bundled."""

    cloud: CloudPort
    clock: Clock
    fencer: Fencer
    coordinator: Coordinator
    events: EventSink
    executor: Executor
    #: Set when kdump checking is on.
    kdump: KdumpWatch | None = None
    #: Where detectors get their listeners (None: they need none).
    listeners: ListenerFactory | None = None
    #: Built from the coordinator; the cloud and fencer given are wrapped
    #: so that every side effect passes it (nothing can forget it).
    guard: LeaderGuard | None = None
    #: Where an operator's pause is read (None: instance HA never paused).
    pause: PauseSource | None = None
    #: Who heard the hosts' shutdown announcements (the heartbeat
    #: detector; None: no host can announce one). The fencer given is
    #: wrapped so that an announced host is proven off by reading its
    #: devices, never power-cycled (instanceha.engine.shutdown).
    announcements: Any = None

    def __post_init__(self) -> None:
        if self.guard is None:
            self.guard = LeaderGuard(self.coordinator, self.clock)
        if not isinstance(self.cloud, GuardedCloud):
            self.cloud = GuardedCloud(self.cloud, self.guard)
        if not isinstance(self.fencer, GuardedFencer):
            if self.announcements is not None:
                from instanceha.engine import shutdown
                self.fencer = shutdown.AnnouncedFencer(
                    self.fencer, self.announcements)
            self.fencer = GuardedFencer(self.fencer, self.guard)
