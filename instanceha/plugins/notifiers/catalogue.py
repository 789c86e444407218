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

"""Engine events as versioned notifications: the one catalogue.

Receivers outside the service (a message bus, a webhook, Kubernetes)
need stable names and documented payloads, not log lines. This module
turns every engine event (:mod:`instanceha.engine.events`) into an event
type, a priority and a payload of a named, versioned schema. It is pure:
the dispatcher calls :func:`translate`; doc/notifications.md lists the
same table (a unit test checks they agree).

A payload's ``data`` holds its schema's fields (None when the event does
not set one) plus ``details``: the engine event's other fields, as they
appear in the log line. A field added to a schema raises its minor
version; a field removed or changed raises the major one.
"""

from collections.abc import Callable
import dataclasses
import datetime
import uuid

from instanceha.engine import events as ev
from instanceha.plugins.notifiers import base

NAMESPACE = 'instanceha'


@dataclasses.dataclass(frozen=True)
class Schema:
    name: str
    version: str
    #: Payload field -> engine event field it is read from.
    fields: dict[str, str]


#: Every payload names the recovery (None outside one) and its event.
_COMMON = {'event': '', 'recovery_id': 'recovery_id'}

HOST = Schema('HostRecoveryPayload', '1.0', {
    **_COMMON, 'host': '', 'state': 'new', 'previous_state': 'old',
    'reason': 'reason'})
INSTANCE = Schema('InstanceEvacuationPayload', '1.0', {
    **_COMMON, 'server': 'server', 'source_host': '', 'target_host': '',
    'attempt': 'attempt', 'status': 'status', 'reason': 'reason',
    'retry_in': 'retry_in', 'request_id': 'request_id'})
PLAN = Schema('PlanPayload', '1.0', {**_COMMON, 'blocked_by': 'by'})
SERVICE = Schema('ServicePayload', '1.0', {
    **_COMMON, 'host': '', 'reason': 'reason'})

SCHEMAS = (HOST, INSTANCE, PLAN, SERVICE)

#: host_state by its new state: event type, priority.
HOST_STATES = {
    'suspect': ('instanceha.host.failed', base.WARN),
    'fencing': ('instanceha.host.fence.start', base.INFO),
    'fenced': ('instanceha.host.fence.end', base.INFO),
    'fence_failed': ('instanceha.host.fence.error', base.ERROR),
    'evacuating': ('instanceha.host.evacuate.start', base.INFO),
    'evacuated': ('instanceha.host.evacuate.end', base.INFO),
    'powering_on': ('instanceha.host.power_on.start', base.INFO),
    'waiting_up': ('instanceha.host.power_on.end', base.INFO),
    'enabling': ('instanceha.host.enable.start', base.INFO),
    'healthy': ('instanceha.host.enabled', base.INFO),
    'failed': ('instanceha.host.recovery.error', base.ERROR),
    'left_disabled': ('instanceha.host.left_disabled', base.INFO),
    'service_down': ('instanceha.host.process.failed', base.WARN),
    'frozen': ('instanceha.host.shutdown.frozen', base.INFO),
    'draining': ('instanceha.host.shutdown.draining', base.INFO),
}
#: A host found healthy again before it was fenced: no recovery happened.
CANCELLED = ('instanceha.host.recovery.cancelled', base.INFO)
_NOT_STARTED = frozenset({'suspect', 'fence_failed'})

#: Every other engine event: event type, priority, schema.
EVENTS: dict[str, tuple[str, str, Schema]] = {
    ev.HOST_RESUMED: ('instanceha.host.resumed', base.INFO, HOST),
    ev.FENCE_PENDING: ('instanceha.host.fence.pending', base.WARN, HOST),
    ev.KDUMP_WAIT: ('instanceha.host.kdump.wait', base.INFO, HOST),
    ev.SPARE_CLAIMED: ('instanceha.host.spare.claimed', base.INFO, HOST),
    ev.SPARE_RELEASED: ('instanceha.host.spare.released', base.INFO, HOST),
    ev.FORCED_DOWN_CLEARED: ('instanceha.host.forced_down.cleared',
                             base.INFO, HOST),
    ev.HOST_FAILED_PENDING: ('instanceha.host.operator.needed', base.WARN,
                             HOST),
    ev.RECOVERY_HELD: ('instanceha.host.recovery.held', base.WARN, HOST),
    ev.UP_OVERDUE: ('instanceha.host.up.overdue', base.WARN, HOST),
    ev.STEP_ERROR: ('instanceha.host.step.error', base.WARN, HOST),
    ev.POWER_UNPROVEN: ('instanceha.host.power.unproven', base.WARN, HOST),
    ev.SHUTDOWN_ANNOUNCED: ('instanceha.host.shutdown.announced', base.INFO,
                            HOST),
    ev.SHUTDOWN_DRAINED: ('instanceha.host.shutdown.drained', base.INFO,
                          HOST),
    ev.SHUTDOWN_RETURNED: ('instanceha.host.shutdown.returned', base.INFO,
                           HOST),
    ev.SHUTDOWN_OVERDUE: ('instanceha.host.shutdown.overdue', base.WARN,
                          HOST),
    ev.EVACUATE_REQUESTED: ('instanceha.instance.evacuate.start',
                            base.INFO, INSTANCE),
    ev.EVACUATE_DONE: ('instanceha.instance.evacuate.end', base.INFO,
                       INSTANCE),
    ev.EVACUATE_REFUSED: ('instanceha.instance.evacuate.error', base.WARN,
                          INSTANCE),
    ev.EVACUATE_UNANSWERED: ('instanceha.instance.evacuate.error',
                             base.WARN, INSTANCE),
    ev.EVACUATE_FAILED: ('instanceha.instance.evacuate.error', base.WARN,
                         INSTANCE),
    ev.EVACUATE_GAVE_UP: ('instanceha.instance.evacuate.error', base.ERROR,
                          INSTANCE),
    ev.EVACUATE_SKIPPED: ('instanceha.instance.evacuate.skipped', base.WARN,
                          INSTANCE),
    ev.SERVER_LOCKED: ('instanceha.instance.locked', base.INFO, INSTANCE),
    ev.SERVER_UNLOCKED: ('instanceha.instance.unlocked', base.INFO,
                         INSTANCE),
    ev.POWER_STATE_RESTORED: ('instanceha.instance.power_state.restored',
                              base.INFO, INSTANCE),
    ev.PLAN_BLOCKED: ('instanceha.plan.blocked', base.WARN, PLAN),
    ev.PLAN_UNBLOCKED: ('instanceha.plan.unblocked', base.INFO, PLAN),
    ev.CAPACITY_SHORT: ('instanceha.service.capacity.short', base.WARN,
                        SERVICE),
    ev.CAPACITY_MET: ('instanceha.service.capacity.met', base.INFO,
                      SERVICE),
    ev.HARDWARE_CONDITION: ('instanceha.host.hardware.condition',
                            base.WARN, HOST),
    ev.PROACTIVE_EVACUATION: ('instanceha.host.proactive.evacuation',
                              base.WARN, HOST),
    ev.PROACTIVE_HELD: ('instanceha.host.proactive.held', base.WARN, HOST),
    ev.LEADER: ('instanceha.service.leader.gained', base.INFO, SERVICE),
    ev.NOT_LEADER: ('instanceha.service.leader.lost', base.WARN, SERVICE),
    ev.SNAPSHOT_FAILED: ('instanceha.service.nova.error', base.WARN,
                         SERVICE),
    ev.SHUTDOWN: ('instanceha.service.shutdown', base.INFO, SERVICE),
    ev.PAUSED: ('instanceha.service.paused', base.WARN, SERVICE),
    ev.RESUMED: ('instanceha.service.resumed', base.INFO, SERVICE),
    ev.PAUSE_EXPIRED: ('instanceha.service.pause.expired', base.INFO,
                       SERVICE),
    ev.RELOADED: ('instanceha.service.reload', base.INFO, SERVICE),
    ev.RELOAD_REFUSED: ('instanceha.service.reload.error', base.ERROR,
                        SERVICE),
    ev.PROCESS_FAILURE: ('instanceha.host.process.failed', base.WARN, HOST),
    ev.PROCESS_RECOVERED: ('instanceha.host.process.recovered', base.INFO,
                           HOST),
    ev.PROCESS_FAILURE_HELD: ('instanceha.host.process.held', base.WARN,
                              SERVICE),
    ev.INSTANCE_CRASHED: ('instanceha.instance.crashed', base.WARN,
                          INSTANCE),
    ev.INSTANCE_START_REQUESTED: ('instanceha.instance.restart.start',
                                  base.INFO, INSTANCE),
    ev.INSTANCE_RUNNING: ('instanceha.instance.restart.end', base.INFO,
                          INSTANCE),
    ev.INSTANCE_RELOCATE_REQUESTED: ('instanceha.instance.relocate.start',
                                     base.INFO, INSTANCE),
    ev.INSTANCE_RELOCATED: ('instanceha.instance.relocate.end', base.INFO,
                            INSTANCE),
    ev.INSTANCE_RECOVERED: ('instanceha.instance.recovered', base.INFO,
                            INSTANCE),
    ev.INSTANCE_RECOVERY_FAILED: ('instanceha.instance.restart.error',
                                  base.WARN, INSTANCE),
    ev.INSTANCE_GAVE_UP: ('instanceha.instance.failure.error', base.ERROR,
                          INSTANCE),
    ev.INSTANCE_FAILURE_HELD: ('instanceha.instance.failure.held',
                               base.WARN, SERVICE),
}

#: Failed evacuations with no retry ahead are errors, not warnings.
_RETRYABLE = frozenset({ev.EVACUATE_REFUSED, ev.EVACUATE_UNANSWERED,
                        ev.EVACUATE_FAILED})


def classify(event: str, details: dict) -> tuple[str, str, Schema]:
    """(event type, priority, schema) of one engine event.

    An event this catalogue does not know yet (added to the engine later)
    still goes out, as ``instanceha.<event>`` with the service schema.
    """
    if event == ev.HOST_STATE:
        new, old = str(details.get('new')), str(details.get('old'))
        if new == 'healthy' and old in _NOT_STARTED:
            return CANCELLED + (HOST,)
        etype, priority = HOST_STATES.get(
            new, ('instanceha.host.state.%s' % new, base.INFO))
        return etype, priority, HOST
    if event in EVENTS:
        etype, priority, schema = EVENTS[event]
        if event in _RETRYABLE and details.get('retry_in') is None:
            priority = base.ERROR
        return etype, priority, schema
    priority = base.WARN if event in ev.WARNINGS else base.INFO
    return 'instanceha.%s' % event, priority, SERVICE


def _plain(value):
    """JSON-ready: tuples and sets become lists, the rest is kept."""
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def payload(schema: Schema, event: str, host: str | None,
            details: dict) -> dict:
    """The versioned payload of one event under ``schema``."""
    data = {}
    used = set()
    for field, source in schema.fields.items():
        if source:
            data[field] = _plain(details.get(source))
            used.add(source)
    data['event'] = event
    if 'host' in schema.fields:
        data['host'] = host
    if schema is INSTANCE:
        data['source_host'] = host
        data['target_host'] = details.get('dest', details.get('target'))
        used.update(('dest', 'target'))
    data['details'] = {k: _plain(v) for k, v in sorted(details.items())
                       if k not in used}
    return {'instanceha_object.name': schema.name,
            'instanceha_object.namespace': NAMESPACE,
            'instanceha_object.version': schema.version,
            'instanceha_object.data': data}


def translate(event: str, host: str | None, details: dict, *,
              publisher_id: str,
              now: Callable[[], datetime.datetime] | None = None
              ) -> base.Notification:
    """One engine event as a :class:`~base.Notification`."""
    etype, priority, schema = classify(event, details)
    when = (now or (lambda: datetime.datetime.now(datetime.timezone.utc)))()
    return base.Notification(
        event_type=etype, priority=priority,
        payload=payload(schema, event, host, details),
        publisher_id=publisher_id, message_id=str(uuid.uuid4()),
        timestamp=when.strftime('%Y-%m-%dT%H:%M:%S.%fZ'),
        event=event, host=host, details=dict(details))
