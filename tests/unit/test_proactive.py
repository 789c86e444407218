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

"""Proactive evacuation's decisions: rules, flapping, limits, gates."""

import datetime

import testtools

from instanceha.engine import model
from instanceha.engine import proactive

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
PSU = model.HardwareCondition('power_supply', 'Critical', 'PSU 2')
FAN = model.HardwareCondition('thermal', 'Warning', 'Fan 1')
RULES = proactive.parse_rules(['power_supply:Critical=evacuate',
                               'thermal:*=warn', 'system:*=ignore'])


def snapshot(*hosts, **states):
    return model.Snapshot(T0, tuple(
        model.Service('s-' + h, h, states.get(h, 'up'),
                      'disabled' if states.get(h) == 'disabled'
                      else 'enabled')
        for h in hosts))


class TestRules(testtools.TestCase):

    def test_most_specific_rule_wins(self):
        rules = proactive.parse_rules(['*:Critical=evacuate',
                                       'memory:Critical=warn'])
        self.assertEqual('warn',
                         proactive.classify('memory', 'Critical', rules))
        self.assertEqual('evacuate', proactive.classify('thermal',
                                                        'Critical', rules))
        self.assertEqual('warn', proactive.classify('thermal', 'Warning',
                                                    rules))

    def test_a_bad_rule_is_named(self):
        self.assertRaisesRegex(ValueError, "'psu=drain'",
                               proactive.parse_rules, ['psu=drain'])


class TestDecide(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.p = proactive.Proactive(RULES, proactive.Limits(
            confirm=2, cooldown=600, max_starts=1, window=900,
            threshold=50))
        self.snap = snapshot('h1', 'h2', 'h3', 'h4')

    def actions(self, readings, now, **kw):
        return {v.host: (v.action, v.why.split(':')[0])
                for v in self.p.decide(readings, self.snap, now, **kw)}

    def test_confirmed_then_emptied_once(self):
        ok = {'h2': (), 'h3': (), 'h4': ()}
        self.assertEqual({'h1': ('held', 'confirming')},
                         self.actions(dict(ok, h1=(PSU,)), 0))
        self.assertEqual({'h1': ('evacuate', '')},
                         self.actions(dict(ok, h1=(PSU,)), 60))

    def test_a_flapping_sensor_never_confirms(self):
        for t in range(0, 3600, 60):
            flap = (PSU,) if (t // 60) % 2 == 0 else ()
            self.assertNotEqual(
                'evacuate', self.actions({'h1': flap, 'h2': ()}, t).get(
                    'h1', ('',))[0])

    def test_rate_limit_and_cooldown(self):
        both = {'h1': (PSU,), 'h2': (PSU,), 'h3': (), 'h4': ()}
        self.actions(both, 0)
        got = self.actions(both, 60)
        # One start per window: h1 (by name) now, h2 held by the limit.
        self.assertEqual(('evacuate', ''), got['h1'])
        self.assertEqual(('held', 'rate limit'), got['h2'])
        # h1 is in maintenance now (disabled): not a candidate.
        self.snap = snapshot('h1', 'h2', 'h3', 'h4', h1='disabled')
        self.assertEqual({'h2': ('held', 'rate limit')},
                         self.actions(both, 500))
        self.assertEqual({'h2': ('evacuate', '')}, self.actions(both, 1000))
        # The operator ends h1's maintenance (say it was emptied again at
        # 900); its PSU still fails: the cool-down (600 s) holds it, then
        # the rate limit (h2 emptied at 1000, window 900 s).
        self.snap = snapshot('h1', 'h2', 'h3', 'h4', h2='disabled')
        self.p.started['h1'] = 900
        # (Confirmed again first: its count restarted while it was out.)
        self.assertEqual({'h1': ('held', 'confirming')},
                         self.actions(both, 1100))
        self.assertEqual({'h1': ('held', 'cool-down')},
                         self.actions(both, 1160))
        self.assertEqual({'h1': ('held', 'rate limit')},
                         self.actions(both, 1600))
        self.assertEqual({'h1': ('evacuate', '')}, self.actions(both, 1950))

    def test_mass_alarm_empties_nothing(self):
        three = {'h1': (PSU,), 'h2': (PSU,), 'h3': (PSU,), 'h4': ()}
        self.actions(three, 0)
        got = self.actions(three, 60)
        self.assertEqual({'held'}, {a for a, _ in got.values()})
        self.assertIn('3 of 4 hosts read ask to be emptied',
                      self.p.decide(three, self.snap, 120)[0].why)

    def test_paused_and_no_room(self):
        r = {'h1': (PSU,), 'h2': ()}
        self.actions(r, 0)
        self.assertEqual(('held', 'instance HA is paused'),
                         self.actions(r, 60, paused=True)['h1'])
        self.assertEqual(('held', 'no room'), self.actions(
            r, 120, absorbed=lambda h: 'no room: 2 instances')['h1'])
        self.assertEqual(('evacuate', ''), self.actions(r, 180)['h1'])

    def test_held_while_the_recovery_gates_hold_failed_hosts(self):
        r = {'h1': (PSU,), 'h2': ()}
        self.actions(r, 0)
        held = self.p.decide(r, self.snap, 60,
                             held='threshold: 3 of 4 hosts unhealthy')
        self.assertEqual(['held'], [v.action for v in held])
        self.assertIn('gates hold failed hosts (threshold: 3 of 4',
                      held[0].why)
        self.assertEqual(('evacuate', ''), self.actions(r, 120)['h1'])

    def test_only_enabled_up_hosts(self):
        self.snap = snapshot('h1', 'h2', h1='down', h2='disabled')
        r = {'h1': (PSU,), 'h2': (PSU,)}
        self.actions(r, 0)
        self.assertEqual({}, self.actions(r, 60))

    def test_warnings_are_reported_not_acted_on(self):
        self.assertEqual({'h1': ('warn', '')},
                         self.actions({'h1': (FAN,)}, 0))

    def test_an_unreadable_bmc_keeps_the_count(self):
        self.actions({'h1': (PSU,), 'h2': ()}, 0)
        self.actions({'h1': None, 'h2': ()}, 60)
        self.assertEqual(('evacuate', ''),
                         self.actions({'h1': (PSU,), 'h2': ()}, 120)['h1'])


class TestGatesHolding(testtools.TestCase):

    def engine(self, plan):
        return type('Engine', (), {'plan': plan})()

    def test_block_all_then_per_host_gates_then_nothing(self):
        from instanceha.daemon import proactive as daemon
        from instanceha.engine import plan as plan_mod
        blocked = plan_mod.HostDecision(
            'h1', plan_mod.Decision.BLOCKED, ('down',), (), None,
            gate='failure_domain')
        healthy = plan_mod.HostDecision(
            'h2', plan_mod.Decision.HEALTHY, (), (), None)
        self.assertEqual('', daemon.gates_holding(self.engine(None))())
        self.assertEqual('gate failure_domain', daemon.gates_holding(
            self.engine(plan_mod.Plan(taken_at=None,
                                      decisions=(blocked, healthy))))())
        self.assertEqual('threshold: 75%', daemon.gates_holding(
            self.engine(plan_mod.Plan(taken_at=None, decisions=(blocked,),
                                      blocked_by=('threshold: 75%',))))())
        self.assertEqual('', daemon.gates_holding(self.engine(
            plan_mod.Plan(taken_at=None, decisions=(healthy,))))())
