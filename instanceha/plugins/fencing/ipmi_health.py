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

"""A host's hardware health as its IPMI BMC reports it.

Two readings through the real ipmitool, each one session:

- ``chassis status``: the fault bits every IPMI BMC keeps (main power
  fault, power overload, power control fault, cooling/fan fault, drive
  fault);
- ``sel list``: the System Event Log (ipmitool's verbose records). An event counts while it is
  asserted: a later "Deasserted" record of the same sensor and event
  clears it, and so does an operator clearing the log after the repair
  (``ipmitool sel clear``), which is how IPMI sites acknowledge a fault.

The sensor types and event texts are ipmitool's own (stable across its
releases); the plain ``sel list`` is used because it needs no sensor
data repository. Conditions are returned in Redfish's words (kind
``system``, ``memory``, ``power_supply`` or ``thermal``; health
``Warning`` or ``Critical``) so ``[proactive] rules`` read the same for
every kind of BMC. An event this module does not know is not a
condition: a condition is only ever what the BMC said, and understood.
"""

from instanceha.engine import model

#: ``chassis status`` lines that are a condition when true / active.
CHASSIS = {
    'main power fault': ('power_supply', 'Critical'),
    'power overload': ('power_supply', 'Warning'),
    'power control fault': ('system', 'Critical'),
    'cooling/fan fault': ('thermal', 'Critical'),
    'drive fault': ('system', 'Warning'),
}

#: SEL sensor types (as ipmitool names them) and the kind they tell of.
SENSOR_KINDS = {
    'power supply': 'power_supply',
    'power unit': 'power_supply',
    'memory': 'memory',
    'temperature': 'thermal',
    'fan': 'thermal',
    'cooling device': 'thermal',
    'processor': 'system',
    'critical interrupt': 'system',
}

#: Event texts (lower case, matched as substrings, first match wins) and
#: the health they mean. Single correctable memory errors are normal
#: wear and no condition; the BMC's "logging limit reached" is.
EVENTS = (
    ('non-recoverable', 'Critical'),
    ('non-critical', 'Warning'),
    ('critical going', 'Critical'),
    ('uncorrectable', 'Critical'),
    ('logging limit reached', 'Warning'),
    ('predictive failure', 'Warning'),
    ('configuration error', 'Warning'),
    ('redundancy lost', 'Warning'),
    ('ac lost', 'Critical'),
    ('failure detected', 'Critical'),
    ('failure', 'Critical'),
    ('ierr', 'Critical'),
    ('thermal trip', 'Critical'),
    ('transition to critical', 'Critical'),
    ('transition to non-recoverable', 'Critical'),
    ('memory device disabled', 'Critical'),
    ('parity', 'Critical'),
)


def chassis_conditions(output: str) -> list[model.HardwareCondition]:
    """The conditions of ``ipmitool chassis status``'s output."""
    found = []
    for line in output.splitlines():
        name, sep, value = line.partition(':')
        what = CHASSIS.get(name.strip().lower())
        if sep and what and value.strip().lower() in ('true', 'active'):
            found.append(model.HardwareCondition(what[0], what[1],
                                                 name.strip()))
    return found


def _event_health(text: str) -> str | None:
    text = text.lower()
    for words, health in EVENTS:
        if words in text:
            return health
    return None


def _sel_events(output: str) -> list[tuple[str, str, bool]]:
    """(sensor, event, asserted) of each record, in the log's order.

    Two shapes: ipmitool's verbose records (``-v``, which the driver
    always passes: blocks of ``Sensor Type``, ``Sensor Number``,
    ``Event Direction``, ``Description`` lines) and its plain lines
    ``id | date | time | Sensor Type #0xNN | event | Asserted`` (older
    releases omit the last column: asserted).
    """
    events, record = [], None
    for line in output.splitlines():
        name, sep, value = line.partition(':')
        name, value = name.strip().lower(), value.strip()
        if sep and name == 'sel record id':
            record = {}
        elif sep and record is not None and name in (
                'sensor type', 'sensor number', 'event direction',
                'description'):
            record[name] = value
            if name == 'description':
                events.append(('%s #0x%s' % (record.get('sensor type', ''),
                                             record.get('sensor number', '')),
                               value, not record.get(
                                   'event direction', '').lower().startswith(
                                       'deassertion')))
                record = None
        elif line.count('|') >= 4:
            cols = [c.strip() for c in line.split('|')]
            events.append((cols[3], cols[4], not (
                len(cols) > 5 and cols[5].lower().startswith('deasserted'))))
    return events


def sel_conditions(output: str) -> list[model.HardwareCondition]:
    """The conditions still asserted in ``ipmitool sel list``'s output."""
    active: dict[tuple[str, str], model.HardwareCondition] = {}
    for sensor, event, asserted in _sel_events(output):
        kind = SENSOR_KINDS.get(sensor.split('#')[0].strip().lower())
        health = _event_health(event)
        if kind is None or health is None:
            continue
        if asserted:
            active[(sensor, event)] = model.HardwareCondition(
                kind, health, '%s: %s' % (sensor, event))
        else:
            active.pop((sensor, event), None)
    return list(active.values())


def conditions(chassis_output: str,
               sel_output: str) -> tuple[model.HardwareCondition, ...]:
    """Both readings' conditions, each named once."""
    seen = []
    for cond in chassis_conditions(chassis_output) + sel_conditions(
            sel_output):
        if cond not in seen:
            seen.append(cond)
    return tuple(seen)
