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

"""IPMI fencing through the real ipmitool (IPMI v2.0, lanplus).

ipmitool runs without a shell and gets the password through its
environment (``-E`` reads ``IPMI_PASSWORD``), so it never appears on a
command line (``ps``), in a log line or in an error. ipmitool runs with
``-v`` because only its verbose output tells a rejected password (RAKP 2
HMAC invalid) from a BMC that does not answer.
"""

import os
import shutil
import subprocess

from instanceha.engine import model
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import ipmi_health

#: ipmitool's own per-message timeout and retries: an unreachable BMC
#: fails in about 6 s rather than ipmitool's default 20 s.
_IPMI_TIMEOUT = '1'
_IPMI_RETRIES = '2'

#: ipmitool -v lines that say nothing about the failure.
_CHATTER = ('Loading IANA', 'Running Get VSO', 'Using best available',
            'Discovered IPMB', 'Invalid completion code')
_AUTH_MARKERS = ('rakp 2 hmac is invalid', 'unauthorized name',
                 'rakp 2 message indicates an error',
                 'no response from rakp 1', 'no response from rakp 3',
                 'rakp 4 message', 'insufficient privilege',
                 'set session privilege level')
_UNKNOWN_MARKERS = ('address lookup for',)
_UNREACHABLE_MARKERS = ('get auth capabilities error',
                        'no response from remote controller',
                        'error issuing get channel authentication',
                        'could not open socket', 'insufficient resources')


class IpmiFencing(base.FencingDriver):
    description = ('IPMI v2.0 (lanplus) through ipmitool; the password is '
                   'passed in the environment, never on the command line.')

    PARAMS = {
        'address': base.Param('BMC host name or IP address', required=True),
        'port': base.Param('BMC UDP port', convert=base.to_port, default=623),
        'username': base.Param('BMC user name', required=True),
        'password': base.Param('BMC password', required=True, secret=True),
        'privilege_level': base.Param(
            'IPMI privilege level of the session', default='ADMINISTRATOR',
            choices=('CALLBACK', 'USER', 'OPERATOR', 'ADMINISTRATOR')),
        'cipher_suite': base.Param(
            'IPMI cipher suite (ipmitool -C); default: the best the BMC '
            'offers', convert=int),
    }

    def describe_target(self) -> str:
        return 'ipmi %s:%s' % (self.params.get('address'),
                               self.params.get('port', 623))

    def validate(self) -> None:
        super().validate()
        if not shutil.which(self.conf.fencing.ipmitool_path):
            self._fail('ipmitool not found (option [fencing] ipmitool_path '
                       '= %s)' % self.conf.fencing.ipmitool_path)

    def command(self, *args: str) -> list[str]:
        """The ipmitool argv: no secret in it, by construction."""
        argv = [self.conf.fencing.ipmitool_path, '-v', '-I', 'lanplus',
                '-H', self.params['address'], '-p', str(self.params['port']),
                '-U', self.params['username'], '-E',
                '-L', self.params['privilege_level'],
                '-N', _IPMI_TIMEOUT, '-R', _IPMI_RETRIES]
        if self.params.get('cipher_suite') is not None:
            argv += ['-C', str(self.params['cipher_suite'])]
        return argv + list(args)

    def _run(self, deadline: float, *args: str) -> str:
        env = dict(os.environ)
        env['IPMI_PASSWORD'] = self.params['password']
        timeout = self.remaining(deadline)
        if timeout <= 0:
            raise base.DeviceTimeoutError(self, 'no time left to run '
                                          'ipmitool %s' % ' '.join(args))
        try:
            proc = subprocess.run(self.command(*args), env=env,
                                  stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise base.DeviceTimeoutError(
                self, 'no answer to "%s" within %.1fs'
                % (' '.join(args), timeout)) from None
        except OSError as exc:
            raise base.DeviceError(self, 'cannot run ipmitool: %s'
                                   % exc) from None
        if proc.returncode == 0:
            return proc.stdout
        self._raise(proc.stdout + proc.stderr, args)

    def _raise(self, output: str, args: tuple) -> None:
        text = output.lower()
        lines = [ln.strip() for ln in output.splitlines()
                 if ln.strip() and not ln.startswith(_CHATTER)]
        detail = '; '.join(lines[-3:]) or 'ipmitool failed without a message'
        if any(m in text for m in _UNKNOWN_MARKERS):
            raise base.UnknownAddressError(
                self, 'BMC address %s does not resolve'
                % self.params['address'])
        if any(m in text for m in _AUTH_MARKERS):
            raise base.AuthError(
                self, 'BMC answered but rejected user %r (wrong user name or '
                'password, or privilege %s not allowed): %s' % (
                    self.params['username'], self.params['privilege_level'],
                    detail))
        if any(m in text for m in _UNREACHABLE_MARKERS):
            raise base.UnreachableError(self, 'no answer from the BMC: %s'
                                        % detail)
        raise base.DeviceError(self, 'ipmitool %s failed: %s'
                               % (' '.join(args), detail))

    def _request_power(self, state: base.PowerState, deadline: float
                       ) -> None:
        self._run(deadline, 'chassis', 'power', state.value)

    def _read_power(self, deadline: float) -> base.PowerState:
        out = self._run(deadline, 'chassis', 'power', 'status').lower()
        if 'chassis power is off' in out:
            return base.PowerState.OFF
        if 'chassis power is on' in out:
            return base.PowerState.ON
        return base.PowerState.UNKNOWN

    # -- hardware health ---------------------------------------------------

    supports_health = True

    def health(self, timeout: float | None = None
               ) -> tuple[model.HardwareCondition, ...]:
        """The chassis fault bits and the asserted SEL events.

        Two ipmitool sessions within one deadline (see
        :mod:`instanceha.plugins.fencing.ipmi_health`).
        """
        deadline = self._deadline(timeout)
        chassis = self._run(deadline, 'chassis', 'status')
        sel = self._run(deadline, 'sel', 'list')
        return ipmi_health.conditions(chassis, sel)
