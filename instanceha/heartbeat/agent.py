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

It also listens: the leading service copy answers its heartbeats
(protocol version 2, spoken to a collector once that collector answered
once). What an answer says goes to the host's side
(:class:`instanceha.heartbeat.hostagent.HostSide`: isolation detection,
the isolation response, the watchdog), which also writes the report each
version 2 heartbeat carries.

When it is stopped because the machine shuts down, it announces that
(:meth:`Agent.announce`): a reboot or a power-off, found in systemd's
job list (:func:`shutdown_kind`). Its unit is ordered after the network,
nova-compute and libvirt, so systemd stops it before any of them: while
it waits for an answer (and, under the migrate policy, for the host's
instances to be live-migrated away) everything they need still runs.
"""

from collections.abc import Callable, Iterable
import logging
import select
import shlex
import socket
import subprocess
import threading
import time

from instanceha.heartbeat import keys as keys_mod
from instanceha.heartbeat import protocol

LOG = logging.getLogger(__name__)

DEFAULT_PORT = 7411
#: Collector names are resolved again this often (DNS may change).
_RESOLVE_EVERY = 300.0
#: An unanswered announcement is sent again this often.
ANNOUNCE_REPEAT = 1.0
#: An answer counts only for a heartbeat sent at most this long ago
#: (seconds, or two intervals if longer): older ones are replays.
ANSWER_WINDOW = 5.0
#: What lists systemd's queued jobs; a shutdown queues one of these.
JOBS_COMMAND = 'systemctl list-jobs --no-legend --plain'
_SHUTDOWN_TARGETS = {'reboot.target': protocol.REBOOT,
                     'kexec.target': protocol.REBOOT,
                     'soft-reboot.target': protocol.REBOOT,
                     'poweroff.target': protocol.POWEROFF,
                     'halt.target': protocol.POWEROFF}


def shutdown_kind(command: str = JOBS_COMMAND,
                  timeout: float = 5.0) -> str | None:
    """REBOOT, POWEROFF or None (not shutting down), from systemd's jobs.

    While the machine goes down, systemd has a start job queued for
    ``reboot.target`` (or ``kexec.target``) or ``poweroff.target`` (or
    ``halt.target``); a plain ``systemctl stop`` or ``restart`` of the
    agent has none. ``command`` prints the job list, one job per line with
    the unit in its second column. A command that fails says nothing.
    """
    try:
        out = subprocess.run(shlex.split(command), capture_output=True,
                             text=True, timeout=timeout, check=False).stdout
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        LOG.warning('cannot tell whether the machine shuts down (%s: %s); '
                    'announcing nothing', command, exc)
        return None
    kinds = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == 'start':
            kind = _SHUTDOWN_TARGETS.get(fields[1])
            if kind:
                kinds.add(kind)
    # A reboot and a power-off both queued (should not happen): the
    # host will not come back by itself, so say power-off.
    return protocol.POWEROFF if protocol.POWEROFF in kinds else (
        protocol.REBOOT if kinds else None)


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
                 wall: Callable[[], float] = time.time, side=None,
                 clock: Callable[[], float] = time.monotonic):
        protocol.check_host_name(host)
        #: Dates the heartbeats sent: the host side's clock.
        self._clock = clock
        #: The host's side (HostSide), or None: heartbeats only.
        self.side = side
        #: Collector addresses that answered: spoken to in version 2.
        self._v2: set[tuple] = set()
        #: sequence -> when it was sent (monotonic), for the answers.
        self._sent: dict[int, float] = {}
        self._answered: set[int] = set()
        self.answers = 0
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

    def packet(self, kind: str | None = None) -> bytes:
        """The next packet (advances the sequence).

        :param kind: REBOOT or POWEROFF: a shutdown announcement.
        """
        return self._packets(kind)[0]

    def _packets(self, kind: str | None = None) -> tuple[bytes, bytes | None]:
        """The next heartbeat in version 1 and, with a host side, 2."""
        self.keyring.reload()
        self.sequence += 1
        now = self._clock()
        self._sent[self.sequence] = now
        window = max(ANSWER_WINDOW, 2 * self.interval)
        for seq in [q for q, t in self._sent.items() if now - t > window]:
            del self._sent[seq]
            self._answered.discard(seq)
        args = (self.host, self.boot_id, self.sequence, self._wall(),
                self.keyring.keys[0])
        v1 = protocol.encode(*args, kind=kind)
        v2 = (protocol.encode(*args, kind=kind,
                              report=self.side.report(self.sequence))
              if self.side is not None else None)
        return v1, v2

    def beat(self, kind: str | None = None) -> bytes:
        """Send one heartbeat to every collector; return the packet."""
        if (self._resolved_at is None or not self._targets
                or time.monotonic() - self._resolved_at > _RESOLVE_EVERY):
            self._resolve()
        v1, v2 = self._packets(kind)
        data = v1
        for family, sockaddr in self._targets:
            target = '[%s]:%d' % sockaddr[:2]
            data = v2 if v2 is not None and sockaddr[:2] in self._v2 else v1
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
        """Beat every interval until :meth:`stop` (or ``count`` beats).

        Between beats it reads the answers; the host side gets a look
        after every beat and every batch of answers.
        """
        LOG.info('sending heartbeats for host %s every %.1f s to %s', self.host,
                 self.interval, ', '.join('%s:%d' % c for c in self.collectors))
        beats = 0
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.beat()
            beats += 1
            self._tick()
            if count and beats >= count:
                break
            deadline += self.interval
            # Catch up without a burst after a long stall (suspend).
            deadline = max(deadline, time.monotonic())
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._listen(min(left, 0.5))
                self._tick()
        self.close()

    def _tick(self) -> None:
        if self.side is not None:
            self.side.tick()

    def _read(self, wait: float) -> list[tuple[bytes, tuple]]:
        """Datagrams arriving within ``wait`` seconds (at least one wait)."""
        socks = list(self._sockets.values())
        if not socks:
            # Stopped (announcing): wait() would not wait any more.
            (time.sleep if self._stop.is_set() else self._stop.wait)(
                max(0.0, wait))
            return []
        ready, _, _ = select.select(socks, [], [], max(0.0, wait))
        out = []
        for sock in ready:
            while True:
                try:
                    out.append(sock.recvfrom(protocol.MAX_DATAGRAM + 1))
                except OSError:
                    break
        return out

    def _decoded(self, wait: float, level: int):
        """The signed replies arriving within ``wait`` seconds.

        Yields ``(reply, sender)``; a datagram that is not a valid reply
        is logged at ``level`` (quiet while only heartbeating, a warning
        while an announcement waits for its answer) and skipped.
        """
        for data, sender in self._read(wait):
            try:
                rep = protocol.decode(data, self.keyring.keys, replies=True)
            except protocol.Rejected as exc:
                LOG.log(level, 'ignored a reply from %s: %s', sender[0], exc)
                continue
            yield rep, sender

    def _listen(self, wait: float) -> None:
        """Take the answers arriving within ``wait`` seconds."""
        for rep, sender in self._decoded(wait, logging.DEBUG):
            if rep.reply != protocol.ANSWER:
                continue  # a late reply to an announcement
            self._answer(rep, sender)

    def _answer(self, rep: protocol.Heartbeat, sender: tuple) -> None:
        """One signed answer: check it answers a recent heartbeat of ours."""
        sent_at = self._sent.get(rep.sequence)
        if (rep.host != self.host or rep.boot_id != self.boot_id
                or sent_at is None):
            LOG.debug('ignored an answer from %s: not to a recent heartbeat '
                      'of this run', sender[0])
            return
        collector = tuple(sender[:2])
        if collector not in self._v2:
            self._v2.add(collector)
            LOG.info('collector [%s]:%d answers: speaking protocol version '
                     '2 to it', *collector)
        if rep.answer.standdown:
            if self.side is not None:
                self.side.stood_down(collector, len(self._targets))
            return
        if rep.sequence in self._answered:
            return  # the same answer again (two addresses, a copy)
        self._answered.add(rep.sequence)
        self.answers += 1
        if self.side is not None:
            self.side.answered(rep.sequence, sent_at, rep.answer, collector)

    def stop(self) -> None:
        self._stop.set()

    def release(self, answer_timeout: float = 10.0) -> bool:
        """Before exiting: release the watchdog once the service knows.

        Heartbeats saying "releasing" are sent every second until an
        answer to one of them arrives (the host side then disarms) or
        ``answer_timeout`` passes (it stays armed: see the host side).

        :returns: whether the watchdog is released (or was not armed).
        """
        side = self.side
        if side is None or not side.releasing():
            return True
        deadline = time.monotonic() + answer_timeout
        while not side.released and time.monotonic() < deadline:
            self.beat()
            end = min(deadline, time.monotonic() + ANNOUNCE_REPEAT)
            while not side.released and time.monotonic() < end:
                self._listen(end - time.monotonic())
        return side.released

    def _replies(self, sent: set[int], wait: float) -> list[str]:
        """Answers to the announcements ``sent`` arriving within ``wait``.

        Only a reply signed with this host's key, for this boot id and
        one of the sequences sent, counts.
        """
        answers = []
        for rep, sender in self._decoded(wait, logging.WARNING):
            if rep.reply == protocol.ANSWER:
                self._answer(rep, sender)
                continue
            if (rep.host != self.host or rep.boot_id != self.boot_id
                    or rep.sequence not in sent):
                LOG.warning('ignored a reply from %s: it answers '
                            'another announcement', sender[0])
                continue
            answers.append(rep.reply)
        return answers

    def announce(self, kind: str, answer_timeout: float = 10.0,
                 drain_timeout: float = 300.0) -> str | None:
        """Tell the collectors this host is going down; wait for an answer.

        Sent again every second until the leading instanceha copy
        answers: ``noted`` (go on), or ``draining`` (the migrate policy:
        the host's instances are being live-migrated away; keep asking
        until ``drained``, at most ``drain_timeout`` seconds). Without an
        answer within ``answer_timeout`` seconds the shutdown goes on and
        instanceha judges the silent host by its own rules.

        :returns: the last answer (None: nobody answered).
        """
        start = time.monotonic()
        deadline = start + answer_timeout
        sent: set[int] = set()
        status = None
        LOG.info('announcing a %s of host %s to %s', kind, self.host,
                 ', '.join('%s:%d' % c for c in self.collectors))
        while True:
            self.beat(kind)
            sent.add(self.sequence)
            answers = self._replies(sent, ANNOUNCE_REPEAT)
            for answer in answers:
                if answer != status:
                    LOG.info('instanceha answered the %s announcement: '
                             '%s', kind, answer)
                status = answer
            now = time.monotonic()
            if protocol.DRAINED in answers or (
                    status == protocol.NOTED):
                break
            if status == protocol.DRAINING:
                if now - start >= drain_timeout:
                    LOG.warning('instances still being migrated away after '
                                '%d s (--drain-timeout): shutting down '
                                'anyway', drain_timeout)
                    break
            elif now >= deadline:
                LOG.warning('no instanceha copy answered the %s '
                            'announcement within %d s: shutting down '
                            'anyway', kind, answer_timeout)
                break
        self.close()
        return status

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets = {}
