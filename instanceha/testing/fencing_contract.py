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

"""The fencing-driver contract, as a test mixin any driver can run.

What the engine relies on, checked against a real device (or the
driver's own emulator): the driver is found by its entry-point name;
bad parameters are refused when the fencing file is loaded, naming the
parameter; "off" returns only once the device reports off, and asking
again is not an error; wrong credentials are an :class:`AuthError` and a
device nobody answers for is unreachable or timed out, within the
device's time-out; no secret ever shows in an error or a log line; the
driver keeps time on the clock it is given.

Mix it into a ``unittest.TestCase`` (testtools, oslotest and stestr all
work) and fill in the hooks::

    from instanceha.testing import fencing_contract

    class TestMyPduContract(fencing_contract.FencingDriverContract,
                            unittest.TestCase):
        DRIVER = 'my-pdu'                 # your entry-point name

        def setUp(self):
            super().setUp()
            self.pdu = start_my_emulator()    # your emulator, on 127.0.0.1
            self.addCleanup(self.pdu.stop)

        def contract_params(self):
            return {'address': '127.0.0.1', 'port': self.pdu.port,
                    'outlet': 3, 'password': self.pdu.password}

        def contract_power(self):
            return self.pdu.outlet_state(3)   # 'on' or 'off', the truth

        def contract_wrong_credentials(self):
            return dict(self.contract_params(), password='not-it-123')

        def contract_unreachable(self):
            return dict(self.contract_params(), port=free_port())

        def contract_secrets(self):
            return [self.pdu.password, 'not-it-123']

Only :meth:`contract_params` and :meth:`contract_power` are required; a
hook returning None skips the checks that need it. The device under test
is built exactly as the service builds it: from a fencing file, through
the installed entry points, with ``*_file`` secrets resolved.
"""

import logging
import os
import tempfile
from typing import Any

from oslo_config import cfg
import yaml

from instanceha.adapters import clock as clock_mod
from instanceha import conf as ha_conf
from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import devices

#: The host name the contract's fencing file uses.
HOST = 'contract-host'


class CountingClock(clock_mod.SystemClock):
    """The wall clock, counting how often a driver consults it."""

    def __init__(self) -> None:
        self.reads = 0
        self.sleeps = 0

    def monotonic(self) -> float:
        self.reads += 1
        return super().monotonic()

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        super().sleep(seconds)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class FencingDriverContract:
    """Mixin of contract tests for one fencing driver; see the module."""

    #: The driver's entry-point name in ``instanceha.fencing``.
    DRIVER: str = ''
    #: Seconds one power change may take on the device under test.
    CONTRACT_TIMEOUT: float = 20.0
    #: Seconds between two status reads while waiting for a change.
    CONTRACT_POLL: float = 0.2

    # -- hooks ----------------------------------------------------------------

    def contract_params(self) -> dict[str, Any]:
        """The device's parameters (not ``driver``) for a working device."""
        raise NotImplementedError('contract_params() must be implemented')

    def contract_power(self) -> str:
        """The device's real power state now: 'on' or 'off'.

        Read directly from the device or emulator, never through the
        driver under test.
        """
        raise NotImplementedError('contract_power() must be implemented')

    def contract_wrong_credentials(self) -> dict[str, Any] | None:
        """Parameters with credentials the device refuses (None: skip)."""
        return None

    def contract_unreachable(self) -> dict[str, Any] | None:
        """Parameters of a device nothing answers for (None: skip)."""
        return None

    def contract_secrets(self) -> list[str]:
        """Values that must never show in an error or a log line."""
        return []

    def contract_conf(self) -> cfg.ConfigOpts:
        """The service configuration the device is built with."""
        conf = cfg.ConfigOpts()
        ha_conf.register_opts(conf)
        conf([], project='instanceha', default_config_files=[])
        conf.set_override('poll_interval', self.CONTRACT_POLL, 'fencing')
        conf.set_override('device_timeout', self.CONTRACT_TIMEOUT,
                          'fencing')
        return conf

    # -- helpers --------------------------------------------------------------

    def contract_device(self, params: dict[str, Any] | None = None,
                        clock: clock_mod.SystemClock | None = None
                        ) -> base.FencingDriver:
        """The device as the service builds it, from a fencing file."""
        spec = dict(self.contract_params() if params is None else params)
        spec['driver'] = self.DRIVER
        tmp = tempfile.mkdtemp(prefix='instanceha-contract-')
        path = os.path.join(tmp, 'fencing.yaml')
        with open(path, 'w') as f:
            yaml.safe_dump({'hosts': {HOST: spec}}, f)
        try:
            loaded = config.load(self.contract_conf(), path,
                                 devices=devices.DeviceFactory(clock))
        finally:
            os.unlink(path)
            os.rmdir(tmp)
        [[drv]] = loaded.hosts[HOST].levels
        self.addCleanup(drv.stop)
        return drv

    def _capture_logs(self) -> _Capture:
        handler = _Capture()
        root = logging.getLogger()
        old_level = root.level
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)

        def restore():
            root.removeHandler(handler)
            root.setLevel(old_level)
        self.addCleanup(restore)
        return handler

    def _raises(self, expected, fn, *args):
        """The exception ``fn(*args)`` raised, for any TestCase.

        unittest's assertRaises returns nothing when given a callable.
        """
        try:
            fn(*args)
        except expected as exc:
            return exc
        self.fail('%s did not raise %s' % (getattr(fn, '__name__', fn),
                                           expected))

    def assertNoSecret(self, text: str) -> None:
        for secret in self.contract_secrets():
            if secret and secret in text:
                self.fail('a secret of the device shows in: %s'
                          % text.replace(secret, '<SECRET>'))

    # -- the contract ---------------------------------------------------------

    def test_contract_entry_point(self):
        self.assertTrue(self.DRIVER, 'set DRIVER to the entry-point name')
        cls = devices.DeviceFactory().driver_class(self.DRIVER, 'contract')
        self.assertTrue(issubclass(cls, base.FencingDriver), cls)
        self.assertTrue(cls.description, '%s has no description' % cls)
        for key, param in cls.PARAMS.items():
            self.assertIsInstance(param, base.Param, key)
        self.assertIsInstance(cls.get_properties(), dict)

    def test_contract_unknown_parameter_refused(self):
        cls = devices.DeviceFactory().driver_class(self.DRIVER, 'contract')
        if cls.PASS_THROUGH:
            self.skipTest('%s passes unknown parameters on' % self.DRIVER)
        params = dict(self.contract_params(), no_such_parameter='1')
        exc = self._raises(exceptions.ConfigurationError,
                           self.contract_device, params)
        self.assertIn('no_such_parameter', str(exc))
        self.assertIn(HOST, str(exc))

    def test_contract_required_parameters_named(self):
        cls = devices.DeviceFactory().driver_class(self.DRIVER, 'contract')
        for key, param in cls.PARAMS.items():
            if not param.required:
                continue
            params = {k: v for k, v in self.contract_params().items()
                      if k not in (key, key + '_file')}
            exc = self._raises(exceptions.ConfigurationError,
                               self.contract_device, params)
            self.assertIn(key, str(exc))

    def test_contract_off_is_confirmed_then_on(self):
        clock = CountingClock()
        drv = self.contract_device(clock=clock)
        self.assertIs(clock, drv.clock)
        if self.contract_power() != 'on':
            drv.power_on()
        self.assertEqual(base.PowerState.ON, drv.power_status())
        drv.power_off()
        self.assertEqual('off', self.contract_power(),
                         'power_off() returned before the device was off')
        self.assertEqual(base.PowerState.OFF, drv.power_status())
        drv.power_off()   # already off: still a success
        drv.power_on()
        self.assertEqual('on', self.contract_power())
        self.assertGreater(clock.reads, 0, 'the driver keeps no time on '
                           'the clock it was given')

    def test_contract_wrong_credentials_are_an_auth_error(self):
        params = self.contract_wrong_credentials()
        if params is None:
            self.skipTest('no contract_wrong_credentials()')
        logs = self._capture_logs()
        drv = self.contract_device(params)
        exc = self._raises(base.AuthError, drv.power_off)
        self.assertFalse(exc.retryable)
        self.assertIn(HOST, str(exc))
        self.assertEqual('on', self.contract_power())
        self.assertNoSecret(str(exc))
        self.assertNoSecret('\n'.join(logs.lines))

    def test_contract_unreachable_within_the_timeout(self):
        params = self.contract_unreachable()
        if params is None:
            self.skipTest('no contract_unreachable()')
        logs = self._capture_logs()
        drv = self.contract_device(dict(params, timeout=3))
        clock = clock_mod.SystemClock()
        started = clock.monotonic()
        exc = self._raises(
            (base.UnreachableError, base.DeviceTimeoutError), drv.power_off)
        # Some slack over the 3 s for the driver's own clean-up.
        self.assertLess(clock.monotonic() - started, 3 + 10)
        self.assertIn(HOST, str(exc))
        self.assertNoSecret(str(exc))
        self.assertNoSecret('\n'.join(logs.lines))
