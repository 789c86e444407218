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

"""The host heartbeat wire protocol, versions 1 and 2.

One UDP datagram per heartbeat, all integers big-endian::

    offset  size  field
         0     4  magic       b'IHHB'
         4     1  version     1
         5     1  flags       0 heartbeat; 1 reboot, 2 power-off announced;
                              0x81..0x83 a reply (below); else malformed
         6     2  name_len    length of the host name, 1..255
         8    16  boot_id     random, chosen when the agent starts
        24     8  sequence    1, 2, 3, ... within one boot_id
        32     8  timestamp   sender's UTC wall clock, ms since the epoch
        40     n  host name   UTF-8, printable, no white space
      40+n    32  mac         HMAC-SHA256(key, bytes 0 .. 40+n-1)

The datagram is exactly ``72 + name_len`` bytes (73..327); anything
shorter is *truncated*, anything longer *oversized*. The MAC covers the
whole packet, so nothing in it can be changed without the key.

Why boot_id + sequence rather than a persisted counter: the agent keeps no
state on disk (a compute host's disk may be what failed, and a counter
file restored from a backup would go back), yet an agent restart must not
look like a replay. A fresh random boot_id starts a new sequence; the
listener accepts a new boot_id only with a timestamp later than the last
packet it accepted from that host, so an old boot's captured packets
cannot come back. Within a boot_id the sequence must grow.

What a captured packet can do: nothing once the listener has seen a newer
packet from that host. A listener that has just started knows no
sequences, so a packet captured less than ``max_clock_skew`` seconds ago
could be accepted once; timestamps bound that window.

Shutdown announcements: a heartbeat whose flags say ``reboot`` (1) or
``power-off`` (2) announces a clean shutdown; the agent sends it from its
systemd stop path, as the next sequence of its boot id, and repeats it
(new sequences) until it is answered or gives up. It is signed and
checked for freshness and replay exactly like a heartbeat.

Replies (flags ``0x80 | status``) go the other way, from the leading
service copy to the address the announcement came from: ``noted`` (1,
the agent may go on), ``draining`` (2, migrate: wait, ask again) and
``drained`` (3, migrate done: go on). A reply carries the host name, the
announcement's boot id and sequence (so an old reply cannot answer a new
announcement), the service's clock, and the HMAC of the host's key. The
listener never accepts a reply and the agent never accepts a heartbeat,
so neither can be reflected at the other. A listener of an older version
rejects an announcement as malformed: the host then simply looks failed.

Version 2 (answers, the host's report). Same header, then a 2-byte
extension length, the host name, the extension, the MAC::

         0    40  as version 1 (version byte 2)
        40     2  ext_len     0..MAX_EXT
        42     n  host name
      42+n     m  extension:  records of type (1), length (2), value
    42+n+m    32  mac         HMAC-SHA256(key, bytes 0 .. 42+n+m-1)

A version 2 heartbeat carries the host's :class:`Report` (isolation state,
its changes not yet acknowledged, the watchdog's state and deadline, the
digest of the isolation policy the agent holds). The leading copy answers
every version 2 heartbeat it accepts with an *answer* (flags ``0x84``,
version 2 only): the heartbeat's boot id and sequence, the service's
clock, and its :class:`Answer` (the host's isolation policy when the
agent's digest is not current, the pause, a stand-down). Records of an
unknown type are skipped: later releases add records, not versions.

How versions interoperate: a listener of this release accepts both; an
older one rejects version 2 as ``bad_version``. An agent therefore sends
version 1 to a collector until that collector has answered it once; the
listener answers a version 1 heartbeat a few times per agent run (a
*probe*: :data:`PROBES`), which an older agent never reads while it
runs. So an old agent works with a new listener, a new agent with an old
listener (it stays at version 1, never hears answers and so never judges
itself isolated), and a new pair moves to version 2 within a beat.

Replay protection of answers: an answer names the heartbeat it answers;
the agent accepts it only for a heartbeat it sent within the last few
seconds and not answered yet, so a captured answer is worthless once
that heartbeat is older. The agent dates what it learns from an answer
at the moment it *sent* the heartbeat answered (never later): a delayed
answer cannot stretch what the service may assume about the host.

Key rotation: the listener holds a current and an optional previous key
and accepts either; agents switch to the new key at their own pace, then
the previous key is removed. With per-host keys (see
:mod:`instanceha.heartbeat.keys`) the keys are those derived for the
host the packet names, from the current and the previous master.
"""

from collections.abc import Callable
import dataclasses
import hashlib
import hmac
import math
import os
import struct

MAGIC = b'IHHB'
VERSION = 1
#: The version with answers and the host's report.
VERSION_2 = 2
VERSIONS = (VERSION, VERSION_2)
HEADER = struct.Struct('!4sBBH16sQQ')
EXT_LEN = struct.Struct('!H')
MAC_SIZE = hashlib.sha256().digest_size
MAX_NAME = 255
BOOT_ID_SIZE = 16
MIN_PACKET = HEADER.size + 1 + MAC_SIZE
MAX_PACKET = HEADER.size + MAX_NAME + MAC_SIZE
#: Largest extension: an isolation policy listing a few hundred
#: protected instances (one answer, sent when the policy changed).
MAX_EXT = 16384
#: Largest datagram of either version: what a receiver reads.
MAX_DATAGRAM = MAX_PACKET + EXT_LEN.size + MAX_EXT
#: Version 1 heartbeats answered per agent run (boot id) by one listener,
#: so a new agent learns it may speak version 2 (several: one may be
#: lost) and an old agent gets a handful of datagrams it never reads.
PROBES = 3

# Why a packet was rejected; also the labels of the rejection counters.
TRUNCATED = 'truncated'
OVERSIZED = 'oversized'
BAD_MAGIC = 'bad_magic'
BAD_VERSION = 'bad_version'
MALFORMED = 'malformed'
BAD_HMAC = 'bad_hmac'
UNKNOWN_HOST = 'unknown_host'
STALE = 'stale'
FUTURE = 'future'
REPLAY = 'replay'
#: The very packet last accepted from that host, again: a collector
#: reached on two addresses gets each packet twice. Rejected like a
#: replay but harmless (nothing changes), so it is logged at debug level.
DUPLICATE = 'duplicate'
#: A reply (service to agent) sent to the listener, or a reply that does
#: not answer the agent's own announcement.
UNEXPECTED = 'unexpected'
#: A version 2 extension that cannot be parsed.
BAD_EXTENSION = 'bad_extension'
REASONS = (TRUNCATED, OVERSIZED, BAD_MAGIC, BAD_VERSION, MALFORMED,
           BAD_HMAC, UNKNOWN_HOST, STALE, FUTURE, REPLAY, DUPLICATE,
           UNEXPECTED, BAD_EXTENSION)

#: Announcement kinds by flags value (0: a plain heartbeat).
REBOOT = 'reboot'
POWEROFF = 'poweroff'
_KIND_FLAGS = {REBOOT: 1, POWEROFF: 2}
_FLAG_KINDS = {v: k for k, v in _KIND_FLAGS.items()}
#: Reply statuses, by flags value without REPLY_FLAG.
REPLY_FLAG = 0x80
NOTED = 'noted'
DRAINING = 'draining'
DRAINED = 'drained'
#: An answer to a version 2 heartbeat (version 2 only): a reply whose
#: status is ANSWER.
ANSWER = 'answer'
_REPLY_FLAGS = {NOTED: 1, DRAINING: 2, DRAINED: 3, ANSWER: 4}
_FLAG_REPLIES = {v: k for k, v in _REPLY_FLAGS.items()}
_VALID_FLAGS = frozenset({0, *_FLAG_KINDS,
                          *(REPLY_FLAG | v for v in _FLAG_REPLIES)})

#: The agent's view of its link to the service (:class:`Report`):
#: not heard any answer since it started (nothing is judged), hears it,
#: hears no answer but reaches an isolation address, reaches neither.
UNKNOWN = 'unknown'
CONNECTED = 'connected'
PARTITIONED = 'partitioned'
ISOLATED = 'isolated'
LINK_STATES = (UNKNOWN, CONNECTED, PARTITIONED, ISOLATED)
#: The watchdog as the agent reports it: not configured; configured but
#: not armed (no protected instance, or never heard the service);
#: armed; armed and asking to be released (idle grace over: disarmed
#: only once an answer acknowledged that); released for a pause;
#: released because every copy of the service said it stops.
WD_OFF = 'off'
WD_IDLE = 'idle'
WD_ARMED = 'armed'
WD_RELEASING = 'releasing'
WD_PAUSED = 'paused'
WD_STANDDOWN = 'standdown'
WATCHDOG_STATES = (WD_OFF, WD_IDLE, WD_ARMED, WD_RELEASING, WD_PAUSED,
                   WD_STANDDOWN)
#: Isolation responses (:class:`Policy`).
RESPONSE_NONE = 'none'
RESPONSE_POWEROFF = 'poweroff'
RESPONSE_SHUTDOWN = 'shutdown'
RESPONSES = (RESPONSE_NONE, RESPONSE_POWEROFF, RESPONSE_SHUTDOWN)

# Extension record types. Agent to service:
_T_STATE = 1      # link state (1), changes (4), watchdog (1), deadline ms (4)
_T_CHANGE = 2     # number (4), old (1), new (1), age ms (4); repeatable
_T_DIGEST = 3     # digest of the policy held (8)
# Service to agent:
_T_POLICY = 16    # digest (8), response (1), shutdown wait s (2)
_T_PROTECTED = 17  # instance ids: length (1) + UTF-8, repeated; repeatable
_T_PAUSE = 18     # seconds left (4), 0xffffffff: until resumed
_T_STANDDOWN = 19  # empty: this copy stops
_T_POLICY_OK = 20  # the digest the agent holds is current (8)
_TLV = struct.Struct('!BH')
_STATE = struct.Struct('!BIBI')
_CHANGE = struct.Struct('!IBBI')
_POLICY = struct.Struct('!8sBH')
_FOREVER = 0xffffffff
DIGEST_SIZE = 8


class Rejected(Exception):
    """A packet that must be ignored; ``reason`` is one of REASONS."""

    def __init__(self, reason: str, detail: str = ''):
        super().__init__('%s%s' % (reason, ': ' + detail if detail else ''))
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    """An authenticated heartbeat (freshness and replay not yet checked)."""

    host: str
    boot_id: bytes
    sequence: int
    #: Sender's clock, seconds since the epoch.
    timestamp: float
    #: Index of the key that verified it: 0 current, 1 previous.
    key_index: int = 0
    #: REBOOT or POWEROFF for a shutdown announcement, None otherwise.
    kind: str | None = None
    #: For a reply only: NOTED, DRAINING, DRAINED or ANSWER.
    reply: str | None = None
    version: int = VERSION
    #: A version 2 heartbeat's report, None otherwise.
    report: 'Report | None' = None
    #: An answer's content (reply ANSWER), None otherwise.
    answer: 'Answer | None' = None


@dataclasses.dataclass(frozen=True)
class Change:
    """One change of the agent's link state, as reported."""

    #: 1, 2, ... since the agent started: the listener logs each once.
    number: int
    old: str
    new: str
    #: Seconds before the heartbeat that reports it.
    age: float


@dataclasses.dataclass(frozen=True)
class Report:
    """What a version 2 heartbeat tells about its host."""

    state: str = UNKNOWN
    #: Link state changes since the agent started.
    changes: int = 0
    watchdog: str = WD_OFF
    #: With an armed watchdog: seconds after the heartbeat it last had
    #: answered was sent (agent's clock) by which the host has reset
    #: unless it heard another answer. 0 when not armed.
    deadline: float = 0.0
    #: Digest of the isolation policy the agent holds (b'' none).
    policy_digest: bytes = b''
    #: Changes not yet acknowledged by an answer, oldest first.
    pending: tuple[Change, ...] = ()


@dataclasses.dataclass(frozen=True)
class Policy:
    """A host's isolation response, as the service tells its agent.

    ``protected``: the instances that get the response (those instanceha
    would recover); any other instance on the host, including one the
    service had not seen yet, is left running.
    """

    response: str = RESPONSE_NONE
    #: shutdown: seconds a guest gets to shut down before it is powered
    #: off.
    shutdown_wait: int = 120
    protected: tuple[str, ...] = ()

    def digest(self) -> bytes:
        """Names this policy in heartbeats (the agent's cache is current)."""
        h = hashlib.sha256(('%s\n%d\n' % (self.response, self.shutdown_wait)
                            ).encode('utf-8'))
        for uuid in sorted(self.protected):
            h.update(uuid.encode('utf-8') + b'\n')
        return h.digest()[:DIGEST_SIZE]


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the leading copy tells an agent in an answer."""

    #: The policy, sent when the agent's digest is not current; None: the
    #: agent's is (then ``policy_ok`` is True) or the service has none.
    policy: Policy | None = None
    policy_ok: bool = False
    #: Instance HA is paused for this many more seconds (math.inf: until
    #: resumed); None: not paused.
    pause: float | None = None
    #: This copy stops: it answers nothing until it runs and leads again.
    standdown: bool = False


def new_boot_id() -> bytes:
    return os.urandom(BOOT_ID_SIZE)


def _valid_name(name: str) -> bool:
    return name.isprintable() and not any(c.isspace() for c in name)


def check_host_name(host: str) -> bytes:
    """The host name as sent.

    :raises ValueError: if the format cannot carry it.
    """
    name = host.encode('utf-8')
    if not 1 <= len(name) <= MAX_NAME or not _valid_name(host):
        raise ValueError('host name %r: 1..%d printable UTF-8 bytes without '
                         'white space required' % (host, MAX_NAME))
    return name


def _records(items: list[tuple[int, bytes]]) -> bytes:
    return b''.join(_TLV.pack(t, len(v)) + v for t, v in items)


def _ms(seconds: float) -> int:
    return max(0, min(_FOREVER - 1, int(seconds * 1000)))


def encode_report(report: Report) -> bytes:
    """A report as extension records."""
    for value, allowed in ((report.state, LINK_STATES),
                           (report.watchdog, WATCHDOG_STATES)):
        if value not in allowed:
            raise ValueError('%r: one of %s expected'
                             % (value, ', '.join(allowed)))
    items = [(_T_STATE, _STATE.pack(
        LINK_STATES.index(report.state), report.changes % 2 ** 32,
        WATCHDOG_STATES.index(report.watchdog), _ms(report.deadline)))]
    for ch in report.pending:
        items.append((_T_CHANGE, _CHANGE.pack(
            ch.number % 2 ** 32, LINK_STATES.index(ch.old),
            LINK_STATES.index(ch.new), _ms(ch.age))))
    if report.policy_digest:
        items.append((_T_DIGEST, report.policy_digest))
    return _records(items)


def encode_answer(answer: Answer) -> bytes:
    """An answer as extension records.

    :raises ValueError: a policy the format cannot carry.
    """
    items = []
    pol = answer.policy
    if pol is not None:
        if pol.response not in RESPONSES:
            raise ValueError('isolation response %r: one of %s expected'
                             % (pol.response, ', '.join(RESPONSES)))
        items.append((_T_POLICY, _POLICY.pack(
            pol.digest(), RESPONSES.index(pol.response),
            max(0, min(65535, pol.shutdown_wait)))))
        chunk = b''
        for uuid in sorted(pol.protected):
            raw = uuid.encode('utf-8')
            if not 0 < len(raw) < 256:
                raise ValueError('instance id %r too long' % uuid)
            if len(chunk) + 1 + len(raw) > 4096:
                items.append((_T_PROTECTED, chunk))
                chunk = b''
            chunk += bytes([len(raw)]) + raw
        if chunk:
            items.append((_T_PROTECTED, chunk))
    elif answer.policy_ok:
        items.append((_T_POLICY_OK, b''))
    if answer.pause is not None:
        left = (_FOREVER if math.isinf(answer.pause)
                else max(0, min(_FOREVER - 1, int(answer.pause))))
        items.append((_T_PAUSE, struct.pack('!I', left)))
    if answer.standdown:
        items.append((_T_STANDDOWN, b''))
    return _records(items)


def encode(host: str, boot_id: bytes, sequence: int, timestamp: float,
           key: bytes, kind: str | None = None,
           reply: str | None = None, *, report: Report | None = None,
           answer: Answer | None = None) -> bytes:
    """Build and sign one heartbeat packet.

    :param kind: REBOOT or POWEROFF for a shutdown announcement.
    :param reply: NOTED, DRAINING or DRAINED for the service's reply to
        an announcement (``boot_id`` and ``sequence`` are the
        announcement's).
    :param report: makes it a version 2 heartbeat carrying the report.
    :param answer: makes it a version 2 answer (``boot_id`` and
        ``sequence`` are those of the heartbeat answered).
    :raises ValueError: for a host name, boot id, sequence, kind, reply
        or extension the format cannot carry.
    """
    if kind is not None and kind not in _KIND_FLAGS:
        raise ValueError('announcement kind %r: one of %s expected'
                         % (kind, ', '.join(_KIND_FLAGS)))
    if reply is not None and reply not in _REPLY_FLAGS:
        raise ValueError('reply %r: one of %s expected'
                         % (reply, ', '.join(_REPLY_FLAGS)))
    if answer is not None:
        reply = ANSWER
    elif reply == ANSWER:
        answer = Answer()
    flags = (REPLY_FLAG | _REPLY_FLAGS[reply] if reply
             else _KIND_FLAGS.get(kind, 0))
    name = check_host_name(host)
    if len(boot_id) != BOOT_ID_SIZE:
        raise ValueError('boot id must be %d bytes' % BOOT_ID_SIZE)
    if not 0 < sequence < 2 ** 64:
        raise ValueError('sequence %r out of range' % sequence)
    if report is None and answer is None:
        body = HEADER.pack(MAGIC, VERSION, flags, len(name), boot_id,
                           sequence, int(timestamp * 1000)) + name
    else:
        ext = encode_answer(answer) if answer else encode_report(report)
        if len(ext) > MAX_EXT:
            raise ValueError('extension of %d bytes, at most %d'
                             % (len(ext), MAX_EXT))
        body = HEADER.pack(MAGIC, VERSION_2, flags, len(name), boot_id,
                           sequence, int(timestamp * 1000)
                           ) + EXT_LEN.pack(len(ext)) + name + ext
    return body + hmac.new(key, body, hashlib.sha256).digest()


def _host_name(data: bytes, start: int, length: int) -> str:
    try:
        host = bytes(data[start:start + length]).decode('utf-8')
    except UnicodeDecodeError:
        raise Rejected(MALFORMED, 'host name is not UTF-8') from None
    if not _valid_name(host):
        raise Rejected(MALFORMED, 'host name %r has unprintable or white '
                       'space characters' % host)
    return host


def _parse_records(ext: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos < len(ext):
        if pos + _TLV.size > len(ext):
            raise Rejected(BAD_EXTENSION, 'record header cut at %d' % pos)
        rtype, length = _TLV.unpack_from(ext, pos)
        pos += _TLV.size
        if pos + length > len(ext):
            raise Rejected(BAD_EXTENSION, 'record %d cut' % rtype)
        out.append((rtype, ext[pos:pos + length]))
        pos += length
    return out


def _fixed(value: bytes, fmt: struct.Struct, rtype: int) -> tuple:
    if len(value) < fmt.size:
        raise Rejected(BAD_EXTENSION, 'record %d too short' % rtype)
    return fmt.unpack_from(value)


def _pick(table: tuple[str, ...], index: int, what: str) -> str:
    if index >= len(table):
        raise Rejected(BAD_EXTENSION, 'unknown %s %d' % (what, index))
    return table[index]


def decode_report(ext: bytes) -> Report:
    """A version 2 heartbeat's report (unknown records are skipped)."""
    fields: dict = {}
    pending = []
    for rtype, value in _parse_records(ext):
        if rtype == _T_STATE:
            state, changes, wd, deadline = _fixed(value, _STATE, rtype)
            fields.update(state=_pick(LINK_STATES, state, 'link state'),
                          changes=changes, deadline=deadline / 1000.0,
                          watchdog=_pick(WATCHDOG_STATES, wd, 'watchdog'))
        elif rtype == _T_CHANGE:
            number, old, new, age = _fixed(value, _CHANGE, rtype)
            pending.append(Change(number, _pick(LINK_STATES, old, 'state'),
                                  _pick(LINK_STATES, new, 'state'),
                                  age / 1000.0))
        elif rtype == _T_DIGEST:
            fields['policy_digest'] = bytes(value[:DIGEST_SIZE])
    return Report(pending=tuple(pending), **fields)


def decode_answer(ext: bytes) -> Answer:
    """An answer's content (unknown records are skipped).

    A policy whose instances do not match its digest is rejected: the
    agent would otherwise cache one policy under another's name.
    """
    fields: dict = {}
    head = None
    protected: list[str] = []
    for rtype, value in _parse_records(ext):
        if rtype == _T_POLICY:
            head = _fixed(value, _POLICY, rtype)
        elif rtype == _T_PROTECTED:
            pos = 0
            while pos < len(value):
                length = value[pos]
                raw = bytes(value[pos + 1:pos + 1 + length])
                if not length or len(raw) != length:
                    raise Rejected(BAD_EXTENSION, 'instance id cut')
                try:
                    protected.append(raw.decode('utf-8'))
                except UnicodeDecodeError:
                    raise Rejected(BAD_EXTENSION,
                                   'instance id not UTF-8') from None
                pos += 1 + length
        elif rtype == _T_POLICY_OK:
            fields['policy_ok'] = True
        elif rtype == _T_PAUSE:
            (left,) = _fixed(value, struct.Struct('!I'), rtype)
            fields['pause'] = math.inf if left == _FOREVER else float(left)
        elif rtype == _T_STANDDOWN:
            fields['standdown'] = True
    if head is not None:
        digest, response, wait = head
        policy = Policy(_pick(RESPONSES, response, 'response'), wait,
                        tuple(sorted(protected)))
        if policy.digest() != digest:
            raise Rejected(BAD_EXTENSION, 'policy does not match its '
                           'digest')
        fields['policy'] = policy
    return Answer(**fields)


def decode(data: bytes, keys: tuple[bytes, ...] | Callable[
        [str], tuple[bytes, ...]], *, replies: bool = False) -> Heartbeat:
    """Check a packet's shape and MAC and return its content.

    :param replies: what the caller takes: False (the listener)
        heartbeats and announcements, True (the agent) replies and
        answers only; the other kind is rejected as UNEXPECTED, after its
        MAC was checked.

    Cheap checks come first so garbage costs no HMAC; the name and the
    extension are decoded only once the MAC proved the sender holds a
    key.

    :param keys: the accepted keys, current first; or a function giving
        them for the host name the packet carries (per-host keys), which
        may raise :class:`Rejected` (e.g. for an unknown host).
    :raises Rejected: with the first reason the packet fails.
    """
    size = len(data)
    if size < MIN_PACKET:
        raise Rejected(TRUNCATED, '%d bytes, at least %d expected'
                       % (size, MIN_PACKET))
    if size > MAX_DATAGRAM:
        raise Rejected(OVERSIZED, 'larger than %d bytes' % MAX_DATAGRAM)
    magic, version, flags, name_len, boot_id, seq, ts_ms = (
        HEADER.unpack_from(data))
    if magic != MAGIC:
        raise Rejected(BAD_MAGIC, 'magic %s' % magic.hex())
    if version not in VERSIONS:
        raise Rejected(BAD_VERSION, 'version %d, only %s are understood'
                       % (version, ' and '.join(map(str, VERSIONS))))
    start, ext_len = HEADER.size, 0
    if version == VERSION_2:
        if size < HEADER.size + EXT_LEN.size:
            raise Rejected(TRUNCATED, '%d bytes' % size)
        (ext_len,) = EXT_LEN.unpack_from(data, HEADER.size)
        start += EXT_LEN.size
    elif size > MAX_PACKET:
        raise Rejected(OVERSIZED, 'larger than %d bytes' % MAX_PACKET)
    expected = start + name_len + ext_len + MAC_SIZE
    if size < expected:
        raise Rejected(TRUNCATED, '%d bytes, name length says %d'
                       % (size, expected))
    if size > expected:
        raise Rejected(OVERSIZED, '%d bytes, name length says %d'
                       % (size, expected))
    if (flags not in _VALID_FLAGS or not name_len or ext_len > MAX_EXT
            or (flags == REPLY_FLAG | _REPLY_FLAGS[ANSWER])
            != (version == VERSION_2 and bool(flags & REPLY_FLAG))):
        raise Rejected(MALFORMED, 'flags %d, name length %d, version %d'
                       % (flags, name_len, version))
    body = memoryview(data)[:-MAC_SIZE]
    mac = data[-MAC_SIZE:]
    host = None
    if callable(keys):
        # Per-host keys: the (not yet authenticated) name selects the
        # key; a wrong name simply fails the MAC.
        host = _host_name(data, start, name_len)
        keys = keys(host)
    for index, key in enumerate(keys):
        if hmac.compare_digest(
                hmac.new(key, body, hashlib.sha256).digest(), mac):
            break
    else:
        raise Rejected(BAD_HMAC, 'no configured key verifies it')
    if host is None:
        host = _host_name(data, start, name_len)
    if not seq:
        raise Rejected(MALFORMED, 'sequence 0')
    if bool(flags & REPLY_FLAG) != replies:
        raise Rejected(UNEXPECTED, 'a %s where %s are expected' % (
            'reply' if flags & REPLY_FLAG else 'heartbeat',
            'replies' if replies else 'heartbeats'))
    reply = (_FLAG_REPLIES.get(flags & ~REPLY_FLAG)
             if flags & REPLY_FLAG else None)
    report = answer = None
    if version == VERSION_2:
        ext = bytes(data[start + name_len:start + name_len + ext_len])
        if reply == ANSWER:
            answer = decode_answer(ext)
        else:
            report = decode_report(ext)
    return Heartbeat(host=host, boot_id=bytes(boot_id), sequence=seq,
                     timestamp=ts_ms / 1000.0, key_index=index,
                     kind=_FLAG_KINDS.get(flags), reply=reply,
                     version=version, report=report, answer=answer)
