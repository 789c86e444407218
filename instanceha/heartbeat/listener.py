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

"""UDP listeners for host heartbeats and fence_kdump messages.

Each listener is one thread around a selector over its sockets (one per
configured address, IPv4 and IPv6). Every datagram goes through a pure
``handle(data, address)`` method, which the tests and the benchmark also
call directly. A bad datagram is counted by reason and logged at a
bounded rate; nothing a sender does can stop the thread.
"""

from collections.abc import Callable, Iterable
import dataclasses
import datetime
import logging
import socket
import threading
import time

from instanceha.engine import ports
from instanceha.engine import shutdown
from instanceha.heartbeat import kdump
from instanceha.heartbeat import keys as keys_mod
from instanceha.heartbeat import protocol
from instanceha.heartbeat import udp as udp_mod

LOG = logging.getLogger(__name__)

#: Upper bound on the hosts a listener remembers, whatever senders claim.
MAX_HOSTS = 65536
#: Reverse DNS answers (and failures) are remembered this long.
_DNS_TTL = 300.0
_DNS_CACHE_MAX = 4096
#: A kdump message after this much silence starts a new dump episode.
KDUMP_EPISODE_GAP = datetime.timedelta(minutes=10)


@dataclasses.dataclass(frozen=True)
class HostRecord:
    """The last valid heartbeat of one host."""

    boot_id: bytes
    sequence: int
    #: The sender's timestamp (seconds since the epoch).
    sent: float
    #: When it arrived, on the listener's monotonic clock.
    received: float
    address: str
    key_index: int
    #: 1, or 2 for an agent that reports (and takes answers).
    version: int = protocol.VERSION
    #: A version 2 heartbeat's report.
    report: protocol.Report | None = None


@dataclasses.dataclass(frozen=True)
class WatchdogView:
    """What this copy may assume about a host's watchdog.

    The service may count a silent host as reset by its watchdog only
    from ``reset_by`` (plus a safety margin) on, and only when
    ``current`` (see :meth:`HeartbeatListener.watchdog`).
    """

    #: The latest heartbeat says armed (not releasing), it was heard
    #: while this copy led and after the last pause release it was told.
    current: bool
    #: Seconds, as announced.
    deadline: float
    #: When the announcing heartbeat arrived (listener's monotonic clock).
    announced: float
    #: When this copy last sent the host an answer (None: never).
    last_answer: float | None
    #: last_answer + deadline: after it the host has reset unless it
    #: heard an answer this copy does not know of (there is none while
    #: ``current``: only the leader answers). None when not current.
    reset_by: float | None


class HeartbeatListener:
    """Receives host heartbeats and keeps the last valid one per host.

    :param keys: a KeyRing (one key for every host), a HostKeys (per-host
        keys derived from a master) or a fixed tuple of keys (current
        first).
    :param max_clock_skew: packets whose timestamp differs from this
        machine's clock by more are rejected (stale or future).
    :param known_hosts: host names accepted; None accepts every
        authenticated name (until :meth:`set_known_hosts` is called).
    :param clock: monotonic clock for receive times; ``wall`` the UTC
        wall clock in seconds, for the sender's timestamps.
    """

    def __init__(self, endpoints: Iterable[tuple[str, int]],
                 keys: keys_mod.KeyRing | keys_mod.HostKeys | tuple[
                     bytes, ...], max_clock_skew: float,
                 known_hosts: Iterable[str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 log_interval: float = 60.0):
        self._keyring = keys if isinstance(
            keys, (keys_mod.KeyRing, keys_mod.HostKeys)) else None
        if isinstance(keys, keys_mod.HostKeys):
            self._keys = self._host_keys
            self._host_ring = keys
            if not keys.ring.keys:
                raise ValueError('heartbeat listener needs at least one key')
        else:
            self._keys = tuple(keys.keys if self._keyring else keys)
            if not self._keys:
                raise ValueError('heartbeat listener needs at least one key')
        self.max_clock_skew = max_clock_skew
        self._known = None if known_hosts is None else frozenset(known_hosts)
        self._clock = clock
        self._wall = wall
        self._table: dict[str, HostRecord] = {}
        self._lock = threading.Lock()
        self.accepted = 0
        self.accepted_previous_key = 0
        self.rejects = udp_mod.RejectLog('heartbeat listener', log_interval,
                                         clock, quiet=[protocol.DUPLICATE])
        self.started_at: float | None = None
        self._announced: dict[str, shutdown.Announcement] = {}
        #: Shutdown announcements accepted, by kind (not their repeats).
        self.announcements: dict[str, int] = {}
        #: Decides the reply to an announcement (the shutdown policy's
        #: handler, only on the leading copy); None: no reply.
        self.responder: Callable[[shutdown.Announcement],
                                 str | None] | None = None
        #: What to answer a host's version 2 heartbeat: its isolation
        #: policy and the pause, or None when this copy does not lead
        #: (then nothing is answered). Set by the service's wiring.
        self.answerer: Callable[[str], protocol.Answer | None] | None = None
        #: Seconds from now this copy's leadership is proven for (the
        #: coordinator's ``proven_for``), set with the answerer. No other
        #: copy can answer before that moment has passed, so answers
        #: whose proofs overlap belong to one uninterrupted leadership;
        #: None: no proof, no watchdog is ever counted on.
        self.leadership: Callable[[], float] | None = None
        #: Until when (monotonic) the leadership proven at the latest
        #: answer lasts.
        self._proven_until: float | None = None
        #: host -> when this copy last sent it an answer (monotonic).
        self._answered: dict[str, float] = {}
        #: host -> when this copy last told it instance HA is paused.
        self._released: dict[str, float] = {}
        #: host -> boot id and number of version 1 heartbeats answered.
        self._probed: dict[str, tuple[bytes, int]] = {}
        #: host -> (boot id, last link state change logged).
        self._changes_seen: dict[str, tuple[bytes, int]] = {}
        #: host -> how to send it a datagram (its last heartbeat's socket
        #: and address): the stand-down at stop.
        self._reply_to: dict[str, Callable[[bytes], None]] = {}
        #: Since when this copy answers (None: it does not).
        self.leading_since: float | None = None
        #: Answers sent; link state changes reported, by new state.
        self.answers = 0
        self.link_changes: dict[str, int] = {}
        self.udp = udp_mod.UdpListener(
            'heartbeat-listener', endpoints, self.handle,
            protocol.MAX_DATAGRAM + 1, housekeeping=self._reload_keys,
            replies=True)

    def start(self) -> None:
        self.udp.start()
        self.started_at = self._clock()

    def stop(self) -> None:
        self.stand_down()
        self.udp.stop()

    def stand_down(self) -> None:
        """Tell every reporting host this copy stops (a clean stop).

        An agent told so by every collector it sends to knows the whole
        service stopped rather than itself being cut off, and releases
        its watchdog instead of letting it reset the host (see
        doc/host-side.md). Sent once; lost datagrams only mean the
        agent judges by silence, as after a crash.
        """
        self.leading_since = None
        with self._lock:
            targets = [(host, rec, self._reply_to.get(host))
                       for host, rec in self._table.items()
                       if rec.version == protocol.VERSION_2]
        for host, rec, reply in targets:
            if reply is None:
                continue
            try:
                reply(self._answer_packet(host, rec, protocol.Answer(
                    standdown=True)))
            except (ValueError, protocol.Rejected):
                continue
        if targets:
            LOG.info('told %d host(s) this copy stops', len(targets))

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return self.udp.addresses

    def now(self) -> float:
        """The listener's monotonic clock (compare with ``received``)."""
        return self._clock()

    def _answer_packet(self, host: str, rec: HostRecord,
                       answer: protocol.Answer) -> bytes:
        keys = self._keys(host) if callable(self._keys) else self._keys
        return protocol.encode(host, rec.boot_id, rec.sequence, self._wall(),
                               keys[rec.key_index], answer=answer)

    def _answer(self, hb: protocol.Heartbeat, record: HostRecord,
                reply: Callable[[bytes], None] | None) -> None:
        """Answer a heartbeat when this copy leads (see protocol)."""
        answerer = self.answerer
        answer = answerer(hb.host) if answerer is not None else None
        if answer is None:
            self.leading_since = None
            return
        now = self._clock()
        proven = self.leadership() if self.leadership is not None else 0.0
        if (self.leading_since is None or self._proven_until is None
                or now > self._proven_until):
            # Set at the first answer, never earlier: what is counted
            # from it errs late, the safe side. A gap in the proof of
            # leadership (a lost lease, another copy that may have led
            # and answered meanwhile, unseen here because no heartbeat
            # came) starts over too.
            self.leading_since = record.received
        self._proven_until = now + proven
        if reply is None:
            return
        if hb.version == protocol.VERSION:
            boot, count = self._probed.get(hb.host, (None, 0))
            count = count if boot == hb.boot_id else 0
            if count >= protocol.PROBES:
                return
            self._probed[hb.host] = (hb.boot_id, count + 1)
        pol = answer.policy
        digest = hb.report.policy_digest if hb.report else b''
        if pol is not None and digest and pol.digest() == digest:
            answer = dataclasses.replace(answer, policy=None, policy_ok=True)
        reply(self._answer_packet(hb.host, record, answer))
        now = self._clock()
        with self._lock:
            self._answered[hb.host] = now
            if answer.pause is not None:
                self._released[hb.host] = now
        self.answers += 1

    def _log_changes(self, host: str, boot_id: bytes,
                     report: protocol.Report) -> None:
        """Log and count each reported link state change once."""
        boot, seen = self._changes_seen.get(host, (None, 0))
        seen = seen if boot == boot_id else 0
        for ch in report.pending:
            if ch.number <= seen:
                continue
            seen = ch.number
            self.link_changes[ch.new] = self.link_changes.get(ch.new, 0) + 1
            log = LOG.warning if ch.new in (protocol.PARTITIONED,
                                            protocol.ISOLATED) else LOG.info
            log('host %s reports its link to the service went from %s to '
                '%s %.0f s ago', host, ch.old, ch.new, ch.age)
        self._changes_seen[host] = (boot_id, seen)

    def last_answer(self, host: str) -> float | None:
        """When this copy last sent ``host`` an answer (monotonic)."""
        return self._answered.get(host)

    def watchdog(self, host: str,
                 min_deadline: float = 0.0) -> WatchdogView | None:
        """The host's watchdog as this copy may count on it.

        None: the host never announced one. ``current`` only when the
        host's latest heartbeat says armed (not releasing) with a
        deadline of at least ``min_deadline`` seconds, it arrived
        while this copy led and after this copy last told the host
        instance HA is paused (an agent released its watchdog then; only
        a later heartbeat says it armed again), and this copy has
        answered the host since it leads, its leadership proven without
        a gap from then to now (:attr:`leadership`). Everything else
        leaves the host to the other fencing levels.
        """
        rec = self._table.get(host)
        report = rec.report if rec is not None else None
        if report is None or report.watchdog == protocol.WD_OFF:
            return None
        last = self._answered.get(host)
        since = self.leading_since
        released = self._released.get(host)
        proven = self._proven_until
        current = bool(report.watchdog == protocol.WD_ARMED
                       and self.leadership is not None
                       and proven is not None and self._clock() <= proven
                       and report.deadline > 0
                       and report.deadline >= min_deadline
                       and since is not None
                       and rec.received >= since and last is not None
                       and last >= since
                       and (released is None or rec.received > released))
        return WatchdogView(
            current=current, deadline=report.deadline,
            announced=rec.received, last_answer=last,
            reset_by=last + report.deadline if current else None)

    def set_keys(self, keys: keys_mod.HostKeys) -> None:
        """Use other keys from now on (a reload: new files or key mode).

        One assignment each: a datagram being checked uses the old keys
        or the new ones, never a mix.
        """
        if not keys.ring.keys:
            raise ValueError('heartbeat listener needs at least one key')
        self._host_ring = keys
        self._keyring = keys
        self._keys = self._host_keys

    def stranded_by(self, keys: keys_mod.HostKeys) -> list[str]:
        """Hosts whose latest heartbeat ``keys`` would refuse.

        A reload that retires the key a host still signs with (the
        previous key removed before its agent switched) cuts that host
        off: its heartbeats are refused from then on and, armed, it
        resets when its watchdog deadline passes.
        """
        ring = getattr(self, '_host_ring', None)
        if ring is None:
            return []
        with self._lock:
            table = dict(self._table)
        stranded = []
        for host, rec in sorted(table.items()):
            used = ring.for_host(host)
            if rec.key_index < len(used) and \
                    used[rec.key_index] not in keys.for_host(host):
                stranded.append(host)
        return stranded

    def _reload_keys(self) -> None:
        if isinstance(self._keyring, keys_mod.HostKeys):
            self._keyring.reload()
        elif self._keyring is not None:
            self._keyring.reload()
            self._keys = self._keyring.keys

    def _host_keys(self, host: str) -> tuple[bytes, ...]:
        """Per-host keys: an unknown name costs no key derivation."""
        known = self._known
        if known is not None and host not in known:
            raise protocol.Rejected(protocol.UNKNOWN_HOST,
                                    'host %r is not a compute host' % host)
        return self._host_ring.for_host(host)

    def set_known_hosts(self, hosts: Iterable[str] | None) -> None:
        """Accept heartbeats only from these names (None: from any)."""
        self._known = None if hosts is None else frozenset(hosts)

    def handle(self, data: bytes, sender: str,
               reply: Callable[[bytes], None] | None = None
               ) -> HostRecord | None:
        """Check one datagram; record and return it if valid.

        :param reply: sends a datagram back to the sender; a shutdown
            announcement is answered through it when :attr:`responder`
            says what to answer.
        """
        try:
            hb = protocol.decode(data, self._keys)
            known = self._known
            if known is not None and hb.host not in known:
                raise protocol.Rejected(protocol.UNKNOWN_HOST,
                                        'host %r is not a compute host'
                                        % hb.host)
            wall = self._wall()
            if hb.timestamp < wall - self.max_clock_skew:
                raise protocol.Rejected(
                    protocol.STALE, 'host %s timestamp %.1f s in the past'
                    % (hb.host, wall - hb.timestamp))
            if hb.timestamp > wall + self.max_clock_skew:
                raise protocol.Rejected(
                    protocol.FUTURE, 'host %s timestamp %.1f s in the future'
                    % (hb.host, hb.timestamp - wall))
            with self._lock:
                record = self._check_replay(hb, sender)
                self._table[hb.host] = record
        except protocol.Rejected as exc:
            self.rejects.reject(exc.reason, sender, exc.detail)
            return None
        self.accepted += 1
        if hb.key_index:
            self.accepted_previous_key += 1
        if reply is not None:
            self._reply_to[hb.host] = reply
        if hb.report is not None:
            self._log_changes(hb.host, hb.boot_id, hb.report)
        if hb.kind is not None:
            self._announce(hb, record, sender, reply)
        else:
            self._answer(hb, record, reply)
        return record

    def _announce(self, hb: protocol.Heartbeat, record: HostRecord,
                  sender: str, reply: Callable[[bytes], None] | None
                  ) -> None:
        """Remember a shutdown announcement; answer it if told what to."""
        with self._lock:
            old = self._announced.get(hb.host)
            if old is not None and (old.boot_id, old.kind) == (
                    hb.boot_id, hb.kind):
                ann = dataclasses.replace(old, last=record.received)
            else:
                ann = shutdown.Announcement(
                    host=hb.host, kind=hb.kind, boot_id=hb.boot_id,
                    first=record.received, last=record.received)
                LOG.info('host %s (%s) announced a %s', hb.host, sender,
                         hb.kind)
                self.announcements[hb.kind] = (
                    self.announcements.get(hb.kind, 0) + 1)
            self._announced[hb.host] = ann
        responder = self.responder
        answer = responder(ann) if responder is not None else None
        if answer is None or reply is None:
            return
        keys = self._keys(hb.host) if callable(self._keys) else self._keys
        reply(protocol.encode(hb.host, hb.boot_id, hb.sequence, self._wall(),
                              keys[hb.key_index], reply=answer))
        with self._lock:
            # The answer tells the agent the service hears it, too.
            self._answered[hb.host] = self._clock()

    def announcement(self, host: str) -> shutdown.Announcement | None:
        """The host's latest shutdown announcement, None if none."""
        return self._announced.get(host)

    def announced(self) -> dict[str, shutdown.Announcement]:
        """Every host's latest shutdown announcement."""
        with self._lock:
            return dict(self._announced)

    def returned(self, host: str) -> bool:
        """A heartbeat from a later agent run than the announcement's."""
        ann = self._announced.get(host)
        rec = self._table.get(host)
        return bool(ann and rec and rec.boot_id != ann.boot_id
                    and rec.received > ann.last)

    def forget_announcement(self, host: str) -> None:
        with self._lock:
            self._announced.pop(host, None)

    def _check_replay(self, hb: protocol.Heartbeat,
                      sender: str) -> HostRecord:
        last = self._table.get(hb.host)
        if last is None:
            if len(self._table) >= MAX_HOSTS:
                raise protocol.Rejected(protocol.UNKNOWN_HOST,
                                        'table full (%d hosts)' % MAX_HOSTS)
        elif hb.boot_id == last.boot_id:
            if hb.sequence == last.sequence and hb.timestamp == last.sent:
                raise protocol.Rejected(
                    protocol.DUPLICATE, 'host %s sequence %d again'
                    % (hb.host, hb.sequence))
            if hb.sequence <= last.sequence:
                raise protocol.Rejected(
                    protocol.REPLAY, 'host %s sequence %d, already at %d'
                    % (hb.host, hb.sequence, last.sequence))
        elif hb.timestamp <= last.sent:
            raise protocol.Rejected(
                protocol.REPLAY, 'host %s: new boot id with a timestamp not '
                'after its last heartbeat' % hb.host)
        return HostRecord(hb.boot_id, hb.sequence, hb.timestamp,
                          self._clock(), sender, hb.key_index,
                          hb.version, hb.report)

    def record(self, host: str) -> HostRecord | None:
        return self._table.get(host)

    def records(self) -> dict[str, HostRecord]:
        with self._lock:
            return dict(self._table)

    def reporting(self) -> set[str]:
        """Hosts whose latest heartbeat takes answers (version 2)."""
        with self._lock:
            return {h for h, rec in self._table.items()
                    if rec.version >= protocol.VERSION_2}

    def age(self, host: str) -> float | None:
        """Seconds since ``host``'s last valid heartbeat; None if never."""
        rec = self._table.get(host)
        return None if rec is None else self._clock() - rec.received

    def stats(self) -> dict:
        stats = {'accepted': self.accepted,
                 'accepted_previous_key': self.accepted_previous_key,
                 'rejected': dict(self.rejects.counts),
                 'errors': dict(self.udp.errors.counts),
                 'hosts': len(self._table)}
        if self.announcements:
            stats['announcements'] = dict(self.announcements)
        if self.answers:
            stats['answers'] = self.answers
        if self.link_changes:
            stats['link_changes'] = dict(self.link_changes)
        return stats


@dataclasses.dataclass(frozen=True)
class KdumpRecord:
    """What the kdump listener heard from one host."""

    first: datetime.datetime
    last: datetime.datetime
    count: int
    address: str


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class KdumpListener:
    """Receives fence_kdump messages and remembers who is dumping.

    :param address_map: sender IP address -> host name; checked first.
    :param reverse_dns: when an address is not mapped, look its name up
        (cached) and use it if it (or its first label) is a known host,
        or as it is while no known hosts were given.
    """

    def __init__(self, endpoints: Iterable[tuple[str, int]],
                 address_map: dict[str, str] | None = None,
                 reverse_dns: bool = True,
                 known_hosts: Iterable[str] | None = None,
                 now: Callable[[], datetime.datetime] = _utcnow,
                 resolver: Callable[[str], tuple] = socket.gethostbyaddr,
                 log_interval: float = 60.0):
        self.address_map = {udp_mod.normalize_address(a): h
                            for a, h in (address_map or {}).items()}
        self.reverse_dns = reverse_dns
        self._known = None if known_hosts is None else frozenset(known_hosts)
        self._now = now
        self._resolver = resolver
        self._dns: dict[str, tuple[str | None, float]] = {}
        self._table: dict[str, KdumpRecord] = {}
        self._lock = threading.Lock()
        self.accepted = 0
        self.rejects = udp_mod.RejectLog('kdump listener', log_interval)
        self.udp = udp_mod.UdpListener('kdump-listener', endpoints,
                                       self.handle, kdump.SIZE + 1)

    def start(self) -> None:
        self.udp.start()

    def stop(self) -> None:
        self.udp.stop()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return self.udp.addresses

    def set_known_hosts(self, hosts: Iterable[str] | None) -> None:
        self._known = None if hosts is None else frozenset(hosts)

    def _reverse(self, address: str) -> str | None:
        now = time.monotonic()
        hit = self._dns.get(address)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            name, aliases, _ = self._resolver(address)
            names = [name, *aliases]
        except (OSError, UnicodeError):
            names = []
        found = None
        known = self._known
        for name in names:
            for candidate in (name, name.split('.', 1)[0]):
                if known is None or candidate in known:
                    found = candidate
                    break
            if found:
                break
        if len(self._dns) >= _DNS_CACHE_MAX:
            self._dns.clear()
        self._dns[address] = (found, now + _DNS_TTL)
        return found

    def host_of(self, address: str) -> str | None:
        """The host an address belongs to, or None."""
        address = udp_mod.normalize_address(address)
        host = self.address_map.get(address)
        if host is None and self.reverse_dns:
            host = self._reverse(address)
        return host

    def handle(self, data: bytes, sender: str) -> KdumpRecord | None:
        """Check one datagram; record and return it if valid."""
        try:
            kdump.decode(data)
            host = self.host_of(sender)
            if host is None:
                raise kdump.Rejected(
                    kdump.UNKNOWN_SENDER, 'address %s is not in [kdump] '
                    'address_map%s' % (sender, ' and has no reverse DNS '
                                       'name of a compute host'
                                       if self.reverse_dns else ''))
            now = self._now()
            with self._lock:
                last = self._table.get(host)
                if last is not None and now - last.last > KDUMP_EPISODE_GAP:
                    last = None
                if last is None and len(self._table) >= MAX_HOSTS:
                    raise kdump.Rejected(kdump.UNKNOWN_SENDER, 'table full')
                record = KdumpRecord(
                    first=last.first if last else now, last=now,
                    count=(last.count if last else 0) + 1, address=sender)
                self._table[host] = record
        except kdump.Rejected as exc:
            self.rejects.reject(exc.reason, sender, exc.detail)
            return None
        self.accepted += 1
        if record.count == 1:
            LOG.warning('host %s (%s) is writing a crash dump (fence_kdump '
                        'message received)', host, sender)
        return record

    def record(self, host: str) -> KdumpRecord | None:
        return self._table.get(host)

    def last_message(self, host: str) -> datetime.datetime | None:
        rec = self._table.get(host)
        return None if rec is None else rec.last

    def forget(self, host: str) -> None:
        """Drop a host's record (e.g. once it is back in service)."""
        with self._lock:
            self._table.pop(host, None)

    def stats(self) -> dict:
        return {'accepted': self.accepted,
                'rejected': dict(self.rejects.counts),
                'errors': dict(self.udp.errors.counts),
                'hosts': len(self._table)}


class UdpListeners(ports.ListenerFactory):
    """The service's listener factory: real UDP sockets."""

    def heartbeat(self, endpoints: list[tuple[str, int]],
                  keyring: keys_mod.KeyRing, max_clock_skew: float,
                  log_interval: float) -> HeartbeatListener:
        return HeartbeatListener(endpoints, keyring, max_clock_skew,
                                 log_interval=log_interval)

    def kdump(self, endpoints: list[tuple[str, int]],
              address_map: dict[str, str],
              reverse_dns: bool) -> KdumpListener:
        return KdumpListener(endpoints, address_map=address_map,
                             reverse_dns=reverse_dns)
