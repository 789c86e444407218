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

"""Past recoveries, rebuilt from what outlives the service: Nova's records.

No copy of instanceha keeps a database: whichever copy was leader, and
from any machine with the configuration, the story of a host comes from
Nova itself --

* the host's marker (``disabled_reason``) while a recovery is under way
  or waits for an operator: its state, when it was fenced, its recovery
  id;
* evacuation migration records: each instance's source, target, status
  and times;
* instance actions: the ``evacuate`` request ids (the id in Nova's own
  logs), who asked, how many tries and whether Nova reported an error;
* live-migration records from the host: the host emptied, by a
  maintenance (the operator's, the shutdown policy migrate's, or a
  proactive evacuation for a hardware condition) or by anyone else; the
  ``BY`` of each move says who asked. While the host is in maintenance
  its reason says which one and why (e.g. ``proactive: power_supply
  PSU 2 Critical``); once it ended, Nova keeps the moves but not the why.

Evacuations of one host less than :data:`GAP` apart are one recovery.
The recovery id is known for a recovery whose marker is still in Nova
(it is also in every log line and notification of that recovery); for an
older one it is shown as ``-`` and the times tie it to the log.
"""

import dataclasses
import datetime

from instanceha.engine import marker as marker_mod
from instanceha.engine import reasons

#: Evacuations of one host further apart than this are two recoveries.
GAP = datetime.timedelta(minutes=30)
#: An instance action counts for a migration record within this window.
SLACK = datetime.timedelta(minutes=2)
#: Migration statuses, as an operator reads them.
RESULTS = {'done': 'evacuated', 'completed': 'evacuated',
           'error': 'failed', 'failed': 'failed', 'cancelled': 'failed'}
#: Nova's names of the moves ``instances history`` shows.
MIGRATION_TYPES = ('evacuation', 'live-migration', 'migration')
_ACTIONS = {'evacuation': 'evacuate', 'live-migration': 'live-migration',
            'migration': 'migrate'}


def _ts(when: datetime.datetime | None) -> str | None:
    return marker_mod.format_ts(when) if when else None


def _time(text) -> datetime.datetime | None:
    from instanceha.adapters import nova_answers
    return nova_answers.parse_time(text) if isinstance(text, str) else text


@dataclasses.dataclass
class InstanceMove:
    server: str
    source: str | None
    target: str | None
    request_id: str | None
    attempts: int
    result: str
    started: datetime.datetime | None
    finished: datetime.datetime | None
    migration: str
    kind: str = 'evacuation'
    user: str | None = None

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d['started'], d['finished'] = _ts(self.started), _ts(self.finished)
        return d


@dataclasses.dataclass
class Recovery:
    """One episode of a host: a recovery, or the host being emptied."""

    host: str
    recovery_id: str | None
    #: The marker's state while the recovery is in Nova's hands
    #: (``maintenance`` while the host is in maintenance), else None
    #: (finished).
    state: str | None
    started: datetime.datetime | None
    instances: list[InstanceMove]
    #: ``recovery`` (evacuations) or ``emptied`` (live migrations).
    kind: str = 'recovery'
    #: Why, while Nova still says it (a maintenance's note).
    note: str = ''

    def as_dict(self) -> dict:
        return {'host': self.host, 'kind': self.kind,
                'recovery_id': self.recovery_id,
                'state': self.state or 'finished',
                'started': _ts(self.started), 'note': self.note,
                'instances': [i.as_dict() for i in self.instances]}


def _result(status: str, action: dict | None) -> str:
    if action is not None and (action.get('message') or '').lower() == \
            'error':
        return 'failed'
    return RESULTS.get((status or '').lower(), 'in progress (%s)' % status)


def _matching(actions: list[dict], name: str, mig) -> list[dict]:
    """The ``name`` actions of one migration record (by time)."""
    lo = (mig.created_at - SLACK) if mig.created_at else None
    hi = (mig.updated_at or mig.created_at)
    hi = hi + SLACK if hi else None
    out = []
    for a in actions:
        if a.get('action') != name:
            continue
        start = _time(a.get('start_time'))
        if start is None or lo is None or lo <= start <= hi:
            out.append(a)
    return sorted(out, key=lambda a: a.get('start_time') or '')


def move(mig, actions: list[dict]) -> InstanceMove:
    """One migration record joined with the instance's actions."""
    name = _ACTIONS.get(mig.migration_type, mig.migration_type)
    mine = _matching(actions, name, mig)
    last = mine[-1] if mine else None
    return InstanceMove(
        server=mig.server_id, source=mig.source_host, target=mig.dest_host,
        request_id=last.get('request_id') if last else None,
        attempts=1, result=_result(mig.status, last),
        started=mig.created_at, finished=mig.updated_at, migration=mig.id,
        kind=mig.migration_type, user=last.get('user_id') if last else None)


def _episodes(cloud, host: str, migrations: list, kind: str,
              actions: dict[str, list[dict]]) -> list[Recovery]:
    """Moves of one host less than :data:`GAP` apart, as episodes."""
    episodes: list[Recovery] = []
    epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    for mig in sorted(migrations, key=lambda m: m.created_at or epoch):
        if mig.server_id not in actions:
            actions[mig.server_id] = cloud.instance_actions(mig.server_id)
        prev = episodes[-1] if episodes else None
        if (prev is None or prev.instances[-1].started is None
                or mig.created_at is None
                or mig.created_at - prev.instances[-1].started > GAP):
            prev = Recovery(host=host, recovery_id=None, state=None,
                            started=mig.created_at, instances=[],
                            kind=kind)
            episodes.append(prev)
        prev.instances.append(move(mig, actions[mig.server_id]))
    for rec in episodes:
        rec.instances = _per_instance(rec.instances)
    return episodes


def host_history(cloud, host: str,
                 since: datetime.datetime | None = None) -> list[Recovery]:
    """Every recovery and emptying of ``host`` Nova remembers, oldest first.

    Costs one read of the services, two of migration records (evacuations
    and live migrations from the host) and one of instance actions per
    instance moved.
    """
    current = None
    for svc in cloud.list_services():
        if svc.host == host:
            current = reasons.of_service(svc)
    actions: dict[str, list[dict]] = {}
    recoveries = _episodes(cloud, host, cloud.migrations(
        source_host=host, since=since), 'recovery', actions)
    emptied = _episodes(cloud, host, cloud.migrations(
        source_host=host, since=since, migration_type='live-migration'),
        'emptied', actions)
    if current is not None and current.marker is not None:
        _attach_marker(recoveries, host, current.marker)
    if current is not None and current.maintenance is not None:
        _attach_maintenance(emptied, host, current.maintenance)
    epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    return sorted(recoveries + emptied, key=lambda r: r.started or epoch)


def _attach_maintenance(emptied: list[Recovery], host: str,
                        maint: reasons.Maintenance) -> None:
    """The current maintenance names the moves since it began."""
    last = emptied[-1] if emptied else None
    if last is None or last.started is None or \
            last.started < maint.since - SLACK:
        last = Recovery(host=host, recovery_id=None, state=None,
                        started=maint.since, instances=[], kind='emptied')
        emptied.append(last)
    last.state, last.note = 'maintenance', maint.note


def _per_instance(moves: list[InstanceMove]) -> list[InstanceMove]:
    """One row per instance, with every try counted.

    Nova makes one migration record per evacuation request: a retried
    instance has several; the last one tells where it went.
    """
    rows: dict[str, InstanceMove] = {}
    for m in moves:
        first = rows.get(m.server)
        if first is None:
            rows[m.server] = m
            continue
        rows[m.server] = dataclasses.replace(
            m, attempts=first.attempts + 1, started=first.started)
    return list(rows.values())


def _attach_marker(recoveries: list[Recovery], host: str, marker) -> None:
    """The current marker names the latest recovery (or a new one)."""
    fenced = marker.fenced_at
    last = recoveries[-1] if recoveries else None
    if last is not None and (fenced is None or last.started is None or
                             last.started >= fenced - GAP):
        last.recovery_id = marker.recovery
        last.state = marker.state.value
        return
    recoveries.append(Recovery(host=host, recovery_id=marker.recovery,
                               state=marker.state.value,
                               started=fenced or marker.when, instances=[]))


def instance_history(cloud, server: str) -> list[InstanceMove]:
    """Every move of one instance Nova still remembers, oldest first."""
    actions = cloud.instance_actions(server)
    moves = [move(mig, actions) for kind in MIGRATION_TYPES
             for mig in cloud.migrations(server_id=server,
                                         migration_type=kind)]
    epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    return sorted(moves, key=lambda m: m.started or epoch)
