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

"""RedfishPeer: sushy-tools' Redfish emulator with its fake driver."""

import os
import secrets
import uuid
import warnings

import requests
import urllib3

from tests.functional.peers import base


class _Session(requests.Session):
    """requests session that never verifies (self-signed when tls=True).

    Session.verify alone loses to REQUESTS_CA_BUNDLE from the environment,
    so verify=False goes on every request.
    """

    def __init__(self, auth):
        super().__init__()
        self.auth = auth or None

    def request(self, method, url, **kwargs):
        kwargs.setdefault('verify', False)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', urllib3.exceptions.HTTPWarning)
            return super().request(method, url, **kwargs)


class RedfishPeer(base.Peer):
    """A Redfish BMC emulator serving one fake ComputerSystem per host.

    **Power changes are not immediate**: sushy's fake driver applies a
    Reset (ForceOff, On, ...) 1-11 s (random) after the 204 answer, so
    poll ``PowerState`` and allow at least 12 s, or pass
    ``power_delay=(lo, hi)`` for another range (e.g. ``(0, 0)``).

    :param hosts: number of hosts (host1..hostN) or a list of names; each
        system's Name is the host name, its Id a random UUID
        (``/redfish/v1/Systems/<name>`` redirects there, HTTP 307).
    :param nova: optional NovaPeer; when a power change lands, the host's
        nova-compute is killed (Off) or revived (On).
    :param auth: require HTTP basic auth (htpasswd file, bcrypt) with
        ``username`` / ``password`` (random per fixture).
    :param tls: serve HTTPS with a self-signed certificate (fence_redfish
        only speaks HTTPS: use its ``--ssl-insecure``).

    Attributes: ``url`` (http://127.0.0.1:PORT), ``systems``
    ({host: uuid}), ``username``, ``password``, ``process``.
    """

    start_timeout = 20

    def __init__(self, hosts=3, nova=None, auth=True, username='admin',
                 password=None, power='On', power_delay=None, tls=False,
                 max_lifetime=3600):
        super().__init__()
        if isinstance(hosts, int):
            hosts = ['host%d' % i for i in range(1, hosts + 1)]
        self.hosts = list(hosts)
        self.nova = nova
        self.auth = auth
        self.username = username
        self.password = password or secrets.token_hex(8)
        self.initial_power = power
        self.power_delay = list(power_delay) if power_delay else None
        self.tls = tls
        self.max_lifetime = max_lifetime
        self.systems = {h: str(uuid.uuid4()) for h in self.hosts}
        self.port = 0
        self.process = None

    def _setUp(self):
        super()._setUp()
        self.sushy_config = os.path.join(self.tmpdir, 'sushy.conf')
        systems = [{'uuid': self.systems[h], 'name': h,
                    'power_state': self.initial_power,
                    'nics': [{'mac': '52:54:00:00:00:%02x' % (i + 1),
                              'ip': '192.0.2.%d' % (i + 1)}]}
                   for i, h in enumerate(self.hosts)]
        lines = [
            "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
            "SUSHY_EMULATOR_FAKE_DRIVER = True",
            "SUSHY_EMULATOR_STATE_DIR = %r" % os.path.join(self.tmpdir,
                                                           'state'),
            "SUSHY_EMULATOR_FAKE_SYSTEMS = %r" % (systems,),
        ]
        if self.auth:
            import bcrypt
            htpasswd = os.path.join(self.tmpdir, 'htpasswd')
            # 4 rounds: the emulator checks bcrypt on every request.
            digest = bcrypt.hashpw(self.password.encode(),
                                   bcrypt.gensalt(rounds=4)).decode()
            with open(htpasswd, 'w') as f:
                f.write('%s:%s\n' % (self.username, digest))
            lines.append('SUSHY_EMULATOR_AUTH_FILE = %r' % htpasswd)
        with open(self.sushy_config, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        self.tls_files = (base.self_signed_cert(self.tmpdir, 'redfish')
                          if self.tls else None)
        self.start()

    def start(self):
        """Start (or restart, same port and power states) the emulator."""
        ready_file = os.path.join(self.tmpdir, 'redfish-ready.json')
        if os.path.exists(ready_file):
            os.unlink(ready_file)
        cfg_path = os.path.join(self.tmpdir, 'redfish.json')
        base.write_json_file(cfg_path, {
            'sushy_config': self.sushy_config,
            'port': self.port,
            'power_delay': self.power_delay,
            'tls': self.tls_files,
            'nova_control': self.nova.control.url if self.nova else None,
            'ready_file': ready_file,
            'max_lifetime': self.max_lifetime,
            # What the emulator starts from: its power history's first
            # entries (a restart keeps the sushy state directory).
            'initial_power': {h: self._power_now(h) for h in self.hosts},
        })
        if self.process is None:
            self.process = self.python_helper('redfish', 'redfish_emulator.py',
                                              [cfg_path])
        else:
            self.process.start()
        ready = self.process.wait_ready(
            lambda: base.read_json_file(ready_file), self.start_timeout,
            what='redfish emulator ready file')
        self.port = ready['port']
        self.url = '%s://%s:%d' % ('https' if self.tls else 'http',
                                   base.LOOPBACK, self.port)
        self.process.wait_ready(
            lambda: self._session().get(self.url + '/redfish/v1',
                                        timeout=5).ok,
            10, what='redfish emulator to answer')

    def stop(self):
        """Stop the emulator (connections refused until start())."""
        self.process.stop()

    def pause(self):
        """Freeze the emulator: connections hang, nothing answers."""
        self.process.pause()

    def resume(self):
        self.process.resume()

    # -- client helpers ---------------------------------------------------

    def system_url(self, host):
        return '%s/redfish/v1/Systems/%s' % (self.url, self.systems[host])

    def _session(self):
        return _Session(self.auth and (self.username, self.password))

    def set_health(self, host, **spec):
        """Make host's BMC report hardware health (see health_app).

        e.g. ``power_supplies={'PSU 2': 'Critical'}, rollup='Critical'``;
        nothing given: all OK again.
        """
        resp = self._session().put(
            '%s/ih-test/health/%s' % (self.url, host), json=spec,
            timeout=10)
        resp.raise_for_status()

    def power_state(self, host):
        """'On' or 'Off' as the emulator reports it now."""
        resp = self._session().get(self.system_url(host), timeout=10)
        resp.raise_for_status()
        return resp.json()['PowerState']

    def reset(self, host, reset_type):
        """POST ComputerSystem.Reset; returns the HTTP response."""
        return self._session().post(
            self.system_url(host) + '/Actions/ComputerSystem.Reset',
            json={'ResetType': reset_type}, timeout=10)

    def _power_now(self, host):
        """Initial power, or the last change seen before a restart."""
        seen = getattr(self, '_history', {}).get(host)
        return seen[-1][1] if seen else self.initial_power

    def power_histories(self):
        """{host: [(wall-clock time, 'on'/'off'), ...]} for every host.

        Every real power change, the first entry the emulator's start;
        the shape of IpmiBmcPeer.power_history.
        """
        resp = self._session().get(self.url + '/ih-test/power', timeout=10)
        resp.raise_for_status()
        self._history = resp.json()
        return {h: [(at, power.lower()) for at, power in changes]
                for h, changes in self._history.items()}

    def power_history(self, host):
        """[(wall-clock time, 'on'/'off'), ...] of one host."""
        return self.power_histories().get(host, [])

    def wait_for_power(self, host, state, timeout=20):
        """Wait until host's PowerState is `state` (bounded)."""
        return base.wait_until(lambda: self.power_state(host) == state,
                               timeout, interval=0.25,
                               what='%s PowerState %s' % (host, state))
