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

"""What every driver of every kind has in common.

Modelled on Ironic's driver interfaces: a driver describes itself in one
line (for ``instanceha-manage drivers list``), lists the settings it reads
(``get_properties``) and checks them at start-up (``validate``), so a bad
setting is a clear error before anything fails, not during an outage.
"""

import abc

from oslo_config import cfg


class Driver(abc.ABC):
    """Base class of every instanceha driver."""

    #: Entry-point name; set by the loader, usable in log lines.
    name: str = ''
    #: One line a human can read in a listing.
    description: str = ''
    #: True for a driver that re-reads something on a live reload
    #: (SIGHUP): :meth:`reload` is then called; ``RELOADS`` names what it
    #: re-reads, for the reload's messages, and ``OPTIONS`` the options
    #: (``[group] name``) saying where it is (not reported as changed
    #: live when the new one is refused).
    supports_reload: bool = False
    RELOADS: str = ''
    OPTIONS: tuple[str, ...] = ()

    def __init__(self, conf: cfg.ConfigOpts):
        self.conf = conf

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        """Settings this driver reads, mapped to a description of each."""
        return {}

    def validate(self) -> None:
        """Check this driver's configuration.

        :raises instanceha.exceptions.ConfigurationError: naming the
            option (or per-host parameter) and what is wrong with it.
        """

    def start(self) -> None:
        """Acquire long-lived resources (sockets, sessions) after validate."""

    def stop(self) -> None:
        """Release what start() acquired; must be safe to call twice."""

    def reload(self) -> str | None:
        """Re-read what ``RELOADS`` names (only if :attr:`supports_reload`).

        Returns what changed, for the log (None: nothing to say).

        :raises instanceha.exceptions.ConfigurationError: the new one is
            refused; the one loaded before stays in force.
        """
        return None

    def __repr__(self) -> str:
        return '<%s %s>' % (type(self).__name__, self.name or '?')
