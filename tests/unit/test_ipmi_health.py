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

"""Reading hardware conditions out of ipmitool's own output.

The texts below are ipmitool 1.8.19's output against a BMC (the
functional test test_proactive_ipmi runs the real tool end to end).
"""

import testtools

from instanceha.engine import model
from instanceha.plugins.fencing import ipmi_health

CHASSIS = """System Power         : on
Power Overload       : false
Power Interlock      : inactive
Main Power Fault     : true
Power Control Fault  : false
Power Restore Policy : always-off
Last Power Event     :
Chassis Intrusion    : active
Front-Panel Lockout  : inactive
Drive Fault          : false
Cooling/Fan Fault    : true
"""

SEL = """\
   1 | 12/02/26 | 10:31:37 UTC | Power Supply #0x01 | Failure detected | \
Asserted
   2 | 12/02/26 | 10:31:37 UTC | Memory #0x03 | Correctable ECC logging \
limit reached | Asserted
   3 | 12/02/26 | 10:31:37 UTC | Temperature #0x01 | Upper Critical going \
high | Asserted
   4 | 12/02/26 | 10:31:38 UTC | Power Supply #0x01 | Failure detected | \
Deasserted
   5 | 12/02/26 | 10:31:39 UTC | Memory #0x03 | Correctable ECC | Asserted
   6 | 12/02/26 | 10:31:39 UTC | Power Supply #0x02 | Presence detected | \
Asserted
   7 | 12/02/26 | 10:31:40 UTC | Fan #0x05 | Lower Non-critical going low \
| Asserted
   8 | 12/02/26 | 10:31:41 UTC | Power Supply #0x02 | Predictive failure | \
Asserted
   9 | 12/02/26 | 10:31:42 UTC | OEM record e0 | 000000 | 0000000000
"""

VERBOSE = """SEL Record ID          : 0001
 Record Type           : 02
 Timestamp             : 12/02/26 12/02/26
 Generator ID          : 0020
 EvM Revision          : 04
 Sensor Type           : Power Supply
 Sensor Number         : 02
 Event Type            : Sensor-specific Discrete
 Event Direction       : Assertion Event
 Event Data            : 01ffff
 Description           : Failure detected

SEL Record ID          : 0002
 Record Type           : 02
 Timestamp             : 12/02/26 12/02/26
 Generator ID          : 0020
 EvM Revision          : 04
 Sensor Type           : Memory
 Sensor Number         : 03
 Event Type            : Sensor-specific Discrete
 Event Direction       : Assertion Event
 Event Data            : 05ffff
 Description           : Correctable ECC logging limit reached

SEL Record ID          : 0003
 Record Type           : 02
 Timestamp             : 12/02/26 12/02/26
 Generator ID          : 0020
 EvM Revision          : 04
 Sensor Type           : Power Supply
 Sensor Number         : 02
 Event Type            : Sensor-specific Discrete
 Event Direction       : Deassertion Event
 Event Data            : 01ffff
 Description           : Failure detected

"""


def cond(kind, health, part):
    return model.HardwareCondition(kind, health, part)


class TestChassis(testtools.TestCase):

    def test_true_fault_bits_are_conditions(self):
        self.assertEqual(
            [cond('power_supply', 'Critical', 'Main Power Fault'),
             cond('thermal', 'Critical', 'Cooling/Fan Fault')],
            ipmi_health.chassis_conditions(CHASSIS))

    def test_a_healthy_chassis_has_none(self):
        healthy = CHASSIS.replace(': true', ': false')
        self.assertEqual([], ipmi_health.chassis_conditions(healthy))


class TestSel(testtools.TestCase):

    def test_asserted_events_count_until_deasserted(self):
        self.assertEqual(
            [cond('memory', 'Warning', 'Memory #0x03: Correctable ECC '
                  'logging limit reached'),
             cond('thermal', 'Critical', 'Temperature #0x01: Upper '
                  'Critical going high'),
             cond('thermal', 'Warning', 'Fan #0x05: Lower Non-critical '
                  'going low'),
             cond('power_supply', 'Warning', 'Power Supply #0x02: '
                  'Predictive failure')],
            ipmi_health.sel_conditions(SEL))

    def test_verbose_records_as_the_driver_reads_them(self):
        self.assertEqual(
            [cond('memory', 'Warning', 'Memory #0x03: Correctable ECC '
                  'logging limit reached')],
            ipmi_health.sel_conditions(VERBOSE))
        asserted = VERBOSE.rsplit('SEL Record ID', 1)[0]
        self.assertEqual(
            cond('power_supply', 'Critical',
                 'Power Supply #0x02: Failure detected'),
            ipmi_health.sel_conditions(asserted)[0])

    def test_an_event_asserted_again_counts_again(self):
        again = SEL + ('  10 | 12/02/26 | 10:32:00 UTC | Power Supply #0x01 '
                       '| Failure detected | Asserted\n')
        self.assertIn(cond('power_supply', 'Critical',
                           'Power Supply #0x01: Failure detected'),
                      ipmi_health.sel_conditions(again))

    def test_empty_log_and_old_format(self):
        self.assertEqual([], ipmi_health.sel_conditions(
            'SEL has no entries\n'))
        # Older ipmitool prints no direction column: asserted.
        self.assertEqual(
            [cond('power_supply', 'Critical', 'Power Unit #0x01: Power '
                  'Supply AC lost')],
            ipmi_health.sel_conditions(
                '   1 | 01/01/20 | 00:00:00 | Power Unit #0x01 | Power '
                'Supply AC lost\n'))

    def test_both_readings_each_condition_once(self):
        twice = ipmi_health.conditions(CHASSIS + CHASSIS, SEL)
        self.assertEqual(len(set(twice)), len(twice))
        self.assertEqual(6, len(twice))
