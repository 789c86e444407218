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
import concurrent.futures
import dataclasses
import datetime

from instanceha.engine import model


class CloudPort(abc.ABC):
    """Nova, as the engine needs it.

    Every method raises :class:`instanceha.exceptions.CloudError` (with
    Nova's request id where there is one) when the cloud refuses or fails.
    """

    @abc.abstractmethod
    def snapshot(self, *, images: bool = False,
                 migrations_since: datetime.datetime | None = None
                 ) -> model.Snapshot:
        """Read the cloud in a number of calls that does not grow with it.

        :param images: also read the images the servers use (for image
            tag filters).
        :param migrations_since: also read evacuation records newer than
            this.
        """

    @abc.abstractmethod
    def update_service(self, service: model.Service, *,
                       status: str | None = None,
                       disabled_reason: str | None = None,
                       forced_down: bool | None = None) -> model.Service:
        """Change a compute service; returns it as Nova now reports it."""

    @abc.abstractmethod
    def evacuate(self, server_id: str, *, host: str | None = None) -> None:
        """Ask Nova to rebuild the server elsewhere (on ``host`` if given)."""

    @abc.abstractmethod
    def get_server(self, server_id: str) -> model.Server:
        """One server as Nova reports it now."""

    @abc.abstractmethod
    def migrations(self, *, server_id: str | None = None,
                   source_host: str | None = None,
                   since: datetime.datetime | None = None
                   ) -> list[model.Migration]:
        """Evacuation records, newest first."""

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


class Fencer(abc.ABC):
    """Fences and unfences hosts through their configured devices."""

    @abc.abstractmethod
    def configured(self, host: str) -> bool:
        """Whether the host has a usable fencing configuration (R9)."""

    @abc.abstractmethod
    def fence(self, host: str) -> FenceResult:
        """Power the host off and confirm it; walks the fencing levels.

        :raises instanceha.exceptions.FencingError: when no level proved
            the host off.
        """

    @abc.abstractmethod
    def unfence(self, host: str) -> FenceResult:
        """Power the host back on through the level that fenced it."""


class Coordinator(abc.ABC):
    """Leader election and per-host locks (R14)."""

    @abc.abstractmethod
    def is_leader(self) -> bool:
        """True only while this copy holds leadership *now*.

        Checked before every destructive step; must be cheap.
        """

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


class KdumpWatch(abc.ABC):
    """What the fence_kdump listener heard (R8)."""

    @abc.abstractmethod
    def last_message(self, host: str) -> datetime.datetime | None:
        """When ``host`` last sent a kdump message; None if never."""


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
