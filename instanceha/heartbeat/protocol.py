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

"""The host heartbeat wire protocol, version 1.

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
import os
import struct

MAGIC = b'IHHB'
VERSION = 1
HEADER = struct.Struct('!4sBBH16sQQ')
MAC_SIZE = hashlib.sha256().digest_size
MAX_NAME = 255
BOOT_ID_SIZE = 16
MIN_PACKET = HEADER.size + 1 + MAC_SIZE
MAX_PACKET = HEADER.size + MAX_NAME + MAC_SIZE

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
REASONS = (TRUNCATED, OVERSIZED, BAD_MAGIC, BAD_VERSION, MALFORMED,
           BAD_HMAC, UNKNOWN_HOST, STALE, FUTURE, REPLAY, DUPLICATE,
           UNEXPECTED)

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
_REPLY_FLAGS = {NOTED: 1, DRAINING: 2, DRAINED: 3}
_FLAG_REPLIES = {v: k for k, v in _REPLY_FLAGS.items()}
_VALID_FLAGS = frozenset({0, *_FLAG_KINDS,
                          *(REPLY_FLAG | v for v in _FLAG_REPLIES)})


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
    #: For a reply only: NOTED, DRAINING or DRAINED.
    reply: str | None = None


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


def encode(host: str, boot_id: bytes, sequence: int, timestamp: float,
           key: bytes, kind: str | None = None,
           reply: str | None = None) -> bytes:
    """Build and sign one heartbeat packet.

    :param kind: REBOOT or POWEROFF for a shutdown announcement.
    :param reply: NOTED, DRAINING or DRAINED for the service's reply to
        an announcement (``boot_id`` and ``sequence`` are the
        announcement's).
    :raises ValueError: for a host name, boot id, sequence, kind or reply
        the format cannot carry.
    """
    if kind is not None and kind not in _KIND_FLAGS:
        raise ValueError('announcement kind %r: one of %s expected'
                         % (kind, ', '.join(_KIND_FLAGS)))
    if reply is not None and reply not in _REPLY_FLAGS:
        raise ValueError('reply %r: one of %s expected'
                         % (reply, ', '.join(_REPLY_FLAGS)))
    flags = (REPLY_FLAG | _REPLY_FLAGS[reply] if reply
             else _KIND_FLAGS.get(kind, 0))
    name = check_host_name(host)
    if len(boot_id) != BOOT_ID_SIZE:
        raise ValueError('boot id must be %d bytes' % BOOT_ID_SIZE)
    if not 0 < sequence < 2 ** 64:
        raise ValueError('sequence %r out of range' % sequence)
    body = HEADER.pack(MAGIC, VERSION, flags, len(name), boot_id, sequence,
                       int(timestamp * 1000)) + name
    return body + hmac.new(key, body, hashlib.sha256).digest()


def _host_name(data: bytes) -> str:
    try:
        host = bytes(data[HEADER.size:-MAC_SIZE]).decode('utf-8')
    except UnicodeDecodeError:
        raise Rejected(MALFORMED, 'host name is not UTF-8') from None
    if not _valid_name(host):
        raise Rejected(MALFORMED, 'host name %r has unprintable or white '
                       'space characters' % host)
    return host


def decode(data: bytes, keys: tuple[bytes, ...] | Callable[
        [str], tuple[bytes, ...]], *, replies: bool = False) -> Heartbeat:
    """Check a packet's shape and MAC and return its content.

    :param replies: what the caller takes: False (the listener)
        heartbeats and announcements, True (the agent) replies only; the
        other kind is rejected as UNEXPECTED, after its MAC was checked.

    Cheap checks come first so garbage costs no HMAC; the name is decoded
    only once the MAC proved the sender holds a key.

    :param keys: the accepted keys, current first; or a function giving
        them for the host name the packet carries (per-host keys), which
        may raise :class:`Rejected` (e.g. for an unknown host).
    :raises Rejected: with the first reason the packet fails.
    """
    size = len(data)
    if size < MIN_PACKET:
        raise Rejected(TRUNCATED, '%d bytes, at least %d expected'
                       % (size, MIN_PACKET))
    if size > MAX_PACKET:
        raise Rejected(OVERSIZED, 'larger than %d bytes' % MAX_PACKET)
    magic, version, flags, name_len, boot_id, seq, ts_ms = (
        HEADER.unpack_from(data))
    if magic != MAGIC:
        raise Rejected(BAD_MAGIC, 'magic %s' % magic.hex())
    if version != VERSION:
        raise Rejected(BAD_VERSION, 'version %d, only %d is understood'
                       % (version, VERSION))
    expected = HEADER.size + name_len + MAC_SIZE
    if size < expected:
        raise Rejected(TRUNCATED, '%d bytes, name length says %d'
                       % (size, expected))
    if size > expected:
        raise Rejected(OVERSIZED, '%d bytes, name length says %d'
                       % (size, expected))
    if flags not in _VALID_FLAGS or not name_len:
        raise Rejected(MALFORMED, 'flags %d, name length %d'
                       % (flags, name_len))
    body = memoryview(data)[:-MAC_SIZE]
    mac = data[-MAC_SIZE:]
    host = None
    if callable(keys):
        # Per-host keys: the (not yet authenticated) name selects the
        # key; a wrong name simply fails the MAC.
        host = _host_name(data)
        keys = keys(host)
    for index, key in enumerate(keys):
        if hmac.compare_digest(
                hmac.new(key, body, hashlib.sha256).digest(), mac):
            break
    else:
        raise Rejected(BAD_HMAC, 'no configured key verifies it')
    if host is None:
        host = _host_name(data)
    if not seq:
        raise Rejected(MALFORMED, 'sequence 0')
    if bool(flags & REPLY_FLAG) != replies:
        raise Rejected(UNEXPECTED, 'a %s where %s are expected' % (
            'reply' if flags & REPLY_FLAG else 'heartbeat',
            'replies' if replies else 'heartbeats'))
    return Heartbeat(host=host, boot_id=bytes(boot_id), sequence=seq,
                     timestamp=ts_ms / 1000.0, key_index=index,
                     kind=_FLAG_KINDS.get(flags),
                     reply=_FLAG_REPLIES.get(flags & ~REPLY_FLAG)
                     if flags & REPLY_FLAG else None)
