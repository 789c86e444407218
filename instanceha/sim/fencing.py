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

"""Simulated fencing devices, and the device factory that provides them.

The simulator hands the production fencing topology a
:class:`SimDeviceFactory`: it builds a ``driver: sim`` entry of a
scenario's fencing file as a :class:`SimFencing` device bound to that
scenario's world, and every other driver (noop, a third-party one) from
the installed entry points -- all of them on simulated time. The
``sim`` driver is deliberately not an entry point of the production
``instanceha.fencing`` namespace: outside a simulation there is no world
for it, and a real fencing file naming it is refused at load time.

Only the device is simulated: the base class does the polling and the
timing, the topology does levels, retries and the chain timeout, exactly
as with ipmi or redfish.

A device of any other driver (built-in or third-party) in a scenario's
fencing file is simulated too: its driver checks its parameters as in
production (``PARAMS`` and its own ``validate()``), and its power changes
act on a simulated device of the world -- the one named by ``simulate:
DEVICE``, by default the host's own BMC (named after the host). A
scenario never reaches real hardware, whatever its fencing file says.
The simulator simulates devices, not protocols; the driver's own
conversation with its hardware is what the fencing contract kit
(:mod:`instanceha.testing.fencing_contract`) tests.
"""

from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

from instanceha.engine import ports
from instanceha.engine import watchdogs as watchdogs_mod
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import devices
from instanceha.sim import world as sim_world

#: The scenario fencing file's name for a simulated device.
DRIVER = 'sim'
#: Key that makes a device of another driver act on a simulated device.
SIMULATE = 'simulate'

_ERRORS = {
    'timeout': base.DeviceTimeoutError,
    'unreachable': base.UnreachableError,
    'error': base.DeviceError,
    'auth': base.AuthError,
}


class SimFencing(base.FencingDriver):
    """A simulated BMC or PDU outlet of one world."""

    name = DRIVER
    description = ('A simulated BMC or PDU outlet; only exists inside '
                   'instanceha-simulate.')

    PARAMS = {
        'target': base.Param('Name of the simulated device in the scenario '
                             'topology (default: the host name, i.e. the '
                             'host\'s own BMC)'),
    }

    def __init__(self, conf: cfg.ConfigOpts, host: str,
                 params: Mapping[str, Any], device: str | None = None, *,
                 world: sim_world.World):
        super().__init__(conf, host, params, device=device)
        self.world = world

    @property
    def target(self) -> str:
        return str(self.params.get('target') or self.host)

    def describe_target(self) -> str:
        return 'simulated %s' % self.target

    def validate(self) -> None:
        super().validate()
        if self.target not in self.world.devices:
            self._fail('parameter \'target\': no simulated device %r; the '
                       'topology has: %s' % (self.target, ', '.join(
                           sorted(self.world.devices))))

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except sim_world.DeviceFault as fault:
            raise _ERRORS[fault.kind](self, str(fault)) from None

    def _request_power(self, state: base.PowerState,
                       deadline: float) -> None:
        self._call(self.world.device_request, self.target, state.value,
                   self.remaining(deadline))

    def _read_power(self, deadline: float) -> base.PowerState:
        return base.PowerState(self._call(
            self.world.device_read, self.target, self.remaining(deadline)))

    #: A simulated device reports the conditions the timeline gives it.
    supports_health = True

    def health(self, timeout: float | None = None) -> tuple:
        return self._call(self.world.device_health, self.target,
                          self.remaining(self._deadline(timeout)))


class SimulatedDevice(SimFencing):
    """A device of another driver, checked by it, powered in the world."""

    def __init__(self, real: base.FencingDriver, target: str,
                 world: sim_world.World):
        super().__init__(real.conf, real.host, {'target': target},
                         device=real.device, world=world)
        self.real = real
        self.clock = real.clock
        # Health as the real driver can tell it (Redfish can, IPMI not).
        self.supports_health = real.supports_health

    def describe_target(self) -> str:
        return 'simulated %s' % self.target

    def validate(self) -> None:
        # The driver's own checks, exactly as in production.
        self.real.name = self.name
        self.real.validate()
        self.params = dict(self.real.params, target=self.params['target'])
        self._secrets = list(self.real._secrets)
        if self.target not in self.world.devices:
            self._fail('%s: no simulated device %r; the topology has: %s'
                       % (SIMULATE, self.target,
                          ', '.join(sorted(self.world.devices))))


class SimDeviceFactory(devices.DeviceFactory):
    """Simulated devices of ``world`` plus the installed drivers.

    Every device it builds runs on the world's simulated clock, so a
    third-party driver that polls and sleeps through ``self.clock`` takes
    simulated, not wall, time.
    """

    def __init__(self, world: sim_world.World,
                 clock: ports.Clock | None = None,
                 watchdogs: watchdogs_mod.WatchdogWatch | None = None):
        super().__init__(clock or world.clock, watchdogs)
        self.world = world

    def driver_class(self, name: str, option: str) -> type[base.FencingDriver]:
        if name == DRIVER:
            return SimFencing
        return super().driver_class(name, option)

    def create(self, cls: type[base.FencingDriver], conf: cfg.ConfigOpts,
               host: str, params: Mapping[str, Any],
               device: str) -> base.FencingDriver:
        if cls.counts_watchdogs:
            # Nothing to simulate: it reads what the copy's heartbeat
            # listener heard of the world's agents, as in production.
            return _checked(super().create(cls, conf, host, params, device),
                            self.world)
        if not issubclass(cls, SimFencing):
            params = dict(params)
            target = str(params.pop(SIMULATE, None) or host)
            return SimulatedDevice(
                super().create(cls, conf, host, params, device), target,
                self.world)
        drv = cls(conf, host, params, device=device, world=self.world)
        drv.clock = self.clock
        return drv


def _checked(drv: base.FencingDriver,
             world: sim_world.World) -> base.FencingDriver:
    """A level that counts watchdogs, checked against the truth.

    Whenever it reads a host off, the host must really be off or reset by
    its watchdog since its agent last heard the service: a partitioned
    host whose watchdog did not fire is never counted fenced.
    """
    read = drv._read_power

    def checked(deadline: float) -> base.PowerState:
        state = read(deadline)
        if state == base.PowerState.OFF:
            world.check_self_fenced(drv.host)
        return state
    drv._read_power = checked
    return drv
