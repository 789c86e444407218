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

"""A host's hardware health as its Redfish BMC reports it.

Read from the fencing device's own session (no second login): the
system's ``Status`` (``Health`` and ``HealthRollup``), its
``MemorySummary``, and for each chassis the system links to, the
``Power`` resource's power supplies and the ``Thermal`` resource's
temperatures and fans. A resource the BMC does not offer (404) is
skipped: a condition is only ever what the BMC said. Only conditions
other than ``OK`` are returned, each as a
:class:`instanceha.engine.model.HardwareCondition`.

Cost: one read of the system, plus two per linked chassis (usually one).
"""

from collections.abc import Iterator

from instanceha.engine import model

#: Redfish health values that are a condition (``OK`` is not).
CONDITIONS = ('Warning', 'Critical')


def _health(status: dict | None, rollup: bool = False) -> str | None:
    status = status or {}
    value = status.get('HealthRollup' if rollup else 'Health') or (
        status.get('HealthRollUp') if rollup else None)
    return value if value in CONDITIONS else None


def _get(conn, path: str) -> dict | None:
    """A resource's JSON; None when the BMC does not offer it."""
    from sushy import exceptions as sushy_exc

    try:
        return conn.get(path=path).json()
    except sushy_exc.ResourceNotFoundError:
        return None


def _members(body: dict | None, key: str,
             kind: str) -> Iterator[model.HardwareCondition]:
    for i, part in enumerate((body or {}).get(key) or ()):
        health = _health(part.get('Status'))
        if health:
            name = part.get('Name') or part.get('MemberId') or str(i)
            yield model.HardwareCondition(kind, health, str(name))


def read(system) -> tuple[model.HardwareCondition, ...]:
    """The conditions of a sushy ``System`` (refreshed here)."""
    system.refresh(force=True)
    body = system.json
    found = []
    health = _health(body.get('Status'))
    if health:
        found.append(model.HardwareCondition('system', health, 'system'))
    rollup = _health(body.get('Status'), rollup=True)
    if rollup and rollup != health:
        found.append(model.HardwareCondition('system', rollup, 'rollup'))
    memory = _health((body.get('MemorySummary') or {}).get('Status'),
                     rollup=True) or _health(
        (body.get('MemorySummary') or {}).get('Status'))
    if memory:
        found.append(model.HardwareCondition('memory', memory, 'memory'))
    conn = system._conn
    for link in (body.get('Links') or {}).get('Chassis') or ():
        chassis = link.get('@odata.id')
        if not chassis:
            continue
        found.extend(_members(_get(conn, chassis + '/Power'),
                              'PowerSupplies', 'power_supply'))
        thermal = _get(conn, chassis + '/Thermal')
        found.extend(_members(thermal, 'Temperatures', 'thermal'))
        found.extend(_members(thermal, 'Fans', 'thermal'))
    return tuple(found)
