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

"""Fencing drivers power one host's device off and on, with proof (R16)."""

import abc
from collections.abc import Mapping
import enum
from typing import Any

from oslo_config import cfg

from instanceha.plugins import base


class PowerState(str, enum.Enum):
    ON = 'on'
    OFF = 'off'
    UNKNOWN = 'unknown'


class FencingDriver(base.Driver):
    """One fencing device of one host.

    Unlike the other kinds, a fencing driver is built per host and device
    from that host's entry in the fencing file; ``validate()`` checks
    those parameters (see ``get_properties()``) without touching the
    device.
    """

    def __init__(self, conf: cfg.ConfigOpts, host: str,
                 params: Mapping[str, Any]):
        super().__init__(conf)
        self.host = host
        self.params = dict(params)

    @abc.abstractmethod
    def power_off(self) -> None:
        """Power off and return only once the device reports off.

        :raises instanceha.exceptions.FencingError: naming the host and
            device, never a secret.
        """

    @abc.abstractmethod
    def power_on(self) -> None:
        """Power on and return once the device reports on."""

    @abc.abstractmethod
    def power_status(self) -> PowerState:
        """The power state the device reports now."""
