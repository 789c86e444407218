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

"""The engine's events: stable names, plain fields, one line each.

Events are the engine's story. The production sink writes them as log
lines; the simulator compares them with a golden log; the health module
may count them. So names and fields are part of the contract: values are
plain (str, int, bool, None, or tuples of those), never wall-clock times,
and :func:`format_event` prints them in a deterministic order.

Every event about a host in recovery also carries ``recovery_id``: the
id of that recovery (a UUID, also in the Nova marker as ``rid=``), the
same in every log line and notification of it.

Names (``host`` is set on all but the cycle-level ones):

========================  =================================================
``host_state``            a workflow transition: ``old``, ``new`` and the
                          step's details (``reason``, ``level``, ...)
``host_resumed``          a workflow adopted from a Nova marker after a
                          restart or leader change: ``state``
``fence_pending``         every cycle while a host cannot be fenced (it is
                          never evacuated unfenced):
                          ``attempts``, ``retry_in``, ``reason``
``kdump_wait``            waiting for a first kdump message: ``timeout``
``spare_claimed``         ``spare``: a reserved host enabled for ``host``
``spare_released``        ``spare``: returned to the pool, nothing landed
``evacuate_requested``    ``server``, ``target`` (None: scheduler),
                          ``attempt``
``evacuate_skipped``      ``server``, ``status``: Nova cannot evacuate an
                          instance in that status (only ACTIVE, ERROR,
                          SHUTOFF); it stays on the failed host
``evacuate_refused``      ``server``, ``attempt``, ``reason``: the API
                          call failed; ``retry_in`` (s) when it will be
                          retried
``evacuate_unanswered``  ``server``, ``attempt``, ``retry_in``,
                          ``reason``: Nova failed the call (5xx, timeout,
                          unreachable) and may have carried it out; Nova
                          is asked before the instance is evacuated again
                          (not counted as an attempt)
``evacuate_done``         ``server``, ``dest``, ``status``
``evacuate_failed``       ``server``, ``attempt``, ``dest``, ``reason``;
                          ``retry_in`` (s) when it will be retried
``evacuate_gave_up``      ``server``, ``attempts``, ``reason`` (retries
                          used up: an operator must act)
``forced_down_cleared``   a recovered host may report ``up`` again (with
                          its enable, once its nova-compute reported)
``server_locked``         ``server``; ``confirmed`` when a lock call Nova
                          did not answer is found carried out
``server_unlocked``       ``server``; ``found`` (why it was looked for)
                          when the lock was left by an earlier copy
                          (see :mod:`instanceha.engine.locks`)
``power_state_restored``  ``server``, ``status`` (SHUTOFF or ERROR)
``host_failed_pending``   each cycle for a host marked FAILED: ``action``
``recovery_held``         every poll while ``[DEFAULT] disabled = true``
                          for a failed host that would be recovered
                          (``note``, ``reason``) or a recovery held where
                          it stopped (``note``, ``state``); every poll
                          while paused for a failed host that would be
                          recovered (``note``, ``reason``, ``pause``)
``up_overdue``            every poll once a host has waited longer than
                          ``[DEFAULT] up_timeout`` to come back up:
                          ``waited`` (s), ``check`` (what to look at)
``paused``                once when the leader first sees an operator's
                          pause (``instanceha-manage pause``): ``reason``,
                          ``until`` (or ``indefinite``), ``by``
``resumed``               once when the pause is lifted by an operator
                          (``instanceha-manage resume``): ``reason``
``pause_expired``         once when a pause's end has passed and it no
                          longer holds anything: ``reason``, ``since``,
                          ``until``
``config_reloaded``       after SIGHUP: ``changed`` (options changed
                          live), ``restart_needed`` (changed in the file
                          but cannot change live), ``reloaded`` (what was
                          re-read: fencing file, heartbeat keys)
``reload_refused``        after SIGHUP, for each part refused: ``what``
                          (configuration files, fencing file, heartbeat
                          keys) and ``reason`` naming the culprit; the
                          version loaded before stays in force
``not_leader``            once when this copy loses leadership
``leader``                once when it (re)gains it
``plan_blocked``          ``by``: gates that blocked the whole plan (a
                          mass failure: nobody is fenced); once when the
                          block starts or its reasons change
``plan_unblocked``        the whole-plan block ended
``capacity_short``        failure domains tolerate fewer lost hosts than
                          ``[capacity] minimum_tolerance``: ``minimum``,
                          ``domains`` (name:N+k each); once per change
``capacity_met``          every domain meets the minimum again
``hardware_condition``    a host's BMC reports conditions to warn about:
                          ``conditions``
``proactive_evacuation``  a host is put into maintenance for its hardware
                          conditions (live migration, no fencing):
                          ``conditions``
``proactive_held``        a host would be emptied but a gate says no:
                          ``conditions``, ``reason``
``snapshot_failed``       ``reason``: Nova could not be read this cycle;
                          ``held``: hosts not fenced until a cycle reads
                          Nova again (their plan may be stale)
``step_error``            ``state``, ``reason``, ``retry_in``: an error in
                          a step; the step is retried after ``retry_in``
                          seconds (5, doubled while it keeps failing, at
                          most ``poll``)
``shutdown``              ``in_flight``: hosts with a running step
``power_unproven``        ``reason``: no evacuation starts because the
                          host's fencing devices could not prove it off
                          just now (read again on the next step)
``process_failure``       nova-compute is down on a host whose own
                          heartbeat says it is alive: its service was
                          disabled with our marker (``reason``); never
                          fenced, never evacuated
``process_recovered``     nova-compute reports up again: the service we
                          disabled was enabled (``down_for`` seconds)
``process_failure_held``  ``hosts``, ``reason``: isolated hosts whose
                          service is not disabled (a partition above
                          ``[process_failure] threshold``, or the
                          per-cycle cap); once per change
``instance_crashed``      ``server`` stopped without anyone asking:
                          ``next`` (restart, relocate or error),
                          ``restarts``, ``relocations`` (so far),
                          ``reason``
``instance_start_requested``  ``server``, ``after`` (restart or
                          relocation)
``instance_relocate_requested``  ``server``: cold migration, the
                          scheduler chooses the host
``instance_relocated``    ``server``, ``dest``
``instance_running``      ``server``: ACTIVE again; counts as a
                          successful start after ``stable_time``
``instance_recovered``    ``server`` ran ``stable_time`` seconds: its
                          counters are reset
``instance_recovery_failed``  ``server``, ``reason``: a start or a
                          relocation did not work (counts as a crash)
``instance_gave_up``      ``server``, ``restarts``, ``relocations``,
                          ``action``: put in the error state; only an
                          operator clears it
``instance_failure_held`` ``servers``, ``reason``: crashed instances not
                          recovered now (a storm above ``[instance_failure]
                          threshold``, the per-cycle cap, or a pause); once
                          per change
``shutdown_announced``    the host's agent announced a clean shutdown:
                          ``kind`` (reboot, poweroff), ``policy`` and
                          where it comes from (``origin``), ``action``
                          (freeze, failover, migrate)
``shutdown_drained``      migrate: the host's instances were moved away
                          before it went down: ``moved``, ``left``
``shutdown_returned``     an announced host is back (a heartbeat from its
                          next boot, Nova reports it up): ``kind``,
                          ``after`` (s since the announcement),
                          ``enabled`` (its service enabled again by us)
``shutdown_overdue``      an announced host did not come back within
                          ``[shutdown] return_timeout``: ``kind``,
                          ``silent`` (s); from now on it is handled as a
                          failed host (fenced, evacuated)
========================  =================================================
"""

from collections.abc import Callable
import logging
import threading

from instanceha.engine import ports

HOST_STATE = 'host_state'
HOST_RESUMED = 'host_resumed'
FENCE_PENDING = 'fence_pending'
KDUMP_WAIT = 'kdump_wait'
SPARE_CLAIMED = 'spare_claimed'
SPARE_RELEASED = 'spare_released'
EVACUATE_REQUESTED = 'evacuate_requested'
EVACUATE_REFUSED = 'evacuate_refused'
EVACUATE_UNANSWERED = 'evacuate_unanswered'
EVACUATE_SKIPPED = 'evacuate_skipped'
EVACUATE_DONE = 'evacuate_done'
EVACUATE_FAILED = 'evacuate_failed'
EVACUATE_GAVE_UP = 'evacuate_gave_up'
FORCED_DOWN_CLEARED = 'forced_down_cleared'
SERVER_LOCKED = 'server_locked'
SERVER_UNLOCKED = 'server_unlocked'
POWER_STATE_RESTORED = 'power_state_restored'
HOST_FAILED_PENDING = 'host_failed_pending'
RECOVERY_HELD = 'recovery_held'
UP_OVERDUE = 'up_overdue'
NOT_LEADER = 'not_leader'
LEADER = 'leader'
SNAPSHOT_FAILED = 'snapshot_failed'
PLAN_BLOCKED = 'plan_blocked'
PLAN_UNBLOCKED = 'plan_unblocked'
CAPACITY_SHORT = 'capacity_short'
CAPACITY_MET = 'capacity_met'
HARDWARE_CONDITION = 'hardware_condition'
PROACTIVE_EVACUATION = 'proactive_evacuation'
PROACTIVE_HELD = 'proactive_held'
STEP_ERROR = 'step_error'
SHUTDOWN = 'shutdown'
PAUSED = 'paused'
RESUMED = 'resumed'
PAUSE_EXPIRED = 'pause_expired'
POWER_UNPROVEN = 'power_unproven'
RELOADED = 'config_reloaded'
RELOAD_REFUSED = 'reload_refused'
PROCESS_FAILURE = 'process_failure'
PROCESS_RECOVERED = 'process_recovered'
PROCESS_FAILURE_HELD = 'process_failure_held'
INSTANCE_CRASHED = 'instance_crashed'
INSTANCE_START_REQUESTED = 'instance_start_requested'
INSTANCE_RELOCATE_REQUESTED = 'instance_relocate_requested'
INSTANCE_RELOCATED = 'instance_relocated'
INSTANCE_RUNNING = 'instance_running'
INSTANCE_RECOVERED = 'instance_recovered'
INSTANCE_RECOVERY_FAILED = 'instance_recovery_failed'
INSTANCE_GAVE_UP = 'instance_gave_up'
INSTANCE_FAILURE_HELD = 'instance_failure_held'
SHUTDOWN_ANNOUNCED = 'shutdown_announced'
SHUTDOWN_DRAINED = 'shutdown_drained'
SHUTDOWN_RETURNED = 'shutdown_returned'
SHUTDOWN_OVERDUE = 'shutdown_overdue'

#: Events that mean something went wrong (logged as warnings).
WARNINGS = frozenset({FENCE_PENDING, EVACUATE_REFUSED, EVACUATE_SKIPPED,
                      EVACUATE_UNANSWERED,
                      EVACUATE_FAILED, EVACUATE_GAVE_UP, HOST_FAILED_PENDING,
                      NOT_LEADER, SNAPSHOT_FAILED, STEP_ERROR, PLAN_BLOCKED,
                      RECOVERY_HELD, UP_OVERDUE, PAUSED, POWER_UNPROVEN,
                      RELOAD_REFUSED,
                      PROCESS_FAILURE, PROCESS_FAILURE_HELD,
                      INSTANCE_CRASHED, INSTANCE_RECOVERY_FAILED,
                      INSTANCE_GAVE_UP, INSTANCE_FAILURE_HELD,
                      SHUTDOWN_OVERDUE, CAPACITY_SHORT, HARDWARE_CONDITION,
                      PROACTIVE_EVACUATION, PROACTIVE_HELD})


def _value(v) -> str:
    if isinstance(v, (list, tuple, set, frozenset)):
        return ','.join(str(x) for x in (sorted(v) if isinstance(
            v, (set, frozenset)) else v))
    text = str(v)
    return repr(text) if (' ' in text or not text) else text


def format_event(event: str, host: str | None = None, **details) -> str:
    """event host key=value ... with keys sorted: one stable line.

    ``recovery_id`` comes last: the line reads the same as before with the
    id appended (``grep`` for it finds the whole recovery).
    """
    parts = [event]
    if host:
        parts.append(host)
    keys = sorted(details, key=lambda k: (k == 'recovery_id', k))
    parts.extend('%s=%s' % (k, _value(details[k])) for k in keys)
    return ' '.join(parts)


class LogEventSink(ports.EventSink):
    """Production: one log line per event (warnings for bad news)."""

    def __init__(self, logger: logging.Logger | None = None):
        self.log = logger or logging.getLogger('instanceha.events')

    def emit(self, event: str, host: str | None = None, **details) -> None:
        level = logging.WARNING if event in WARNINGS else logging.INFO
        self.log.log(level, '%s', format_event(event, host, **details))


class RecordingEventSink(ports.EventSink):
    """Keeps every event in memory (tests, instanceha-manage)."""

    def __init__(self):
        self.events: list[tuple[str, str | None, dict]] = []
        self._lock = threading.Lock()

    def emit(self, event: str, host: str | None = None, **details) -> None:
        with self._lock:
            self.events.append((event, host, dict(details)))

    def lines(self) -> list[str]:
        """The log lines, without the random ``recovery_id`` (named())."""
        with self._lock:
            return [format_event(e, h, **{k: v for k, v in d.items()
                                          if k != 'recovery_id'})
                    for e, h, d in self.events]

    def named(self, event: str, host: str | None = None) -> list[dict]:
        """Details of every event (for host if given), without the id."""
        with self._lock:
            return [{k: v for k, v in d.items() if k != 'recovery_id'}
                    for e, h, d in self.events
                    if e == event and (host is None or h == host)]

    def recovery_ids(self, host: str | None = None) -> list[str | None]:
        """The recovery id of every event (for host if given), in order."""
        with self._lock:
            return [d.get('recovery_id') for _e, h, d in self.events
                    if host is None or h == host]


class RecoveryIdSink(ports.EventSink):
    """Adds ``recovery_id`` to every event about a host in recovery.

    The engine wraps its sink in one, so that its own events and its
    evacuation jobs' carry the id of the recovery they belong to.
    """

    def __init__(self, inner: ports.EventSink,
                 lookup: Callable[[str], str | None]):
        self.inner = inner
        self.lookup = lookup

    def emit(self, event: str, host: str | None = None, **details) -> None:
        if host and 'recovery_id' not in details:
            rid = self.lookup(host)
            if rid:
                details['recovery_id'] = rid
        self.inner.emit(event, host, **details)


class FanOutEventSink(ports.EventSink):
    """Sends each event to several sinks in order; one failing spares others.

    The service's story has several readers (the log, the metrics, an
    operator's notifiers): each is a sink given to :meth:`add`, so a new
    reader never has to wrap or replace another. A sink that raises is
    logged and skipped for that event; the engine never sees the error,
    because telling the story must not stop a recovery.
    """

    def __init__(self, *sinks: ports.EventSink):
        self.sinks: list[ports.EventSink] = list(sinks)
        self._log = logging.getLogger(__name__)

    def add(self, sink: ports.EventSink) -> ports.EventSink:
        """Send every later event to ``sink`` too; returns it."""
        self.sinks.append(sink)
        return sink

    def remove(self, sink: ports.EventSink) -> None:
        if sink in self.sinks:
            self.sinks.remove(sink)

    def emit(self, event: str, host: str | None = None, **details) -> None:
        for sink in list(self.sinks):
            try:
                sink.emit(event, host, **details)
            except Exception:  # noqa: one reader must not silence others
                self._log.exception('event sink %s failed on %s',
                                    type(sink).__name__, event)
