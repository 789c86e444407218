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

"""The watchdog's state machine (the device protocol: functional tests)."""

import os

import fixtures
import testtools

from instanceha.heartbeat import protocol as p
from instanceha.heartbeat import watchdog


class FakeDevice:
    timeout = 30.0
    path = 'fake'

    def __init__(self):
        self.armed = False
        self.log = []

    def arm(self):
        self.armed = True
        self.log.append('arm')

    def feed(self):
        self.log.append('feed')

    def disarm(self):
        self.armed = False
        self.log.append('disarm')

    def abandon(self):
        self.armed = False
        self.log.append('abandon')


class TestWatchdog(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.t = 0.0
        self.dev = FakeDevice()
        self.wd = watchdog.Watchdog(self.dev, 90.0, grace=900.0,
                                    clock=lambda: self.t)

    def step(self, t, heard=0.0, protected=True, paused=False,
             stopped=False):
        self.t = t
        self.dev.log.clear()
        self.wd.step(heard, protected, paused, stopped)
        return self.dev.log

    def test_deadline_must_exceed_the_device_timeout(self):
        self.assertRaises(ValueError, watchdog.Watchdog, FakeDevice(), 30.0)

    def test_armed_only_with_protected_instances_and_the_service_heard(self):
        self.assertEqual([], self.step(1, heard=None))
        self.assertEqual([], self.step(1, protected=False))
        self.assertEqual(['arm'], self.step(1))
        self.assertEqual((p.WD_ARMED, 90.0), self.wd.report(1))

    def test_fed_only_within_deadline_minus_timeout(self):
        self.step(1)
        self.assertEqual(['feed'], self.step(59.9))
        self.assertEqual([], self.step(60.0))
        self.assertIn('no longer fed', self.log.output)
        self.assertEqual(['feed'], self.step(61, heard=50))

    def test_never_armed_when_it_could_not_be_fed(self):
        self.assertEqual([], self.step(100, heard=0))

    def test_pause_and_stand_down_release_at_once(self):
        self.step(1)
        self.assertEqual(['disarm'], self.step(2, paused=True))
        self.assertEqual((p.WD_PAUSED, 0.0), self.wd.report(2))
        self.assertEqual([], self.step(3, paused=True))
        self.assertEqual(['arm'], self.step(4))
        self.assertEqual(['disarm'], self.step(5, stopped=True))
        self.assertEqual(p.WD_STANDDOWN, self.wd.state)

    def test_idle_release_waits_for_the_grace_and_an_answer(self):
        self.step(1, heard=1)
        self.step(10, heard=10, protected=False)
        self.step(909, heard=909, protected=False)
        self.assertEqual(p.WD_ARMED, self.wd.state)
        self.assertEqual(['feed'], self.step(910, heard=910,
                                             protected=False))
        self.assertEqual((p.WD_RELEASING, 90.0), self.wd.report(7))
        self.wd.report(8)
        self.wd.acknowledged(6)  # answers an earlier heartbeat: not yet
        self.assertTrue(self.dev.armed)
        self.wd.acknowledged(7)
        self.assertFalse(self.dev.armed)
        self.assertEqual(p.WD_IDLE, self.wd.state)

    def test_protected_again_cancels_the_release(self):
        self.step(1, heard=1)
        self.step(2, heard=2, protected=False)
        self.step(903, heard=903, protected=False)
        self.assertEqual(p.WD_RELEASING, self.wd.state)
        self.step(904, heard=904)
        self.assertEqual(p.WD_ARMED, self.wd.state)

    def test_exit_without_acknowledgement_leaves_it_running(self):
        self.step(1)
        self.wd.release()
        self.wd.close()
        self.assertEqual(['abandon'], self.dev.log[-1:])


class TestDevice(testtools.TestCase):
    """The file protocol on a FIFO: what the stand-in device reads."""

    def test_arm_feed_magic_close(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'wd')
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, reader)
        dev = watchdog.Device(path, 5)
        dev.arm()
        dev.feed()
        dev.disarm()
        self.assertEqual(b'\0\0V', os.read(reader, 10))
        dev.arm()
        dev.abandon()
        self.assertEqual(b'\0', os.read(reader, 10))
        self.assertFalse(dev.armed)

    def test_no_reader_is_an_error_not_a_hang(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'wd')
        os.mkfifo(path)
        self.assertRaises(OSError, watchdog.Device(path, 5).arm)
