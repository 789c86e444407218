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

"""The device factory: how the fencing file's ``driver:`` names become devices.

The fencing topology never finds a driver class or a clock by itself; it
is handed a factory. The production factory takes the classes from the
``instanceha.fencing`` entry points and gives every device the clock of
the environment. The simulator hands the topology its own factory (see
:mod:`instanceha.sim.fencing`), which adds simulated devices and gives
every device -- built-in or third-party -- simulated time. Nothing is
patched and no device reaches for a global.
"""

from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

from instanceha.adapters import clock as clock_mod
from instanceha.engine import ports
from instanceha.engine import watchdogs as watchdogs_mod
from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins import loader

NAMESPACE = 'instanceha.fencing'


class DeviceFactory:
    """Builds fencing devices by driver name, on the given clock."""

    def __init__(self, clock: ports.Clock | None = None,
                 watchdogs: watchdogs_mod.WatchdogWatch | None = None):
        self.clock = clock or clock_mod.SystemClock()
        #: Given to the devices that declare ``counts_watchdogs`` (the
        #: heartbeat detector; None: none configured).
        self.watchdogs = watchdogs

    def driver_class(self, name: str, option: str) -> type[base.FencingDriver]:
        """The class the fencing file's ``driver: name`` means.

        :param option: where the name was written (file, host, level,
            device), for the error message.
        :raises DriverLoadError: for an unknown or broken driver, listing
            the installed ones.
        """
        try:
            return loader.driver_class(NAMESPACE, name, option)
        except exceptions.DriverLoadError as exc:
            if name != 'sim':
                raise
            # Scenario fencing files use it; say why it is not here.
            raise exceptions.DriverLoadError(
                '%s; the sim fencing driver only works inside '
                'instanceha-simulate (simulated devices of a scenario)'
                % exc) from None

    def create(self, cls: type[base.FencingDriver], conf: cfg.ConfigOpts,
               host: str, params: Mapping[str, Any],
               device: str) -> base.FencingDriver:
        """One device of one host, not yet validated, on this clock."""
        drv = cls(conf, host, params, device=device)
        drv.clock = self.clock
        if cls.counts_watchdogs:
            drv.watchdogs = self.watchdogs
        return drv
