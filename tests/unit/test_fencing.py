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

"""Fencing file schema, driver parameter checks and chain logic.

The chain tests use a tiny scripted driver defined here: they are about
the order of levels, retries and deadlines, not about any device. The
real devices are exercised in tests/functional/test_fencing*.py.
"""

import os

import fixtures
from oslo_config import cfg
import testtools

from instanceha import conf as ha_conf
from instanceha.engine import ports
from instanceha import exceptions
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config
from instanceha.plugins.fencing import fence_agent
from instanceha.plugins.fencing import ipmi
from instanceha.plugins.fencing import topology
from tests import conf_fixture

SECRET = 's3cr3t-Pa55'


def make_conf(**fencing) -> cfg.ConfigOpts:
    """The shared test configuration; ``fencing`` are [fencing] options."""
    fencing.setdefault('poll_interval', 0.05)
    # Most tests use the noop driver as a stand-in device.
    fencing.setdefault('allow_noop', True)
    return conf_fixture.make_conf(fencing=fencing)


class FileMixin:

    def write(self, text: str, name: str = 'fencing.yaml',
              mode: int = 0o600) -> str:
        path = os.path.join(self.dir, name)
        with open(path, 'w') as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.conf = make_conf()


class TestSchema(FileMixin, testtools.TestCase):

    def load(self, text: str, **kwargs) -> config.FencingFile:
        return config.load(self.conf, self.write(text), **kwargs)

    def assertConfigError(self, text: str, *fragments: str) -> str:
        exc = self.assertRaises(exceptions.ConfigurationError, self.load,
                                text)
        for fragment in fragments:
            self.assertIn(fragment, str(exc))
        self.assertNotIn(SECRET, str(exc))
        return str(exc)

    def test_single_device_shorthand(self):
        f = self.load('''
hosts:
  compute-0:
    driver: ipmi
    address: 10.0.0.10
    username: admin
    password: %s
''' % SECRET)
        [[drv]] = f.hosts['compute-0'].levels
        self.assertIsInstance(drv, ipmi.IpmiFencing)
        self.assertEqual('ipmi', drv.device)
        self.assertEqual(623, drv.params['port'])
        self.assertEqual('ADMINISTRATOR', drv.params['privilege_level'])

    def test_levels_templates_and_secret_files(self):
        self.write(SECRET + '\n', 'pdu.pw')
        os.mkdir(os.path.join(self.dir, 'secrets'))
        self.write(SECRET, 'secrets/bmc')
        f = self.load('''
devices:
  pdu:
    driver: noop
hosts:
  compute-1.example.com:
    levels:
      - driver: ipmi
        name: bmc
        address: bmc1
        username: admin
        password_file: secrets/bmc
        timeout: 7
        retries: 0
      - - template: pdu
          name: pdu-a
        - template: pdu
''')
        levels = f.hosts['compute-1.example.com'].levels
        self.assertEqual([['bmc'], ['pdu-a', 'pdu']],
                         [[d.device for d in lv] for lv in levels])
        self.assertEqual(SECRET, levels[0][0].params['password'])
        self.assertNotIn('password_file', levels[0][0].params)
        self.assertEqual(7.0, levels[0][0].timeout)
        self.assertEqual(0, levels[0][0].params['retries'])

    def test_duplicate_labels_are_made_unique(self):
        f = self.load('hosts:\n  h:\n    levels:\n'
                      '      - [{driver: noop}, {driver: noop}]\n')
        self.assertEqual(['noop', 'noop-2'],
                         [d.device for d in f.hosts['h'].levels[0]])

    def test_missing_parameter_names_host_level_device_and_key(self):
        self.assertConfigError('''
hosts:
  compute-2:
    levels:
      - driver: noop
      - driver: ipmi
        address: bmc2
        password: %s
''' % SECRET, 'compute-2', 'level 2', 'device ipmi',
                               "missing required parameter 'username'")

    def test_unknown_parameter(self):
        self.assertConfigError('''
hosts:
  compute-3: {driver: ipmi, address: a, username: u, password: p,
              adress: typo}
''', 'compute-3', "unknown parameter 'adress'",
                               "(did you mean 'address'?)")

    def test_bad_values(self):
        self.assertConfigError(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password: p, port: 70000}}', "parameter 'port'", 'out of range')
        self.assertConfigError(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password: p, privilege_level: ROOT}}', "'privilege_level'",
            'ADMINISTRATOR')
        self.assertConfigError(
            'hosts: {h: {driver: noop, timeout: -1}}', "'timeout'")
        self.assertConfigError(
            'hosts: {h: {driver: noop, retries: 99}}', "'retries'")

    def test_unknown_driver_lists_the_available_ones(self):
        self.assertConfigError('hosts: {h: {driver: ipmy}}', "'ipmy'",
                               'ipmi', 'redfish', 'fence-agent', 'bmh')

    def test_structure_errors(self):
        self.assertConfigError('hosts: [a, b]', '"hosts" must be a mapping')
        self.assertConfigError('host: {}', "unknown top-level key(s) host")
        self.assertConfigError('hosts: {h: [driver, noop]}', 'host h',
                               'expected a device mapping')
        self.assertConfigError('hosts: {h: {levels: []}}',
                               '"levels" must be a non-empty list')
        self.assertConfigError('hosts: {h: {levels: [[]]}}', 'level 1',
                               'at least one device')
        self.assertConfigError('hosts: {h: {levels: [{driver: noop}], '
                               'driver: noop}}', 'cannot be combined')
        self.assertConfigError('hosts: {h: {template: nope}}',
                               "template 'nope' is not defined")
        self.assertConfigError('hosts: {h: {name: x}}',
                               'missing required key "driver"')
        self.assertConfigError('hosts: {h: {driver: noop\n',
                               'not valid YAML')

    def test_secret_file_problems(self):
        self.assertConfigError(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password_file: /nonexistent/pw}}', 'host h', 'password_file',
            '/nonexistent/pw', 'No such file')
        self.write('', 'empty')
        self.assertConfigError(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password_file: empty}}', 'is empty')
        self.write(SECRET, 'pw')
        self.assertConfigError(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password: %s, password_file: pw}}' % SECRET, 'not both')

    def test_missing_file_names_the_option(self):
        exc = self.assertRaises(exceptions.ConfigurationError, config.load,
                                self.conf, os.path.join(self.dir, 'nope'))
        self.assertIn('[fencing] config_file', str(exc))

    def test_lenient_load_collects_per_host_errors(self):
        f = self.load('hosts: {good: {driver: noop}, bad: {driver: ipmi}}',
                      strict=False)
        self.assertEqual(['good'], list(f.hosts))
        self.assertIn("missing required parameter 'address'",
                      f.errors['bad'])
        self.assertEqual(['bad', 'good'], f.names())

    def test_only_one_host(self):
        f = self.load('hosts: {a.example.com: {driver: noop}, '
                      'b: {driver: ipmi}}', only='a')
        self.assertEqual(['a.example.com'], list(f.hosts))
        self.assertEqual({}, self.load('hosts: {a: {driver: noop}}',
                                       only='zz').hosts)


class TestHostMatching(testtools.TestCase):

    def test_short_and_fqdn_match_both_ways(self):
        keys = ['compute-0.example.com', 'compute-1', 'Compute-2']
        self.assertEqual('compute-0.example.com',
                         config.match_host('compute-0', keys))
        self.assertEqual('compute-1',
                         config.match_host('compute-1.example.com', keys))
        self.assertEqual('Compute-2', config.match_host('compute-2', keys))
        self.assertIsNone(config.match_host('compute-9', keys))

    def test_different_domains_do_not_match(self):
        self.assertIsNone(config.match_host('c0.a.example',
                                            ['c0.b.example']))

    def test_short_key_naming_two_nova_hosts_serves_neither(self):
        keys = ['compute-1', 'compute-0.az1']
        nova = ['compute-0.az1', 'compute-1.az1', 'compute-1.az2']
        for host in ('compute-1.az1', 'compute-1.az2'):
            exc = self.assertRaises(exceptions.ConfigurationError,
                                    config.match_host, host, keys, 'f.yaml',
                                    nova)
            self.assertIn('entry compute-1 is ambiguous: it matches Nova '
                          'hosts compute-1.az1, compute-1.az2', str(exc))
        self.assertEqual('compute-0.az1',
                         config.match_host('compute-0.az1', keys, '', nova))
        # Without Nova's names (or with one host of that short name, all
        # in one domain) the short key serves its host as before.
        self.assertEqual('compute-1', config.match_host('compute-1.az2',
                                                        keys))
        self.assertEqual('compute-1', config.match_host(
            'compute-1.az2', keys, '', ['compute-1.az2', 'compute-0.az2']))

    def test_short_key_in_a_cloud_of_several_domains_serves_none(self):
        # compute-1.az1 may exist unseen (its service record deleted before
        # this copy started): the short key could name either machine.
        keys = ['compute-1', 'compute-0.az1']
        exc = self.assertRaises(
            exceptions.ConfigurationError, config.match_host,
            'compute-1.az2', keys, 'f.yaml',
            ['compute-1.az2', 'compute-0.az1'])
        self.assertIn('entry compute-1 is a short name, and Nova\'s hosts '
                      'are in several domains (az1, az2)', str(exc))
        self.assertIn('Give host compute-1.az2 an entry with its exact name',
                      str(exc))
        # A full key for a short Nova name guesses nothing.
        self.assertEqual('c2.example.com', config.match_host(
            'c2', ['c2.example.com'], '', ['c2', 'c3.az1', 'c4.az2']))

    def test_key_naming_another_host_exactly_is_not_borrowed(self):
        keys = ['compute-1']
        nova = ['compute-1', 'compute-1.az2']
        self.assertEqual('compute-1',
                         config.match_host('compute-1', keys, '', nova))
        exc = self.assertRaises(exceptions.ConfigurationError,
                                config.match_host, 'compute-1.az2', keys,
                                'f.yaml', nova)
        self.assertIn('host compute-1.az2 has no entry of its own: entry '
                      'compute-1 names Nova host compute-1 exactly',
                      str(exc))

    def test_assign_hosts_reports_each_nova_host(self):
        assigned, problems = config.assign_hosts(
            ['compute-1', 'c2.example.com', 'c3'],
            ['compute-1.az1', 'compute-1.az2', 'c2', 'c4'])
        self.assertEqual({'c2': 'c2.example.com'}, assigned)
        self.assertEqual(['compute-1.az1', 'compute-1.az2'],
                         sorted(problems))

    def test_exact_match_wins_and_ambiguity_is_an_error(self):
        keys = ['c0.a.example', 'c0.b.example', 'c1.a.example', 'c1']
        self.assertEqual('c1', config.match_host('c1', keys))
        exc = self.assertRaises(exceptions.ConfigurationError,
                                config.match_host, 'c0', keys, 'f.yaml')
        self.assertIn('c0.a.example, c0.b.example', str(exc))


class TestDriverSafety(FileMixin, testtools.TestCase):

    def test_ipmi_password_is_not_in_argv(self):
        f = config.load(self.conf, self.write(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password: %s, cipher_suite: 17}}' % SECRET))
        [[drv]] = f.hosts['h'].levels
        argv = drv.command('chassis', 'power', 'status')
        self.assertNotIn(SECRET, ' '.join(argv))
        self.assertIn('-E', argv)
        self.assertEqual(['-C', '17'], argv[argv.index('-C'):][:2])

    def test_errors_redact_secrets(self):
        f = config.load(self.conf, self.write(
            'hosts: {h: {driver: ipmi, address: a, username: u, '
            'password: %s}}' % SECRET))
        [[drv]] = f.hosts['h'].levels
        exc = base.DeviceError(drv, 'the BMC said %s' % SECRET)
        self.assertNotIn(SECRET, str(exc))
        self.assertIn('host h device ipmi (ipmi a:623)', str(exc))

    def test_fence_agent_password_only_on_stdin(self):
        f = config.load(self.conf, self.write(
            'hosts: {h: {driver: fence-agent, agent: fence_ipmilan, '
            'ip: 127.0.0.1, username: admin, lanplus: true, '
            'password: %s}}' % SECRET))
        [[drv]] = f.hosts['h'].levels
        text = drv.stdin_text('off')
        self.assertEqual(['action=off', 'ip=127.0.0.1', 'lanplus=1',
                          'username=admin', 'password=%s' % SECRET],
                         text.splitlines())
        self.assertNotIn(SECRET, drv.agent_path)
        self.assertNotIn(SECRET, ' '.join(fence_agent._agent_env().values()))

    def test_fence_agent_options_checked_against_metadata(self):
        for text, fragment in [
                ('plugg: 3', "unknown parameter 'plugg' for agent "
                             "fence_ipmilan"),
                ('action: reboot', "parameter 'action' is set by"),
                ('passwd: x', "parameter 'passwd' is set by")]:
            exc = self.assertRaises(
                exceptions.ConfigurationError, config.load, self.conf,
                self.write('hosts: {h: {driver: fence-agent, agent: '
                           'fence_ipmilan, ip: a, %s}}' % text))
            self.assertIn(fragment, str(exc))
        exc = self.assertRaises(
            exceptions.ConfigurationError, config.load, self.conf,
            self.write('hosts: {h: {driver: fence-agent, agent: '
                       'fence_nonexistent}}'))
        self.assertIn('not found or not executable', str(exc))

    def test_redfish_and_bmh_checks(self):
        for text, fragment in [
                ('driver: redfish, address: bmc, username: u, password: p',
                 'needs a scheme'),
                ('driver: redfish, address: "https://b", username: u, '
                 'password: p, verify: false, ca_file: /x', 'contradict'),
                ('driver: redfish, address: "https://b", username: u, '
                 'password: p, verify: maybe', 'expected true or false'),
                ('driver: bmh, baremetalhost: b, namespace: n, token: t',
                 "'token' needs 'api_url'"),
                ('driver: bmh, baremetalhost: b, namespace: n',
                 'no Kubernetes credentials'),
                ('driver: bmh, baremetalhost: b, namespace: n, kubeconfig: '
                 '/nonexistent', 'cannot read /nonexistent')]:
            self.useFixture(fixtures.EnvironmentVariable(
                'KUBERNETES_SERVICE_HOST'))
            exc = self.assertRaises(
                exceptions.ConfigurationError, config.load, self.conf,
                self.write('hosts: {h: {%s}}' % text))
            self.assertIn(fragment, str(exc))


class TestOptions(testtools.TestCase):

    def test_chain_shorter_than_device_is_rejected(self):
        conf = make_conf(chain_timeout=10, device_timeout=30)
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('[fencing] chain_timeout', str(exc))

    def test_defaults_are_valid(self):
        ha_conf.validate(make_conf())


# -- chain logic with a scripted driver -----------------------------------------


class Scripted(base.FencingDriver):
    """Plays a script of outcomes: 'ok', 'auth', 'down', 'stuck', 'slow'."""

    PARAMS = {'script': base.Param('outcomes, comma separated',
                                   required=True)}
    calls: list

    def __init__(self, conf, host, params, device=None):
        super().__init__(conf, host, params, device=device)
        self.outcomes = list(self.params['script'].split(','))
        self.power = base.PowerState.ON
        self.requested = None

    def _request_power(self, state, deadline):
        self.calls.append((self.device, state.value))
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else \
            self.outcomes[0]
        if outcome == 'auth':
            raise base.AuthError(self, 'rejected')
        if outcome == 'down':
            raise base.UnreachableError(self, 'no answer')
        if outcome == 'ok':
            self.power = state

    def _read_power(self, deadline):
        return self.power


class TestChain(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.calls = []
        self.conf = make_conf(device_retries=1)
        self.log = self.useFixture(fixtures.FakeLogger(level='INFO'))

    def topo(self, hosts: dict[str, list[list[str]]]) -> topology.Topology:
        entries = {}
        for host, levels in hosts.items():
            built = []
            for li, level in enumerate(levels, 1):
                devs = []
                for di, script in enumerate(level, 1):
                    drv = Scripted(self.conf, host, {'script': script,
                                                     'timeout': 0.3},
                                   device='d%d.%d' % (li, di))
                    drv.name = 'scripted'
                    drv.calls = self.calls
                    drv.validate()
                    devs.append(drv)
                built.append(devs)
            entries[host] = config.HostEntry(key=host, levels=built)
        return topology.Topology(self.conf, config.FencingFile(
            path='test.yaml', hosts=entries, errors={}))

    def test_first_level_that_works_fences(self):
        t = self.topo({'h1': [['auth'], ['ok']]})
        result = t.fence('h1')
        self.assertEqual(ports.FenceResult('h1', 2, ('d2.1',)), result)
        self.assertEqual([('d1.1', 'off'), ('d2.1', 'off')], self.calls)
        self.assertIn('h1 powered off by fencing level 2 (d2.1)',
                      self.log.output)
        self.assertIn('fencing level 1 (d1.1) failed', self.log.output)

    def test_all_devices_of_a_level_must_succeed(self):
        t = self.topo({'h1': [['ok', 'auth'], ['ok']]})
        self.assertEqual(2, t.fence('h1').level)
        t = self.topo({'h2': [['ok', 'auth']]})
        exc = self.assertRaises(topology.ChainError, t.fence, 'h2')
        self.assertIn('level 1 (d1.1, d1.2)', str(exc))
        self.assertIn('authentication failed', str(exc))

    def test_two_device_level_succeeds_only_with_both(self):
        t = self.topo({'h1': [['ok', 'ok']]})
        self.assertEqual(('d1.1', 'd1.2'), t.fence('h1').devices)

    def test_a_count_never_outweighs_a_device_that_reads_on(self):
        # A watchdog's level infers "off" from a deadline; a device that
        # reads the host on (someone powered it back on) wins, whichever
        # level comes first.
        for order in ((0, 1), (1, 0)):
            t = self.topo({'h1': [['ok'], ['ok']]})
            levels = t.levels('h1')
            bmc, counted = (levels[order[0]][0], levels[order[1]][0])
            counted.counts_watchdogs = True
            counted.deadline_left = lambda: 0.0
            counted.power = base.PowerState.OFF
            reading = t.power_state('h1')
            self.assertFalse(reading.off, reading.detail)
            # The power-reading device unreadable: the count stands.
            bmc.power_status = lambda timeout=None: 1 / 0
            self.assertTrue(t.power_state('h1').off)

    def test_power_state_needs_a_whole_level_off(self):
        t = self.topo({'h1': [['ok'], ['ok', 'ok']]})
        reading = t.power_state('h1')
        self.assertEqual((False, True), (reading.off, reading.on))
        self.assertEqual([], self.calls)  # reading changes nothing
        # One outlet of a dual-fed server off proves nothing.
        [[bmc], [pdu_a, pdu_b]] = t.levels('h1')
        pdu_a.power = base.PowerState.OFF
        self.assertFalse(t.power_state('h1').off)
        pdu_b.power = base.PowerState.OFF
        reading = t.power_state('h1')
        self.assertTrue(reading.off)
        self.assertIn('level 2 reports off', reading.detail)

    def test_power_state_of_an_unreadable_device_proves_nothing(self):
        t = self.topo({'h1': [['ok']]})
        [[drv]] = t.levels('h1')

        def broken(deadline):
            raise base.UnreachableError(drv, 'no answer')
        drv._read_power = broken
        reading = t.power_state('h1')
        self.assertEqual((False, False), (reading.off, reading.on))
        self.assertIn('unreadable', reading.detail)
        self.assertFalse(t.power_state('nobody').off)

    def test_device_guard_stops_the_chain(self):
        t = self.topo({'h1': [['down'], ['ok']]})
        seen = []

        def guard(host, device, action):
            seen.append(device)
            if device == 'd2.1':
                raise exceptions.CoordinationError('not the leader')
            return 5.0
        t.device_guard = guard
        self.assertRaises(exceptions.CoordinationError, t.fence, 'h1')
        self.assertEqual(['d1.1', 'd1.1', 'd2.1'], seen)
        self.assertNotIn(('d2.1', 'off'), self.calls)

    def test_retryable_failures_are_retried_auth_is_not(self):
        t = self.topo({'h1': [['down,ok']]})
        self.assertEqual(1, t.fence('h1').level)
        self.assertEqual([('d1.1', 'off')] * 2, self.calls)
        self.calls.clear()
        t = self.topo({'h2': [['auth,ok']]})
        self.assertRaises(exceptions.FencingError, t.fence, 'h2')
        self.assertEqual([('d1.1', 'off')], self.calls)

    def test_retries_are_bounded(self):
        t = self.topo({'h1': [['down,down,ok']]})
        exc = self.assertRaises(exceptions.FencingError, t.fence, 'h1')
        self.assertIn('unreachable', str(exc))
        self.assertEqual(2, len(self.calls))

    def test_accepted_but_never_off(self):
        t = self.topo({'h1': [['stuck']]})
        exc = self.assertRaises(exceptions.FencingError, t.fence, 'h1')
        self.assertIn('not confirmed: accepted power off but still reports '
                      'on', str(exc))

    def test_chain_timeout_stops_the_walk(self):
        self.conf.set_override('chain_timeout', 1, 'fencing')
        self.conf.set_override('device_retries', 10, 'fencing')
        t = self.topo({'h1': [['stuck'], ['ok']]})
        exc = self.assertRaises(topology.ChainError, t.fence, 'h1')
        self.assertIn('chain timeout', str(exc))
        self.assertNotIn(('d2.1', 'off'), self.calls)

    def test_unfence_through_the_level_that_fenced(self):
        t = self.topo({'h1': [['auth,ok'], ['ok']]})
        self.assertEqual(2, t.fence('h1').level)
        self.assertEqual(2, t.fenced_by('h1'))
        self.calls.clear()
        result = t.unfence('h1')
        self.assertEqual(2, result.level)
        self.assertEqual([('d2.1', 'on')], self.calls)
        self.assertIsNone(t.fenced_by('h1'))

    def test_unfence_without_memory_walks_the_levels(self):
        t = self.topo({'h1': [['down'], ['ok']]})
        self.assertEqual(2, t.unfence('h1').level)

    def test_ambiguous_short_name_is_not_configured_and_logged_once(self):
        t = self.topo({'c0.a.example': [['ok']], 'c0.b.example': [['ok']]})
        self.assertFalse(t.configured('c0'))
        self.assertFalse(t.configured('c0'))
        self.assertEqual(1, self.log.output.count('matches several entries'))
        self.assertTrue(t.configured('c0.b.example'))
        self.assertRaises(exceptions.FencingError, t.fence, 'c0')
        t.stop()

    def test_key_ambiguous_among_nova_hosts_is_never_fenced(self):
        t = self.topo({'c0': [['ok']]})
        self.assertTrue(t.configured('c0.a.example'))
        t.learn_hosts(['c0.a.example'])
        t.learn_hosts(['c0.b.example'])  # names add up
        self.assertFalse(t.configured('c0.a.example'))
        self.assertFalse(t.configured('c0.b.example'))
        exc = self.assertRaises(exceptions.FencingError, t.fence,
                                'c0.b.example')
        self.assertIn('entry c0 is ambiguous', str(exc))
        self.assertEqual([], self.calls)
        t.stop()

    def test_unconfigured_host_is_never_fenced(self):
        t = self.topo({'h1.example.com': [['ok']]})
        self.assertTrue(t.configured('h1'))
        self.assertFalse(t.configured('h9'))
        exc = self.assertRaises(exceptions.FencingError, t.fence, 'h9')
        self.assertIn('host h9 has no entry in the fencing file', str(exc))
        self.assertEqual([], self.calls)

    def test_driver_bug_is_a_failure_naming_the_device(self):
        t = self.topo({'h1': [['ok'], ['ok']]})
        drv = t.levels('h1')[0][0]

        def boom(state, deadline):
            raise KeyError('oops')
        drv._request_power = boom
        self.assertEqual(2, t.fence('h1').level)
        self.assertIn("unexpected KeyError: 'oops'", self.log.output)


class TestFromConf(FileMixin, testtools.TestCase):

    def test_from_conf_fails_fast_naming_host_and_key(self):
        path = self.write('hosts: {ok: {driver: noop}, '
                          'broken: {driver: ipmi, address: a}}')
        self.conf.set_override('config_file', path, 'fencing')
        exc = self.assertRaises(exceptions.ConfigurationError,
                                topology.Topology.from_conf, self.conf)
        self.assertIn('host broken', str(exc))
        self.assertIn("'username'", str(exc))

    def test_from_conf_noop(self):
        path = self.write('hosts: {c1: {driver: noop}}')
        self.conf.set_override('config_file', path, 'fencing')
        t = topology.Topology.from_conf(self.conf)
        with fixtures.FakeLogger(level='WARNING') as log:
            self.assertEqual(ports.FenceResult('c1.example.com', 1,
                                               ('noop',)),
                             t.fence('c1.example.com'))
        self.assertIn('nothing was proven', log.output)

    def test_noop_refused_unless_allowed(self):
        path = self.write('hosts: {c1: {driver: noop}}')
        self.conf.set_override('config_file', path, 'fencing')
        self.conf.set_override('allow_noop', False, 'fencing')
        exc = self.assertRaises(exceptions.ConfigurationError,
                                topology.Topology.from_conf, self.conf)
        self.assertIn('c1', str(exc))
        self.assertIn('allow_noop', str(exc))


class TestSample(testtools.TestCase):

    def test_sample_file_follows_the_schema(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        path = os.path.join(root, 'etc', 'instanceha', 'fencing.yaml.sample')
        self.useFixture(fixtures.EnvironmentVariable(
            'KUBERNETES_SERVICE_HOST'))
        f = config.load(make_conf(), path, strict=False)
        self.assertEqual(['compute-0.example.com', 'compute-1', 'compute-2',
                          'compute-3', 'compute-4'], f.names())
        # The sample points at secret files and a kubeconfig that do not
        # exist here; anything else wrong is a mistake in the sample.
        for host, error in f.errors.items():
            self.assertIn('cannot read', error, host)
