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

"""instanceha-manage hosts: read the markers, hand a FAILED host back."""

import dataclasses

import testtools

from instanceha.cmd import manage_hosts
from instanceha.engine import marker as marker_mod
from instanceha.engine import reasons
from instanceha.engine.states import HostState as S
from instanceha import exceptions
from tests.unit import test_recovery_fakes as fakes


class TestHosts(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.clock = fakes.FakeClock()
        self.cloud = fakes.FakeCloud(self.clock)

    def mark(self, host, state, note='', forced_down=True):
        self.cloud.services[host] = dataclasses.replace(
            self.cloud.services[host], status='disabled',
            forced_down=forced_down,
            disabled_reason=marker_mod.Marker(state, fakes.T0, note=note).render())

    def test_describe(self):
        self.mark('host2', S.FAILED, '1 instance(s) not evacuated')
        snap = self.cloud.snapshot()
        rows = {r['host']: r for r in map(manage_hosts.describe,
                                          snap.services)}
        self.assertIsNone(rows['host1']['instanceha'])
        self.assertEqual('failed', rows['host2']['instanceha'])
        self.assertEqual('2026-11-29T12:00:00Z', rows['host2']['since'])
        self.assertIn('hosts clear host2', rows['host2']['action'])
        self.assertEqual('1 instance(s) not evacuated', rows['host2']['note'])

    def test_describe_maintenance_says_why(self):
        self.cloud.services['host2'] = dataclasses.replace(
            self.cloud.services['host2'], status='disabled',
            disabled_reason=reasons.Maintenance(
                fakes.T0, 'proactive: power_supply PSU 2 Critical').render())
        row = manage_hosts.describe(self.cloud.snapshot().service('host2'))
        self.assertEqual(('maintenance', '2026-11-29T12:00:00Z',
                          'proactive: power_supply PSU 2 Critical'),
                         (row['instanceha'], row['since'], row['note']))
        self.assertIn('maintenance end host2', row['action'])

    def test_clear_failed_host_waits_for_up(self):
        self.mark('host2', S.FAILED)
        msg = manage_hosts.clear(self.cloud, 'host2', False, fakes.T0)
        self.assertIn('once Nova reports it up', msg)
        svc = self.cloud.services['host2']
        self.assertFalse(svc.forced_down)
        self.assertEqual('disabled', svc.status)
        self.assertEqual(S.WAITING_UP,
                         reasons.read(svc.disabled_reason).marker.state)
        # Its times on Nova's clock, as the service writes them.
        self.assertIn(' clock=nova', svc.disabled_reason)

    def test_clear_enable_now(self):
        self.mark('host2', S.LEFT_DISABLED)
        manage_hosts.clear(self.cloud, 'host2', True, fakes.T0)
        svc = self.cloud.services['host2']
        self.assertEqual('enabled', svc.status)
        self.assertFalse(svc.forced_down)

    def test_refusals(self):
        e = self.assertRaises(exceptions.InstanceHAError, manage_hosts.clear,
                              self.cloud, 'host1', False, fakes.T0)
        self.assertIn('no instanceha marker', str(e))
        self.mark('host2', S.EVACUATING)
        e = self.assertRaises(exceptions.InstanceHAError, manage_hosts.clear,
                              self.cloud, 'host2', False, fakes.T0)
        self.assertIn('still running', str(e))
        self.assertIn('clear only a host marked failed, left_disabled or '
                      'waiting_up', str(e))
        e = self.assertRaises(exceptions.InstanceHAError, manage_hosts.clear,
                              self.cloud, 'nohost', False, fakes.T0)
        self.assertIn("'nohost'", str(e))

    def test_engine_enables_a_cleared_host(self):
        rig = fakes.failed_host_rig()
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())
        rig.cloud.revive('host1')  # the operator fixed and powered it on
        rig.run(5)
        self.assertEqual({'host1': S.FAILED}, rig.engine.host_states())
        manage_hosts.clear(rig.cloud, 'host1', False, rig.clock.now())
        rig.run(10)
        self.assertEqual({}, rig.engine.host_states())
        self.assertEqual('enabled', rig.cloud.services['host1'].status)

    def test_clear_waiting_up_again(self):
        self.mark('host2', S.WAITING_UP, forced_down=False)
        manage_hosts.clear(self.cloud, 'host2', False, fakes.T0)
        self.assertEqual(S.WAITING_UP, reasons.read(
            self.cloud.services['host2'].disabled_reason).marker.state)

    def test_json_help_says_array(self):
        import argparse
        parser = argparse.ArgumentParser()
        manage_hosts.add_parsers(parser.add_subparsers())
        hosts = parser._subparsers._group_actions[0].choices['hosts']
        lst = hosts._subparsers._group_actions[0].choices['list']
        self.assertIn('JSON array', lst.format_help())
