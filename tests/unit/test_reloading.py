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

"""SIGHUP: options, the fencing file and the heartbeat keys, live."""

import os
import threading

import fixtures
from oslo_config import cfg
import testtools

from instanceha import conf as ha_conf
from instanceha.daemon import reloading
from instanceha.engine import events as ev
from instanceha.heartbeat import keys
from instanceha.heartbeat import listener as lst_mod
from instanceha.heartbeat import protocol
from instanceha.plugins.detectors import heartbeat as hb_det
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import devices as devices_mod
from instanceha.plugins.fencing import topology
from tests.unit import test_fencing


class Recorder:

    def __init__(self):
        self.events = []

    def emit(self, event, host=None, **details):
        self.events.append((event, details))


class Gate(base.FencingDriver):
    """A device whose power change waits for the test to let it go."""

    PARAMS = {'label': base.Param('which device this is', required=True)}
    gates: dict = {}
    used: list = []
    stopped: list = []

    def _request_power(self, state, deadline):
        self.used.append((self.params['label'], state.value))
        gate = self.gates.get(self.params['label'])
        if gate is not None:
            gate[0].set()
            gate[1].wait(10)
        self.power = state

    def _read_power(self, deadline):
        return getattr(self, 'power', base.PowerState.ON)

    def describe_target(self):
        return 'gate %s' % self.params['label']

    def stop(self):
        self.stopped.append(self.params['label'])


class GateFactory(devices_mod.DeviceFactory):

    def driver_class(self, name, option):
        if name == 'gate':
            return Gate
        return super().driver_class(name, option)


class ReloadBase(test_fencing.FileMixin, testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger(level='INFO'))
        Gate.gates, Gate.used, Gate.stopped = {}, [], []
        self.conf_path = os.path.join(self.dir, 'instanceha.conf')
        self.fencing = self.write('hosts:\n  c1: {driver: gate, label: a}\n')
        self.write_conf('threshold = 50\nworkers = 4\n')
        self.conf = cfg.ConfigOpts()
        ha_conf.parse_args(['--config-file', self.conf_path], self.conf,
                           default_config_files=[])
        self.topo = topology.Topology.from_conf(self.conf,
                                                devices=GateFactory())
        self.events = Recorder()
        self.reloader = reloading.Reloader(self.conf, parts=[self.topo],
                                           events=self.events)

    def write_conf(self, default: str, fencing: str = '') -> None:
        with open(self.conf_path, 'w') as f:
            f.write('[DEFAULT]\n%s[fencing]\nconfig_file = %s\npoll_interval '
                    '= 0.05\n%s' % (default, self.fencing, fencing))

    def last(self, event):
        return [d for e, d in self.events.events if e == event][-1]


class TestOptions(ReloadBase):

    def test_mutable_change_and_restart_needed(self):
        self.write_conf('threshold = 80\nworkers = 8\n')
        self.reloader.reload()
        self.assertEqual(80, self.conf.threshold)
        self.assertEqual(4, self.conf.workers)
        done = self.last(ev.RELOADED)
        self.assertEqual(['[DEFAULT] threshold'], done['changed'])
        self.assertEqual(['[DEFAULT] workers'], done['restart_needed'])
        self.assertIn('option [DEFAULT] workers changed but cannot change '
                      'while the service runs', self.log.output)

    def test_bad_value_refuses_the_whole_reload(self):
        self.write_conf('threshold = 180\n')
        self.reloader.reload()
        self.assertEqual(50, self.conf.threshold)
        refused = self.last(ev.RELOAD_REFUSED)
        self.assertEqual('configuration files', refused['what'])
        self.assertIn('[DEFAULT] threshold', refused['reason'])
        self.assertIn('the running configuration stays in force',
                      self.log.output)
        self.assertNotIn(ev.RELOADED, [e for e, _ in self.events.events])


class TestFencingFile(ReloadBase):

    def test_new_file_in_force(self):
        self.write('hosts:\n  c1: {driver: gate, label: b}\n'
                   '  c2: {driver: gate, label: c}\n')
        self.reloader.reload()
        self.assertTrue(self.topo.configured('c2'))
        self.topo.fence('c1')
        self.assertEqual([('b', 'off')], Gate.used)
        self.assertEqual(['a'], Gate.stopped)
        self.assertIn('fencing file %s reloaded: 2 host(s); added: c2; '
                      'changed: c1' % self.fencing, self.log.output)
        self.assertEqual(['fencing file'],
                         self.last(ev.RELOADED)['reloaded'])

    def test_bad_file_refused_old_one_in_force(self):
        self.write('hosts:\n  c1: {driver: gate, label: b}\n'
                   '  c2: {driver: ipmi, address: 10.0.0.2}\n')
        self.reloader.reload()
        refused = self.last(ev.RELOAD_REFUSED)
        self.assertEqual('fencing file', refused['what'])
        self.assertIn('host c2', refused['reason'])
        self.assertIn("'username'", refused['reason'])
        self.assertIn('the fencing file loaded before stays in force',
                      self.log.output)
        self.assertFalse(self.topo.configured('c2'))
        self.topo.fence('c1')
        self.assertEqual([('a', 'off')], Gate.used)
        self.assertEqual([], Gate.stopped)

    def test_path_changed_live(self):
        other = self.write('hosts:\n  c9: {driver: gate, label: z}\n',
                           name='other.yaml')
        self.write_conf('', fencing='')
        with open(self.conf_path, 'a') as f:
            f.write('[fencing]\nconfig_file = %s\n' % other)
        self.reloader.reload()
        self.assertTrue(self.topo.configured('c9'))
        self.assertFalse(self.topo.configured('c1'))
        self.assertIn('[fencing] config_file',
                      self.last(ev.RELOADED)['changed'])

    def test_refused_path_is_not_changed_live(self):
        bad = self.write('hosts:\n  c9: {driver: ipmi}\n', name='bad.yaml')
        self.write_conf('threshold = 60\n', fencing='')
        with open(self.conf_path, 'a') as f:
            f.write('[fencing]\nconfig_file = %s\n' % bad)
        self.reloader.reload()
        self.assertEqual('fencing file',
                         self.last(ev.RELOAD_REFUSED)['what'])
        self.assertTrue(self.topo.configured('c1'))
        self.assertEqual(['[DEFAULT] threshold'],
                         self.last(ev.RELOADED)['changed'])
        self.assertIn('reload done: 1 option(s) changed live; not applied '
                      '(refused above): [fencing] config_file',
                      self.log.output)

    def test_fence_in_progress_keeps_the_file_it_started_with(self):
        started, go = threading.Event(), threading.Event()
        Gate.gates['a'] = (started, go)
        results = []
        worker = threading.Thread(
            target=lambda: results.append(self.topo.fence('c1')))
        worker.start()
        self.assertTrue(started.wait(10))
        # Level 1 is now another device; a second level is added.
        self.write('hosts:\n  c1:\n    levels:\n'
                   '      - {driver: gate, label: b}\n'
                   '      - {driver: gate, label: a}\n')
        self.reloader.reload()
        self.assertEqual([], Gate.stopped)  # device a is still in use
        go.set()
        worker.join(10)
        self.assertEqual(1, results[0].level)
        self.assertEqual([('a', 'off')], Gate.used)
        self.assertEqual(['a'], Gate.stopped)  # released once done
        # Powered on by the device that fenced it: now level 2.
        self.assertEqual(2, self.topo.unfence('c1').level)
        self.assertEqual([('a', 'off'), ('a', 'on')], Gate.used)


class Clock:
    mono = 100.0
    wall = 1_700_000_000.0


class TestHeartbeatKeys(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger(level='INFO'))
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.old = self.key('old.key', 'o' * 32)
        self.new = self.key('new.key', 'n' * 32)
        self.conf = test_fencing.conf_fixture.make_conf(
            heartbeat={'key_file': self.old})
        self.lst = lst_mod.HeartbeatListener(
            [('127.0.0.1', 0)], keys.HostKeys(keys.KeyRing(self.old)),
            max_clock_skew=15, clock=lambda: Clock.mono,
            wall=lambda: Clock.wall)
        self.det = hb_det.HeartbeatDetector(self.conf, listener=self.lst)
        self.events = Recorder()
        self.reloader = reloading.Reloader(
            self.conf, parts=[self.det], events=self.events)
        self.seq = 0

    def key(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, 'w') as f:
            f.write(text + '\n')
        os.chmod(path, 0o600)
        return path

    def accepted(self, master: str) -> bool:
        self.seq += 1
        with open(master, 'rb') as f:
            key = keys.derive_host_key(f.read().strip(), 'compute-0')
        data = protocol.encode('compute-0', b'b' * protocol.BOOT_ID_SIZE,
                               self.seq, Clock.wall, key)
        return self.lst.handle(data, '192.0.2.1') is not None

    def reload(self, **options):
        for name, value in options.items():
            self.conf.set_override(name, value, 'heartbeat')
        self.reloader.reload(mutate=lambda: ([], []))

    def test_rotation_current_and_previous(self):
        self.assertTrue(self.accepted(self.old))
        self.assertFalse(self.accepted(self.new))
        self.reload(key_file=self.new, previous_key_file=self.old)
        self.assertTrue(self.accepted(self.new))
        self.assertTrue(self.accepted(self.old))
        self.assertIn('heartbeat keys reloaded: key_file %s, '
                      'previous_key_file %s' % (self.new, self.old),
                      self.log.output)
        self.reload(previous_key_file=None)
        self.assertFalse(self.accepted(self.old))
        self.assertTrue(self.accepted(self.new))

    def test_retiring_a_key_a_host_still_uses_is_named(self):
        # compute-0 still signs with the old key, now the previous one.
        self.reload(key_file=self.new, previous_key_file=self.old)
        self.assertTrue(self.accepted(self.old))
        self.assertEqual([], self.lst.stranded_by(keys.HostKeys(
            keys.KeyRing(self.new, self.old))))
        self.reload(previous_key_file=None)
        self.assertIn('1 host(s) still sign with a key this reload '
                      'retired: compute-0', self.log.output)
        self.assertIn('1 host(s) still on a retired key: compute-0',
                      self.log.output)
        self.assertFalse(self.accepted(self.old))
        # Once its agent switched, retiring says nothing more.
        self.reload(previous_key_file=self.old)
        self.assertTrue(self.accepted(self.new))
        before = self.log.output.count('still sign with')
        self.reload(previous_key_file=None)
        self.assertEqual(before, self.log.output.count('still sign with'))

    def test_bad_key_file_refused_old_keys_in_force(self):
        short = self.key('short.key', 'tooshort')
        self.reload(key_file=short)
        refused = [d for e, d in self.events.events
                   if e == ev.RELOAD_REFUSED][-1]
        self.assertEqual('heartbeat keys', refused['what'])
        self.assertIn(short, refused['reason'])
        self.assertNotIn('tooshort', refused['reason'])
        self.assertNotIn('tooshort', self.log.output)
        self.assertTrue(self.accepted(self.old))

    def test_nothing_changed_says_nothing(self):
        self.reload()
        self.assertEqual([], [d for e, d in self.events.events
                              if e == ev.RELOADED][-1]['reloaded'])
