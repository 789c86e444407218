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

"""Fencing chains: Pacemaker's fencing topology as the engine's Fencer.

A host has ordered levels; each level is one or more devices that must
all succeed (both outlets of a dual-fed server's PDUs). Levels are tried
in order until one proves the host off. Every device attempt is bounded
by the device's timeout and retried on failures that may be transient;
the whole chain is bounded by ``[fencing] chain_timeout``. Unfencing
powers the host on through the level that fenced it (or, after a restart
of the service that forgot it, through the levels in order).

A host without an entry is never fenced: ``configured()`` is False and
``fence()`` raises, so the engine never evacuates it (R9).
"""

import logging
import threading

from oslo_config import cfg

from instanceha import clock as clock_mod
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import devices as devices_mod

LOG = logging.getLogger(__name__)


class ChainError(exceptions.FencingError):
    """No level of a host's chain succeeded; ``failures`` says why."""

    def __init__(self, message: str, failures: list[str]):
        super().__init__(message)
        self.failures = failures


class Topology(ports.Fencer):
    """Fences hosts through the levels of the fencing file."""

    def __init__(self, conf: cfg.ConfigOpts, fencing: config.FencingFile,
                 clock: ports.Clock | None = None):
        self.conf = conf
        self.file = fencing
        #: Deadlines and the pause between retries; the devices were
        #: given the same clock by the factory that built them.
        self.clock = clock or clock_mod.SystemClock()
        self._fenced_by: dict[str, int] = {}
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._ambiguous: set[str] = set()
        #: Called before each device operation as ``(host, device,
        #: action)``; returns the seconds it may take or raises (the
        #: engine's leadership guard installs itself here).
        self.device_guard = None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  clock: ports.Clock | None = None,
                  devices: devices_mod.DeviceFactory | None = None
                  ) -> 'Topology':
        """Load and validate every entry of ``[fencing] config_file``.

        :param clock: the environment's clock (default: the wall clock).
        :param devices: builds the devices (default: the installed
            drivers, on ``clock``).
        :raises ConfigurationError: naming the file, host and key of the
            first bad entry, so the service fails fast.
        """
        devices = devices or devices_mod.DeviceFactory(clock)
        return cls(conf, config.load(conf, strict=True, devices=devices),
                   clock=clock or devices.clock)

    # -- look-up ------------------------------------------------------------

    def _entry(self, host: str) -> config.HostEntry | None:
        key = self.file.find(host)
        return self.file.hosts.get(key) if key else None

    def learn_hosts(self, hosts) -> None:
        """Nova's compute host names: a key naming two is ambiguous."""
        self.file.learn_hosts(hosts)

    def configured(self, host: str) -> bool:
        try:
            return self._entry(host) is not None
        except exceptions.ConfigurationError as exc:
            # Asked every tick: say it once per host.
            with self._lock:
                first = host not in self._ambiguous
                self._ambiguous.add(host)
            if first:
                LOG.error('%s; host %s is not fenced and never evacuated',
                          exc, host)
            return False

    def levels(self, host: str) -> list[list[base.FencingDriver]]:
        """The host's levels; raises FencingError if it has none."""
        try:
            entry = self._entry(host)
        except exceptions.ConfigurationError as exc:
            raise exceptions.FencingError(str(exc)) from None
        if entry is None:
            raise exceptions.FencingError(
                'host %s has no entry in the fencing file %s: it cannot be '
                'fenced and is never evacuated' % (host, self.file.path))
        return entry.levels

    def _host_lock(self, host: str) -> threading.Lock:
        with self._lock:
            return self._host_locks.setdefault(host, threading.Lock())

    # -- the chain ----------------------------------------------------------

    def _attempt(self, drv: base.FencingDriver, action: str,
                 deadline: float) -> None:
        """One device, with its retries, within the chain's deadline."""
        retries = drv.params.get('retries')
        if retries is None:
            retries = self.conf.fencing.device_retries
        attempt = 0
        while True:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise base.DeviceTimeoutError(
                    drv, 'chain timeout ([fencing] chain_timeout = %ds) '
                    'reached before power %s' % (
                        self.conf.fencing.chain_timeout, action))
            if self.device_guard is not None:
                left = min(left, self.device_guard(drv.host, drv.device,
                                                   action))
            try:
                if action == 'off':
                    drv.power_off(timeout=min(drv.timeout, left))
                else:
                    drv.power_on(timeout=min(drv.timeout, left))
                return
            except base.DeviceError as exc:
                if not exc.retryable or attempt >= retries:
                    raise
                attempt += 1
                LOG.warning('%s; retrying (%d of %d)', exc, attempt,
                            retries)
                self.clock.sleep(min(
                    self.conf.fencing.poll_interval,
                    max(0.0, deadline - self.clock.monotonic())))
            except exceptions.FencingError:
                raise
            except Exception as exc:
                # A driver bug must not look like success, nor crash the
                # worker without naming the device.
                LOG.exception('host %s device %s: unexpected error',
                              drv.host, drv.device)
                raise base.DeviceError(drv, 'unexpected %s: %s' % (
                    type(exc).__name__, exc)) from None

    def _run_level(self, host: str, index: int,
                   devices: list[base.FencingDriver], action: str,
                   deadline: float) -> ports.FenceResult:
        for drv in devices:
            self._attempt(drv, action, deadline)
        return ports.FenceResult(host=host, level=index, devices=tuple(
            d.device for d in devices))

    def _walk(self, host: str, action: str,
              order: list[int]) -> ports.FenceResult:
        levels = self.levels(host)
        deadline = self.clock.monotonic() + self.conf.fencing.chain_timeout
        failures: list[str] = []
        for index in order:
            devices = levels[index - 1]
            names = ', '.join(d.device for d in devices)
            try:
                result = self._run_level(host, index, devices, action,
                                         deadline)
            except exceptions.FencingError as exc:
                failures.append('level %d (%s): %s' % (index, names, exc))
                LOG.warning('host %s: fencing level %d (%s) failed to power '
                            '%s: %s', host, index, names, action, exc)
                continue
            LOG.info('host %s powered %s by fencing level %d (%s)', host,
                     action, index, names)
            return result
        raise ChainError('host %s: no fencing level powered it %s (%d '
                         'tried): %s' % (host, action, len(failures),
                                         ' | '.join(failures)), failures)

    def fence(self, host: str) -> ports.FenceResult:
        with self._host_lock(host):
            levels = self.levels(host)
            result = self._walk(host, 'off', list(range(1, len(levels) + 1)))
            with self._lock:
                self._fenced_by[host] = result.level
            return result

    def unfence(self, host: str) -> ports.FenceResult:
        with self._host_lock(host):
            levels = self.levels(host)
            order = list(range(1, len(levels) + 1))
            with self._lock:
                fenced_by = self._fenced_by.get(host)
            if fenced_by is not None and fenced_by <= len(levels):
                order = [fenced_by]
            else:
                LOG.info('host %s: the level that fenced it is not known '
                         '(service restarted?); powering on through the '
                         'levels in order', host)
            result = self._walk(host, 'on', order)
            with self._lock:
                self._fenced_by.pop(host, None)
            return result

    def power_state(self, host: str) -> ports.PowerReading:
        """What the host's devices report now, level by level (no change).

        Off is proven by a level whose every device reports off (one
        outlet of a dual-fed server proves nothing); a level whose every
        device reports on says the host may be running.
        """
        try:
            levels = self.levels(host)
        except exceptions.FencingError as exc:
            return ports.PowerReading(host=host, off=False, detail=str(exc))
        said: list[str] = []
        seen_on = False
        for index, devices in enumerate(levels, 1):
            states = []
            for drv in devices:
                try:
                    state = base.PowerState(drv.power_status(
                        timeout=drv.timeout)).value
                except Exception as exc:  # a read proves nothing
                    state = 'unreadable (%s)' % exc
                said.append('%s %s' % (drv.device, state))
                states.append(state)
            if all(st == 'off' for st in states):
                return ports.PowerReading(
                    host=host, off=True, detail='level %d reports off: %s'
                    % (index, ', '.join(said[-len(devices):])))
            seen_on = seen_on or all(st == 'on' for st in states)
        return ports.PowerReading(host=host, off=False, on=seen_on,
                                  detail=', '.join(said))

    def stop(self) -> None:
        """Release every driver's resources (sessions, temporary files)."""
        for entry in self.file.hosts.values():
            for level in entry.levels:
                for drv in level:
                    drv.stop()

    def fenced_by(self, host: str) -> int | None:
        """The level that last fenced ``host`` (None if not known)."""
        with self._lock:
            return self._fenced_by.get(host)
