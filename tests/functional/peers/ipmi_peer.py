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

"""IpmiBmcPeer: IPMI BMC emulators (pyghmi) reachable with ipmitool."""

import os
import secrets
import shutil
import subprocess

import requests

from tests.functional.peers import base

IPMITOOL = shutil.which('ipmitool') or '/usr/bin/ipmitool'


class IpmiBmcPeer(base.Peer):
    """One IPMI-over-LAN BMC per host (UDP port each), in one subprocess.

    :param hosts: number of hosts (host1..hostN) or a list of names.
    :param nova: optional NovaPeer; powering a host off kills its
        nova-compute, powering it on revives it (a real power cut).
    :param power: initial power state of every host ('on').

    Attributes: ``ports`` ({host: UDP port on 127.0.0.1}), ``username``,
    ``password`` (random per fixture), ``process``.
    Misbehaviour: :meth:`set_mode` per host ('ok', 'stuck', 'error',
    'silent'), or :meth:`pause` / :meth:`stop` the whole process.
    """

    start_timeout = 20

    def __init__(self, hosts=3, nova=None, power='on', username='admin',
                 password=None, max_lifetime=3600):
        super().__init__()
        if isinstance(hosts, int):
            hosts = ['host%d' % i for i in range(1, hosts + 1)]
        self.hosts = list(hosts)
        self.nova = nova
        self.initial_power = power
        self.username = username
        self.password = password or secrets.token_hex(8)
        self.max_lifetime = max_lifetime
        self.ports = {h: 0 for h in self.hosts}
        self.process = None

    def _setUp(self):
        super()._setUp()
        self.start()

    def start(self):
        """Start (or restart, on the same ports) the BMC process.

        On a restart every BMC keeps its port and last known power state.
        """
        ready_file = os.path.join(self.tmpdir, 'ipmi-ready.json')
        if os.path.exists(ready_file):
            os.unlink(ready_file)
        states = self._last_states or {}
        cfg = {
            'hosts': {h: {'port': self.ports[h],
                          'power': states.get(h, {}).get(
                              'power', self.initial_power),
                          'mode': states.get(h, {}).get('mode', 'ok')}
                      for h in self.hosts},
            'username': self.username,
            'password': self.password,
            'nova_control': self.nova.control.url if self.nova else None,
            'ready_file': ready_file,
            'max_lifetime': self.max_lifetime,
        }
        cfg_path = os.path.join(self.tmpdir, 'ipmi.json')
        fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        base.write_json_file(cfg_path, cfg)
        if self.process is None:
            self.process = self.python_helper('ipmi-bmc', 'ipmi_bmc.py',
                                              [cfg_path])
        else:
            self.process.start()
        ready = self.process.wait_ready(
            lambda: base.read_json_file(ready_file), self.start_timeout,
            what='IPMI BMCs ready file')
        self.ports = ready['ports']
        self.control_url = 'http://%s:%d' % (base.LOOPBACK,
                                             ready['control_port'])

    _last_states = None

    def stop(self):
        """Stop the process: every BMC stops answering (ports freed)."""
        try:
            self._last_states = self.bmcs()
        except Exception:  # noqa: BLE001 - already dead: defaults apply
            pass
        self.process.stop()

    def pause(self):
        """Freeze the process: BMCs keep their ports but never answer."""
        self.process.pause()

    def resume(self):
        self.process.resume()

    # -- control ----------------------------------------------------------

    def _control(self, method, path, body=None):
        resp = requests.request(method, self.control_url + path, json=body,
                                timeout=10)
        if resp.status_code != 200:
            raise base.PeerError('BMC control %s %s: HTTP %s %s' % (
                method, path, resp.status_code, resp.text[:200]))
        return resp.json()

    def bmcs(self):
        """{host: {'port', 'power', 'mode'}} as the BMCs see it."""
        return self._control('GET', '/bmcs')

    def power_state(self, host):
        return self.bmcs()[host]['power']

    def power_history(self, host):
        """[(wall-clock time, 'on'/'off'), ...]: every real power change."""
        return [tuple(e) for e in self.bmcs()[host]['history']]

    def set_mode(self, host, mode):
        """Make host's BMC 'ok', 'stuck', 'error', 'silent' or 'lying'."""
        return self._control('POST', '/bmcs/%s/mode' % host, {'mode': mode})

    def set_power(self, host, power):
        """Set the recorded power state only (no nova hook)."""
        return self._control('POST', '/bmcs/%s/power' % host,
                             {'power': power})

    def set_faults(self, host, *faults):
        """Set host's chassis fault bits (ipmi_bmc.CHASSIS_FAULTS names)."""
        return self._control('POST', '/bmcs/%s/faults' % host,
                             {'faults': list(faults)})

    def add_sel_event(self, host, sensor_type, offset, sensor_number=1,
                      deassert=False, event_type=0x6f):
        """Log one event in host's SEL, as the BMC's firmware would.

        :param sensor_type: IPMI sensor type (0x08 power supply, 0x0c
            memory, 0x01 temperature, 0x04 fan...).
        :param offset: the event offset (e.g. 0x01 "failure detected").
        """
        return self._control('POST', '/bmcs/%s/sel' % host, {
            'sensor_type': sensor_type, 'offset': offset,
            'sensor_number': sensor_number, 'deassert': deassert,
            'event_type': event_type})

    def clear_sel(self, host):
        return self._control('POST', '/bmcs/%s/sel' % host, {'clear': True})

    # -- the real client --------------------------------------------------

    def ipmitool(self, host, *args, password=None, timeout=30):
        """Run the real ipmitool against host's BMC; CompletedProcess.

        The password goes through IPMI_PASSWORD (-E), not the command line.
        """
        argv = [IPMITOOL, '-I', 'lanplus', '-H', base.LOOPBACK,
                '-p', str(self.ports[host]), '-U', self.username, '-E',
                '-R', '1', '-N', '1'] + list(args)
        env = dict(os.environ, IPMI_PASSWORD=password or self.password)
        return subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
