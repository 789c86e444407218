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

"""fence_kdump: a host writing a crash dump has failed.

Listens for the ``fence_kdump_send`` messages a kdump kernel sends (see
:mod:`instanceha.heartbeat.kdump`) and serves two readers:

* as a detector, a host whose last message is younger than
  ``[kdump] message_timeout`` is FAILED ("writing a crash dump"); other
  hosts get no evidence at all (kdump only ever confirms a failure, it
  never says a host is alive);
* as the engine's :class:`~instanceha.engine.ports.KdumpWatch`
  (``Environment.kdump``, set when ``[kdump] check_kdump`` is on), the
  recovery workflow asks :meth:`last_message`: it gives a failed host
  ``kdump_timeout`` for a first message, treats a dumping host as fenced
  without power-cycling it (that would lose the dump), and waits until
  the messages stop (older than ``message_timeout``) before it ends.

The same instance is both: use :func:`find_watch` on the loaded
detectors to get it.

fence_kdump messages are not authenticated: whoever can send UDP from a
host's address can make it look dumping. Keep the port on the management
network, prefer ``address_map`` to reverse DNS, and run the heartbeat
detector beside this one: a host that still heartbeats is ALIVE, which
vetoes this FAILED under ``[detection] combine = veto`` or ``all``.
"""

from collections.abc import Iterable
import datetime

from instanceha.conf import kdump as kdump_conf
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.heartbeat import listener as listener_mod
from instanceha.plugins.detectors import base
from instanceha.plugins.detectors import heartbeat


class KdumpDetector(base.Detector, ports.KdumpWatch):
    """Failed while the host sends fence_kdump messages."""

    description = ('fence_kdump messages (UDP 7410): a host writing a '
                   'crash dump is failed and must not be power-cycled')
    reports_failures_only = True
    supports_suspects = True
    supports_stats = True

    def __init__(self, conf, listener=None):
        super().__init__(conf)
        #: A KdumpListener; built by start() unless given (tests).
        self.listener = listener
        self._own_listener = listener is None

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {
            '[kdump] listen_addresses': 'addresses to listen on',
            '[kdump] port': 'UDP port to listen on (7410)',
            '[kdump] address_map': 'sender address -> host name',
            '[kdump] reverse_dns': 'fall back to reverse DNS',
            '[kdump] message_timeout': 'silence after which a host stopped '
                                       'dumping',
        }

    def validate(self) -> None:
        kdump_conf.address_map(self.conf)
        heartbeat.endpoints(self.conf.kdump.listen_addresses, 0,
                            '[kdump] listen_addresses')

    def start(self) -> None:
        if self.listener is not None and not self._own_listener:
            return
        group = self.conf.kdump
        factory = self.listeners or listener_mod.UdpListeners()
        self.listener = factory.kdump(
            heartbeat.endpoints(group.listen_addresses, group.port,
                                '[kdump] listen_addresses'),
            kdump_conf.address_map(self.conf), group.reverse_dns)
        heartbeat.start_listener(self.listener,
                                 '[kdump] listen_addresses/port')

    def stop(self) -> None:
        if self.listener is not None and self._own_listener:
            self.listener.stop()
            self.listener = None

    # -- KdumpWatch -------------------------------------------------------

    def last_message(self, host: str) -> datetime.datetime | None:
        """When ``host`` last sent a fence_kdump message; None if never."""
        return None if self.listener is None else self.listener.last_message(
            host)

    def is_dumping(self, host: str, now: datetime.datetime) -> bool:
        """Whether ``host`` sent a message within ``message_timeout``."""
        last = self.last_message(host)
        return last is not None and (now - last).total_seconds() <= (
            self.conf.kdump.message_timeout)

    def stats(self) -> dict:
        """Listener counters (accepted, rejected by reason) for metrics."""
        return self.listener.stats() if self.listener is not None else {}

    # -- Detector ---------------------------------------------------------

    def suspects(self, services, now) -> frozenset[str]:
        """Hosts writing a crash dump now."""
        if self.listener is None:
            return frozenset()
        return frozenset(s.host for s in services
                         if self.listener.record(s.host) is not None
                         and self.is_dumping(s.host, now))

    def detect(self, snapshot: model.Snapshot,
               now: datetime.datetime) -> dict[str, base.Evidence]:
        if self.listener is None:
            return {}
        hosts = [s.host for s in snapshot.services]
        self.listener.set_known_hosts(hosts)
        result = {}
        for host in hosts:
            rec = self.listener.record(host)
            if rec is None or not self.is_dumping(host, now):
                continue
            result[host] = base.Evidence(
                host, base.Verdict.FAILED,
                'kdump: writing a crash dump (%d fence_kdump message(s) from '
                '%s since %s, last %.0fs ago)' % (
                    rec.count, rec.address, rec.first.isoformat(),
                    (now - rec.last).total_seconds()))
        return result


def find_watch(detectors: Iterable) -> KdumpDetector | None:
    """The loaded kdump detector, for ``Environment.kdump``; None if off."""
    for det in detectors:
        if isinstance(det, KdumpDetector):
            return det
    return None
