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

"""The fence_kdump message, as ClusterLabs' fence_kdump_send sends it.

fence-agents' ``fence_kdump.h`` defines a packed struct of two 32-bit
integers in the sender's byte order: ``magic_number`` 0x1B302A40 and
``version`` 1, so a datagram is exactly 8 bytes (an x86 host sends
``40 2a 30 1b 01 00 00 00``). The kdump kernel sends it every
``--interval`` seconds (10 by default) to UDP port 7410 until the dump is
written. The message carries no host name and no authentication: the
sender is its source address, mapped to a host by configuration or
reverse DNS.

Both byte orders are accepted so a big-endian host (s390x, ppc64)
is understood too.
"""

import struct

MAGIC = 0x1B302A40
VERSION = 1
DEFAULT_PORT = 7410
SIZE = 8
_LE = struct.Struct('<II')
_BE = struct.Struct('>II')

# Why a kdump packet was rejected (counter labels).
TRUNCATED = 'truncated'
OVERSIZED = 'oversized'
BAD_MAGIC = 'bad_magic'
BAD_VERSION = 'bad_version'
UNKNOWN_SENDER = 'unknown_sender'
REASONS = (TRUNCATED, OVERSIZED, BAD_MAGIC, BAD_VERSION, UNKNOWN_SENDER)


class Rejected(Exception):
    """A datagram that is not a fence_kdump message."""

    def __init__(self, reason: str, detail: str = ''):
        super().__init__('%s%s' % (reason, ': ' + detail if detail else ''))
        self.reason = reason
        self.detail = detail


def encode(version: int = VERSION, byteorder: str = 'little') -> bytes:
    """A message as fence_kdump_send would send it (for tests and tools)."""
    packer = _LE if byteorder == 'little' else _BE
    return packer.pack(MAGIC, version)


def decode(data: bytes) -> int:
    """Check a fence_kdump datagram; return its version.

    :raises Rejected: when it is not exactly one version-1 message.
    """
    if len(data) < SIZE:
        raise Rejected(TRUNCATED, '%d bytes, %d expected' % (len(data), SIZE))
    if len(data) > SIZE:
        raise Rejected(OVERSIZED, '%d bytes, %d expected' % (len(data), SIZE))
    for packer in (_LE, _BE):
        magic, version = packer.unpack(data)
        if magic == MAGIC:
            if version != VERSION:
                raise Rejected(BAD_VERSION, 'version %d, only %d is '
                               'understood' % (version, VERSION))
            return version
    raise Rejected(BAD_MAGIC, 'magic %s' % bytes(data[:4]).hex())
