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

"""The redfish fencing driver against sushy-tools' Redfish emulator.

The emulator's fake driver applies a power change 1-11 s after answering
204, so only one test runs with that real delay; the others ask the
fixture for an immediate change (power_delay=(0, 0)).

Two vendor answers the emulator never gives -- 409 for ForceOff on a
system that is already off, and 409 for On shortly after ForceOff -- are
injected by a small HTTP proxy in front of the real emulator (VendorQuirks
below): everything else still goes to, and comes from, the emulator.
"""

import http.server
import threading
import time

import fixtures
import requests

from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import topology
from instanceha.testing import fencing_contract
from tests.functional import peers
from tests.functional.peers import base as peers_base
from tests.functional import test_fencing

WRONG = test_fencing.WRONG


class VendorQuirks(fixtures.Fixture):
    """A proxy that answers 409 where some real BMCs do."""

    def __init__(self, target: str, refuse_on_for: float = 2.0):
        super().__init__()
        self.target = target
        self.refuse_on_for = refuse_on_for
        self.last_force_off = 0.0
        self.refused: list[str] = []

    def _setUp(self):
        quirks = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def forward(self, method):
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else None
                if method == 'POST' and self.path.endswith(
                        'ComputerSystem.Reset'):
                    refusal = quirks.refusal(self.path, body, self.headers)
                    if refusal:
                        return self.send(409, refusal.encode(),
                                         'application/json')
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ('host', 'content-length')}
                resp = requests.request(method, quirks.target + self.path,
                                        headers=headers, data=body,
                                        allow_redirects=False, timeout=30)
                self.send(resp.status_code, resp.content,
                          resp.headers.get('Content-Type'),
                          resp.headers.get('Location'))

            def send(self, code, data, ctype, location=None):
                self.send_response(code)
                if ctype:
                    self.send_header('Content-Type', ctype)
                if location:
                    self.send_header('Location', location)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.forward('GET')

            def do_POST(self):
                self.forward('POST')

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]
        thread = threading.Thread(target=self.server.serve_forever,
                                  daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)

    def refusal(self, path, body, headers) -> str | None:
        reset = (body or b'').decode()
        system = path.split('/Actions/')[0]
        if 'ForceOff' in reset:
            state = requests.get(self.target + system, headers={
                'Authorization': headers.get('Authorization', '')},
                timeout=10).json().get('PowerState')
            self.last_force_off = time.monotonic()
            if state == 'Off':
                self.refused.append('ForceOff')
                return ('{"error": {"code": "Base.1.0.ResetNotAllowed", '
                        '"message": "The system is already powered off"}}')
        elif '"On"' in reset and (time.monotonic() - self.last_force_off
                                  < self.refuse_on_for):
            self.refused.append('On')
            return ('{"error": {"code": "Base.1.0.ResetNotAllowed", '
                    '"message": "Power operation in progress"}}')
        return None


class RedfishTestBase(test_fencing.FencingTestBase):

    power_delay: tuple | None = (0, 0)
    tls = False

    def setUp(self):
        super().setUp()
        self.bmc = self.useFixture(peers.RedfishPeer(
            hosts=2, power_delay=self.power_delay, tls=self.tls))
        self.good = self.secret_file('bmc.pw', self.bmc.password)
        self.bad = self.secret_file('wrong.pw', WRONG)

    def redfish(self, host: str, password_file: str | None = None,
                **extra) -> dict:
        dev = {'driver': 'redfish', 'address': self.bmc.url,
               'system_id': self.bmc.systems[host],
               'username': self.bmc.username,
               'password_file': password_file or self.good}
        dev.update(extra)
        return dev

    def driver(self, host: str, **kwargs) -> base.FencingDriver:
        path = self.fencing_file({host: self.redfish(host, **kwargs)})
        [[drv]] = config.load(self.conf, path).hosts[host].levels
        return drv


class TestRedfishContract(fencing_contract.FencingDriverContract,
                          RedfishTestBase):
    """The shipped fencing contract, run on the redfish driver."""

    DRIVER = 'redfish'

    def contract_params(self):
        return self.redfish('host1')

    def contract_power(self):
        return self.bmc.power_state('host1').lower()

    def contract_wrong_credentials(self):
        return self.redfish('host1', password_file=self.bad)

    def contract_unreachable(self):
        return self.redfish('host1', address='http://127.0.0.1:%d'
                            % peers_base.free_port())

    def contract_secrets(self):
        return [self.bmc.password, WRONG]


class TestRedfishRealDelay(RedfishTestBase):
    """The emulator's own 1-11 s power change delay (one test only)."""

    power_delay = None

    def test_force_off_polled_until_off_then_on(self):
        drv = self.driver('host1', timeout=30)
        started = time.monotonic()
        drv.power_off()
        took_off = time.monotonic() - started
        self.assertEqual('Off', self.bmc.power_state('host1'))
        root = drv._root
        started = time.monotonic()
        drv.power_on()
        took_on = time.monotonic() - started
        self.assertEqual('On', self.bmc.power_state('host1'))
        # One sushy root (one login) served every request.
        self.assertIs(root, drv._root)
        print('redfish emulator: off confirmed after %.1fs, on after %.1fs'
              % (took_off, took_on))
        self.assertNoSecret(self.log.output, self.bmc.password)


class TestRedfish(RedfishTestBase):

    def test_wrong_password_and_unreachable(self):
        exc = self.assertRaises(
            base.AuthError,
            self.driver('host1', password_file=self.bad).power_off)
        self.assertIn('host host1 device redfish', str(exc))
        self.assertIn('authentication failed', str(exc))
        self.assertEqual('On', self.bmc.power_state('host1'))
        url = 'http://127.0.0.1:%d' % peers_base.free_port()
        exc = self.assertRaises(
            base.UnreachableError,
            self.driver('host1', address=url).power_status)
        self.assertIn('unreachable: cannot connect', str(exc))
        exc = self.assertRaises(
            base.UnknownAddressError,
            self.driver('host1', system_id='no-such-system').power_status)
        self.assertIn('no system /redfish/v1/Systems/no-such-system',
                      str(exc))
        self.assertNoSecret(self.log.output + str(exc), WRONG,
                            self.bmc.password)

    def test_frozen_bmc_times_out(self):
        self.bmc.pause()
        self.addCleanup(self.bmc.resume)
        started = time.monotonic()
        exc = self.assertRaises(base.DeviceTimeoutError, self.driver(
            'host1', timeout=2).power_status)
        print('frozen redfish BMC: gave up after %.1fs'
              % (time.monotonic() - started))
        self.assertIn('timed out: no answer to power status', str(exc))

    def test_vendor_refusals_are_handled(self):
        proxy = self.useFixture(VendorQuirks(self.bmc.url))
        drv = self.driver('host2', address=proxy.url, timeout=10)
        drv.power_off()
        drv.power_off()  # already off: 409, yet success
        drv.power_on()  # refused for 2 s after ForceOff, then accepted
        self.assertEqual(['ForceOff', 'On'], proxy.refused[:2])
        self.assertEqual('On', self.bmc.power_state('host2'))

    def test_chain_wrong_password_then_redfish(self):
        self.fencing_file({'host1': {'levels': [
            self.redfish('host1', password_file=self.bad, name='old'),
            self.redfish('host1', name='bmc')]}})
        topo = topology.Topology.from_conf(self.conf)
        result = topo.fence('host1')
        self.assertEqual((2, ('bmc',)), (result.level, result.devices))
        self.assertEqual('Off', self.bmc.power_state('host1'))
        self.assertIn('host1 powered off by fencing level 2 (bmc)',
                      self.log.output)
        self.assertNoSecret(self.log.output, WRONG, self.bmc.password)


class TestRedfishTls(RedfishTestBase):

    tls = True

    def test_fence_redfish_agent(self):
        # Any ClusterLabs agent works through the fence-agent driver:
        # here the real fence_redfish against the same emulator.
        path = self.fencing_file({'host2': {
            'driver': 'fence-agent', 'agent': 'fence_redfish',
            'ip': '127.0.0.1', 'ipport': self.bmc.port, 'ssl_insecure': True,
            'username': self.bmc.username, 'password_file': self.good,
            'systems_uri': '/redfish/v1/Systems/%s'
                           % self.bmc.systems['host2']}})
        [[drv]] = config.load(self.conf, path).hosts['host2'].levels
        self.assertEqual(base.PowerState.ON, drv.power_status())
        drv.power_off()
        self.assertEqual('Off', self.bmc.power_state('host2'))
        self.assertNoSecret(self.log.output, self.bmc.password)

    def test_certificate_verified_by_default(self):
        exc = self.assertRaises(base.DeviceError,
                                self.driver('host1').power_status)
        self.assertIn('TLS failed', str(exc))
        cert = self.bmc.tls_files[0]
        self.assertEqual(base.PowerState.ON, self.driver(
            'host1', ca_file=cert).power_status())
        self.assertEqual(base.PowerState.ON, self.driver(
            'host1', verify=False).power_status())


class TestManageValidateBothEmulators(RedfishTestBase):
    """The issue's check: IPMI and Redfish hosts, one wrong password."""

    def test_correct_hosts_ok_wrong_password_named(self):
        ipmi = self.useFixture(peers.IpmiBmcPeer(hosts=1))
        ipmi_pw = self.secret_file('ipmi.pw', ipmi.password)
        self.fencing_file({
            'compute-ipmi': {'driver': 'ipmi', 'address': '127.0.0.1',
                             'port': ipmi.ports['host1'],
                             'username': ipmi.username,
                             'password_file': ipmi_pw},
            'compute-rf1': self.redfish('host1'),
            'compute-rf2': self.redfish('host2', password_file=self.bad),
        })
        with test_fencing.ProcessWatcher([ipmi.password, self.bmc.password,
                                          WRONG]) as watch:
            proc = test_fencing.run_manage(self.tmp)
        lines = proc.stdout.splitlines()
        self.assertEqual(1, proc.returncode, proc.stderr)
        self.assertEqual(['compute-ipmi: OK (level 1: ipmi on)',
                          'compute-rf1: OK (level 1: redfish on)'],
                         lines[:2])
        self.assertTrue(lines[2].startswith(
            'compute-rf2: FAILED: level 1 device redfish (redfish %s '
            'system %s): authentication failed' % (
                self.bmc.url, self.bmc.systems['host2'])), lines[2])
        self.assertEqual([], watch.leaks)
        self.assertNoSecret(proc.stdout + proc.stderr, ipmi.password,
                            self.bmc.password, WRONG)


class TestRedfishHealth(RedfishTestBase):
    """Hardware health read through the fencing device's own session.

    The stock sushy-tools fake driver reports every system OK and serves
    no power supplies: the fixture extends it (health_app in
    peers/redfish_emulator.py) so that a test can make a BMC report a
    failed power supply, memory or a temperature alarm.
    """

    def test_all_ok_is_no_condition(self):
        self.assertEqual((), self.driver('host1').health())

    def test_a_failed_power_supply_is_read(self):
        self.bmc.set_health('host1', rollup='Critical',
                            power_supplies={'PSU 1': 'OK',
                                            'PSU 2': 'Critical'})
        found = self.driver('host1').health()
        self.assertEqual(['system rollup Critical',
                          'power_supply PSU 2 Critical'],
                         [c.describe() for c in found])
        # The other host's BMC says nothing.
        self.assertEqual((), self.driver('host2').health())
        self.bmc.set_health('host1')
        self.assertEqual((), self.driver('host1').health())

    def test_memory_and_thermal(self):
        self.bmc.set_health('host2', memory='Warning',
                            temperatures={'CPU 1': 'Critical'},
                            fans={'Fan 3': 'Warning'})
        self.assertEqual(
            ['memory memory Warning', 'thermal CPU 1 Critical',
             'thermal Fan 3 Warning'],
            [c.describe() for c in self.driver('host2').health()])
