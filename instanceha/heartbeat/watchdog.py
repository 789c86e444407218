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

"""Watchdog self-fencing: the host resets itself when cut off.

The Linux watchdog protocol (``/dev/watchdog``, a hardware watchdog or
the kernel's softdog): opening the device arms it, every write feeds it,
writing ``V`` and closing disarms it ("magic close"). Closing without
``V`` (the agent died) leaves it running: the host resets ``timeout``
seconds after the last feed.

:class:`Watchdog` decides when to arm, feed and release:

* armed only while the host runs instances instanceha protects (the
  policy the service sent lists them) and the service was heard;
* fed only while the last answer was heard less than ``deadline -
  timeout`` seconds ago: the host has reset at most ``deadline`` seconds
  after the heartbeat whose answer it last heard was sent (the
  *deadline* its heartbeats announce);
* released when the service says instance HA is paused (re-armed at the
  resume or when the pause's time is up), when every copy of the service
  said it stops, and, after an idle ``grace`` without protected
  instances, once an answer acknowledged the agent's intent (until then
  the service still counts on the watchdog);
* a clean stop of the agent releases it the same acknowledged way; an
  agent that dies leaves it running.

See doc/host-side.md for the deadline arithmetic.
"""

from collections.abc import Callable
import fcntl
import logging
import os
import stat
import struct
import time

from instanceha.heartbeat import protocol

LOG = logging.getLogger(__name__)

#: ioctl WDIOC_SETTIMEOUT: _IOWR('W', 6, int).
WDIOC_SETTIMEOUT = 0xC0045706
MAGIC_CLOSE = b'V'
DEFAULT_GRACE = 900.0


class Device:
    """One watchdog device file (real, softdog, or a test's stand-in)."""

    def __init__(self, path: str, timeout: float):
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None

    @property
    def armed(self) -> bool:
        return self._fd is not None

    def arm(self) -> None:
        """Open (arms it), set its timeout when it is a device, feed.

        :raises OSError: the device cannot be opened or written.
        """
        fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if stat.S_ISCHR(os.fstat(fd).st_mode):
                fcntl.ioctl(fd, WDIOC_SETTIMEOUT,
                            struct.pack('i', int(self.timeout)))
            os.write(fd, b'\0')
        except OSError:
            os.close(fd)  # no magic: if it armed, it stays armed
            raise
        self._fd = fd

    def feed(self) -> None:
        if self._fd is not None:
            os.write(self._fd, b'\0')

    def disarm(self) -> None:
        """Magic close: the device stops."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.write(fd, MAGIC_CLOSE)
            finally:
                os.close(fd)

    def abandon(self) -> None:
        """Close without the magic: the device keeps counting down."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class Watchdog:
    """When to arm, feed and release the device (see the module doc).

    :param deadline: seconds after the last answered heartbeat was sent
        by which the host has reset; more than the device's timeout.
    """

    def __init__(self, device: Device, deadline: float,
                 grace: float = DEFAULT_GRACE,
                 clock: Callable[[], float] = time.monotonic):
        if deadline <= device.timeout:
            raise ValueError('watchdog deadline %s s must exceed the '
                             'device timeout %s s' % (deadline,
                                                      device.timeout))
        self.device = device
        self.deadline = deadline
        self.grace = grace
        self._clock = clock
        self.state = protocol.WD_IDLE
        self._idle_since: float | None = None
        #: First heartbeat that said releasing (acknowledged: release).
        self._release_seq: int | None = None
        self._starving = False

    @property
    def window(self) -> float:
        """How long after the last answered heartbeat it is still fed."""
        return self.deadline - self.device.timeout

    def _set(self, state: str, why: str) -> None:
        if state != self.state:
            LOG.warning('watchdog %s -> %s: %s', self.state, state, why)
            self.state = state

    def report(self, sequence: int) -> tuple[str, float]:
        """(state, deadline) for heartbeat ``sequence``."""
        if self.state == protocol.WD_RELEASING and self._release_seq is None:
            self._release_seq = sequence
        armed = self.state in (protocol.WD_ARMED, protocol.WD_RELEASING)
        return self.state, self.deadline if armed else 0.0

    def acknowledged(self, sequence: int) -> None:
        """Heartbeat ``sequence`` was answered."""
        if (self.state == protocol.WD_RELEASING
                and self._release_seq is not None
                and sequence >= self._release_seq):
            self.device.disarm()
            self._release_seq = None
            self._set(protocol.WD_IDLE, 'release acknowledged')

    def release(self) -> None:
        """Ask to be released (a clean stop): armed -> releasing."""
        if self.state == protocol.WD_ARMED:
            self._release_seq = None
            self._set(protocol.WD_RELEASING, 'the agent stops')

    def step(self, heard_at: float | None, protected: bool, paused: bool,
             stopped: bool) -> None:
        """Arm, feed or release, from what the host side knows now."""
        now = self._clock()
        if self.device.armed and (paused or stopped):
            self.device.disarm()
            self._release_seq = None
            self._set(protocol.WD_PAUSED if paused else protocol.WD_STANDDOWN,
                      'instance HA is paused' if paused
                      else 'every copy of the service stopped')
            return
        if not self.device.armed:
            if heard_at is None or not protected or paused or stopped:
                if self.state != protocol.WD_IDLE and not (paused or stopped):
                    self._set(protocol.WD_IDLE, 'nothing to protect')
                return
            if now - heard_at >= self.window:
                return  # never arm a watchdog that could not be fed
            try:
                self.device.arm()
            except OSError as exc:
                LOG.error('watchdog %s cannot be armed: %s',
                          self.device.path, exc)
                return
            self._idle_since = None
            self._starving = False
            self._set(protocol.WD_ARMED, 'protected instances run here')
            return
        if protected:
            self._idle_since = None
            if self.state == protocol.WD_RELEASING:
                self._release_seq = None
                self._set(protocol.WD_ARMED, 'protected instances again')
        elif self.state == protocol.WD_ARMED:
            if self._idle_since is None:
                self._idle_since = now
            elif now - self._idle_since >= self.grace:
                self._set(protocol.WD_RELEASING, 'no protected instance '
                          'for %.0f s' % (now - self._idle_since))
        self._feed(now, heard_at)

    def _feed(self, now: float, heard_at: float | None) -> None:
        silent = now - heard_at if heard_at is not None else None
        if silent is not None and silent < self.window:
            try:
                self.device.feed()
            except OSError as exc:
                LOG.error('watchdog %s cannot be fed: %s', self.device.path,
                          exc)
                return
            if self._starving:
                LOG.warning('watchdog fed again: the service answers')
            self._starving = False
        elif not self._starving:
            self._starving = True
            LOG.critical('no answer from the service for %.0f s: the '
                         'watchdog is no longer fed; this host resets '
                         'within %.0f s unless the service answers',
                         silent or 0.0, self.device.timeout)

    def close(self) -> None:
        """The agent exits: a device still armed is left running.

        A release the service acknowledged has disarmed it already
        (:meth:`acknowledged`); without that the service still counts on
        the watchdog, so the host resets unless the agent starts again
        and hears the service.
        """
        if self.device.armed:
            LOG.warning('watchdog left armed: the service did not '
                        'acknowledge its release; the host resets in %.0f '
                        's unless the agent starts again and hears it',
                        self.device.timeout)
            self.device.abandon()
