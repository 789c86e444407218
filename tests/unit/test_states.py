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

import datetime

import testtools

from instanceha.engine import states
from instanceha.engine.states import HostState as S
from instanceha.engine import steps

NOW = datetime.datetime(2026, 11, 29, 12, 0, 5,
                        tzinfo=datetime.timezone.utc)


class TestStates(testtools.TestCase):

    def test_every_state_has_a_row(self):
        self.assertEqual(set(S), set(states.TRANSITIONS))
        for targets in states.TRANSITIONS.values():
            self.assertLessEqual(targets, set(S))

    def test_every_state_has_a_step_or_waits(self):
        # The step table beside TRANSITIONS: a state the engine moves on
        # by itself has a step; the others wait for someone else.
        self.assertEqual(set(), set(steps.STEPS) & steps.WAITING)
        self.assertEqual(set(S), set(steps.STEPS) | steps.WAITING)

    def test_no_evacuation_without_fencing(self):
        for state, targets in states.TRANSITIONS.items():
            if S.EVACUATING in targets:
                self.assertEqual(S.FENCED, state)

    def test_refused_transition(self):
        self.assertRaises(states.TransitionError, states.check_transition,
                          'h1', S.SUSPECT, S.EVACUATING)
        states.check_transition('h1', S.FENCING, S.FENCED)
