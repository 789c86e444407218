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

"""Fencing drivers power one host's device off and on, with proof.

A driver is built per host and device from that host's entry in the
fencing file (see :mod:`instanceha.plugins.fencing.config`). It declares
its parameters in ``PARAMS``; the base class checks them (missing,
unknown, wrong type) so every driver reports bad input the same way,
naming the host, the device and the parameter.

"Off" means the device *reports* off: :meth:`FencingDriver.power_off`
asks for it and then polls the state until it is off or the time is up.
Failures are distinct exception classes (wrong credentials, unreachable,
timed out, accepted but never off) so operators and the chain logic can
tell them apart; none of their messages ever carries a secret.

A driver never reads the ``time`` module for its timing: it polls, sleeps
and measures deadlines through ``self.clock`` (the engine's Clock port),
which whoever builds the driver provides -- the wall clock in the
service, simulated time in ``instanceha-simulate``. A driver written that
way runs in simulated time in the simulator like the built-in ones.
"""

import abc
from collections.abc import Callable, Mapping
import dataclasses
import difflib
import enum
import logging
import re
from typing import Any

from oslo_config import cfg

from instanceha.adapters import clock as clock_mod
from instanceha.engine import ports
from instanceha.engine import watchdogs as watchdogs_mod
from instanceha import exceptions
from instanceha.plugins import base

LOG = logging.getLogger(__name__)


class PowerState(str, enum.Enum):
    ON = 'on'
    OFF = 'off'
    UNKNOWN = 'unknown'


# -- errors -----------------------------------------------------------------

class DeviceError(exceptions.FencingError):
    """One device of one host failed. Subclasses say how."""

    #: Short words for the kind of failure, used in summaries.
    reason = 'failed'
    #: Whether trying the same device again may help.
    retryable = True

    def __init__(self, driver: 'FencingDriver', detail: str):
        self.host = driver.host
        self.device = driver.device
        self.detail = driver.redact(detail)
        #: The message without the host, for per-host listings.
        self.short = 'device %s (%s): %s: %s' % (
            driver.device, driver.describe_target(), self.reason,
            self.detail)
        super().__init__('host %s %s' % (driver.host, self.short))


class AuthError(DeviceError):
    """The device answered but refused the credentials or the action."""

    reason = 'authentication failed'
    retryable = False


class UnreachableError(DeviceError):
    """Nothing answered at the device's address."""

    reason = 'unreachable'


class UnknownAddressError(UnreachableError):
    """The device's host name does not resolve, or it has no such target."""

    reason = 'unknown host'
    retryable = False


class DeviceTimeoutError(DeviceError):
    """The device did not answer within the time allowed."""

    reason = 'timed out'


class NotConfirmedError(DeviceError):
    """The device accepted the command but never reported the new state."""

    reason = 'not confirmed'


# -- parameters ---------------------------------------------------------------

_BOOLEAN = cfg.types.Boolean()


def to_bool(value: Any) -> bool:
    """A boolean parameter, read as oslo.config reads a BoolOpt.

    The same words work in the fencing file as in instanceha.conf:
    true/false, yes/no, on/off, 1/0.
    """
    if isinstance(value, bool):
        return value
    try:
        return _BOOLEAN(str(value).strip())
    except ValueError:
        raise ValueError('expected true or false, got %r' % (value,)) from None


def to_port(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError('expected a port number, got %r' % (value,))
    port = int(value)
    if not 0 < port < 65536:
        raise ValueError('port %d out of range 1..65535' % port)
    return port


def to_positive(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError('expected a number, got %r' % (value,))
    number = float(value)
    if number <= 0:
        raise ValueError('must be greater than 0, got %r' % (value,))
    return number


def to_count(value: Any) -> int:
    if isinstance(value, bool) or int(value) != float(value):
        raise ValueError('expected a whole number, got %r' % (value,))
    number = int(value)
    if not 0 <= number <= 10:
        raise ValueError('must be between 0 and 10, got %r' % (value,))
    return number


def to_text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError('expected a single value, got %s'
                         % type(value).__name__)
    text = str(value)
    if '\n' in text or '\r' in text or '\0' in text:
        raise ValueError('must be a single line')
    return text


@dataclasses.dataclass(frozen=True)
class Param:
    """One per-host parameter a driver reads."""

    description: str
    required: bool = False
    #: Converts the YAML value; raises ValueError with a reason.
    convert: Callable[[Any], Any] = to_text
    default: Any = None
    choices: tuple | None = None
    #: Secret values may also come from ``<name>_file`` and are redacted
    #: from every message.
    secret: bool = False


#: Parameters every device accepts; the chain (topology) reads them.
COMMON_PARAMS: dict[str, Param] = {
    'driver': Param('Fencing driver name (entry point in '
                    'instanceha.fencing); required'),
    'name': Param('Label of this device in logs and results (default: the '
                  'template name or the driver name)'),
    'template': Param('Name of an entry in the top-level "devices" section '
                      'whose parameters this device starts from'),
    'timeout': Param('Seconds this device may take to confirm a power '
                     'change (default [fencing] device_timeout)',
                     convert=to_positive),
    'retries': Param('Extra attempts after a retryable failure (default '
                     '[fencing] device_retries)', convert=to_count),
}


class FencingDriver(base.Driver):
    """One fencing device of one host.

    Unlike the other kinds, a fencing driver is built per host and device
    from that host's entry in the fencing file; ``validate()`` checks
    those parameters (see ``get_properties()``) without touching the
    device. Subclasses implement ``_request_power``, ``_read_power`` and
    ``describe_target``; the base class does the polling and the timing.
    """

    #: Driver-specific parameters.
    PARAMS: dict[str, Param] = {}
    #: True when parameters not in PARAMS are passed on to the device
    #: (fence-agent); the driver then checks them itself.
    PASS_THROUGH = False
    #: Declared by a level that proves a host off by a deadline rather
    #: than a device (the host's own watchdog): the device factory gives
    #: it :attr:`watchdogs`, and the chain reads :meth:`deadline_left`
    #: with every reading so the power proof can refuse one whose
    #: deadline has not passed.
    counts_watchdogs = False
    #: What the heartbeat listener knows of the hosts' watchdogs (set by
    #: the device factory for a driver that :attr:`counts_watchdogs`).
    watchdogs: watchdogs_mod.WatchdogWatch | None = None
    #: Time as this driver must see it (poll, sleep, deadlines). The
    #: device factory that builds the driver sets the environment's
    #: clock; the wall clock is only the default for a driver built by
    #: hand (a test, a one-off script).
    clock: ports.Clock = clock_mod.SystemClock()

    def __init__(self, conf: cfg.ConfigOpts, host: str,
                 params: Mapping[str, Any], device: str | None = None):
        super().__init__(conf)
        self.host = host
        self.params = dict(params)
        self.device = device or self.params.get('name') or self.name or \
            type(self).__name__
        self._secrets: list[str] = []
        self._note_secrets()

    # -- description and validation --------------------------------------

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        props = {}
        for key, param in cls.PARAMS.items():
            text = param.description
            if param.required:
                text += ' (required)'
            elif param.default is not None:
                text += ' (default %s)' % (param.default,)
            if param.choices:
                text += '; one of %s' % ', '.join(map(str, param.choices))
            if param.secret:
                text += '; secret: may be given as %s_file' % key
            props[key] = text
        return props

    def _note_secrets(self) -> None:
        self._secrets = [str(self.params[k]) for k, p in self.PARAMS.items()
                         if p.secret and self.params.get(k)]

    def _fail(self, message: str) -> None:
        message = self.redact(message)
        exc = exceptions.ConfigurationError(
            'fencing host %s device %s: %s' % (self.host, self.device,
                                               message))
        # The fencing file loader puts the file and level in front.
        exc.detail = message
        raise exc

    def validate(self) -> None:
        """Check and convert parameters; apply defaults.

        :raises ConfigurationError: naming host, device and parameter.
        """
        for key in sorted(self.params):
            if key in COMMON_PARAMS:
                continue
            if key not in self.PARAMS and not self.PASS_THROUGH:
                close = difflib.get_close_matches(
                    key, [*self.PARAMS, *COMMON_PARAMS], n=1)
                self._fail('unknown parameter %r for driver %s%s; known: %s'
                           % (key, self.name, ' (did you mean %r?)' % close[0]
                              if close else '', ', '.join(
                                  sorted(self.PARAMS)) or '(none)'))
        for key, param in [*COMMON_PARAMS.items(), *self.PARAMS.items()]:
            value = self.params.get(key)
            if value is None or value == '':
                if param.required:
                    self._fail('missing required parameter %r' % key)
                if param.default is not None:
                    self.params[key] = param.default
                else:
                    self.params.pop(key, None)
                continue
            try:
                value = param.convert(value)
            except (TypeError, ValueError) as exc:
                self._fail('parameter %r: %s' % (key, exc))
            if param.choices and value not in param.choices:
                self._fail('parameter %r: %r is not one of %s' % (
                    key, value, ', '.join(map(str, param.choices))))
            self.params[key] = value
        self._note_secrets()

    # -- helpers for subclasses ------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every secret of this device replaced by ***.

        A short secret is replaced only where it stands alone, so that a
        (weak) password "admin" does not mangle every word containing it.
        """
        for secret in self._secrets:
            if len(secret) >= 8:
                text = text.replace(secret, '***')
            elif secret:
                text = re.sub(r'(?<![A-Za-z0-9])%s(?![A-Za-z0-9])'
                              % re.escape(secret), '***', text)
        return text

    def describe_target(self) -> str:
        """Where the device is, for messages (never a secret)."""
        return self.name

    @property
    def timeout(self) -> float:
        return float(self.params.get('timeout')
                     or self.conf.fencing.device_timeout)

    @property
    def poll_interval(self) -> float:
        return float(self.conf.fencing.poll_interval)

    def remaining(self, deadline: float) -> float:
        """Seconds left until ``deadline`` (on ``self.clock``), never < 0."""
        return max(0.0, deadline - self.clock.monotonic())

    def deadline_left(self) -> float:
        """Seconds until this level's deadline has passed (<= 0: passed).

        Only called where :attr:`counts_watchdogs` is declared.
        """
        raise NotImplementedError(type(self).__name__)

    # -- what a driver implements ------------------------------------------

    @abc.abstractmethod
    def _request_power(self, state: PowerState, deadline: float) -> None:
        """Ask the device for ``state`` (ON or OFF); don't wait for it.

        A device that answers "already in that state" must not raise.
        """

    @abc.abstractmethod
    def _read_power(self, deadline: float) -> PowerState:
        """The power state the device reports now."""

    # -- the public operations ---------------------------------------------

    def power_off(self, timeout: float | None = None) -> None:
        """Power off and return only once the device reports off.

        :param timeout: seconds allowed; default this device's timeout.
        :raises instanceha.exceptions.FencingError: a DeviceError subclass
            naming the host and device, never a secret.
        """
        self._change(PowerState.OFF, timeout)

    def power_on(self, timeout: float | None = None) -> None:
        """Power on and return once the device reports on."""
        self._change(PowerState.ON, timeout)

    #: The device reports hardware health (:meth:`health`).
    supports_health: bool = False

    def health(self, timeout: float | None = None) -> tuple:
        """Hardware conditions the device reports (proactive evacuation).

        Only where :attr:`supports_health`; a device that cannot tell
        raises ``NotImplementedError``.
        """
        raise NotImplementedError

    def power_status(self, timeout: float | None = None) -> PowerState:
        """The power state the device reports now."""
        return self._read_power(self._deadline(timeout))

    def _deadline(self, timeout: float | None) -> float:
        return self.clock.monotonic() + (
            self.timeout if timeout is None else timeout)

    def _change(self, state: PowerState, timeout: float | None) -> None:
        deadline = self._deadline(timeout)
        started = self.clock.monotonic()
        self._request_power(state, deadline)
        last_seen: PowerState | None = None
        last_error: DeviceError | None = None
        while True:
            try:
                last_seen = self._read_power(deadline)
                last_error = None
            except (AuthError, UnknownAddressError):
                raise
            except DeviceError as exc:
                # A BMC busy with the power change may drop a status
                # query; keep polling until the deadline.
                last_error = exc
            if last_seen is state and last_error is None:
                LOG.debug('host %s device %s reports %s after %.1fs',
                          self.host, self.device, state.value,
                          self.clock.monotonic() - started)
                return
            if self.remaining(deadline) <= 0:
                break
            self.clock.sleep(min(self.poll_interval,
                                 self.remaining(deadline)))
        if last_error is not None and (last_seen is None or not isinstance(
                last_error, DeviceTimeoutError)):
            raise last_error
        raise NotConfirmedError(self, 'accepted power %s but still reports '
                                '%s after %.1fs' % (
                                    state.value, last_seen.value if last_seen
                                    else 'nothing',
                                    self.clock.monotonic() - started))
