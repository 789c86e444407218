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

This module holds the interfaces and the values that cross them, nothing
else: the leadership guard and the power proof that wrap the cloud and
the fencer are :mod:`instanceha.engine.guard`; the environment is put
together by :func:`instanceha.engine.guard.assemble`, which both the
service and the simulator call.
"""

import abc
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import concurrent.futures
import dataclasses
import datetime
import math
from typing import Any

from instanceha.engine import model


class CloudPort(abc.ABC):
    """Nova, as the engine needs it.

    Every method raises :class:`instanceha.exceptions.CloudError` (with
    Nova's request id where there is one) when the cloud refuses or fails.
    """

    @abc.abstractmethod
    def snapshot(self, *, images: bool = False,
                 migrations_since: datetime.datetime | None = None,
                 hosts: model.HostSelector | None = None,
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

    @abc.abstractmethod
    def read_services(self) -> model.Snapshot:
        """Only the nova-compute services, in one small call.

        Read often between two full snapshots (see
        :mod:`instanceha.engine.watch`); a snapshot with no servers and no
        aggregates.
        """

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

    @abc.abstractmethod
    def changed_servers(self, since: datetime.datetime
                        ) -> tuple[model.Server, ...]:
        """Every server Nova changed since ``since`` (our clock), in bulk.

        One listing confirms the rebuilds that ended in a step, instead of
        one read per instance; a server missing from it is read alone.
        """

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
        """Host -> its vCPUs (of :meth:`host_resources`); None: unknown."""
        found = self.host_resources()
        return None if found is None else {
            h: v for h, r in found.items() if (v := r.vcpus()) is not None}

    def host_resources(self) -> Mapping[str, model.HostResources] | None:
        """Host -> its room as Placement counts it; None (default): unknown."""
        return None

    # -- instance failures (crashed guests) -------------------------------

    @abc.abstractmethod
    def start_server(self, server_id: str) -> None:
        """Power a stopped server on (Nova's ``os-start``)."""

    @abc.abstractmethod
    def server_actions(self, server_id: str
                       ) -> list[model.InstanceAction]:
        """The server's instance actions, newest first."""

    @abc.abstractmethod
    def stopped_servers(self, since: datetime.datetime | None = None
                        ) -> tuple[model.Server, ...]:
        """The servers the instance failure loop watches, in bulk.

        Without ``since``: every server of the cloud that is SHUTOFF or
        VERIFY_RESIZE (not the running majority). With ``since`` (our
        clock): what changed since then, to update such a listing: every
        server Nova changed since ``since`` whatever its status, deleted
        ones included with the status ``DELETED`` (Nova's
        ``changes-since``).
        """

    @abc.abstractmethod
    def locked_servers(self) -> tuple[model.Server, ...]:
        """Every locked server of the cloud, with its lock reason.

        Read rarely (see :mod:`instanceha.engine.locks`): when a copy
        gains leadership and when an operator takes a host.
        """

    #: Calls made to the cloud so far (for benchmarks and tests).
    api_calls: int = 0
    #: Writes of compute services made through this port so far, counted
    #: once each has ended whatever its outcome (the guarded cloud counts
    #: them): a read begun after the count moved shows them (see
    #: :mod:`instanceha.engine.watch`).
    service_writes: int = 0


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
    #: usual :data:`instanceha.engine.guard.PROOF_TTL` (a crash dump's
    #: message proves less: see :data:`instanceha.engine.guard.KDUMP_FRESH`).
    valid_for: float | None = None
    #: Seconds left to a watchdog level's deadline (> 0: no proof yet).
    wait_left: float | None = None


class Fencer(abc.ABC):
    """Fences and unfences hosts through their configured devices."""

    #: True for a fencer that asks :attr:`device_guard` before each device
    #: operation of each level (a fencing topology), so that a chain
    #: walking to its next level stops the moment leadership is lost.
    supports_device_guard: bool = False
    #: Set by whoever assembles the environment when
    #: :attr:`supports_device_guard`: called with (host, device, action)
    #: before each device operation; returns the seconds it may take, or
    #: raises when it must not happen.
    device_guard: Callable[[str, str, str], float] | None = None
    #: True for a fencer that re-reads its configuration on a live reload
    #: (its ``reload()``, ``RELOADS`` and ``OPTIONS``, as a driver's).
    supports_reload: bool = False

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

    def learn_hosts(self, hosts: Iterable[str]) -> None:
        """Nova's host names, as the engine read them just now.

        A fencer matching configured keys against host names (a short
        key naming two hosts serves neither) learns them here. This
        default needs none.
        """


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


class Guard(abc.ABC):
    """What the engine asks of the gate every side effect passes.

    :class:`instanceha.engine.guard.LeaderGuard` is that gate.
    """

    @abc.abstractmethod
    def check(self, what: str) -> float:
        """Seconds ``what`` may take; raises when it must not happen.

        :raises instanceha.exceptions.CoordinationError: this copy is
            not the leader now, or is stopping.
        """

    @abc.abstractmethod
    def halt(self, why: str) -> None:
        """Refuse every side effect from now on (a stopping copy)."""

    @property
    @abc.abstractmethod
    def halted(self) -> bool:
        """Whether :meth:`halt` was called."""


@dataclasses.dataclass
class Environment:
    """Everything the engine may use, bundled.

    Made by :func:`instanceha.engine.guard.assemble`, which wraps the
    cloud and the fencer so that every side effect passes the guard.
    """

    cloud: CloudPort
    clock: Clock
    fencer: Fencer
    coordinator: Coordinator
    events: EventSink
    executor: Executor
    guard: Guard
    #: Set when kdump checking is on.
    kdump: KdumpWatch | None = None
    #: Where detectors get their listeners (None: they need none).
    listeners: ListenerFactory | None = None
    #: Where an operator's pause is read (None: instance HA never paused).
    pause: PauseSource | None = None
    #: Who heard the hosts' shutdown announcements (the heartbeat
    #: detector; None: no host can announce one).
    announcements: Any = None
