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

"""The agent's view of its link to the service: isolation detection.

The agent hears the service through the leading copy's answers. When it
has heard none for ``isolation_timeout`` seconds it asks its isolation
addresses (by default the host's default gateway): if one answers, the
host still has a network and only the service is out of reach
(*partitioned*: nothing is done about it); if none does, the host is
*isolated* and its isolation response may apply. Until the agent has
heard the service once it judges nothing (*unknown*): an agent started
while the network is down, or talking to an older service that never
answers, must not act.

Standard library only, like the whole agent.
"""

from collections.abc import Callable, Iterable
import dataclasses
import logging
import shlex
import socket
import subprocess
import threading
import time

from instanceha.heartbeat import protocol

LOG = logging.getLogger(__name__)

#: Changes kept for the report until an answer acknowledges them.
MAX_PENDING = 8
ROUTE_TABLE = '/proc/net/route'
PING_COMMAND = 'ping -n -q -c 1 -W 1'


def default_gateway(path: str = ROUTE_TABLE) -> str | None:
    """The IPv4 default gateway from the kernel's routing table."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[1] != '00000000':
            continue
        if not int(fields[3], 16) & 0x2:  # RTF_GATEWAY
            continue
        raw = bytes.fromhex(fields[2])
        return socket.inet_ntoa(raw[::-1])
    return None


@dataclasses.dataclass(frozen=True)
class Address:
    """An isolation address.

    ``tcp:HOST:PORT`` (a connection completes) or ``HOST`` /
    ``icmp:HOST`` (one ping answered).
    """

    kind: str
    host: str
    port: int = 0

    @classmethod
    def parse(cls, text: str) -> 'Address':
        text = text.strip()
        if text.startswith('tcp:'):
            rest = text[4:]
            host, _, port = rest.rpartition(':')
            host = host.strip('[]')
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError('isolation address %r: tcp:HOST:PORT '
                                 'expected' % text)
            return cls('tcp', host, int(port))
        host = text[5:] if text.startswith('icmp:') else text
        if not host or any(c.isspace() for c in host):
            raise ValueError('isolation address %r' % text)
        return cls('icmp', host)

    def __str__(self) -> str:
        return ('tcp:%s:%d' % (self.host, self.port) if self.kind == 'tcp'
                else self.host)


_PING_ERRORS: set[str] = set()


def probe(address: Address, timeout: float = 1.0,
          ping: str = PING_COMMAND) -> bool:
    """Whether ``address`` answers now.

    TCP: only a completed connection counts (a refusal may come from a
    local firewall rule as well as from the address). ICMP: ping's exit
    status 0 (answered) or 1 (no answer). A ping that cannot run at all
    (missing, not permitted: exit status 2) proves nothing about the
    network, so it counts as an answer (logged once): a host must never
    take itself for isolated because of its own configuration.
    """
    if address.kind == 'tcp':
        try:
            with socket.create_connection((address.host, address.port),
                                          timeout=timeout):
                return True
        except OSError:
            return False
    try:
        done = subprocess.run(
            shlex.split(ping) + [address.host], capture_output=True,
            timeout=timeout + 2, check=False)
    except subprocess.TimeoutExpired:
        return False
    except (OSError, subprocess.SubprocessError) as exc:
        error = str(exc)
    else:
        if done.returncode in (0, 1):
            return done.returncode == 0
        error = (done.stderr or done.stdout or b'').decode(
            'utf-8', 'replace').strip()[:200] or 'exit status %d' % (
                done.returncode)
    if error not in _PING_ERRORS:
        _PING_ERRORS.add(error)
        LOG.error('cannot ping isolation address %s (%s): it counts as '
                  'answering, so this host is never taken for isolated '
                  'through it; use tcp:HOST:PORT or allow ping', address,
                  error)
    return True


class Prober:
    """Asks the isolation addresses, in a thread of its own, while wanted.

    Probing never delays a heartbeat. A round asks every address (at the
    same time) and records whether any answered and when it ended.
    """

    def __init__(self, addresses: Iterable[Address], interval: float,
                 timeout: float = 1.0,
                 check: Callable[[Address, float], bool] = probe,
                 clock: Callable[[], float] = time.monotonic):
        self.addresses = list(addresses)
        self.interval = interval
        self.timeout = timeout
        self._check = check
        self._clock = clock
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: (when the latest round ended, whether any address answered).
        self.latest: tuple[float, bool] | None = None

    def want(self, wanted: bool) -> None:
        if wanted:
            self._wanted.set()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='isolation-probes', daemon=True)
                self._thread.start()
        else:
            self._wanted.clear()

    def round(self) -> bool:
        """Ask every address once; whether any answered."""
        results = [False] * len(self.addresses)

        def one(i, addr):
            results[i] = self._check(addr, self.timeout)

        threads = [threading.Thread(target=one, args=(i, a), daemon=True)
                   for i, a in enumerate(self.addresses)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout + 5)
        any_ok = any(results)
        self.latest = (self._clock(), any_ok)
        return any_ok

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wanted.wait(1.0)
            if self._stop.is_set():
                return
            if self._wanted.is_set():
                self.round()
                self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()


class LinkMonitor:
    """The state machine: unknown, connected, partitioned, isolated.

    :param timeout: ``isolation_timeout``: seconds without an answer
        before the isolation addresses are asked.
    :param prober: supplies the latest probe round; with no addresses
        at all a silent service means isolated (nothing says otherwise).
    """

    def __init__(self, timeout: float, prober: Prober,
                 clock: Callable[[], float] = time.monotonic):
        self.timeout = timeout
        self.prober = prober
        self._clock = clock
        self.state = protocol.UNKNOWN
        self.changes = 0
        #: When the last answered heartbeat was sent (None: never).
        self.heard_at: float | None = None
        #: (change, sequence of the first heartbeat that carried it).
        self._pending: list[tuple[protocol.Change, float, int | None]] = []

    def heard(self, sent_at: float) -> None:
        """An answer to a heartbeat sent at ``sent_at`` arrived."""
        if self.heard_at is None or sent_at > self.heard_at:
            self.heard_at = sent_at

    def evaluate(self) -> str:
        """The state now; a change is logged and kept for the report."""
        now = self._clock()
        if self.heard_at is None or now - self.heard_at <= self.timeout:
            new = (protocol.UNKNOWN if self.heard_at is None
                   else protocol.CONNECTED)
            self.prober.want(False)
        else:
            silent_since = self.heard_at + self.timeout
            self.prober.want(True)
            latest = self.prober.latest
            if not self.prober.addresses:
                new = protocol.ISOLATED
            elif latest is None or latest[0] < silent_since:
                new = self.state  # no round since the silence began yet
            else:
                new = (protocol.PARTITIONED if latest[1]
                       else protocol.ISOLATED)
        if new != self.state:
            self._change(new, now)
        return self.state

    def _change(self, new: str, now: float) -> None:
        old, self.state = self.state, new
        self.changes += 1
        silent = ('' if self.heard_at is None else
                  ' (last answer %.0f s ago)' % (now - self.heard_at))
        log = (LOG.warning if new in (protocol.PARTITIONED,
                                      protocol.ISOLATED) else LOG.info)
        log('link to the service: %s -> %s%s', old, new, silent)
        self._pending.append((protocol.Change(self.changes, old, new, 0.0),
                              now, None))
        del self._pending[:-MAX_PENDING]

    def pending(self, sequence: int) -> tuple[protocol.Change, ...]:
        """The changes to report in heartbeat ``sequence``."""
        now = self._clock()
        out = []
        for i, (ch, when, first) in enumerate(self._pending):
            if first is None:
                self._pending[i] = (ch, when, sequence)
            out.append(dataclasses.replace(ch, age=now - when))
        return tuple(out)

    def acknowledged(self, sequence: int) -> None:
        """Heartbeat ``sequence`` was answered: its changes got through."""
        self._pending = [p for p in self._pending
                         if p[2] is None or p[2] > sequence]
