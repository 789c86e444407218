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

"""The veto-hook gate with real hook scripts and a real HTTP server.

Hooks are small executables written to a temporary directory and run for
real; the URL form talks to an http.server on 127.0.0.1. Nothing is
mocked.
"""

import base64
from concurrent import futures
import http.server
import json
import os
import ssl
import stat
import sys
import threading
import time

import fixtures
from oslo_config import cfg
import testtools

from instanceha import conf as ha_conf
from instanceha.engine import decide
from instanceha.engine import model
from instanceha.engine import plan
from instanceha import exceptions
from instanceha.plugins.gates import veto_hook
from instanceha.plugins import loader
from tests.unit import test_decide as h

D = plan.Decision
GATES = ['disabled', 'threshold', 'failure-domain', 'per-cycle',
         'veto-hook']

ALLOW = '#!/bin/sh\ncat > {dir}/proposal.json\nenv > {dir}/env\nexit 0\n'
VETO_ALL = ('#!/bin/sh\ncat >/dev/null\n'
            'echo "etcd quorum: member on host1 not yet replaced"\n'
            'echo "second line is not quoted"\nexit 1\n')
VETO_STDERR = '#!/bin/sh\necho "only on stderr" >&2\nexit 1\n'
# Vetoes every proposed host whose name ends in 3, by JSON.
VETO_ONE = '''#!{python}
import json, sys
doc = json.load(sys.stdin)
hosts = [h['host'] for h in doc['hosts'] if h['host'].endswith('3')]
print(json.dumps({{'veto': hosts, 'reason': 'etcd member on ' +
                   ', '.join(hosts) + ' not yet migrated'}}))
sys.exit(1 if hosts else 0)
'''
CRASH = '#!/bin/sh\necho "segfault in libfoo" >&2\nexit 3\n'
KILLED = '#!/bin/sh\nkill -9 $$\n'
HANG = '#!/bin/sh\nsleep 60 &\necho $! > {dir}/child\nwait\n'
GARBAGE_VETO = '#!/bin/sh\nprintf "\\001\\002\\377bad\\033[31m\\n"\nexit 1\n'
GARBAGE_JSON = '#!/bin/sh\necho "{{not json"\nexit 1\n'
GARBAGE_ALLOW = '#!/bin/sh\nprintf "\\377\\376{{{{"\nexit 0\n'
UNKNOWN_HOST = '#!/bin/sh\necho \'{{"veto": ["host9"]}}\'\nexit 1\n'
EMPTY_VETO = '#!/bin/sh\necho \'{{"veto": []}}\'\nexit 1\n'


class HookDir(fixtures.Fixture):
    """A temporary directory of executable hook scripts."""

    def _setUp(self):
        self.path = self.useFixture(fixtures.TempDir()).path

    def write(self, name, text, mode=0o755):
        path = os.path.join(self.path, name)
        with open(path, 'w') as f:
            f.write(text.format(dir=self.path, python=sys.executable))
        os.chmod(path, mode)
        return path


def conf_with(hooks, **veto):
    veto = dict({'hooks': hooks, 'timeout': 5.0}, **veto)
    return h.make_conf(gates={'enabled': GATES}, veto_hooks=veto)


def plan_with(hooks, down=('host1', 'host3'), n=6, **veto):
    services, servers = h.cloud(n, down=set(down))
    aggs = [model.Aggregate('a1', 'rack1', frozenset({'host1', 'host2'}),
                            availability_zone='az1')]
    return h.run(h.snapshot(services, servers, aggs), conf_with(hooks,
                                                                **veto))


class TestExecHooks(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(HookDir())

    def test_allow_and_what_the_hook_is_told(self):
        self.useFixture(fixtures.EnvironmentVariable('OS_PASSWORD',
                                                     's3cret-pw'))
        p = plan_with([self.dir.write('allow', ALLOW)])
        self.assertEqual(['host1', 'host3'],
                         [d.host for d in p.to_recover()])
        with open(os.path.join(self.dir.path, 'proposal.json')) as f:
            doc = json.load(f)
        self.assertEqual(1, doc['version'])
        self.assertEqual('fence-and-evacuate', doc['action'])
        self.assertEqual(['host1', 'host3'], doc['failed'])
        self.assertEqual(6, doc['monitored'])
        host1 = doc['hosts'][0]
        self.assertEqual('host1', host1['host'])
        self.assertEqual(['rack1'], host1['aggregates'])
        self.assertEqual(['az1'], host1['availability_zones'])
        self.assertEqual(2, host1['instances'])
        self.assertEqual(2, host1['evacuable_instances'])
        self.assertEqual({'ACTIVE': 2}, host1['instance_statuses'])
        self.assertIn('nova: state down', host1['reasons'][0])
        self.assertEqual([], doc['hosts'][1]['aggregates'])
        # The service's environment (credentials) is not passed on.
        with open(os.path.join(self.dir.path, 'env')) as f:
            env = f.read()
        self.assertNotIn('s3cret-pw', env)
        self.assertIn('PATH=', env)

    def test_veto_all_blocks_the_plan_with_the_first_line(self):
        hook = self.dir.write('etcd-guard', VETO_ALL)
        p = plan_with([hook])
        self.assertEqual([], p.to_recover())
        why = ('veto-hook: hook %s vetoes host1, host3: etcd quorum: member '
               'on host1 not yet replaced' % hook)
        self.assertEqual([why], list(p.blocked_by))
        self.assertEqual(D.BLOCKED, p.decision('host3').decision)
        self.assertEqual('gate ' + why, p.decision('host3').reasons[-1])
        self.assertNotIn('second line', p.lines()[-1])

    def test_veto_reason_from_stderr(self):
        hook = self.dir.write('h', VETO_STDERR)
        p = plan_with([hook])
        self.assertIn('vetoes host1, host3: only on stderr',
                      p.blocked_by[0])

    def test_veto_one_host(self):
        hook = self.dir.write('etcd-guard', VETO_ONE)
        p = plan_with([hook])
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])
        d3 = p.decision('host3')
        self.assertEqual(D.BLOCKED, d3.decision)
        self.assertEqual('gate veto-hook: hook %s vetoes host3: etcd member '
                         'on host3 not yet migrated' % hook, d3.reasons[-1])
        self.assertEqual((), p.blocked_by)
        self.assertIn('host3 blocked: nova: state down', p.lines()[2])
        self.assertTrue(p.lines()[2].endswith(
            'vetoes host3: etcd member on host3 not yet migrated; 2 '
            'eligible instance(s)'), p.lines()[2])
        # When host3 is no longer proposed, the same hook allows.
        p = plan_with([hook], down=('host1',))
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])

    def test_two_hooks_both_asked(self):
        one = self.dir.write('one', VETO_ONE)
        everything = self.dir.write('all', VETO_ALL)
        allow = self.dir.write('allow', ALLOW)
        p = plan_with([allow, one, everything])
        self.assertEqual([], p.to_recover())
        self.assertIn('hook %s vetoes host1, host3' % everything,
                      p.blocked_by[0])
        p = plan_with([one, allow])
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])

    def assert_error_blocks(self, script, expected):
        hook = self.dir.write('hook', script)
        p = plan_with([hook], timeout=1.0)
        self.assertEqual([], p.to_recover())
        self.assertEqual(1, len(p.blocked_by))
        self.assertIn('veto-hook: hook %s failed: %s' % (hook, expected),
                      p.blocked_by[0])
        self.assertIn('([veto_hooks] on_error = veto)', p.blocked_by[0])
        # on_error = allow: recovered, and the error is still logged.
        log = self.useFixture(fixtures.FakeLogger())
        p = plan_with([hook], timeout=1.0, on_error='allow')
        self.assertEqual(['host1', 'host3'],
                         [d.host for d in p.to_recover()])
        self.assertIn('hook %s failed: %s' % (hook, expected), log.output)
        self.assertIn('ignored ([veto_hooks] on_error = allow)', log.output)

    def test_crash_is_an_error(self):
        self.assert_error_blocks(CRASH, 'exit status 3 (0 allows, 1 vetoes)'
                                        ': segfault in libfoo')

    def test_killed_by_signal_is_an_error(self):
        self.assert_error_blocks(KILLED, 'killed by signal 9')

    def test_hang_past_timeout_kills_the_process_group(self):
        self.assert_error_blocks(HANG, 'no answer within 1s (killed)')
        with open(os.path.join(self.dir.path, 'child')) as f:
            child = int(f.read())
        # SIGKILL is delivered asynchronously: wait (bounded) for the
        # hook's own child, the sleep, to be gone or a zombie.
        for _ in range(100):
            try:
                with open('/proc/%d/stat' % child) as f:
                    state = f.read().rsplit(')', 1)[1].split()[0]
            except FileNotFoundError:
                break
            if state in 'ZX':
                break
            time.sleep(0.05)
        else:
            self.fail('the hook child %d survived the timeout' % child)

    def test_garbage_veto_is_a_sanitised_veto(self):
        hook = self.dir.write('hook', GARBAGE_VETO)
        p = plan_with([hook])
        self.assertEqual([], p.to_recover())
        reason = p.blocked_by[0].split(': ', 2)[-1]
        self.assertTrue(reason.isprintable(), reason)
        self.assertIn('bad', reason)

    def test_garbage_json_is_an_error(self):
        self.assert_error_blocks(GARBAGE_JSON, 'its veto is not valid JSON')

    def test_garbage_with_exit_0_allows(self):
        hook = self.dir.write('hook', GARBAGE_ALLOW)
        self.assertEqual(2, len(plan_with([hook]).to_recover()))

    def test_veto_of_a_host_not_proposed_allows_the_proposal(self):
        # A static guard names the hosts it protects whatever is proposed
        # (the etcd member guard): host9 is not at stake, nothing vetoed.
        hook = self.dir.write('hook', UNKNOWN_HOST)
        p = plan_with([hook])
        self.assertEqual(['host1', 'host3'],
                         [d.host for d in p.to_recover()])
        self.assertEqual((), p.blocked_by)

    def test_veto_naming_proposed_and_other_hosts_blocks_the_proposed(self):
        hook = self.dir.write('hook', '#!/bin/sh\necho \'{{"veto": '
                              '["host9", "host3"], "reason": "guard"}}\'\n'
                              'exit 1\n')
        p = plan_with([hook])
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])
        self.assertIn('hook %s vetoes host3: guard' % hook,
                      p.decision('host3').reasons[-1])

    def test_empty_veto_list_is_an_error(self):
        self.assert_error_blocks(EMPTY_VETO, 'it vetoes but its "veto" list '
                                             'is empty')

    def test_hook_not_asked_without_candidates(self):
        hook = self.dir.write('allow', ALLOW)
        p = plan_with([hook], down=())
        self.assertEqual([], p.to_recover())
        self.assertFalse(os.path.exists(
            os.path.join(self.dir.path, 'proposal.json')))

    def test_hook_not_asked_when_an_earlier_gate_blocks(self):
        # Over the threshold: the mass-failure gate blocks first and the
        # hook is never bothered.
        hook = self.dir.write('allow', ALLOW)
        p = plan_with([hook], down=('host1', 'host2', 'host3', 'host4'))
        self.assertIn('threshold', p.blocked_by[0])
        self.assertFalse(os.path.exists(
            os.path.join(self.dir.path, 'proposal.json')))

    def test_hook_asked_only_about_hosts_earlier_gates_allow(self):
        hook = self.dir.write('allow', ALLOW)
        conf = conf_with([hook])
        conf.set_override('max_hosts_per_cycle', 1, group='gates')
        services, servers = h.cloud(6, down={'host1', 'host3'})
        p = h.run(h.snapshot(services, servers), conf)
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])
        with open(os.path.join(self.dir.path, 'proposal.json')) as f:
            doc = json.load(f)
        self.assertEqual(['host1'], [x['host'] for x in doc['hosts']])


class TestValidate(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(HookDir())

    def assert_invalid(self, hooks, expected, **veto):
        conf = conf_with(hooks, **veto)
        gate = veto_hook.VetoHookGate(conf)
        exc = self.assertRaises(exceptions.ConfigurationError, gate.validate)
        self.assertIn(expected, str(exc))
        return str(exc)

    def test_missing_executable(self):
        path = os.path.join(self.dir.path, 'nope')
        self.assert_invalid([path], 'option [veto_hooks] hooks: %s does not '
                                    'exist or is not a file' % path)

    def test_not_executable(self):
        path = self.dir.write('h', ALLOW, mode=stat.S_IRUSR | stat.S_IWUSR)
        self.assert_invalid([path], 'option [veto_hooks] hooks: %s is not '
                                    'executable' % path)

    def test_relative_path_and_other_schemes(self):
        self.assert_invalid(['etcd-guard'], "'etcd-guard' is neither an "
                            'absolute path to an executable nor an '
                            'http(s):// URL')
        msg = self.assert_invalid(['ftp://u:pw@h/x?token=t0k'],
                                  "'ftp://h/x' is neither")
        self.assertNotIn('pw', msg)
        self.assertNotIn('t0k', msg)

    def test_bad_url_names_the_option_without_secrets(self):
        msg = self.assert_invalid(['http://u:pw@host:99999/x?token=t0k'],
                                  'option [veto_hooks] hooks: '
                                  'http://host:99999/x is not a valid')
        self.assertNotIn('t0k', msg)
        self.assertNotIn('pw', msg)
        self.assert_invalid(['https:///x'], 'is not a valid http(s) URL')

    def test_missing_ca_file(self):
        self.assert_invalid(['https://example.org/'],
                            'option [veto_hooks] ca_file: /nonexistent does '
                            'not exist', ca_file='/nonexistent')

    def test_valid(self):
        gate = veto_hook.VetoHookGate(conf_with(
            [self.dir.write('h', ALLOW), 'https://example.org/veto']))
        gate.validate()
        self.assertEqual(2, len(gate.hooks))

    def test_hooks_without_the_gate(self):
        conf = h.make_conf(veto_hooks={'hooks': ['/bin/true']})
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('option [veto_hooks] hooks is set but the "veto-hook" '
                      'gate is not in [gates] enabled', str(exc))

    def test_timeout_must_be_shorter_than_poll(self):
        conf = conf_with(['/bin/true'], timeout=60.0)
        exc = self.assertRaises(exceptions.ConfigurationError,
                                ha_conf.validate, conf)
        self.assertIn('option [veto_hooks] timeout (60s) must be less than '
                      '[DEFAULT] poll (45s)', str(exc))
        ha_conf.validate(conf_with(['/bin/true'], timeout=44.0))

    def from_file(self, text):
        path = os.path.join(self.dir.path, 'instanceha.conf')
        with open(path, 'w') as f:
            f.write('[gates]\nenabled = veto-hook\n[veto_hooks]\n'
                    'hooks = /bin/true\n' + text)
        conf = cfg.ConfigOpts()
        ha_conf.register_opts(conf)
        conf(['--config-file', path], project='instanceha',
             default_config_files=[])
        return self.assertRaises(exceptions.ConfigurationError,
                                 ha_conf.validate, conf)

    def test_timeout_is_bounded(self):
        exc = self.from_file('timeout = 1000\n')
        self.assertIn('invalid value for option [veto_hooks] timeout',
                      str(exc))

    def test_on_error_choices(self):
        exc = self.from_file('on_error = maybe\n')
        self.assertIn('invalid value for option [veto_hooks] on_error',
                      str(exc))


class HookServer(fixtures.Fixture):
    """A real HTTP server on 127.0.0.1 answering per path."""

    ROUTES = {
        '/allow': (204, ''),
        '/veto-one': (409, json.dumps({'veto': ['host3'],
                                       'reason': 'rack3 in maintenance'})),
        '/forbid': (403, 'change freeze until Monday\nmore'),
        '/fail': (500, 'Internal Server Error'),
        '/redirect': (302, ''),
        '/bad-json': (409, '{"veto": "host3"}'),
    }

    def __init__(self, tls=False):
        super().__init__()
        self.tls = tls

    def _setUp(self):
        # Loopback requests must never go through a proxy.
        for var in ('no_proxy', 'NO_PROXY'):
            self.useFixture(fixtures.EnvironmentVariable(var, '127.0.0.1'))
        self.requests = []
        fixture = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get('Content-Length', 0))
                body = self.rfile.read(length)
                path, _, query = self.path.partition('?')
                fixture.requests.append({
                    'path': path, 'query': query, 'body': json.loads(body),
                    'auth': self.headers.get('Authorization'),
                    'type': self.headers.get('Content-Type')})
                if path == '/slow':
                    fixture.release.wait(10)
                    code, text = 200, ''
                else:
                    code, text = fixture.ROUTES[path]
                data = text.encode()
                self.send_response(code)
                if code == 302:
                    self.send_header('Location', '/allow')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except BrokenPipeError:
                    pass  # the hook's client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.release = threading.Event()
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.server.daemon_threads = True
        scheme = 'http'
        if self.tls:
            # A real TLS endpoint with its own self-signed certificate.
            from tests.functional.peers import base as peers
            tmp = self.useFixture(fixtures.TempDir()).path
            self.cert, key = peers.self_signed_cert(tmp, 'hook')
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert, key)
            self.server.socket = ctx.wrap_socket(self.server.socket,
                                                 server_side=True)
            scheme = 'https'
        thread = threading.Thread(target=self.server.serve_forever,
                                  daemon=True)
        thread.start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.addCleanup(self.release.set)
        self.base = '%s://127.0.0.1:%d' % (scheme,
                                           self.server.server_address[1])


class TestHttpHooks(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.srv = self.useFixture(HookServer())

    def url(self, path):
        return self.srv.base + path

    def test_allow_posts_the_proposal(self):
        p = plan_with([self.url('/allow')])
        self.assertEqual(2, len(p.to_recover()))
        req = self.srv.requests[0]
        self.assertEqual('application/json', req['type'])
        self.assertEqual(['host1', 'host3'],
                         [x['host'] for x in req['body']['hosts']])

    def test_veto_one_host_with_409(self):
        p = plan_with([self.url('/veto-one')])
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])
        self.assertEqual('gate veto-hook: hook %s vetoes host3: rack3 in '
                         'maintenance' % self.url('/veto-one'),
                         p.decision('host3').reasons[-1])

    def test_veto_all_with_403_text(self):
        p = plan_with([self.url('/forbid')])
        self.assertEqual(['veto-hook: hook %s vetoes host1, host3: change '
                          'freeze until Monday' % self.url('/forbid')],
                         list(p.blocked_by))

    def test_errors(self):
        for path, expected in [
                ('/fail', 'HTTP 500 (2xx allows, 403/409 vetoes): Internal '
                          'Server Error'),
                ('/redirect', 'HTTP 302'),
                ('/bad-json', '"veto" in its answer is not a list')]:
            p = plan_with([self.url(path)])
            self.assertEqual([], p.to_recover(), path)
            self.assertIn('hook %s failed: %s' % (self.url(path), expected),
                          p.blocked_by[0])
        self.assertNotIn('/allow', [r['path'] for r in self.srv.requests])

    def test_unreachable(self):
        self.srv.server.server_close()
        self.srv.server.shutdown()
        p = plan_with([self.url('/allow')])
        self.assertIn('failed: cannot reach it', p.blocked_by[0])

    def test_slow_answer_is_a_timeout(self):
        p = plan_with([self.url('/slow')], timeout=0.5)
        self.assertEqual([], p.to_recover())
        self.assertIn('hook %s failed: no answer within 0.5s'
                      % self.url('/slow'), p.blocked_by[0])

    def test_credentials_are_sent_never_shown(self):
        secret = self.srv.base.replace('http://',
                                       'http://ops:pa%40ss@') + (
            '/forbid?token=t0k3n')
        p = plan_with([secret])
        req = self.srv.requests[-1]
        self.assertEqual('Basic ' + base64.b64encode(b'ops:pa@ss').decode(),
                         req['auth'])
        self.assertEqual('token=t0k3n', req['query'])
        text = '\n'.join(p.lines())
        self.assertIn('hook %s vetoes' % self.url('/forbid'), text)
        for leak in ('pa%40ss', 'pa@ss', 't0k3n', 'ops'):
            self.assertNotIn(leak, text)

    def test_exec_and_http_together(self):
        hook = self.useFixture(HookDir()).write('one', VETO_ONE)
        p = plan_with([hook, self.url('/veto-one')])
        reason = p.decision('host3').reasons[-1]
        self.assertIn('hook %s vetoes host3: etcd member' % hook, reason)
        self.assertIn('; hook %s vetoes host3: rack3' % self.url('/veto-one'),
                      reason)


class TestHttpsHooks(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.srv = self.useFixture(HookServer(tls=True))

    def test_verified_with_ca_file(self):
        url = self.srv.base + '/veto-one'
        p = plan_with([url], ca_file=self.srv.cert)
        self.assertEqual(['host1'], [d.host for d in p.to_recover()])
        self.assertIn('hook %s vetoes host3: rack3' % url,
                      p.decision('host3').reasons[-1])

    def test_unknown_certificate_is_an_error(self):
        url = self.srv.base + '/allow'
        p = plan_with([url])
        self.assertEqual([], p.to_recover())
        self.assertIn('hook %s failed: cannot reach it: [SSL: '
                      'CERTIFICATE_VERIFY_FAILED]' % url, p.blocked_by[0])
        self.assertEqual([], self.srv.requests)


class TestHelpers(testtools.TestCase):

    def test_clean(self):
        self.assertEqual('a?b', veto_hook.clean('\n  \na\x07b  \nc'))
        self.assertEqual(veto_hook.MAX_REASON,
                         len(veto_hook.clean('x' * 1000)))

    def test_safe_url(self):
        self.assertEqual('https://h:8443/p',
                         veto_hook.safe_url('https://u:p@h:8443/p?t=1#f'))


class ManualExecutor:
    """Jobs run only when the test says so (the engine's executor port)."""

    def __init__(self):
        self.jobs = []

    def submit(self, fn, *args, **kwargs):
        fut = futures.Future()
        self.jobs.append((fut, fn, args, kwargs))
        return fut

    def run_all(self):
        for fut, fn, args, kwargs in self.jobs:
            fut.set_result(fn(*args, **kwargs))
        self.jobs = []


class TestHooksOnTheExecutor(testtools.TestCase):
    """The hooks are asked as a job: the plan never waits on the tick."""

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(HookDir())
        services, servers = h.cloud(6, down={'host1', 'host3'})
        self.snap = h.snapshot(services, servers)
        self.conf = conf_with([self.dir.write('veto', VETO_ONE)])
        self.drivers = loader.load_deciders(self.conf)
        self.executor = ManualExecutor()

    def plan(self):
        return decide.make_plan(self.snap, self.drivers, self.conf, h.NOW,
                                submit=self.executor.submit)

    def test_plan_waits_for_the_answer_then_uses_it(self):
        first = self.plan()
        self.assertEqual(1, len(self.executor.jobs))
        self.assertEqual([], first.to_recover())
        self.assertIn('waiting for the veto hooks',
                      first.decision('host1').reasons[-1])
        self.assertFalse(first.answered)
        # Asked once, however often the plan is made meanwhile.
        self.assertEqual([], self.plan().to_recover())
        self.assertEqual(1, len(self.executor.jobs))
        self.executor.run_all()
        self.assertTrue(first.answered)
        second = self.plan()
        self.assertEqual(['host1'], [d.host for d in second.to_recover()])
        self.assertIn('etcd member on host3',
                      second.decision('host3').reasons[-1])
        self.assertEqual((), second.waiting)
        # The next plan asks again: a veto holds while the hook says so.
        self.assertEqual([], self.plan().to_recover())
        self.assertEqual(1, len(self.executor.jobs))

    def test_an_answer_to_another_proposal_is_not_used(self):
        self.plan()
        services, servers = h.cloud(6, down={'host1'})
        self.snap = h.snapshot(services, servers)
        self.executor.run_all()
        p = self.plan()  # the old answer is dropped, the new set asked
        self.assertEqual([], p.to_recover())
        self.assertEqual(1, len(self.executor.jobs))
        self.executor.run_all()
        self.assertEqual(['host1'], [d.host for d in self.plan().to_recover()])

    def test_a_failed_job_is_a_hook_error(self):
        self.plan()
        fut = self.executor.jobs[0][0]
        fut.set_exception(RuntimeError('worker died'))
        self.executor.jobs = []
        p = self.plan()
        self.assertEqual([], p.to_recover())
        self.assertIn('asking it failed: worker died', p.blocked_by[0])


class TestDryRun(testtools.TestCase):

    def test_hooks_asked_only_with_the_flag(self):
        from instanceha.cmd import manage_plan
        d = self.useFixture(HookDir())
        drivers = loader.load_deciders(conf_with([d.write('allow', ALLOW)]))
        kept, note = manage_plan.hook_gates(drivers, ask=False)
        self.assertEqual(GATES[:-1], [g.name for g in kept.gates])
        self.assertIn('veto hooks not asked', note)
        self.assertIn('--ask-hooks', note)
        kept, note = manage_plan.hook_gates(drivers, ask=True)
        self.assertIs(drivers, kept)
        self.assertIn('veto hooks asked', note)
        nohooks = loader.load_deciders(conf_with([]))
        self.assertEqual((nohooks, None),
                         manage_plan.hook_gates(nohooks, ask=False))
