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

"""The heartbeat wire format, the key files and the fence_kdump parser."""

import os
import struct

import fixtures
import hypothesis
from hypothesis import strategies as st
import testtools

from instanceha.heartbeat import kdump
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol as p

KEY = b'k' * 32
OLD_KEY = b'o' * 32
BOOT = b'b' * 16
TS = 1_700_000_000.25

names = st.text(
    st.characters(blacklist_categories=('Cc', 'Cs', 'Zs', 'Zl', 'Zp', 'Cf',
                                        'Co', 'Cn')),
    min_size=1, max_size=60).filter(lambda n: p._valid_name(n))


def packet(host='host1', seq=1, ts=TS, key=KEY, boot=BOOT):
    return p.encode(host, boot, seq, ts, key)


def resign(body: bytes, key=KEY) -> bytes:
    import hashlib
    import hmac
    return body + hmac.new(key, body, hashlib.sha256).digest()


class TestHeartbeatProtocol(testtools.TestCase):

    def reason(self, data, keys=(KEY,)):
        return self.assertRaises(p.Rejected, p.decode, data, keys).reason

    def test_round_trip(self):
        hb = p.decode(packet('compute-1.example', 7), (KEY,))
        self.assertEqual(('compute-1.example', BOOT, 7, TS, 0),
                         (hb.host, hb.boot_id, hb.sequence, hb.timestamp,
                          hb.key_index))

    def test_layout_is_documented_one(self):
        data = packet('h1', 2)
        self.assertEqual(72 + 2, len(data))
        self.assertEqual(b'IHHB\x01\x00\x00\x02', data[:8])
        self.assertEqual(BOOT, data[8:24])
        self.assertEqual((2, int(TS * 1000)), struct.unpack('!QQ',
                                                            data[24:40]))
        self.assertEqual(b'h1', data[40:42])

    def test_previous_key_accepted_and_reported(self):
        hb = p.decode(packet(key=OLD_KEY), (KEY, OLD_KEY))
        self.assertEqual(1, hb.key_index)

    def test_truncated(self):
        data = packet()
        self.assertEqual(p.TRUNCATED, self.reason(b''))
        self.assertEqual(p.TRUNCATED, self.reason(data[:p.MIN_PACKET - 1]))
        # Long enough in general, shorter than its name length says.
        self.assertEqual(p.TRUNCATED, self.reason(packet('a' * 20)[:-1]))

    def test_oversized(self):
        self.assertEqual(p.OVERSIZED,
                         self.reason(b'x' * (p.MAX_DATAGRAM + 1)))
        self.assertEqual(p.OVERSIZED, self.reason(packet() + b'\0'))

    def test_bad_magic_and_version(self):
        data = packet()
        self.assertEqual(p.BAD_MAGIC, self.reason(b'XXXX' + data[4:]))
        self.assertEqual(p.BAD_VERSION,
                         self.reason(data[:4] + b'\x03' + data[5:]))

    def test_bad_hmac(self):
        data = bytearray(packet())
        data[30] ^= 1
        self.assertEqual(p.BAD_HMAC, self.reason(bytes(data)))
        self.assertEqual(p.BAD_HMAC, self.reason(packet(key=OLD_KEY)))
        self.assertEqual(p.BAD_HMAC, self.reason(packet()[:-1] + b'\0'))

    def test_malformed_even_when_signed(self):
        head = p.HEADER.pack(p.MAGIC, 1, 0, 2, BOOT, 1, 1)
        self.assertEqual(p.MALFORMED, self.reason(resign(head + b'\xff\xfe')))
        self.assertEqual(p.MALFORMED, self.reason(resign(head + b'a ')))
        flags = p.HEADER.pack(p.MAGIC, 1, 4, 2, BOOT, 1, 1)
        self.assertEqual(p.MALFORMED, self.reason(resign(flags + b'ab')))
        seq0 = p.HEADER.pack(p.MAGIC, 1, 0, 2, BOOT, 0, 1)
        self.assertEqual(p.MALFORMED, self.reason(resign(seq0 + b'ab')))

    def test_encode_refuses_what_it_cannot_carry(self):
        for bad in ('', 'a b', 'a\nb', 'x' * 256):
            self.assertRaises(ValueError, p.encode, bad, BOOT, 1, TS, KEY)
        self.assertRaises(ValueError, p.encode, 'h', b'short', 1, TS, KEY)
        self.assertRaises(ValueError, p.encode, 'h', BOOT, 0, TS, KEY)

    def test_limits_are_consistent(self):
        self.assertEqual(p.MAX_PACKET, len(packet('x' * 255)))
        self.assertEqual(p.MIN_PACKET, len(packet('x')))

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=400))
    def test_fuzz_garbage_only_ever_rejected(self, data):
        self.assertRaises(p.Rejected, p.decode, data, (KEY, OLD_KEY))

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.binary(min_size=4, max_size=400))
    def test_fuzz_with_valid_magic_only_ever_rejected(self, tail):
        data = p.MAGIC + b'\x01' + tail
        self.assertRaises(p.Rejected, p.decode, data, (KEY,))

    @hypothesis.settings(max_examples=200, deadline=None, database=None)
    @hypothesis.given(names, st.integers(1, 2 ** 64 - 1),
                      st.floats(0, 4e9), st.binary(min_size=16,
                                                   max_size=16))
    def test_fuzz_round_trip(self, host, seq, ts, boot):
        hb = p.decode(p.encode(host, boot, seq, ts, KEY), (OLD_KEY, KEY))
        self.assertEqual((host, boot, seq, 1),
                         (hb.host, hb.boot_id, hb.sequence, hb.key_index))
        self.assertLessEqual(abs(ts - hb.timestamp), 0.001)

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.data())
    def test_fuzz_any_change_is_rejected(self, data):
        good = packet('compute-7')
        pos = data.draw(st.integers(0, len(good) - 1))
        bit = data.draw(st.integers(0, 7))
        bad = bytearray(good)
        bad[pos] ^= 1 << bit
        self.assertRaises(p.Rejected, p.decode, bytes(bad), (KEY,))


class TestKeys(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path

    def write(self, name, content, mtime=None):
        path = os.path.join(self.dir, name)
        with open(path, 'wb') as f:
            f.write(content)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path

    def test_key_is_stripped(self):
        path = self.write('k', b'  %s\n' % KEY)
        self.assertEqual(KEY, keys.load_key(path))

    def test_short_key_names_file_not_content(self):
        path = self.write('k', b'secret-123\n')
        exc = self.assertRaises(ValueError, keys.load_key, path,
                                '[heartbeat] key_file')
        self.assertIn(path, str(exc))
        self.assertIn('[heartbeat] key_file', str(exc))
        self.assertNotIn('secret', str(exc))

    def test_huge_file_refused(self):
        path = self.write('k', b'a' * (keys.MAX_KEY_FILE + 1))
        self.assertRaises(ValueError, keys.load_key, path)

    def test_missing_file_names_option(self):
        exc = self.assertRaises(ValueError, keys.KeyRing,
                                os.path.join(self.dir, 'nope'))
        self.assertIn('[heartbeat] key_file', str(exc))
        self.assertIn('nope', str(exc))

    def test_rotation_reload(self):
        cur = self.write('cur', KEY, mtime=1000)
        prev = self.write('prev', OLD_KEY, mtime=1000)
        ring = keys.KeyRing(cur, prev)
        self.assertEqual((KEY, OLD_KEY), ring.keys)
        self.write('cur', b'n' * 32, mtime=2000)
        ring.reload()
        self.assertEqual((b'n' * 32, OLD_KEY), ring.keys)

    def test_broken_file_keeps_last_key_and_says_so_once(self):
        log = self.useFixture(fixtures.FakeLogger())
        cur = self.write('cur', KEY, mtime=1000)
        ring = keys.KeyRing(cur)
        self.write('cur', b'short', mtime=2000)
        ring.reload()
        ring.reload()
        self.assertEqual((KEY,), ring.keys)
        self.assertEqual(1, log.output.count('at least 16 are required'))
        self.assertNotIn('short', log.output.replace(cur, ''))


class TestKdumpProtocol(testtools.TestCase):

    #: What Debian's fence_kdump_send 4.12 sent on x86_64 (captured).
    CAPTURED = bytes.fromhex('402a301b01000000')

    def test_captured_packet(self):
        self.assertEqual(1, kdump.decode(self.CAPTURED))
        self.assertEqual(self.CAPTURED, kdump.encode())

    def test_big_endian_sender(self):
        self.assertEqual(1, kdump.decode(bytes.fromhex('1b302a4000000001')))

    def test_rejections(self):
        def reason(data):
            return self.assertRaises(kdump.Rejected, kdump.decode,
                                     data).reason
        self.assertEqual(kdump.TRUNCATED, reason(self.CAPTURED[:7]))
        self.assertEqual(kdump.OVERSIZED, reason(self.CAPTURED + b'\0'))
        self.assertEqual(kdump.BAD_MAGIC, reason(b'\0' * 8))
        self.assertEqual(kdump.BAD_VERSION, reason(kdump.encode(2)))
        self.assertEqual(kdump.BAD_VERSION, reason(kdump.encode(2, 'big')))

    @hypothesis.settings(max_examples=500, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=32))
    def test_fuzz(self, data):
        try:
            self.assertEqual(1, kdump.decode(data))
        except kdump.Rejected:
            return
        self.assertIn(data, (kdump.encode(), kdump.encode(byteorder='big')))
