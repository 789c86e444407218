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

"""Fencing against real BMC emulators on 127.0.0.1.

pyghmi BMCs (IpmiBmcPeer) driven by the real ipmitool through the ``ipmi``
driver and by the real ``fence_ipmilan`` (Debian fence-agents) through the
``fence-agent`` driver; fencing chains built from the fencing file; and
``instanceha-manage fencing validate`` run as a real process.
"""

import os
import socket
import subprocess
import sys
import threading
import time

import fixtures
import testtools
import yaml

from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import topology
from instanceha.testing import fencing_contract
from tests.functional import peers
from tests.functional.peers import base as peers_base
from tests.unit.test_fencing import make_conf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
WRONG = 'wrong-Passw0rd-123'


def scan_cmdlines(secrets: list[str]) -> tuple[set[str], list[str]]:
    """(command lines seen, command lines containing a secret)."""
    seen, leaks = set(), []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                argv = f.read().decode('utf-8', 'replace').split('\0')
        except OSError:
            continue
        if not argv or not argv[0]:
            continue
        text = ' '.join(argv)
        seen.add(text)
        if any(s in text for s in secrets):
            leaks.append(text)
    return seen, leaks


class ProcessWatcher(threading.Thread):
    """Reads every process's command line, over and over, in the back."""

    def __init__(self, secrets: list[str]):
        super().__init__(daemon=True)
        self.secrets = secrets
        self.seen: set[str] = set()
        self.leaks: list[str] = []
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.002):
            seen, leaks = scan_cmdlines(self.secrets)
            self.seen |= seen
            self.leaks += leaks

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join(10)


class FencingTestBase(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.log = self.useFixture(fixtures.FakeLogger(level='DEBUG'))
        self.conf = make_conf(poll_interval=0.2, device_timeout=20,
                              chain_timeout=120)

    def secret_file(self, name: str, value: str) -> str:
        path = os.path.join(self.tmp, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write(value + '\n')
        return path

    def fencing_file(self, hosts: dict, devices: dict | None = None) -> str:
        path = os.path.join(self.tmp, 'fencing.yaml')
        data = {'hosts': hosts}
        if devices:
            data['devices'] = devices
        with open(path, 'w') as f:
            yaml.safe_dump(data, f)
        self.conf.set_override('config_file', path, 'fencing')
        return path

    def assertNoSecret(self, text: str, *secrets: str) -> None:
        for secret in secrets:
            self.assertNotIn(secret, text)


class IpmiTestBase(FencingTestBase):

    def setUp(self):
        super().setUp()
        self.bmcs = self.useFixture(peers.IpmiBmcPeer(hosts=3))
        self.good = self.secret_file('bmc.pw', self.bmcs.password)
        self.bad = self.secret_file('wrong.pw', WRONG)

    def ipmi(self, host: str, password_file: str | None = None,
             **extra) -> dict:
        dev = {'driver': 'ipmi', 'address': '127.0.0.1',
               'port': self.bmcs.ports[host],
               'username': self.bmcs.username,
               'password_file': password_file or self.good}
        dev.update(extra)
        return dev

    def driver(self, host: str, **kwargs) -> base.FencingDriver:
        path = self.fencing_file({host: self.ipmi(host, **kwargs)})
        [[drv]] = config.load(self.conf, path).hosts[host].levels
        return drv


class TestIpmiDriver(IpmiTestBase):

    def test_off_is_confirmed_and_on_again(self):
        drv = self.driver('host1')
        self.assertEqual(base.PowerState.ON, drv.power_status())
        drv.power_off()
        self.assertEqual('off', self.bmcs.power_state('host1'))
        self.assertEqual(base.PowerState.OFF, drv.power_status())
        drv.power_off()  # already off: still success
        drv.power_on()
        self.assertEqual('on', self.bmcs.power_state('host1'))
        self.assertEqual('on', self.bmcs.power_state('host2'))

    def test_wrong_password_is_an_auth_error(self):
        drv = self.driver('host1', password_file=self.bad)
        exc = self.assertRaises(base.AuthError, drv.power_off)
        self.assertIn('host host1 device ipmi', str(exc))
        self.assertIn('authentication failed', str(exc))
        self.assertEqual('on', self.bmcs.power_state('host1'))
        self.assertNoSecret(str(exc) + self.log.output, WRONG,
                            self.bmcs.password)

    def test_silent_bmc_is_unreachable(self):
        self.bmcs.set_mode('host1', 'silent')
        drv = self.driver('host1')
        exc = self.assertRaises(base.UnreachableError, drv.power_status)
        self.assertIn('unreachable', str(exc))

    def test_bmc_slower_than_the_timeout(self):
        # ipmitool needs about 6 s to give up on a silent BMC; the device
        # may take 1 s: ipmitool is stopped and the failure is a time-out.
        self.bmcs.set_mode('host1', 'silent')
        drv = self.driver('host1', timeout=1)
        exc = self.assertRaises(base.DeviceTimeoutError, drv.power_off)
        self.assertIn('timed out: no answer to "chassis power off" within',
                      str(exc))

    def test_accepted_but_never_off(self):
        self.bmcs.set_mode('host1', 'stuck')
        drv = self.driver('host1', timeout=2)
        exc = self.assertRaises(base.NotConfirmedError, drv.power_off)
        self.assertIn('accepted power off but still reports on', str(exc))

    def test_bmc_refusing_the_command(self):
        self.bmcs.set_mode('host1', 'error')
        drv = self.driver('host1')
        exc = self.assertRaises(base.DeviceError, drv.power_off)
        self.assertIn('chassis power off failed', str(exc))

    def test_address_that_does_not_resolve(self):
        drv = self.driver('host1', address='bmc.invalid')
        exc = self.assertRaises(base.UnknownAddressError, drv.power_status)
        self.assertIn('unknown host: BMC address bmc.invalid does not '
                      'resolve', str(exc))

    def test_password_never_on_a_command_line(self):
        # A silent BMC keeps ipmitool running for seconds: long enough for
        # the watcher to read its command line many times.
        self.bmcs.set_mode('host1', 'silent')
        drv = self.driver('host1')
        with ProcessWatcher([self.bmcs.password]) as watch:
            self.assertRaises(base.UnreachableError, drv.power_status)
        self.assertTrue([t for t in watch.seen if 'ipmitool' in t
                         and 'chassis' in t])
        self.assertEqual([], watch.leaks)
        self.assertNoSecret(self.log.output, self.bmcs.password)


class TestIpmiContract(fencing_contract.FencingDriverContract,
                       IpmiTestBase):
    """The shipped fencing contract, run on the ipmi driver."""

    DRIVER = 'ipmi'

    def contract_params(self):
        return self.ipmi('host1')

    def contract_power(self):
        return self.bmcs.power_state('host1')

    def contract_wrong_credentials(self):
        return self.ipmi('host1', password_file=self.bad)

    def contract_unreachable(self):
        return self.ipmi('host1', port=peers_base.free_port(socket.SOCK_DGRAM))

    def contract_secrets(self):
        return [self.bmcs.password, WRONG]


class TestChains(IpmiTestBase):

    def test_first_level_wrong_password_second_level_fences(self):
        self.fencing_file({'host1.example.com': {'levels': [
            self.ipmi('host1', password_file=self.bad, name='bmc-old'),
            self.ipmi('host1', name='bmc')]}})
        topo = topology.Topology.from_conf(self.conf)
        self.assertTrue(topo.configured('host1'))
        result = topo.fence('host1')
        self.assertEqual((2, ('bmc',)), (result.level, result.devices))
        self.assertEqual('off', self.bmcs.power_state('host1'))
        self.assertIn('host1 powered off by fencing level 2 (bmc)',
                      self.log.output)
        self.assertIn('fencing level 1 (bmc-old) failed to power off',
                      self.log.output)
        result = topo.unfence('host1')
        self.assertEqual(2, result.level)
        self.assertEqual('on', self.bmcs.power_state('host1'))
        self.assertNoSecret(self.log.output, WRONG, self.bmcs.password)

    def test_level_fails_when_one_of_its_devices_fails(self):
        # Both "outlets" of host1's level 1 must switch off; the second
        # one (host2's BMC with a wrong password) cannot, so the level
        # failed and level 2 (host3's BMC, standing in for a PDU) fences.
        self.fencing_file({'host1': {'levels': [
            [self.ipmi('host1', name='outlet-a'),
             self.ipmi('host2', password_file=self.bad, name='outlet-b')],
            self.ipmi('host3', name='pdu')]}})
        topo = topology.Topology.from_conf(self.conf)
        result = topo.fence('host1')
        self.assertEqual((2, ('pdu',)), (result.level, result.devices))
        self.assertIn('fencing level 1 (outlet-a, outlet-b) failed',
                      self.log.output)
        self.assertIn('device outlet-b', self.log.output)
        self.assertEqual('on', self.bmcs.power_state('host2'))

    def test_no_level_works_means_not_fenced(self):
        self.bmcs.set_mode('host1', 'stuck')
        self.fencing_file({'host1': {'levels': [
            self.ipmi('host1', password_file=self.bad, name='a'),
            self.ipmi('host1', name='b', timeout=2, retries=0)]}})
        topo = topology.Topology.from_conf(self.conf)
        exc = self.assertRaises(exceptions.FencingError, topo.fence,
                                'host1')
        self.assertIn('no fencing level powered it off (2 tried)', str(exc))
        self.assertIn('authentication failed', str(exc))
        self.assertIn('not confirmed', str(exc))
        self.assertFalse(topo.configured('host4'))
        self.assertRaises(exceptions.FencingError, topo.fence, 'host4')


class TestFenceAgent(IpmiTestBase):
    """The real fence_ipmilan against the pyghmi BMC.

    fence_ipmilan (fence-agents 4.12) itself hands the password to
    ipmitool with -P, which shows in ps for the few milliseconds ipmitool
    runs: that is the agent's design, outside instanceha; the ipmi driver
    avoids it. Here we check our part: the password reaches the agent only
    on stdin.
    """

    def agent(self, host: str, password_file: str | None = None) -> dict:
        return {'driver': 'fence-agent', 'agent': 'fence_ipmilan',
                'ip': '127.0.0.1', 'ipport': self.bmcs.ports[host],
                'username': self.bmcs.username, 'lanplus': True,
                'password_file': password_file or self.good}

    def test_fence_ipmilan_off_status_on(self):
        path = self.fencing_file({'host2': self.agent('host2')})
        [[drv]] = config.load(self.conf, path).hosts['host2'].levels
        self.assertEqual(base.PowerState.ON, drv.power_status())
        with ProcessWatcher([self.bmcs.password]) as watch:
            drv.power_off()
        self.assertEqual('off', self.bmcs.power_state('host2'))
        agents = [t for t in watch.seen if 'fence_ipmilan' in t]
        self.assertTrue(agents)
        self.assertEqual([], [t for t in agents if self.bmcs.password in t])
        drv.power_on()
        self.assertEqual('on', self.bmcs.power_state('host2'))
        self.assertNoSecret(self.log.output, self.bmcs.password)

    def test_wrong_password_fails_and_says_what_the_agent_said(self):
        path = self.fencing_file({'host2': self.agent('host2', self.bad)})
        [[drv]] = config.load(self.conf, path).hosts['host2'].levels
        exc = self.assertRaises(base.DeviceError, drv.power_off)
        self.assertIn('host host2 device fence-agent (fence_ipmilan '
                      '127.0.0.1)', str(exc))
        self.assertIn('fence_ipmilan action=off exited 1', str(exc))
        self.assertEqual('on', self.bmcs.power_state('host2'))
        self.assertNoSecret(str(exc) + self.log.output, WRONG)

    def test_chain_fence_agent_after_failed_ipmi(self):
        self.fencing_file({'host3': {'levels': [
            self.ipmi('host3', password_file=self.bad),
            self.agent('host3')]}})
        result = topology.Topology.from_conf(self.conf).fence('host3')
        self.assertEqual((2, ('fence-agent',)),
                         (result.level, result.devices))
        self.assertEqual('off', self.bmcs.power_state('host3'))


class TestFenceAgentContract(fencing_contract.FencingDriverContract,
                             IpmiTestBase):
    """The shipped fencing contract, run on the fence-agent driver."""

    DRIVER = 'fence-agent'
    agent = TestFenceAgent.agent

    def contract_params(self):
        return self.agent('host3')

    def contract_power(self):
        return self.bmcs.power_state('host3')

    def contract_wrong_credentials(self):
        # fence_ipmilan answers a refused password with "Unable to obtain
        # correct plug status or plug is not available", the words of any
        # other failure, so the driver cannot say it was the credentials:
        # a plain DeviceError, checked by TestFenceAgent's
        # test_wrong_password_fails_and_says_what_the_agent_said.
        return None

    def contract_secrets(self):
        return [self.bmcs.password, WRONG]


def run_manage(tmp: str, *args: str, extra: str = ''
               ) -> subprocess.CompletedProcess:
    """instanceha-manage fencing validate, as an operator runs it."""
    conf_path = os.path.join(tmp, 'instanceha.conf')
    with open(conf_path, 'w') as f:
        f.write('[fencing]\nconfig_file = %s\ndevice_timeout = 20\n%s'
                % (os.path.join(tmp, 'fencing.yaml'), extra))
    return subprocess.run(
        [sys.executable, '-m', 'instanceha.cmd.manage', '--config-file',
         conf_path, 'fencing', 'validate', *args], cwd=ROOT,
        capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL)


class TestManageValidate(IpmiTestBase):

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return run_manage(self.tmp, *args)

    def test_reports_each_host(self):
        self.fencing_file({
            'host1': self.ipmi('host1'),
            'host2.example.com': self.ipmi('host2', password_file=self.bad),
            'host3': {'levels': [self.ipmi('host3'), {
                'driver': 'ipmi', 'address': '127.0.0.1',
                'password_file': self.good}]},
        })
        proc = self.manage()
        lines = proc.stdout.splitlines()
        self.assertEqual(1, proc.returncode, proc.stderr)
        self.assertEqual(3, len(lines), proc.stdout)
        self.assertEqual('host1: OK (level 1: ipmi on)', lines[0])
        self.assertTrue(lines[1].startswith(
            'host2.example.com: FAILED: level 1 device ipmi (ipmi '
            '127.0.0.1:%d): authentication failed' % self.bmcs.ports[
                'host2']), lines[1])
        self.assertEqual("host3: INVALID: level 2 device ipmi-2: missing "
                         "required parameter 'username'", lines[2])
        self.assertNoSecret(proc.stdout + proc.stderr, WRONG,
                            self.bmcs.password)

        proc = self.manage('--host', 'host1.example.com')
        self.assertEqual((0, 'host1: OK (level 1: ipmi on)\n'),
                         (proc.returncode, proc.stdout), proc.stderr)
        proc = self.manage('--host', 'host7')
        self.assertEqual(1, proc.returncode)
        self.assertIn('host7: unknown host: no entry in the fencing file',
                      proc.stdout)

    def test_unreachable_and_missing_file(self):
        self.bmcs.set_mode('host1', 'silent')
        self.fencing_file({'host1': self.ipmi('host1')})
        started = time.monotonic()
        proc = self.manage()
        print('validate with a silent BMC took %.1fs'
              % (time.monotonic() - started))
        self.assertEqual(1, proc.returncode)
        self.assertIn('host1: FAILED: level 1 device ipmi', proc.stdout)
        self.assertIn('unreachable', proc.stdout)
        os.unlink(os.path.join(self.tmp, 'fencing.yaml'))
        proc = self.manage()
        self.assertEqual(2, proc.returncode)
        self.assertIn('[fencing] config_file', proc.stderr)


class TestManageValidateWithNova(IpmiTestBase):
    """--nova compares the file with the real Nova's compute hosts."""

    def test_unconfigured_compute_and_unknown_entry(self):
        nova = self.useFixture(peers.NovaPeer(hosts=3))
        self.fencing_file({
            'host1.example.com': self.ipmi('host1'),
            'host2': self.ipmi('host2', password_file=self.bad),
            'hots3': self.ipmi('host3'),
        })
        proc = run_manage(self.tmp, '--nova', extra=(
            '[nova]\nauth_type = none\nendpoint_override = %s\n'
            % nova.endpoint))
        self.assertEqual(1, proc.returncode, proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(4, len(lines), proc.stdout)
        self.assertEqual('host1.example.com: OK (level 1: ipmi on)',
                         lines[0])
        self.assertIn('host2: FAILED: level 1 device ipmi', lines[1])
        self.assertEqual('host3: NOT CONFIGURED: Nova compute host without '
                         'a fencing entry: it is never evacuated', lines[2])
        self.assertTrue(lines[3].startswith(
            'hots3: unknown host: no nova-compute service of that name'),
            lines[3])
