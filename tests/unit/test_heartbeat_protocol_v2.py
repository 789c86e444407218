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

"""Heartbeat protocol version 2: the host's report and the answers."""

import hashlib
import hmac
import math

import hypothesis
from hypothesis import strategies as st
import testtools

from instanceha.heartbeat import protocol as p

KEY = b'k' * 32
BOOT = b'b' * 16
TS = 1_700_000_000.25

REPORT = p.Report(state=p.PARTITIONED, changes=3, watchdog=p.WD_ARMED,
                  deadline=75.5, policy_digest=b'd' * 8,
                  pending=(p.Change(2, p.CONNECTED, p.UNKNOWN, 30.0),
                           p.Change(3, p.UNKNOWN, p.PARTITIONED, 1.5)))
POLICY = p.Policy(p.RESPONSE_SHUTDOWN, 90, ('uuid-b', 'uuid-a'))


def sign(body: bytes, key=KEY) -> bytes:
    return body + hmac.new(key, body, hashlib.sha256).digest()


def v2(host='h1', ext=b'', flags=0, seq=1, name_len=None):
    name = host.encode()
    return sign(p.HEADER.pack(p.MAGIC, 2, flags, len(name) if name_len is
                              None else name_len, BOOT, seq, 1)
                + p.EXT_LEN.pack(len(ext)) + name + ext)


class TestVersion2(testtools.TestCase):

    def reason(self, data, replies=False):
        return self.assertRaises(p.Rejected, p.decode, data, (KEY,),
                                 replies=replies).reason

    def test_report_round_trip(self):
        data = p.encode('compute-1', BOOT, 5, TS, KEY, report=REPORT)
        self.assertEqual(2, data[4])
        hb = p.decode(data, (KEY,))
        self.assertEqual((2, 'compute-1', 5, None), (hb.version, hb.host,
                                                     hb.sequence, hb.reply))
        self.assertEqual(REPORT, hb.report)

    def test_version_1_unchanged_without_a_report(self):
        data = p.encode('h1', BOOT, 1, TS, KEY)
        self.assertEqual(1, data[4])
        hb = p.decode(data, (KEY,))
        self.assertEqual((1, None), (hb.version, hb.report))

    def test_answer_round_trip(self):
        ans = p.Answer(policy=POLICY, pause=600.0, standdown=True)
        data = p.encode('h1', BOOT, 9, TS, KEY, answer=ans)
        got = p.decode(data, (KEY,), replies=True)
        self.assertEqual(p.ANSWER, got.reply)
        self.assertEqual((9, BOOT), (got.sequence, got.boot_id))
        self.assertEqual(POLICY.response, got.answer.policy.response)
        self.assertEqual(('uuid-a', 'uuid-b'), got.answer.policy.protected)
        self.assertEqual(POLICY.digest(), got.answer.policy.digest())
        self.assertEqual((600.0, True), (got.answer.pause,
                                         got.answer.standdown))

    def test_open_ended_pause_and_policy_ok(self):
        got = p.decode(p.encode('h1', BOOT, 1, TS, KEY, answer=p.Answer(
            policy_ok=True, pause=math.inf)), (KEY,), replies=True)
        self.assertEqual((None, True, math.inf), (
            got.answer.policy, got.answer.policy_ok, got.answer.pause))

    def test_big_policy_fits(self):
        pol = p.Policy(p.RESPONSE_POWEROFF, 0, tuple(
            '%08d-0000-0000-0000-000000000000' % i for i in range(400)))
        got = p.decode(p.encode('h1', BOOT, 1, TS, KEY, answer=p.Answer(
            policy=pol)), (KEY,), replies=True)
        self.assertEqual(pol.digest(), got.answer.policy.digest())

    def test_digest_names_content(self):
        self.assertEqual(POLICY.digest(), p.Policy(
            p.RESPONSE_SHUTDOWN, 90, ('uuid-a', 'uuid-b')).digest())
        for other in (p.Policy(p.RESPONSE_POWEROFF, 90, POLICY.protected),
                      p.Policy(p.RESPONSE_SHUTDOWN, 91, POLICY.protected),
                      p.Policy(p.RESPONSE_SHUTDOWN, 90, ('uuid-a',))):
            self.assertNotEqual(POLICY.digest(), other.digest())

    def test_answer_and_heartbeat_never_confused(self):
        answer = p.encode('h1', BOOT, 1, TS, KEY, answer=p.Answer())
        report = p.encode('h1', BOOT, 1, TS, KEY, report=REPORT)
        self.assertEqual(p.UNEXPECTED, self.reason(answer))
        self.assertEqual(p.UNEXPECTED, self.reason(report, replies=True))

    def test_answer_flag_needs_version_2(self):
        # An answer flag in a version 1 packet, or a v1 reply flag in a
        # version 2 one: malformed (an old agent never sees an answer it
        # could take for a reply to its announcement).
        head = p.HEADER.pack(p.MAGIC, 1, 0x84, 2, BOOT, 1, 1)
        self.assertEqual(p.MALFORMED, self.reason(sign(head + b'h1'),
                                                  replies=True))
        self.assertEqual(p.MALFORMED, self.reason(v2(flags=0x81),
                                                  replies=True))

    def test_unknown_records_skipped(self):
        ext = p._records([(200, b'future'), (1, p._STATE.pack(1, 7, 2, 5000))])
        hb = p.decode(v2(ext=ext), (KEY,))
        self.assertEqual((p.CONNECTED, 7, p.WD_ARMED, 5.0), (
            hb.report.state, hb.report.changes, hb.report.watchdog,
            hb.report.deadline))

    def test_bad_extensions_rejected_after_the_mac(self):
        self.assertEqual(p.BAD_EXTENSION, self.reason(v2(ext=b'\x01\x00')))
        self.assertEqual(p.BAD_EXTENSION, self.reason(v2(ext=b'\x01\x00\x09')))
        self.assertEqual(p.BAD_EXTENSION, self.reason(
            v2(ext=p._records([(1, p._STATE.pack(9, 0, 0, 0))]))))
        wrong = p._records([(16, p._POLICY.pack(b'x' * 8, 1, 5))])
        self.assertEqual(p.BAD_EXTENSION, self.reason(
            v2(ext=wrong, flags=0x84), replies=True))

    def test_lengths_checked(self):
        data = p.encode('h1', BOOT, 1, TS, KEY, report=REPORT)
        self.assertEqual(p.TRUNCATED, self.reason(data[:-1]))
        self.assertEqual(p.OVERSIZED, self.reason(data + b'\0'))

    def test_extension_is_signed(self):
        data = bytearray(p.encode('h1', BOOT, 1, TS, KEY, report=REPORT))
        data[-p.MAC_SIZE - 3] ^= 1
        self.assertEqual(p.BAD_HMAC, self.reason(bytes(data)))

    @hypothesis.settings(max_examples=300, deadline=None, database=None)
    @hypothesis.given(st.binary(max_size=300), st.booleans())
    def test_fuzz_signed_garbage_extension_only_rejected(self, ext, ans):
        try:
            p.decode(v2(ext=ext, flags=0x84 if ans else 0), (KEY,),
                     replies=ans)
        except p.Rejected:
            pass
