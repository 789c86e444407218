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

"""The heartbeat agent that runs on each compute host.

It signs one packet per interval (see :mod:`protocol`) and sends the same
packet to every collector. It keeps no state on disk: each start picks a
new boot id. Sending never blocks on a collector and a failing collector
never stops the others.
"""

from collections.abc import Callable, Iterable
import logging
import socket
import threading
import time

from instanceha.heartbeat import keys as keys_mod
from instanceha.heartbeat import protocol

LOG = logging.getLogger(__name__)

DEFAULT_PORT = 7411
#: Collector names are resolved again this often (DNS may change).
_RESOLVE_EVERY = 300.0


def parse_endpoint(text: str, default_port: int) -> tuple[str, int]:
    """'host', 'host:port', '[v6]:port' or a bare IPv6 address.

    :raises ValueError: naming the text when it cannot be parsed.
    """
    text = text.strip()
    host, port = text, default_port
    if text.startswith('['):
        end = text.find(']')
        if end < 0 or (text[end + 1:] and not text[end + 1:].startswith(':')):
            raise ValueError('bad address %r' % text)
        host = text[1:end]
        if text[end + 1:]:
            port = text[end + 2:]
    elif text.count(':') == 1:
        host, port = text.split(':')
    try:
        port = int(port)
    except ValueError:
        raise ValueError('bad port in address %r' % text) from None
    if not host or not 0 <= port <= 65535:
        raise ValueError('bad address %r' % text)
    return host, port


class Agent:
    """Sends signed heartbeats for ``host`` to ``collectors``.

    :param keyring: the current key signs; its file is re-read when it
        changes, so rotating the key needs no restart.
    """

    def __init__(self, host: str, keyring: keys_mod.KeyRing,
                 collectors: Iterable[tuple[str, int]], interval: float,
                 wall: Callable[[], float] = time.time):
        protocol.check_host_name(host)
        self.host = host
        self.keyring = keyring
        self.collectors = list(collectors)
        self.interval = interval
        self._wall = wall
        self.boot_id = protocol.new_boot_id()
        self.sequence = 0
        self.sent = 0
        self.errors = 0
        self._targets: list[tuple[int, tuple]] = []
        self._resolved_at: float | None = None
        self._sockets: dict[int, socket.socket] = {}
        self._last_error: dict[str, str] = {}
        self._stop = threading.Event()

    def _resolve(self) -> None:
        targets = []
        for host, port in self.collectors:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
            except OSError as exc:
                self._error('%s:%d' % (host, port), 'cannot resolve: %s' % exc)
                continue
            # One address per collector: the first the resolver prefers.
            family, _, _, _, sockaddr = infos[0]
            targets.append((family, sockaddr))
        self._targets = targets
        self._resolved_at = time.monotonic()

    def _socket(self, family: int) -> socket.socket:
        sock = self._sockets.get(family)
        if sock is None:
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            self._sockets[family] = sock
        return sock

    def _error(self, target: str, message: str) -> None:
        self.errors += 1
        if self._last_error.get(target) != message:
            # Log a problem when it starts or changes, not every beat.
            self._last_error[target] = message
            LOG.warning('heartbeat to %s: %s', target, message)

    def packet(self) -> bytes:
        """The next packet (advances the sequence)."""
        self.keyring.reload()
        self.sequence += 1
        return protocol.encode(self.host, self.boot_id, self.sequence,
                               self._wall(), self.keyring.keys[0])

    def beat(self) -> bytes:
        """Send one heartbeat to every collector; return the packet."""
        if (self._resolved_at is None or not self._targets
                or time.monotonic() - self._resolved_at > _RESOLVE_EVERY):
            self._resolve()
        data = self.packet()
        for family, sockaddr in self._targets:
            target = '[%s]:%d' % sockaddr[:2]
            try:
                self._socket(family).sendto(data, sockaddr)
            except OSError as exc:
                self._error(target, str(exc))
                continue
            self.sent += 1
            if self._last_error.pop(target, None):
                LOG.info('heartbeat to %s: sending again', target)
        LOG.debug('heartbeat %d of host %s sent to %d collector(s)',
                  self.sequence, self.host, len(self._targets))
        return data

    def run(self, count: int = 0) -> None:
        """Beat every interval until :meth:`stop` (or ``count`` beats)."""
        LOG.info('sending heartbeats for host %s every %.1f s to %s', self.host,
                 self.interval, ', '.join('%s:%d' % c for c in self.collectors))
        beats = 0
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.beat()
            beats += 1
            if count and beats >= count:
                break
            deadline += self.interval
            # Catch up without a burst after a long stall (suspend).
            deadline = max(deadline, time.monotonic())
            self._stop.wait(deadline - time.monotonic())
        self.close()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets = {}
