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

"""While paused, no copy starts fencing a host (adversarial reading).

Beyond the golden logs: every pause case is run and its log read for a
fencing, a power-off or an evacuation of a host whose recovery had not
passed fencing when the pause began, between the pause and its end.
"""

import os

import testtools

from instanceha.sim import runner

CASES = os.path.join(os.path.dirname(__file__), 'cases')
PAUSE_CASES = ('pause-expires', 'pause-during-failure', 'pause-two-copies')


def _events(path: str) -> list[tuple[float, str, str, str, str]]:
    out = []
    for line in runner.run_scenario(path).lines:
        words = line.split(None, 4) + ['']
        out.append((float(words[0]), words[1], words[2], words[3],
                    words[4]))
    return out


class TestPauseHolds(testtools.TestCase):

    def test_nothing_new_is_fenced_or_evacuated_while_paused(self):
        for case in PAUSE_CASES:
            events = _events(os.path.join(CASES, case))
            start = next(t for t, src, _h, ev, _d in events
                         if src == 'timeline' and ev == 'pause')
            end = next((t for t, src, _h, ev, _d in events
                        if ev in ('resumed', 'pause_expired')), 1e9)
            past_fencing = {h for t, src, h, ev, d in events
                            if t <= start and ev == 'host_state'
                            and 'new=fenced' in d}
            bad = [(t, h, ev, d) for t, src, h, ev, d in events
                   if start < t < end and h not in past_fencing and (
                       'new=fencing' in d or ev == 'evacuate_requested'
                       or (src == 'bmc' and ev == 'power_off'))]
            self.assertEqual([], bad, case)
            held = [t for t, src, _h, ev, _d in events
                    if ev == 'recovery_held' and start < t < end]
            self.assertTrue(held, '%s: nothing was held' % case)
            after = [t for t, src, _h, ev, d in events
                     if t >= end and 'new=fencing' in d]
            self.assertTrue(after, '%s: no recovery after the pause' % case)
