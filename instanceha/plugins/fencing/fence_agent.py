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

"""Any ClusterLabs fence agent (fence_ipmilan, fence_redfish, fence_apc...).

The agent runs the way Pacemaker's fencer runs it: no arguments, its
options as ``key=value`` lines on stdin (``action=off``, ``ip=...``,
``password=...``). So every device those agents support works here, and
the password travels only on a pipe -- never on the agent's command line
or in its environment. (What an agent does with it is the agent's
business: fence_ipmilan 4.12, for one, hands it to ipmitool with ``-P``;
the ``ipmi`` driver does not.)

The agent's options are checked against its own metadata
(``fence_x -o metadata``) at start-up, so a misspelt option is an error
naming it instead of an agent silently ignoring it. Exit codes follow the
fence agent API: status 0 = on, 2 = off, anything else = error.
"""

import functools
import os
import re
import subprocess
from xml.etree import ElementTree

from instanceha.plugins.fencing import base

_AGENT_RE = re.compile(r'^fence_[A-Za-z0-9_]+$')
#: Options the driver sets itself.
_RESERVED = ('action', 'port_as_ip')
_PASSWORD_KEYS = ('password', 'passwd')

_UNREACHABLE = ('connection timed out', 'unable to connect', 'no route to '
                'host', 'connection refused', 'network is unreachable',
                'timed out while waiting', 'unable to establish')
_UNKNOWN = ('name or service not known', 'could not resolve',
            'address lookup', 'unknown host')
_AUTH = ('unable to login', 'login failed', 'invalid user', 'invalid '
         'password', 'authentication failed', 'unauthorized', 'access denied',
         'wrong password', 'incorrect username or password')
_NOT_OFF = ('timed out waiting to power off', 'timed out waiting to power on')


@functools.lru_cache(maxsize=64)
def agent_options(path: str) -> frozenset[str]:
    """The option names an agent accepts, from its metadata."""
    proc = subprocess.run([path, '-o', 'metadata'], capture_output=True,
                          stdin=subprocess.DEVNULL, text=True, timeout=60,
                          env=_agent_env(), check=False)
    root = ElementTree.fromstring(proc.stdout)
    return frozenset(p.get('name') for p in root.iter('parameter')
                     if p.get('name'))


def _agent_env() -> dict[str, str]:
    env = dict(os.environ)
    # The agents are Python; keep their deprecation noise out of errors.
    env['PYTHONWARNINGS'] = 'ignore'
    for key in [k for k in env if k.startswith('IPMI_')]:
        del env[key]
    return env


def _value(value) -> str:
    if isinstance(value, bool):
        return '1' if value else '0'
    return base.to_text(value)


class FenceAgentFencing(base.FencingDriver):
    description = ('Runs a ClusterLabs fence agent (fence_*) through its '
                   'stdin key=value interface; options pass through.')

    PARAMS = {
        'agent': base.Param('Fence agent name, e.g. fence_ipmilan (looked '
                            'up in [fencing] agents_dir)', required=True),
        'password': base.Param('Password given to the agent on stdin',
                               secret=True),
    }
    #: Every other key is an option of the agent (checked against its
    #: metadata), e.g. ip, ipport, username, lanplus, plug.
    PASS_THROUGH = True

    def describe_target(self) -> str:
        where = self.params.get('ip') or self.params.get('ipaddr') or ''
        plug = self.params.get('plug') or self.params.get('port')
        return '%s %s%s' % (self.params.get('agent'), where,
                            ' plug %s' % plug if plug else '')

    @property
    def agent_path(self) -> str:
        return os.path.join(self.conf.fencing.agents_dir,
                            self.params['agent'])

    def agent_params(self) -> dict[str, str]:
        """The agent's own options (not the common/driver keys)."""
        return {k: _value(v) for k, v in sorted(self.params.items())
                if k not in base.COMMON_PARAMS and k not in self.PARAMS}

    def validate(self) -> None:
        super().validate()
        agent = self.params['agent']
        if not _AGENT_RE.match(agent):
            self._fail("parameter 'agent': %r is not a fence agent name "
                       "(fence_...)" % agent)
        if not os.access(self.agent_path, os.X_OK):
            self._fail("parameter 'agent': %s not found or not executable "
                       "(option [fencing] agents_dir = %s)"
                       % (self.agent_path, self.conf.fencing.agents_dir))
        try:
            known = agent_options(self.agent_path)
        except (OSError, subprocess.SubprocessError,
                ElementTree.ParseError) as exc:
            self._fail('cannot read the metadata of %s: %s'
                       % (agent, exc))
        for key, value in self.agent_params().items():
            if key in _RESERVED or key in _PASSWORD_KEYS:
                self._fail('parameter %r is set by instanceha (use '
                           '"password"/"password_file" for the password)'
                           % key)
            if key not in known:
                self._fail('unknown parameter %r for agent %s (see "%s -o '
                           'metadata")' % (key, agent, agent))

    def stdin_text(self, action: str) -> str:
        """What the agent reads on stdin: its options, one per line."""
        lines = ['action=%s' % action]
        lines += ['%s=%s' % kv for kv in self.agent_params().items()]
        if self.params.get('password'):
            lines.append('password=%s' % self.params['password'])
        return '\n'.join(lines) + '\n'

    def _run(self, action: str, deadline: float
             ) -> subprocess.CompletedProcess:
        timeout = self.remaining(deadline)
        if timeout <= 0:
            raise base.DeviceTimeoutError(self, 'no time left to run %s '
                                          'action=%s' % (
                                              self.params['agent'], action))
        try:
            return subprocess.run([self.agent_path],
                                  input=self.stdin_text(action),
                                  capture_output=True, text=True,
                                  timeout=timeout, env=_agent_env(),
                                  check=False)
        except subprocess.TimeoutExpired:
            raise base.DeviceTimeoutError(
                self, '%s action=%s did not finish within %.1fs' % (
                    self.params['agent'], action, timeout)) from None
        except OSError as exc:
            raise base.DeviceError(self, 'cannot run %s: %s' % (
                self.params['agent'], exc)) from None

    def _raise(self, proc: subprocess.CompletedProcess, action: str) -> None:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines()
                 if ln.strip()]
        errors = [ln for ln in lines if 'ERROR' in ln or 'Failed' in ln]
        detail = '; '.join((errors or lines)[-3:]) or 'no message'
        # Drop the agent's own time stamps: "2026-... ERROR: Failed: x".
        detail = re.sub(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ', '', detail)
        text = detail.lower()
        message = '%s action=%s exited %d: %s' % (
            self.params['agent'], action, proc.returncode, detail)
        if any(m in text for m in _UNKNOWN):
            raise base.UnknownAddressError(self, message)
        if any(m in text for m in _AUTH):
            raise base.AuthError(self, message)
        if any(m in text for m in _NOT_OFF):
            raise base.NotConfirmedError(self, message)
        if any(m in text for m in _UNREACHABLE):
            raise base.UnreachableError(self, message)
        raise base.DeviceError(self, message)

    def _request_power(self, state: base.PowerState, deadline: float
                       ) -> None:
        proc = self._run(state.value, deadline)
        if proc.returncode != 0:
            self._raise(proc, state.value)

    def _read_power(self, deadline: float) -> base.PowerState:
        proc = self._run('status', deadline)
        if proc.returncode == 0:
            return base.PowerState.ON
        if proc.returncode == 2:
            return base.PowerState.OFF
        self._raise(proc, 'status')
