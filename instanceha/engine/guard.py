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

"""The leadership guard, the power proof, and the environment they wrap.

Safety is structural: the engine never holds a cloud or a fencer that can
act without passing :class:`LeaderGuard` at the moment of the call, and
no evacuate call passes without a :class:`PowerProof` read when it is
made. :func:`assemble` is the one place that wraps the ports given into
an :class:`~instanceha.engine.ports.Environment`; the production service
and the simulator both build theirs with it, so neither can forget a
wrapper.
"""

from collections.abc import Callable
import contextlib
import contextvars
import math
import time

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import shutdown
from instanceha import exceptions


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

    def __init__(self, reading: ports.PowerReading):
        super().__init__('evacuation from %s refused: it is not proven off '
                         'now (%s)' % (reading.host, reading.detail))
        self.reading = reading


class PowerProof:
    """Proof, read when a call needs it, that one host runs nothing now.

    Made for one evacuation step and installed with :func:`proving`;
    every evacuate call of the cloud port
    asks it first (:meth:`require`), so no code path can evacuate with a
    stale proof or none at all.
    """

    def __init__(self, host: str, read: Callable[[], ports.PowerReading],
                 clock: ports.Clock):
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
        for its own shorter ``valid_for`` (a crash dump's message); a
        reading with a deadline (``wait_left``, a watchdog's) proves
        nothing before that deadline has passed.

        :raises PowerUnproven: with what was read (``on``: it runs).
        """
        if (self.proven_until is not None and
                self._clock.monotonic() <= self.proven_until):
            return
        reading = self._read()
        if not reading.off or (reading.wait_left is not None
                               and reading.wait_left > 0):
            # A deadline-based level (a watchdog) counts only once its
            # deadline has passed now, whatever it claims.
            raise PowerUnproven(reading)
        ttl = PROOF_TTL if reading.valid_for is None else max(
            0.0, min(PROOF_TTL, reading.valid_for))
        self.proven_at = self._clock.monotonic()
        self.proven_until = self.proven_at + ttl


_power_proof: contextvars.ContextVar[PowerProof | None] = \
    contextvars.ContextVar('instanceha_power_proof', default=None)


@contextlib.contextmanager
def proving(proof: PowerProof):
    """Evacuate calls in the body need ``proof`` (read when needed)."""
    token = _power_proof.set(proof)
    try:
        yield proof
    finally:
        _power_proof.reset(token)


class LeaderGuard(ports.Guard):
    """The one gate every side effect passes (only the leader acts).

    Checked at the moment of the call, not when the step was planned: a
    job queued while this copy led, a fencing chain walking to its next
    level, a shutdown's clean-up all come through here. The call gets
    a budget (:func:`call_budget`) that ends before leadership could.

    The budget is measured on the environment's clock (the one the lease
    is measured on): in the simulator simulated seconds, never the wall
    time the simulation happens to take.
    """

    def __init__(self, coordinator: ports.Coordinator,
                 clock: ports.Clock | None = None):
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

    def require_proof(self, what: str) -> None:
        """The host of the evacuation being made is proven off now.

        :raises PowerUnproven: outside :func:`proving`, or when the
            host's devices do not prove it off.
        """
        proof = _power_proof.get()
        if proof is None:
            raise PowerUnproven(ports.PowerReading(
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


def _forward(name: str) -> property:
    """A port attribute read from the inner port (a count, a capability)."""
    return property(lambda self: getattr(self._inner, name))


class _Wrapper:
    """A port whose calls go to ``inner`` through ``guard``."""

    def __init__(self, inner, guard: LeaderGuard):
        self._inner = inner
        self._guard = guard

    def __getattr__(self, name):
        # Anything that is not a port method (counters, test hooks).
        return getattr(self._inner, name)


class GuardedCloud(_Wrapper, ports.CloudPort):
    """The cloud port with every write behind the leadership guard."""

    api_calls = _forward('api_calls')
    snapshot = _read('snapshot')
    read_services = _read('read_services')
    get_server = _read('get_server')
    migrations = _read('migrations')
    host_vcpus = _read('host_vcpus')
    host_resources = _read('host_resources')
    changed_servers = _read('changed_servers')

    _update_service = _guarded(
        'update_service',
        lambda service, **kw: 'update of the service of %s' % service.host)

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


class GuardedFencer(_Wrapper, ports.Fencer):
    """The fencer port with every power change behind the guard.

    The whole call is checked; each device operation of each level is
    checked too where the fencer supports it (:func:`assemble` installs
    the guard there).
    """

    supports_reload = _forward('supports_reload')
    configured = _read('configured')
    power_state = _read('power_state')
    learn_hosts = _read('learn_hosts')
    fence = _guarded('fence', lambda host: 'fencing of %s' % host)
    unfence = _guarded('unfence', lambda host: 'power-on of %s' % host)


#: Port methods that change nothing (everything else must be guarded).
READ_ONLY = {
    ports.CloudPort: frozenset({
        'snapshot', 'read_services', 'get_server', 'changed_servers',
        'migrations', 'action_errors', 'host_vcpus', 'host_resources',
        'server_actions',
        'stopped_servers', 'locked_servers'}),
    ports.Fencer: frozenset({'configured', 'power_state', 'learn_hosts'}),
}


def assemble(*, cloud: ports.CloudPort, clock: ports.Clock,
             fencer: ports.Fencer, coordinator: ports.Coordinator,
             events: ports.EventSink, executor: ports.Executor,
             kdump: ports.KdumpWatch | None = None,
             listeners: ports.ListenerFactory | None = None,
             pause: ports.PauseSource | None = None,
             announcements: shutdown.AnnouncementSource | None = None
             ) -> ports.Environment:
    """The engine's environment: the ports given, behind the guard.

    A guard is made from the coordinator, on the environment's clock (the
    one the lease is measured on). The cloud and the fencer are wrapped
    so that every side effect passes it (and, where the fencer supports
    it, each of its device operations); with ``announcements`` (the
    heartbeat detector) the fencer first proves an announced host off by
    reading its devices, never power-cycling it
    (:class:`instanceha.engine.shutdown.AnnouncedFencer`).
    """
    guard = LeaderGuard(coordinator, clock)
    if fencer.supports_device_guard:
        # On the fencer given, the one walking the levels: each device
        # operation passes the guard too.
        fencer.device_guard = guard.device_check
    if announcements is not None:
        fencer = shutdown.AnnouncedFencer(fencer, announcements)
    return ports.Environment(
        cloud=GuardedCloud(cloud, guard), clock=clock,
        fencer=GuardedFencer(fencer, guard), coordinator=coordinator,
        events=events, executor=executor, guard=guard, kdump=kdump,
        listeners=listeners, pause=pause, announcements=announcements)
