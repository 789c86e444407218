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
``fence()`` raises, so the engine never evacuates it.

:meth:`Topology.reload` (SIGHUP) re-reads and re-checks the fencing file
and swaps it in whole, or refuses it and keeps the old one. A call in
progress keeps the file it started with to its end (a fence mid-chain
is never switched to other devices); the old file's devices are released
once no call uses them.
"""

import logging
import threading

from oslo_config import cfg

from instanceha.adapters import clock as clock_mod
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

    #: What :meth:`reload` re-reads (for the reload's messages).
    RELOADS = 'fencing file'
    supports_reload = True
    #: Each device operation of each level asks ``device_guard`` first
    #: (the engine's leadership guard installs itself there).
    supports_device_guard = True
    #: The options naming it: not changed live when the file is refused.
    OPTIONS = ('[fencing] config_file',)

    def __init__(self, conf: cfg.ConfigOpts, fencing: config.FencingFile,
                 clock: ports.Clock | None = None):
        self.conf = conf
        self.file = fencing
        #: Deadlines and the pause between retries; the devices were
        #: given the same clock by the factory that built them.
        self.clock = clock or clock_mod.SystemClock()
        self._fenced_by: dict[str, int] = {}
        #: The file and devices of the level that fenced each host: the
        #: level that powers it on again, even after a reload renumbered
        #: the levels.
        self._fenced_with: dict[str, tuple] = {}
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._ambiguous: set[str] = set()
        #: Builds the devices of a reloaded file (default: the installed
        #: drivers on ``clock``).
        self.devices: devices_mod.DeviceFactory | None = None
        #: Calls in progress per file (id), and files replaced by a
        #: reload whose devices are released when their last call ends.
        self._users: dict[int, int] = {}
        self._retired: dict[int, config.FencingFile] = {}

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
        topo = cls(conf, config.load(conf, strict=True, devices=devices),
                   clock=clock or devices.clock)
        topo.devices = devices
        return topo

    # -- reload ---------------------------------------------------------------

    def reload(self) -> str | None:
        """Re-read and re-check ``[fencing] config_file``; swap it in.

        Returns what changed (None: nothing). Calls in progress finish
        with the file they started with.

        :raises ConfigurationError: naming the file, host, level, device
            and key of the first bad entry; the file loaded before stays
            in force.
        """
        devices = self.devices or devices_mod.DeviceFactory(self.clock)
        new = config.load(self.conf, strict=True, devices=devices)
        with self._lock:
            old = self.file
            if old.nova_hosts is not None:
                new.learn_hosts(old.nova_hosts)
            self.file = new
            self._ambiguous.clear()
            # Released now, or by the last call still using it.
            in_use = bool(self._users.get(id(old)))
            if in_use:
                self._retired[id(old)] = old
        if not in_use:
            _stop_file(old)
        return describe_change(old, new)

    def _acquire(self) -> config.FencingFile:
        """The file in force, held until :meth:`_release`."""
        with self._lock:
            file = self.file
            self._users[id(file)] = self._users.get(id(file), 0) + 1
            return file

    def _release(self, file: config.FencingFile) -> None:
        with self._lock:
            left = self._users[id(file)] - 1
            if left:
                self._users[id(file)] = left
                return
            del self._users[id(file)]
            retired = self._retired.pop(id(file), None)
        if retired is not None:
            _stop_file(retired)

    # -- look-up ------------------------------------------------------------

    def _entry(self, host: str,
               file: config.FencingFile | None = None
               ) -> config.HostEntry | None:
        file = file or self.file
        key = file.find(host)
        return file.hosts.get(key) if key else None

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

    def levels(self, host: str, file: config.FencingFile | None = None
               ) -> list[list[base.FencingDriver]]:
        """The host's levels; raises FencingError if it has none."""
        file = file or self.file
        try:
            entry = self._entry(host, file)
        except exceptions.ConfigurationError as exc:
            raise exceptions.FencingError(str(exc)) from None
        if entry is None:
            raise exceptions.FencingError(
                'host %s has no entry in the fencing file %s: it cannot be '
                'fenced and is never evacuated' % (host, file.path))
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

    def _walk(self, host: str, action: str, order: list[int],
              levels: list[list[base.FencingDriver]]) -> ports.FenceResult:
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
            file = self._acquire()
            try:
                levels = self.levels(host, file)
                result = self._walk(host, 'off', list(range(
                    1, len(levels) + 1)), levels)
            finally:
                self._release(file)
            with self._lock:
                self._fenced_by[host] = result.level
                self._fenced_with[host] = (file, _signature(
                    levels[result.level - 1]))
            return result

    def unfence(self, host: str) -> ports.FenceResult:
        with self._host_lock(host):
            file = self._acquire()
            try:
                levels = self.levels(host, file)
                order = list(range(1, len(levels) + 1))
                with self._lock:
                    fenced_by = self._fenced_by.get(host)
                    fenced_in, fenced_with = self._fenced_with.get(
                        host, (None, None))
                if fenced_in is file:
                    same = [fenced_by]
                else:  # reloaded since: the same devices, if still there
                    same = [i for i, level in enumerate(levels, 1)
                            if _signature(level) == fenced_with]
                if same:
                    order = same[:1]
                elif fenced_with is not None:
                    LOG.info('host %s: the level that fenced it is no longer '
                             'in the fencing file (reloaded since); powering '
                             'on through the levels in order', host)
                else:
                    LOG.info('host %s: the level that fenced it is not known '
                             '(service restarted?); powering on through the '
                             'levels in order', host)
                result = self._walk(host, 'on', order, levels)
            finally:
                self._release(file)
            with self._lock:
                self._fenced_by.pop(host, None)
                self._fenced_with.pop(host, None)
            return result

    def power_state(self, host: str) -> ports.PowerReading:
        """What the host's devices report now, level by level (no change).

        Off is proven by a level whose every device reports off (one
        outlet of a dual-fed server proves nothing); a level whose every
        device reports on says the host may be running.
        """
        file = self._acquire()
        try:
            return self._power_state(host, file)
        finally:
            self._release(file)

    def _power_state(self, host: str,
                     file: config.FencingFile) -> ports.PowerReading:
        try:
            levels = self.levels(host, file)
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
            if all(st == 'off' for st in states) and not (
                    _counts(devices) and (seen_on or self._any_on(
                        host, levels[index:], said))):
                return ports.PowerReading(
                    host=host, off=True, detail='level %d reports off: %s'
                    % (index, ', '.join(said[-len(devices):])), level=index,
                    wait_left=_wait_left(devices))
            seen_on = seen_on or all(st == 'on' for st in states)
        return ports.PowerReading(host=host, off=False, on=seen_on,
                                  detail=', '.join(said))

    @staticmethod
    def _any_on(host: str, levels: list, said: list[str]) -> bool:
        """Whether a device of ``levels`` that can read power reads on."""
        for devices in levels:
            for drv in devices:
                if drv.counts_watchdogs:
                    continue
                try:
                    state = base.PowerState(drv.power_status(
                        timeout=drv.timeout)).value
                except Exception:  # a read proves nothing either way
                    continue
                said.append('%s %s' % (drv.device, state))
                if state == 'on':
                    return True
        return False

    def stop(self) -> None:
        """Release every driver's resources (sessions, temporary files)."""
        with self._lock:
            files = [self.file, *self._retired.values()]
            self._retired.clear()
        for file in files:
            _stop_file(file)

    def fenced_by(self, host: str) -> int | None:
        """The level that last fenced ``host`` (None if not known)."""
        with self._lock:
            return self._fenced_by.get(host)


def _stop_file(file: config.FencingFile) -> None:
    for entry in file.hosts.values():
        for level in entry.levels:
            for drv in level:
                try:
                    drv.stop()
                except Exception as exc:  # noqa: release the others
                    LOG.warning('host %s device %s: releasing it failed: %s',
                                drv.host, drv.device, drv.redact(str(exc)))


def _counts(level: list[base.FencingDriver]) -> bool:
    """Whether a level infers "off" from a count (a watchdog's deadline).

    Such a level observes nothing: a device of another level that reads
    the host on (someone powered it back on) outweighs it.
    """
    return any(drv.counts_watchdogs for drv in level)


def _wait_left(level: list[base.FencingDriver]) -> float | None:
    """The latest deadline of a level's deadline-based devices, if any.

    Read again with the reading, for the power proof to check itself.
    """
    waits = [drv.deadline_left() for drv in level if drv.counts_watchdogs]
    return max(waits) if waits else None


def _signature(level: list[base.FencingDriver]) -> tuple:
    """What a level acts on: its devices' drivers and targets."""
    return tuple((drv.name, drv.describe_target()) for drv in level)


def _settings(entry: config.HostEntry) -> tuple:
    return tuple(tuple((drv.name, sorted(drv.params.items(), key=str))
                       for drv in level) for level in entry.levels)


def describe_change(old: config.FencingFile,
                    new: config.FencingFile) -> str | None:
    """Hosts added, removed and changed between two files (no secret)."""
    added = sorted(set(new.hosts) - set(old.hosts))
    removed = sorted(set(old.hosts) - set(new.hosts))
    changed = sorted(h for h in set(old.hosts) & set(new.hosts)
                     if _settings(old.hosts[h]) != _settings(new.hosts[h]))
    if old.path != new.path:
        head = 'fencing file %s (was %s)' % (new.path, old.path)
    elif not (added or removed or changed):
        return None
    else:
        head = 'fencing file %s' % new.path
    parts = ['%d host(s)' % len(new.hosts)]
    for what, hosts in (('added', added), ('removed', removed),
                        ('changed', changed)):
        if hosts:
            parts.append('%s: %s' % (what, ', '.join(hosts)))
    return '%s reloaded: %s' % (head, '; '.join(parts))
