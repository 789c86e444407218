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

"""The soak's audit rules catch what they are written to catch."""

import testtools

from instanceha.engine import model
from tests.soak import audit


def _svc(host, status='enabled', state='up', forced=False, reason=None):
    return model.Service(id=host, host=host, status=status, state=state,
                         forced_down=forced, disabled_reason=reason)


def _truth(**kw):
    base = dict(power={'h1': [(0.0, 'on')], 'h2': [(0.0, 'on')]},
                evacuations=[], servers=[], services=[_svc('h1'),
                                                      _svc('h2')],
                held={}, lying={}, pauses=[], own_power_offs=[])
    base.update(kw)
    return audit.Truth(**base)


def _evac(created, source='h1'):
    return {'instance': 'i1', 'source': source, 'dest': 'h2',
            'created': created}


class TestAudit(testtools.TestCase):

    def test_power_at_follows_the_history(self):
        hist = [(0.0, 'on'), (10.0, 'off'), (20.0, 'on')]
        self.assertEqual(['on', 'off', 'off', 'on'],
                         [audit.power_at(hist, t) for t in (5, 10, 19, 25)])

    def test_evacuation_from_a_powered_host_is_a_breach(self):
        power = {'h1': [(0.0, 'on'), (10.0, 'off'), (30.0, 'on')]}
        self.assertEqual([], audit.no_rebuild_while_source_runs(
            _truth(power=power, evacuations=[_evac(15.0)])))
        (breach,) = audit.no_rebuild_while_source_runs(
            _truth(power=power, evacuations=[_evac(5.0)]))
        self.assertIn('while h1 was powered on', breach)
        self.assertEqual(1, len(audit.no_rebuild_while_source_runs(
            _truth(power=power, evacuations=[_evac(31.0)]))))

    def test_evacuation_while_the_bmc_lies_is_a_breach(self):
        lying = {'h1': [[10.0, 20.0]]}
        self.assertEqual(1, len(audit.no_evacuation_on_a_lying_bmc(
            _truth(lying=lying, evacuations=[_evac(15.0)]))))
        self.assertEqual([], audit.no_evacuation_on_a_lying_bmc(
            _truth(lying=lying, evacuations=[_evac(25.0)])))

    def test_power_off_during_a_pause_unless_the_soaks_own(self):
        power = {'h1': [(0.0, 'on'), (15.0, 'off')]}
        pauses = [[10.0, 20.0]]
        self.assertEqual(1, len(audit.no_fence_while_paused(
            _truth(power=power, pauses=pauses))))
        self.assertEqual([], audit.no_fence_while_paused(
            _truth(power=power, pauses=pauses,
                   own_power_offs=[(15.2, 'h1')])))
        # Within the grace after the pause began: a job already on its way.
        self.assertEqual([], audit.no_fence_while_paused(_truth(
            power={'h1': [(0.0, 'on'), (11.0, 'off')]}, pauses=pauses)))

    def test_operator_hold_must_be_kept(self):
        held = {'h1': 'ticket 42'}
        self.assertEqual([], audit.operator_holds_kept(_truth(
            held=held, services=[_svc('h1', 'disabled',
                                      reason='ticket 42')])))
        self.assertEqual(1, len(audit.operator_holds_kept(_truth(
            held=held, services=[_svc('h1')]))))

    def test_settled_names_what_is_left_behind(self):
        servers = [{'id': 'a', 'name': 'vm-a', 'host': 'h1',
                    'status': 'ACTIVE', 'locked': True,
                    'locked_reason': 'instanceha:evacuating h9'},
                   {'id': 'b', 'name': 'vm-b', 'host': 'h2',
                    'status': 'ERROR', 'locked': False,
                    'locked_reason': None}]
        services = [_svc('h1'), _svc('h2', 'disabled', forced=True,
                                     reason='instanceha:failed')]
        found = audit.settled(_truth(servers=servers, services=services))
        self.assertEqual(3, len(found), found)
        self.assertEqual([], audit.settled(_truth()))
