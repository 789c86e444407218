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

"""Fencing by hand: verdicts of ``fencing validate``, the recovery check.

Devices are the scripted driver of the chain tests; Nova is the
simulator's cloud (the real BMC emulators and the real Nova are in
tests/functional/test_fencing_manual.py).
"""

import datetime

import testtools

from instanceha.cmd import manage_fencing
from instanceha.engine import marker
from instanceha.engine import states
from instanceha import exceptions
from instanceha.ops import manual_fencing as manual
from instanceha.plugins.fencing import base
from instanceha.plugins.fencing import config
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import world as sim_world
from tests.unit import test_fencing

S = states.HostState
ON = base.PowerState.ON
NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


def entry(conf, host: str, levels: list[list[str]]) -> config.HostEntry:
    """A host whose devices play scripts ('ok', 'auth', 'down')."""
    built = []
    for li, level in enumerate(levels, 1):
        devs = []
        for di, script in enumerate(level, 1):
            drv = test_fencing.Scripted(conf, host, {'script': script,
                                                     'timeout': 0.3},
                                        device='d%d.%d' % (li, di))
            drv.name = 'scripted'
            drv.calls = []
            drv.validate()
            if script != 'ok':
                # A status read fails as the power change would.
                drv._read_power = (lambda deadline, drv=drv: drv.
                                   _request_power(ON, deadline))
            devs.append(drv)
        built.append(devs)
    return config.HostEntry(key=host, levels=built)


class TestVerdict(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.conf = test_fencing.make_conf()

    def judge(self, levels):
        return manual.verdict(manual.read_levels(
            entry(self.conf, 'h1', levels)))

    def test_every_level_answers(self):
        status, text = self.judge([['ok'], ['ok', 'ok']])
        self.assertEqual(manual.OK, status)
        self.assertEqual('OK (level 1: d1.1 on; level 2: d2.1 on, d2.2 on)',
                         text)

    def test_broken_first_level_working_second_is_degraded(self):
        status, text = self.judge([['auth'], ['ok']])
        self.assertEqual(manual.DEGRADED, status)
        self.assertTrue(text.startswith(
            'DEGRADED: level 1 broken, level 2 works (level 2: d2.1 on): '
            'level 1 device d1.1'), text)
        self.assertIn('authentication failed', text)

    def test_broken_backup_level_is_degraded_too(self):
        status, text = self.judge([['ok'], ['ok', 'down']])
        self.assertEqual(manual.DEGRADED, status)
        self.assertIn('level 2 broken, level 1 works', text)
        self.assertIn('unreachable', text)

    def test_no_level_works_is_failed(self):
        status, text = self.judge([['auth'], ['ok', 'down']])
        self.assertEqual(manual.FAILED, status)
        self.assertIn('level 1 device d1.1', text)
        self.assertIn('level 2 device d2.2', text)

    def test_exit_codes(self):
        row = manage_fencing.Row
        self.assertEqual(0, manage_fencing.exit_code([row('a', 'OK', '')]))
        self.assertEqual(3, manage_fencing.exit_code(
            [row('a', 'OK', ''), row('b', 'DEGRADED', '')]))
        self.assertEqual(1, manage_fencing.exit_code(
            [row('a', 'DEGRADED', ''), row('b', 'FAILED', '')]))
        self.assertEqual(1, manage_fencing.exit_code(
            [row('a', 'OK', ''), row('b', 'INVALID', '')]))
        self.assertEqual(1, manage_fencing.exit_code([]))
        self.assertEqual([0, 1, 2, 3],
                         [c for c, _ in manage_fencing.EXIT_CODES])

    def test_power_summary(self):
        levels = manual.read_levels(entry(self.conf, 'h1', [['auth'],
                                                            ['ok']]))
        self.assertEqual('on (level 2 reports on)',
                         manual.power_summary(levels))


class TestNotHeld(testtools.TestCase):
    """The marker in Nova decides; any machine gets the same answer."""

    def setUp(self):
        super().setUp()
        clock = sim_clock.SimClock()
        self.world = sim_world.World(clock, sim_events.EventLog(clock))
        for n, name in enumerate(('compute-0', 'compute-1.example.com')):
            self.world.add_host(sim_world.Host(name=name, id=str(n)))
        self.cloud = sim_cloud.SimCloud(self.world)

    def mark(self, host: str, state: S) -> None:
        h = self.world.host(host)
        h.status = 'disabled'
        h.disabled_reason = marker.Marker(state=state, when=NOW).render()

    def test_refused_in_every_recovery_state(self):
        for state in manual.HELD:
            self.mark('compute-0', state)
            exc = self.assertRaises(manual.Refused, manual.check_not_held,
                                    self.cloud, 'compute-0')
            self.assertIn('state %s since 2026-11-30T12:00:00Z'
                          % state.value, str(exc))

    def test_short_name_finds_the_fqdn_service(self):
        self.mark('compute-1.example.com', S.EVACUATING)
        self.assertRaises(manual.Refused, manual.check_not_held,
                          self.cloud, 'compute-1')

    def test_operator_states_and_healthy_hosts_are_allowed(self):
        note, names = manual.check_not_held(self.cloud, 'compute-0')
        self.assertEqual('compute-0 not in a recovery', note)
        self.assertEqual(['compute-0', 'compute-1.example.com'],
                         sorted(names))
        for state in (S.FAILED, S.LEFT_DISABLED):
            self.mark('compute-0', state)
            note, _ = manual.check_not_held(self.cloud, 'compute-0')
            self.assertEqual('compute-0 %s' % state.value, note)
        h = self.world.host('compute-0')
        h.disabled_reason = 'disabled by an operator for a disk swap'
        note, _ = manual.check_not_held(self.cloud, 'compute-0')
        self.assertEqual('compute-0 not in a recovery', note)

    def test_unknown_to_nova(self):
        note, _ = manual.check_not_held(self.cloud, 'compute-9')
        self.assertEqual('no nova-compute service named compute-9', note)

    def test_nova_unreachable_means_nothing_is_done(self):
        self.world.nova_down = True
        exc = self.assertRaises(exceptions.InstanceHAError,
                                manual.check_not_held, self.cloud,
                                'compute-0')
        self.assertNotIsInstance(exc, manual.Refused)
        self.assertIn('nothing was done', str(exc))
