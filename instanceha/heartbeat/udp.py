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

"""One UDP listener thread: sockets, a selector, bounded rejection logs.

The heartbeat and fence_kdump listeners (:mod:`instanceha.heartbeat.
listener`) each run one :class:`UdpListener` around a ``handle(data,
address)`` method of their own. It binds every configured address (IPv4
and IPv6), reads bursts from each socket in turn, and never lets a
sender stop the thread: a datagram the handler chokes on is counted as
``internal_error`` and logged at a bounded rate (:class:`RejectLog`).
"""

from collections.abc import Callable, Iterable
import functools
import ipaddress
import logging
import selectors
import socket
import threading
import time

LOG = logging.getLogger(__name__)

#: Datagrams read from one socket before looking at the others.
_BURST = 256
#: Kernel receive buffer asked for, so bursts are not dropped.
_RCVBUF = 4 * 1024 * 1024
INTERNAL_ERROR = 'internal_error'


def normalize_address(address: str) -> str:
    """Canonical text of an IP address (IPv4-mapped IPv6 becomes IPv4).

    :raises ValueError: if it is not an IP address.
    """
    ip = ipaddress.ip_address(address.split('%', 1)[0])
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip)


class RejectLog:
    """Counts rejected packets by reason and logs them at a bounded rate.

    Each reason is logged at most once per ``interval`` seconds, with how
    many were not logged since: a flood cannot flood the log.
    """

    def __init__(self, what: str, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 quiet: Iterable[str] = ()):
        self.what = what
        #: Reasons counted but logged at debug level only.
        self.quiet = frozenset(quiet)
        self.interval = interval
        self._clock = clock
        self.counts: dict[str, int] = {}
        self._last_logged: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def reject(self, reason: str, sender: str, detail: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if reason in self.quiet:
            LOG.debug('%s: rejected a packet from %s: %s: %s', self.what,
                      sender, reason, detail)
            return
        now = self._clock()
        last = self._last_logged.get(reason)
        if last is not None and now - last < self.interval:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return
        self._last_logged[reason] = now
        hidden = self._suppressed.pop(reason, 0)
        LOG.warning('%s: rejected a packet from %s: %s: %s%s', self.what,
                    sender, reason, detail,
                    ' (%d more %s packets since the last such message)'
                    % (hidden, reason) if hidden else '')

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class UdpListener:
    """A thread reading datagrams from a set of UDP sockets.

    :param endpoints: (address, port) pairs to bind; port 0 picks a free
        port (see :attr:`addresses` once started).
    :param handle: called with (datagram, sender address) for each one.
    :param housekeeping: called about every ``housekeeping_interval``
        seconds in the same thread (key reloads).
    :param replies: ``handle`` also gets a third argument, a function
        sending a datagram back to the sender from the socket it came in
        on (answers to shutdown announcements).
    """

    def __init__(self, name: str, endpoints: Iterable[tuple[str, int]],
                 handle: Callable[..., None], bufsize: int,
                 housekeeping: Callable[[], None] | None = None,
                 housekeeping_interval: float = 5.0,
                 replies: bool = False):
        self.name = name
        self._replies = replies
        self.endpoints = list(endpoints)
        self._handle = handle
        self._bufsize = bufsize
        self._housekeeping = housekeeping
        self._hk_interval = housekeeping_interval
        self._sockets: list[socket.socket] = []
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = None
        self._stopping = False
        self.errors = RejectLog(name)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The (address, port) pairs actually bound."""
        return [s.getsockname()[:2] for s in self._sockets]

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _bind(self, address: str, port: int) -> socket.socket:
        family = (socket.AF_INET6 if ':' in address else socket.AF_INET)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if family == socket.AF_INET6:
                # Let an IPv4 socket share the port (0.0.0.0 and ::).
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                                _RCVBUF)
            except OSError:
                pass
            sock.bind((address, port))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    def start(self) -> None:
        """Bind every endpoint and start the thread.

        :raises OSError: naming the address that could not be bound.
        """
        if self._thread is not None:
            return
        try:
            for address, port in self.endpoints:
                try:
                    self._sockets.append(self._bind(address, port))
                except OSError as exc:
                    raise OSError(exc.errno, '%s: cannot listen on %s port '
                                  '%d: %s' % (self.name, address, port,
                                              exc.strerror)) from None
        except OSError:
            self._close()
            raise
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.name,
                                        daemon=True)
        self._thread.start()
        LOG.info('%s listening on %s', self.name, ', '.join(
            '[%s]:%d' % a for a in self.addresses))

    def stop(self) -> None:
        """Stop the thread and close the sockets; safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping = True
            try:
                self._wake_w.send(b'x')
            except OSError:
                pass
            thread.join(10)
        self._close()

    def _close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._wake_r = self._wake_w = None

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for sock in self._sockets:
            sel.register(sock, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        next_hk = time.monotonic() + self._hk_interval
        try:
            while not self._stopping:
                timeout = max(0.0, next_hk - time.monotonic())
                try:
                    ready = sel.select(timeout)
                except (OSError, ValueError) as exc:
                    # Should not happen; never let it end the thread.
                    self.errors.reject('select_error', self.name, str(exc))
                    time.sleep(0.1)
                    continue
                for key, _ in ready:
                    if key.fileobj is not self._wake_r:
                        self._drain(key.fileobj)
                if time.monotonic() >= next_hk:
                    next_hk = time.monotonic() + self._hk_interval
                    if self._housekeeping is not None:
                        self._guarded(self._housekeeping)
        finally:
            sel.close()

    def _drain(self, sock: socket.socket) -> None:
        for _ in range(_BURST):
            try:
                data, sender = sock.recvfrom(self._bufsize)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # e.g. ICMP errors surfacing on the socket; keep going.
                self.errors.reject('socket_error', self.name, str(exc))
                return
            if self._replies:
                self._guarded(self._handle, data, sender[0],
                              functools.partial(self._send, sock, sender))
            else:
                self._guarded(self._handle, data, sender[0])

    def _send(self, sock: socket.socket, to, data: bytes) -> None:
        try:
            sock.sendto(data, to)
        except OSError as exc:
            self.errors.reject('reply_error', self.name, str(exc))

    def _guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:
            LOG.exception('%s: unexpected error (ignored)', self.name)
            self.errors.reject(INTERNAL_ERROR, self.name,
                               '%s: %s' % (type(exc).__name__, exc))
