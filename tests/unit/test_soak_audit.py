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
    return audit.service_dict(model.Service(
        id=host, host=host, status=status, state=state, forced_down=forced,
        disabled_reason=reason))


def _truth(**kw):
    base = dict(power={'h1': [(0.0, 'on')], 'h2': [(0.0, 'on')]},
                evacuations=[], servers=[], services=[_svc('h1'),
                                                      _svc('h2')],
                held={}, unprovable={}, pauses=[], own_power_offs=[])
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

    def test_evacuation_while_the_bmc_proves_nothing_is_a_breach(self):
        for why in ('lying', 'silent', 'wrong password'):
            unprovable = {'h1': [[10.0, 20.0, why]]}
            (breach,) = audit.no_evacuation_unproven(
                _truth(unprovable=unprovable, evacuations=[_evac(15.0)]))
            self.assertIn(why, breach)
            self.assertEqual([], audit.no_evacuation_unproven(
                _truth(unprovable=unprovable, evacuations=[_evac(25.0)])))
        # Still open (end None): every later evacuation is a breach.
        self.assertEqual(1, len(audit.no_evacuation_unproven(_truth(
            unprovable={'h1': [[10.0, None, 'lying']]},
            evacuations=[_evac(99.0)]))))

    def test_fencing_a_held_host_or_evacuating_it_is_a_breach(self):
        holds = {'h1': [[10.0, 30.0, 'ticket 7']]}
        power = {'h1': [(0.0, 'on'), (20.0, 'off'), (40.0, 'on'),
                        (50.0, 'off')]}
        found = audit.operator_hosts_left_alone(_truth(
            power=power, holds=holds,
            evacuations=[_evac(25.0), _evac(55.0)]))
        self.assertEqual(2, len(found), found)
        self.assertIn('powered off at', found[0])
        self.assertIn('evacuated from h1', found[1])
        # The soak's own power-off of a held host is its failure, fine.
        self.assertEqual([], audit.operator_hosts_left_alone(_truth(
            power={'h1': [(0.0, 'on'), (20.0, 'off')]}, holds=holds,
            own_power_offs=[(20.1, 'h1')])))

    def test_fencing_a_host_whose_agent_beats_is_a_breach(self):
        power = {'h1': [(0.0, 'on'), (20.0, 'off')]}
        (breach,) = audit.fence_only_silent_hosts(_truth(
            power=power, beating={'h1': [[0.0, None]]}))
        self.assertIn('agent had been beating since', breach)
        self.assertEqual([], audit.fence_only_silent_hosts(_truth(
            power=power, beating={'h1': [[0.0, 12.0], [30.0, None]]})))
        # Back a moment before the power-off: it came back while fenced.
        self.assertEqual([], audit.fence_only_silent_hosts(_truth(
            power=power, beating={'h1': [[0.0, 12.0], [19.0, None]]})))

    def test_acting_on_a_mass_failure_is_a_breach(self):
        partitions = [[10.0, 40.0, ['h1', 'h2']]]
        power = {'h1': [(0.0, 'on'), (20.0, 'off'), (25.0, 'on')],
                 'h2': [(0.0, 'on'), (45.0, 'off')]}
        found = audit.no_action_on_a_mass_failure(_truth(
            power=power, partitions=partitions,
            evacuations=[_evac(22.0, 'h1'), _evac(50.0, 'h2')]))
        self.assertEqual(2, len(found), found)
        self.assertTrue(all('mass failure of h1, h2' in f for f in found))

    def test_fencing_twice_for_one_failure_is_a_breach(self):
        power = {'h1': [(0.0, 'on'), (20.0, 'off'), (25.0, 'on'),
                        (40.0, 'off'), (45.0, 'on'), (60.0, 'off')]}
        (breach,) = audit.one_fencing_per_failure(_truth(
            power=power, host_faults={'h1': [10.0, 50.0]}))
        self.assertIn('again', breach)
        self.assertEqual([], audit.one_fencing_per_failure(_truth(
            power=power, host_faults={'h1': [10.0, 30.0, 50.0]})))

    def test_evacuations_beyond_the_retries_are_a_breach(self):
        tries = [_evac(20.0 + i) for i in range(4)]
        self.assertEqual([], audit.evacuations_within_retries(_truth(
            evacuations=tries, retries=3, host_faults={'h1': [10.0]})))
        (breach,) = audit.evacuations_within_retries(_truth(
            evacuations=tries + [_evac(30.0)], retries=3,
            host_faults={'h1': [10.0]}))
        self.assertIn('5 times', breach)
        # Two failures of the host: two budgets.
        self.assertEqual([], audit.evacuations_within_retries(_truth(
            evacuations=tries + [_evac(30.0)], retries=3,
            host_faults={'h1': [10.0, 22.5]})))

    def test_counts(self):
        power = {'h1': [(0.0, 'on'), (20.0, 'off'), (25.0, 'on'),
                        (40.0, 'off')]}
        self.assertEqual({'fencing_power_offs': 1, 'evacuations': 1},
                         audit.counts(_truth(
                             power=power, evacuations=[_evac(21.0)],
                             own_power_offs=[(40.0, 'h1')])))

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
