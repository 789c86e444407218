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

"""The recovery engine: one explicit workflow per failed host.

``Engine.tick()`` is one step of the service. Every ``poll`` seconds (by
the environment's clock) it reads a snapshot of the cloud, adopts hosts
whose Nova marker says a recovery is under way (so a restarted service or
a new leader resumes exactly where the last one stopped), asks
:func:`instanceha.engine.decide.make_plan` which failed hosts to recover
and starts their workflows. On every tick it advances each workflow by at
most one step. Slow work (fencing, Nova calls, power-on) runs as jobs on
``env.executor``; a tick only looks at finished futures, so a BMC that
takes a minute never delays anything else.

A host's way through the table of :mod:`instanceha.engine.states`::

    suspect -> fencing -> fenced -> evacuating -> evacuated
            -> powering_on -> waiting_up -> enabling -> healthy

* fencing: R9, a host that cannot be fenced (no configuration, every
  level failed) goes to fence_failed and is retried with back-off; it is
  never evacuated. With kdump checking, a host first gets
  ``kdump_timeout`` seconds to announce a crash dump; a dumping host
  counts as fenced and is never power-cycled.
* fenced: forced down and disabled with a marker (R10), then a spare is
  claimed (R7) and the marker says ``evacuating``.
* evacuating: the evacuation strategy's job is stepped until it is
  complete; any instance given up means FAILED (R12; with
  fire-and-forget, unless ``force_enable``, R13).
* evacuated: ``leave_disabled`` ends in left_disabled (R11); otherwise the
  host is powered on (not a kdump host), ``forced_down`` is cleared, and
  it is enabled once Nova reports it ``up``.

Safety: every side effect passes the environment's leadership guard at
the moment it is made (see :class:`instanceha.engine.ports.LeaderGuard`);
the steps' own leadership checks only avoid submitting work that would be
refused. Each job holds the coordinator's lock on its host. Evacuate
calls need a fresh proof that the host is off (``prove_off``); a host an
operator disabled with a reason of their own leaves our hands
(:class:`OperatorTookOver`). A stopping service changes nothing more,
marks nothing FAILED and leaves the markers and our locks for the next
start.
"""

from collections.abc import Callable
import concurrent.futures
import dataclasses
import datetime
import logging
import uuid

from instanceha.conf import evacuation as evacuation_conf
from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import pause as pause_mod
from instanceha.engine import plan as plan_mod
from instanceha.engine import ports
from instanceha.engine import states
from instanceha.engine.states import HostState
from instanceha.engine import watch
from instanceha import exceptions
from instanceha.plugins.evacuation import base as evac_base

LOG = logging.getLogger(__name__)

S = HostState

#: Nova's and our clocks may differ a little: migration records this much
#: older than the fence time still count as ours.
MIGRATION_SLACK = datetime.timedelta(seconds=120)

#: "The workflow's own" (a marker argument left as it is).
_SAME = object()

#: States that hold one of the ``workers`` recovery slots.
BUSY_STATES = frozenset({S.FENCING, S.FENCED, S.EVACUATING, S.EVACUATED,
                         S.POWERING_ON, S.ENABLING})

#: Marker states a (re)started engine adopts from Nova.
RESUMABLE = frozenset({S.FENCED, S.EVACUATING, S.EVACUATED,
                       S.POWERING_ON, S.WAITING_UP, S.ENABLING,
                       S.LEFT_DISABLED, S.FAILED})

#: States whose next step fences a host: taken only on a plan made from
#: the latest cycle's snapshot, never while Nova cannot be read.
NEEDS_FRESH_PLAN = frozenset({S.SUSPECT, S.FENCE_FAILED})

#: A crash-dumping host counts as off while its latest fence_kdump
#: message is at most this old (fence_kdump_send repeats every 10 s).
KDUMP_PROOF_WINDOW = 15.0

#: Seconds before a step that raised is tried again (doubled while it
#: keeps failing, up to ``poll``).
STEP_RETRY = 5.0

#: What to look at when a host stays in waiting_up (``up_timeout``).
UP_OVERDUE_CHECK = (
    'is %(host)s powered on and booted (its BMC, console)? is its '
    'nova-compute running and reaching the message bus? Nova must report '
    'it up (openstack compute service list --host %(host)s). To take it '
    'out of instanceha\'s hands, disable it with a reason of your own')


#: Logged when a host is marked FAILED (seed manual, step 11).
OPERATOR_STEPS = (
    'host %(host)s is FAILED and stays disabled and forced down. To hand '
    'it back: 1) find out why the instances listed above could not be '
    'evacuated; 2) evacuate (or fix) the instances still on %(host)s; '
    '3) make sure %(host)s restarts cleanly; 4) run "instanceha-manage '
    'hosts clear %(host)s" (clears forced_down; instanceha enables it once '
    'Nova reports it up).')


class OperatorTookOver(exceptions.InstanceHAError):
    """The host was disabled with a reason that is not ours: hands off."""


def operators_reason(svc: model.Service | None) -> str | None:
    """Why ``svc`` is an operator's now (None while it is ours or free).

    A service disabled with a reason that is not our marker (no reason,
    a reason of the operator's own, maintenance) was taken by an
    operator; whatever our workflow was doing, it ends there.
    """
    if svc is None or not svc.disabled:
        return None
    if marker_mod.Marker.parse(svc.disabled_reason) is not None:
        return None
    if svc.disabled_reason:
        return 'disabled with the reason "%s"' % svc.disabled_reason
    return 'disabled without a reason'


def new_recovery_id() -> str:
    """A fresh recovery id (a UUID: unique across copies and restarts)."""
    return str(uuid.uuid4())


def operator_action(host: str) -> str:
    """What an operator must do about a FAILED host (seed step 11)."""
    return ('check the instances of %s listed in the log, evacuate or fix '
            'them by hand, then run "instanceha-manage hosts clear %s"'
            % (host, host))


@dataclasses.dataclass
class HostWorkflow:
    """The engine's in-memory view of one host being recovered."""

    host: str
    state: HostState
    #: When the current state was entered (clock.now()).
    entered: datetime.datetime
    #: When the host was detected failed (or the marker's time).
    detected: datetime.datetime
    servers: tuple[model.Server, ...] = ()
    future: concurrent.futures.Future | None = None
    #: Applied in the tick thread to the job's result.
    on_done: Callable | None = None
    #: Evacuations the running job may start (counted against the cap).
    budget: int = 0
    attempts: int = 0
    retry_at: float = 0.0
    kdump: bool = False
    kdump_deadline: float | None = None
    fence_level: int | None = None
    spare: str | None = None
    since: datetime.datetime | None = None
    job: evac_base.EvacuationJob | None = None
    progress: evac_base.Progress | None = None
    resumed: bool = False
    reason: str = ''
    #: When forced_down was cleared (waiting_up); None: not yet.
    cleared_at: datetime.datetime | None = None
    #: Only a heartbeat newer than this proves the host came back (the
    #: power-on, or for a kdump host the end of its dump).
    up_after: datetime.datetime | None = None
    #: Steps in a row that raised (their retry backs off).
    step_errors: int = 0
    #: This recovery's id: in every event of it (``recovery_id``), every
    #: notification and the Nova marker (``rid=``), so a resumed copy
    #: goes on with the same one.
    recovery: str = ''
    #: The spare (if any) was enabled by this copy.
    spare_enabled: bool = False
    #: Monotonic time the host was last proven off (None: never by this
    #: copy; an adopted marker is a claim, not a proof).
    proven_at: float | None = None


class Engine:
    """Drives every failed host's workflow; see the module docstring."""

    def __init__(self, conf, drivers, env: ports.Environment, *,
                 planner: Callable | None = None):
        """Build an engine; it acts only when ticked.

        :param planner: ``(snapshot, now, recovering) -> Plan``; the
            default is :func:`instanceha.engine.decide.make_plan` with the
            configured detectors, filters and gates.
        """
        self.conf = conf
        self.drivers = drivers
        # Every event about a host in recovery, the evacuation jobs' too,
        # carries that recovery's id.
        self.env = dataclasses.replace(env, events=events.RecoveryIdSink(
            env.events, self.recovery_id))
        self._planner = planner
        self._workflows: dict[str, HostWorkflow] = {}
        #: Jobs of hosts that moved on while rebuilds still run
        #: (fire-and-forget): watched until settled, for unlock/restore.
        self._aftercare: dict[str, HostWorkflow] = {}
        self._next_poll: float | None = None
        self._leader: bool | None = None
        #: The latest cycle read Nova (its plan is current).
        self._fresh = False
        self._stopping = False
        self.pause = pause_mod.PauseWatch(env.pause, env.events, env.clock)
        self.snapshot: model.Snapshot | None = None
        self._watch = watch.ServiceWatch(self._services_interval())
        self.plan = None
        self.cycles = 0
        #: The gates' reasons of the current whole-plan block (or none).
        self._blocked_by: tuple[str, ...] = ()

    # -- public -------------------------------------------------------------

    def host_states(self) -> dict[str, HostState]:
        """Every host in a workflow and its state, sorted by host."""
        return {h: self._workflows[h].state for h in sorted(self._workflows)}

    def recovery_id(self, host: str) -> str | None:
        """The id of ``host``'s recovery, None when it is in none."""
        wf = self._workflows.get(host) or self._aftercare.get(host)
        return (wf.recovery or None) if wf is not None else None

    def workflows(self) -> dict[str, HostWorkflow]:
        return dict(self._workflows)

    def busy(self) -> bool:
        """True while any job is running."""
        return any(wf.future is not None for wf in self._all())

    def tick(self) -> None:
        """One step; never blocks on slow work.

        Results of finished jobs are applied only while this copy leads:
        a copy that lost its lease forgets them and, leading again,
        resumes from Nova's markers.
        """
        if self._stopping:
            self._harvest(apply=False)
            return
        leader = self._check_leadership()
        self._harvest(apply=leader)
        if not leader:
            return
        now = self.env.clock.monotonic()
        # A plan that waited on gates (veto hooks asked on the executor)
        # is made again as soon as they have answered.
        answered = self.plan is not None and getattr(
            self.plan, 'answered', False)
        if self._full_read_due(now, answered):
            self._next_poll = now + self.conf.poll
            self._cycle()
            if self._fresh:
                seen = watch.attention(self.snapshot, self.env.clock.now(),
                                       self.conf.delta, skip=self._workflows)
                self._watch.seen = seen
                self._watch.quiet = (not seen and not self._workflows and
                                     self._services_tell_all())
        if self.conf.disabled:
            return
        self._advance()

    def wait_hint(self) -> float:
        """Seconds until the compute services should be read again."""
        nxt = self._watch.next_read
        if nxt is None:
            return 0.0
        return max(0.0, nxt - self.env.clock.monotonic())

    def _services_interval(self) -> float:
        try:
            return float(self.conf.detection.services_interval)
        except (AttributeError, KeyError, TypeError,
                ValueError):  # a conf without the option: the default
            return 0.0

    def _services_tell_all(self) -> bool:
        """Whether the compute services alone show every failure.

        True when every configured detector judges from Nova's services
        only; another witness (heartbeats, kdump) may see a failure Nova
        does not, so then the full picture is read every poll as well.
        """
        return all(getattr(d, 'judges_services_only', False)
                   for d in self.drivers.detectors)

    def _full_read_due(self, mono: float, answered: bool) -> bool:
        """Read the services alone when due; is a full read needed now?

        See :mod:`instanceha.engine.watch`: at once when the services
        show news, every poll while anything is not healthy, never while
        every host is healthy.
        """
        poll_due = self._next_poll is None or mono >= self._next_poll
        w = self._watch
        if answered:
            return True
        if self.snapshot is None or w.seen is None:
            return poll_due
        if w.due(mono):
            snap = w.read(self.env.cloud, mono)
            if snap is None:
                return poll_due  # the full read reports Nova's trouble
            self.snapshot = dataclasses.replace(
                self.snapshot, services=snap.services,
                taken_at=snap.taken_at, clock_skew=snap.clock_skew)
            seen = watch.attention(self.snapshot, self.env.clock.now(),
                                   self.conf.delta, skip=self._workflows)
            w.quiet = (not seen and not self._workflows and
                       self._services_tell_all())
            if seen != w.seen and self._fresh:
                return True
        if poll_due and w.quiet:
            self._next_poll = mono + self.conf.poll
            return False
        return poll_due

    def shutdown(self, timeout: float) -> None:
        """Stop taking new work; let running jobs reach their end.

        A stopping copy changes nothing any more (the leadership guard
        refuses every side effect from here on, clean-ups included):
        the markers in Nova and our locks on instances stay as they are,
        and the next start (or another leader) resumes from them.
        """
        self._stopping = True
        self.env.guard.halt('stopping')
        deadline = self.env.clock.monotonic() + timeout
        running = sorted(wf.host for wf in self._all() if wf.future)
        self.env.events.emit(events.SHUTDOWN, in_flight=tuple(running))
        futures = [wf.future for wf in self._all() if wf.future]
        while futures and self.env.clock.monotonic() < deadline:
            if all(f.done() for f in futures):
                break
            self.env.clock.sleep(0.1)
        self._harvest(apply=False)

    # -- plumbing -------------------------------------------------------------

    def _all(self) -> list[HostWorkflow]:
        return ([self._workflows[h] for h in sorted(self._workflows)] +
                [self._aftercare[h] for h in sorted(self._aftercare)])

    def _emit(self, event: str, host: str | None = None, **details) -> None:
        self.env.events.emit(event, host, **details)

    def _check_leadership(self) -> bool:
        leader = bool(self.env.coordinator.is_leader())
        if leader != self._leader:
            if leader:
                if self._leader is not None:
                    # Another copy may have moved our hosts on: forget what
                    # we knew and resume from Nova's markers right away.
                    for host in sorted(self._workflows):
                        if self._workflows[host].future is None:
                            del self._workflows[host]
                    self._next_poll = None
                self._emit(events.LEADER)
            else:
                self._emit(events.NOT_LEADER)
            self._leader = leader
        return leader

    def _transition(self, wf: HostWorkflow, new: HostState,
                    **details) -> None:
        states.check_transition(wf.host, wf.state, new)
        old = wf.state
        wf.state = new
        wf.entered = self.env.clock.now()
        if new in (S.FENCED, S.POWERING_ON):
            wf.attempts = 0
        wf.retry_at = 0.0
        self._emit(events.HOST_STATE, wf.host, old=old.value,
                   new=new.value, **details)
        if new is S.HEALTHY:
            self._workflows.pop(wf.host, None)

    def _submit(self, wf: HostWorkflow, fn: Callable,
                on_done: Callable, *, lock: bool = True) -> None:
        """Run ``fn()`` as a job holding the host's lock.

        Later, in the tick thread, ``on_done(result)`` is called (or the
        job's error is reported and the step retried).
        """
        coordinator = self.env.coordinator

        def job():
            if not lock:
                return fn()
            with coordinator.host_lock(wf.host):
                return fn()

        wf.on_done = on_done
        wf.future = self.env.executor.submit(job)

    def _harvest(self, apply: bool = True) -> None:
        for wf in self._all():
            fut = wf.future
            if fut is None or not fut.done():
                continue
            wf.future, on_done, wf.on_done = None, wf.on_done, None
            wf.budget = 0
            if not apply:
                continue  # forgotten: the next leader resumes from Nova
            exc = fut.exception()
            if isinstance(exc, OperatorTookOver):
                self._hand_over(wf, str(exc))
                continue
            if exc is not None:
                # Back off while it keeps failing (Nova down for an hour
                # is one warning a poll, not one every 5 s), never beyond
                # a poll.
                wf.step_errors += 1
                wait = min(STEP_RETRY * 2 ** (wf.step_errors - 1),
                           max(STEP_RETRY, float(self.conf.poll)))
                self._emit(events.STEP_ERROR, wf.host, state=wf.state.value,
                           reason='%s: %s' % (type(exc).__name__, exc),
                           retry_in=int(wait))
                if not isinstance(exc, exceptions.InstanceHAError):
                    LOG.error('host %s: unexpected error in state %s',
                              wf.host, wf.state, exc_info=exc)
                wf.retry_at = self.env.clock.monotonic() + wait
                continue
            wf.step_errors = 0
            if on_done is not None:
                on_done(fut.result())

    def _service(self, host: str) -> model.Service:
        svc = self.snapshot.service(host) if self.snapshot else None
        if svc is None:
            raise exceptions.CloudError('nova-compute service of %s is not '
                                        'listed by Nova' % host)
        return svc

    def _mark(self, wf: HostWorkflow, state: HostState, note: str = '',
              *, spare=_SAME, **changes) -> None:
        """Write our marker (and other changes) to the host's service."""
        if not self.env.coordinator.is_leader():
            raise exceptions.CoordinationError(
                'not the leader: %s left unchanged' % wf.host)
        svc = self._ours(wf)
        reason = self._marker(wf, state, note, spare=spare).render()
        # Nova takes a disabled_reason only together with status=disabled.
        changes.setdefault('status', model.DISABLED)
        self.env.cloud.update_service(svc, disabled_reason=reason,
                                      **changes)

    def _ours(self, wf: HostWorkflow) -> model.Service:
        """The host's service, unless an operator took the host.

        Checked before every write: the operator's word wins at every
        step.

        :raises OperatorTookOver: it carries a reason that is not ours.
        """
        svc = self._service(wf.host)
        why = operators_reason(svc)
        if why is not None:
            raise OperatorTookOver(why)
        return svc

    def _backoff(self, attempts: int) -> float:
        wait = self.conf.fence_retry_interval * (2 ** max(attempts - 1, 0))
        return float(min(wait, self.conf.fence_retry_max_interval))

    def _kdump_on(self) -> bool:
        if self.env.kdump is None:
            return False
        try:
            return bool(self.conf.kdump.check_kdump)
        except Exception:  # the [kdump] group is optional
            return True

    def _kdump_opt(self, name: str, default: int) -> int:
        try:
            return int(getattr(self.conf.kdump, name))
        except Exception:
            return default

    # -- the cycle: snapshot, adopt, plan -------------------------------------

    def _plan(self, snapshot, now, recovering):
        if self._planner is not None:
            return self._planner(snapshot, now, recovering)
        from instanceha.engine import decide
        return decide.make_plan(snapshot, self.drivers, self.conf, now,
                                recovering=recovering,
                                submit=self.env.executor.submit)

    def _take_snapshot(self) -> model.Snapshot:
        kwargs = {}
        try:
            from instanceha.engine import decide
            kwargs = decide.snapshot_needs(self.drivers)
        except (ImportError, AttributeError):
            pass
        return self.env.cloud.snapshot(**kwargs)

    def _cycle(self) -> None:
        self.cycles += 1
        try:
            snapshot = self._take_snapshot()
        except exceptions.InstanceHAError as exc:
            # The plan that chose the hosts waiting to be fenced may be
            # stale now (a mass failure may be under way): they wait for a
            # cycle that reads Nova again (see _advance).
            self._fresh = False
            held = tuple(h for h in sorted(self._workflows)
                         if self._workflows[h].state in NEEDS_FRESH_PLAN)
            details = {'held': held} if held else {}
            self._emit(events.SNAPSHOT_FAILED, reason=str(exc), **details)
            return
        self._fresh = True
        self.snapshot = snapshot
        self._watch.read_done(self.env.clock.monotonic(),
                              len(snapshot.services))
        # Fencing keys are matched against every Nova host name: a short
        # key naming two hosts serves neither.
        learn = getattr(self.env.fencer, 'learn_hosts', None)
        if learn is not None:
            learn(s.host for s in snapshot.services)
        now = self.env.clock.now()
        if not self.conf.disabled:
            self._adopt(snapshot)
        # Hosts in suspect or fence_failed are judged again every cycle (a
        # host back up, or a gate now blocking, ends their workflow); the
        # planner knows they were started already (per-cycle cap).
        recovering = {h: wf.state for h, wf in self._workflows.items()}
        plan = self._plan(snapshot, now, recovering)
        if not self.conf.disabled:  # an operator's pause holds new work
            plan = self.pause.apply(plan)
        self.plan = plan
        self._log_plan(plan, blocks=not self.conf.disabled)
        self._report_block(plan.blocked_by if not self.conf.disabled
                           else ())
        if self.conf.disabled:
            self._report_held(snapshot, now, recovering)
            return
        to_recover = {d.host: d for d in plan.to_recover()}
        for host in sorted(to_recover):
            if host not in self._workflows:
                self._workflows[host] = HostWorkflow(
                    host=host, state=S.HEALTHY, entered=now, detected=now,
                    servers=tuple(to_recover[host].servers),
                    recovery=new_recovery_id())
                self._transition(self._workflows[host], S.SUSPECT,
                                 reason='; '.join(to_recover[host].reasons))
        for host in sorted(self._workflows):
            wf = self._workflows[host]
            if wf.state in (S.SUSPECT, S.FENCE_FAILED) and wf.future is None:
                if host not in to_recover:
                    decision = plan.decision(host)
                    why = ('; '.join(decision.reasons) if decision else
                           'no longer listed by Nova')
                    self._transition(wf, S.HEALTHY,
                                     reason='no longer to recover: %s'
                                     % (why or decision.decision.value))
                    continue
                wf.servers = tuple(to_recover[host].servers)
            if (wf.state in (S.WAITING_UP, S.FAILED, S.LEFT_DISABLED)
                    and wf.future is None
                    and snapshot.service(host) is None):
                # Its compute service was deleted: no marker left to keep
                # and nothing to enable. Should it come back with our
                # marker, the marker is adopted again.
                self._transition(wf, S.HEALTHY, reason=(
                    'its nova-compute service is no longer listed by Nova '
                    '(deleted); nothing left to recover'))
                continue
            if wf.state is S.FENCE_FAILED:
                self._emit(events.FENCE_PENDING, host, attempts=wf.attempts,
                           retry_in=int(max(0, wf.retry_at -
                                            self.env.clock.monotonic())),
                           reason=wf.reason)
            elif wf.state is S.WAITING_UP:
                self._check_up_timeout(wf, now)
            elif wf.state is S.FAILED and wf.future is None:
                self._emit(events.HOST_FAILED_PENDING, host,
                           action=operator_action(host))

    @staticmethod
    def _log_plan(plan: plan_mod.Plan, blocks: bool = True) -> None:
        """Healthy hosts at debug; anything else is news (R5: logged).

        A whole-plan block (a mass failure) is a warning, once a poll.
        """
        for d in plan.decisions:
            level = (logging.DEBUG if d.decision is plan_mod.Decision.HEALTHY
                     else logging.INFO)
            LOG.log(level, 'plan: %s', d.line())
        for why in plan.blocked_by if blocks else ():
            LOG.warning('plan blocked by %s', why)

    def _report_block(self, blocked_by: tuple[str, ...]) -> None:
        """An event when a whole-plan block starts, changes or ends.

        The warning above repeats every poll for the log's reader; the
        event is for receivers that page someone, once per change.
        """
        blocked_by = tuple(blocked_by)
        if blocked_by == self._blocked_by:
            return
        self._blocked_by = blocked_by
        if blocked_by:
            self._emit(events.PLAN_BLOCKED, by=blocked_by)
        else:
            self._emit(events.PLAN_UNBLOCKED)

    def _what_if(self, snapshot, now, recovering) -> plan_mod.Plan:
        """The plan without the ``disabled`` gate, to say what is held.

        Only side-effect-free gates are asked (a veto hook would be sent
        a proposal nobody is going to carry out).
        """
        from instanceha.engine import decide
        gates = [g for g in self.drivers.gates if getattr(g, 'pure', False)
                 and not getattr(g, 'detect_only', False)]
        drivers = dataclasses.replace(self.drivers, gates=gates)
        return decide.make_plan(snapshot, drivers, self.conf, now,
                                recovering=recovering)

    def _report_held(self, snapshot, now, recovering) -> None:
        """Detect-only mode (R6): say every poll what is not being done.

        A failed host the plan would recover, and every host whose
        recovery is held where it stopped, gets a ``recovery_held``
        warning; a whole-plan block (mass failure) is logged as usual.
        """
        what_if = self._what_if(snapshot, now, recovering)
        for why in what_if.blocked_by:
            LOG.warning('plan blocked by %s (and [DEFAULT] disabled = '
                        'true)', why)
        for d in what_if.decisions:
            if d.decision is plan_mod.Decision.BLOCKED:
                LOG.info('with [DEFAULT] disabled = false: %s', d.line())
            if d.decision is plan_mod.Decision.RECOVER:
                self._emit(events.RECOVERY_HELD, d.host,
                           note='would recover, but [DEFAULT] disabled = '
                                'true', reason='; '.join(d.reasons))
            elif (d.decision is plan_mod.Decision.RECOVERING and
                  d.recovery_state not in (None, S.FAILED,
                                           S.LEFT_DISABLED)):
                self._emit(events.RECOVERY_HELD, d.host,
                           note='recovery held in %s while [DEFAULT] '
                                'disabled = true' % d.recovery_state.value,
                           state=d.recovery_state.value)

    def _check_up_timeout(self, wf: HostWorkflow,
                          now: datetime.datetime) -> None:
        """Warn every poll about a host that does not come back up.

        It is not power-cycled again: it was fenced and its instances
        moved, so it harms nobody, while a host that boots slowly (or
        whose nova-compute cannot reach the control plane) would be
        killed in the middle of its start. It keeps counting as unhealthy
        for the gates until it is up or an operator takes it over.
        """
        waited = int((now - wf.entered).total_seconds())
        if waited < self.conf.up_timeout:
            return
        self._emit(events.UP_OVERDUE, wf.host, waited=waited,
                   forced_down_cleared=wf.cleared_at is not None,
                   check=UP_OVERDUE_CHECK % {'host': wf.host})

    def _adopt(self, snapshot: model.Snapshot) -> None:
        """Resume hosts whose Nova marker says a recovery is under way."""
        for svc in sorted(snapshot.services, key=lambda s: s.host):
            parsed = (marker_mod.Marker.parse(svc.disabled_reason)
                      if svc.disabled else None)
            wf = self._workflows.get(svc.host)
            if wf is not None:
                self._handed_back(wf, svc, parsed)
                continue
            if parsed is None or parsed.state not in RESUMABLE:
                continue
            state, when = parsed.state, parsed.when
            wf = HostWorkflow(host=svc.host, state=state, entered=when,
                              detected=when, resumed=True,
                              servers=tuple(snapshot.servers_on(svc.host)),
                              spare=parsed.spare, kdump=parsed.kdump,
                              since=(parsed.fenced_at or when) -
                              MIGRATION_SLACK,
                              recovery=parsed.recovery or new_recovery_id())
            if wf.spare and state in (S.FENCED, S.EVACUATING):
                self.drivers.reservation.adopt(svc.host, wf.spare)
            else:
                wf.spare = None  # a stale name: released or in service
            self._workflows[svc.host] = wf
            strategy = self.drivers.evacuation
            if state not in (S.FENCED, S.EVACUATING) and not strategy.tracks:
                # Fire-and-forget moved on before the rebuilds ended; the
                # previous run's aftercare is lost: watch them again so
                # they are unlocked and their power state restored.
                self._aftercare[svc.host] = dataclasses.replace(
                    wf, job=strategy.begin(svc.host, [], since=wf.since))
            self._emit(events.HOST_RESUMED, svc.host, state=state.value)

    def _handed_back(self, wf: HostWorkflow, svc: model.Service,
                     parsed) -> None:
        """Follow an operator's ``instanceha-manage hosts clear``.

        Only hosts waiting for an operator (failed, left_disabled) or to
        come up (waiting_up) are handed back; the marker we wrote is gone
        or replaced, so the table says where the host goes: waiting_up
        (``hosts clear``: enabled once Nova reports it up) or healthy
        (``--enable``, or disabled with the operator's own reason, which
        takes it out of our hands).
        """
        if wf.future is not None:
            return
        why = operators_reason(svc)
        if why is not None and wf.state not in (
                NEEDS_FRESH_PLAN | {S.FAILED, S.LEFT_DISABLED,
                                    S.WAITING_UP}):
            self._hand_over(wf, why)
            return
        if wf.state not in (S.FAILED, S.LEFT_DISABLED, S.WAITING_UP):
            return
        marker = parsed.state if parsed else None
        if marker is S.WAITING_UP:
            if wf.state is not S.WAITING_UP:
                self._transition(wf, S.WAITING_UP,
                                 reason='cleared by operator')
                wf.cleared_at = wf.up_after = None
            return
        if marker is wf.state:
            return
        if marker is not None and marker in RESUMABLE:
            why = 'marker changed to %s by someone else' % marker.value
        elif svc.disabled:
            why = 'disabled by an operator: %s' % (
                svc.disabled_reason or 'no reason')
        else:
            why = 'enabled by an operator'
        self._transition(wf, S.HEALTHY, reason=why[:200])

    def _hand_over(self, wf: HostWorkflow, why: str) -> None:
        """An operator took the host: our workflow ends where it stood.

        Nothing more is done to the host (no marker, no power-on, no
        enable). Rebuilds already running are watched to their end so
        that their instances are unlocked; nothing new is started.
        """
        if wf.job is not None:
            wf.job.stop('left to the operator: %s' % why)
            if not wf.job.progress().settled:
                self._aftercare[wf.host] = dataclasses.replace(
                    wf, future=None, on_done=None)
            wf.job = None
        if wf.spare:
            self.drivers.reservation.forget(wf.spare)
        self._transition(wf, S.HEALTHY, reason=(
            'taken over by an operator (%s); instanceha leaves it as it is'
            % why)[:250])

    # -- advancing workflows -------------------------------------------------

    def _advance(self) -> None:
        now = self.env.clock.monotonic()
        busy = sum(1 for wf in self._workflows.values()
                   if wf.state in BUSY_STATES)
        for host in sorted(self._workflows):
            wf = self._workflows.get(host)
            if wf is None or wf.future is not None or now < wf.retry_at:
                continue
            if wf.state in NEEDS_FRESH_PLAN and not self._fresh:
                continue  # judged on data Nova could not refresh
            if wf.state is S.SUSPECT:
                if busy >= self.conf.workers:
                    continue
                busy += 1
            self._step(wf)
        for host in sorted(self._aftercare):
            wf = self._aftercare[host]
            if wf.future is None:
                self._step_evacuation(wf, aftercare=True)

    def _step(self, wf: HostWorkflow) -> None:
        handler = {
            S.SUSPECT: self._step_suspect,
            S.FENCING: self._step_fencing,
            S.FENCE_FAILED: self._step_fence_failed,
            S.FENCED: self._step_fenced,
            S.EVACUATING: self._step_evacuation,
            S.EVACUATED: self._step_evacuated,
            S.POWERING_ON: self._step_powering_on,
            S.WAITING_UP: self._step_waiting_up,
            S.ENABLING: self._step_enabling,
        }.get(wf.state)
        if handler is not None:
            handler(wf)

    def _step_suspect(self, wf: HostWorkflow) -> None:
        self._transition(wf, S.FENCING)
        self._step_fencing(wf)

    def _step_fence_failed(self, wf: HostWorkflow) -> None:
        self._transition(wf, S.FENCING, attempt=wf.attempts + 1)
        self._step_fencing(wf)

    def _step_fencing(self, wf: HostWorkflow) -> None:
        clock = self.env.clock
        if self._kdump_on() and wf.attempts == 0:
            if wf.kdump_deadline is None:
                timeout = self._kdump_opt('kdump_timeout', 30)
                wf.kdump_deadline = clock.monotonic() + timeout
                self._emit(events.KDUMP_WAIT, wf.host, timeout=timeout)
            # Only a dump in progress proves the host runs nothing: its
            # messages must still arrive now (the last one within one
            # message interval). A dump that ended may have been followed
            # by a reboot.
            last = self.env.kdump.last_message(wf.host)
            live = datetime.timedelta(
                seconds=self._kdump_opt('message_interval', 10))
            if last is not None and clock.now() - last <= live:
                self._fenced(wf, ports.FenceResult(
                    host=wf.host, level=0, devices=(), kdump=True))
                return
            if clock.monotonic() < wf.kdump_deadline:
                return
        fencer = self.env.fencer
        host = wf.host

        def fence():
            if not fencer.configured(host):
                raise exceptions.FencingError(
                    'host %s has no fencing configuration; it will not be '
                    'evacuated (R9)' % host)
            if not self.env.coordinator.is_leader():
                raise exceptions.CoordinationError('not the leader')
            return fencer.fence(host)

        def done(result):
            self._fenced(wf, result)

        self._submit(wf, self._catching(fence, exceptions.FencingError),
                     done)

    @staticmethod
    def _catching(fn: Callable, *errors) -> Callable:
        """Wrap ``fn`` so that ``errors`` come back as results."""
        def wrapped():
            try:
                return fn()
            except errors as exc:
                return exc
        return wrapped

    def _fenced(self, wf: HostWorkflow, result) -> None:
        if isinstance(result, Exception):
            wf.attempts += 1
            wf.reason = str(result)
            wait = self._backoff(wf.attempts)
            self._transition(wf, S.FENCE_FAILED, reason=wf.reason,
                             attempts=wf.attempts, retry_in=int(wait))
            wf.retry_at = self.env.clock.monotonic() + wait
            return
        wf.kdump = bool(result.kdump)
        wf.fence_level = result.level
        wf.proven_at = self.env.clock.monotonic()
        details = {'kdump': True} if wf.kdump else {
            'level': result.level, 'devices': tuple(result.devices)}
        self._transition(wf, S.FENCED, **details)
        if not self.conf.disabled:  # else held here (detect-only mode)
            self._step_fenced(wf)

    def _marker(self, wf: HostWorkflow, state: HostState,
                note: str = '', spare=_SAME) -> marker_mod.Marker:
        """The marker of ``wf`` in ``state``: what a resumed copy needs.

        ``spare``: the spare to name (default: the workflow's).
        """
        if state is S.FAILED:
            # An operator's note only (the workflow ends here).
            return marker_mod.Marker(state=state, when=self.env.clock.now(),
                                     recovery=wf.recovery or None,
                                     note=note[:200])
        return marker_mod.Marker(
            state=state, when=self.env.clock.now(),
            fenced_at=(wf.since + MIGRATION_SLACK) if wf.since else None,
            spare=wf.spare if spare is _SAME else spare, kdump=wf.kdump,
            recovery=wf.recovery or None,
            note=note)

    def _step_fenced(self, wf: HostWorkflow) -> None:
        """Force down + disable with a marker (R10), then claim a spare."""
        if not self.env.coordinator.is_leader():
            return
        snapshot = self.snapshot
        reservation = self.drivers.reservation
        if wf.since is None:
            wf.since = self.env.clock.now() - MIGRATION_SLACK

        def mark():
            # The claim is in Nova (the fenced marker) before the spare is
            # enabled: a copy resuming in between enables the same spare,
            # none is ever lost from the pool.
            claimed = wf.spare or reservation.claim(wf.host, snapshot)
            self._mark(wf, S.FENCED, spare=claimed, forced_down=True)
            if not wf.spare_enabled:
                wf.spare = reservation.reserve(self.env, wf.host, snapshot)
                wf.spare_enabled = True
            spare = wf.spare
            self._mark(wf, S.EVACUATING)
            return spare

        def done(spare):
            if spare:
                self._emit(events.SPARE_CLAIMED, wf.host, spare=spare)
            self._transition(wf, S.EVACUATING, forced_down=True,
                             spare=spare)

        self._submit(wf, mark, done)

    def _budget(self, wf: HostWorkflow | None = None) -> int:
        """How many evacuations the next step of ``wf`` may start.

        Tracked strategies count the rebuilds they are watching (the
        seed's WORKERS: instances evacuated at the same time);
        fire-and-forget does not wait for rebuilds, so for it the cap only
        bounds the calls started per tick. The cap is shared fairly: each
        host being evacuated may hold at most its share of it (so the
        first host in name order cannot starve the others while it
        retries).
        """
        tracks = self.drivers.evacuation.tracks
        cap = evacuation_conf.max_in_flight(self.conf)
        used = 0
        for other in self._all():
            running = other.job.in_flight if (other.job and tracks) else 0
            used += running + (other.budget if other.future is not None
                               else 0)
        free = max(0, cap - used)
        if wf is None:
            return free
        sharing = [w for w in self._workflows.values()
                   if w.state is S.EVACUATING and (
                       w.job is None or w.job.wants_more())]
        if len(sharing) <= 1:
            return free
        share = -(-cap // len(sharing))
        own = wf.job.in_flight if (wf.job and tracks) else 0
        return max(0, min(free, share - own))

    def _step_evacuation(self, wf: HostWorkflow,
                         aftercare: bool = False) -> None:
        if not self.env.coordinator.is_leader():
            return
        strategy = self.drivers.evacuation
        if wf.job is None:
            servers = list(wf.servers)
            if wf.resumed and self.plan is not None:
                decision = self.plan.decision(wf.host)
                if decision is not None:
                    servers = list(decision.servers)
            wf.job = strategy.begin(
                wf.host, servers,
                target=self.drivers.reservation.evacuation_target(wf.spare),
                since=wf.since)
        budget = 0 if aftercare else self._budget(wf)
        wf.budget = budget
        ctx = evac_base.StepContext(
            env=self.env, snapshot=self.snapshot, budget=budget,
            prove_off=None if aftercare else self._prover(wf),
            proven_at=wf.proven_at)
        job = wf.job

        def done(progress):
            wf.progress = progress
            if aftercare:
                if progress.settled:
                    self._aftercare.pop(wf.host, None)
                return
            if progress.unproven is not None:
                self._unproven(wf, progress.unproven)
                return
            if progress.complete and not self.conf.disabled:
                self._evacuation_complete(wf, progress)

        # Aftercare only touches instances; the host itself has moved on
        # and its own steps hold the host lock.
        self._submit(wf, lambda: job.step(ctx), done, lock=not aftercare)

    def _prover(self, wf: HostWorkflow) -> Callable[[], ports.PowerReading]:
        """Proof, read now, that ``wf.host`` runs nothing (job thread).

        A host found crash-dumping counts while its fence_kdump messages
        are current (one repeat interval and some slack); otherwise its
        fencing devices are read, level by level.
        """
        host, kdump = wf.host, wf.kdump
        window = datetime.timedelta(seconds=min(
            KDUMP_PROOF_WINDOW, self._kdump_opt('message_timeout', 30)))

        def prove() -> ports.PowerReading:
            if kdump and self.env.kdump is not None:
                last = self.env.kdump.last_message(host)
                if last is not None and self.env.clock.now() - last <= window:
                    return ports.PowerReading(host=host, off=True,
                                              detail='crash-dumping')
            return self.env.fencer.power_state(host)
        return prove

    def _unproven(self, wf: HostWorkflow,
                  reading: ports.PowerReading) -> None:
        """No proof the host is off now: fence it again, or wait.

        Devices reporting it on mean someone powered it on (or its dump
        ended and it rebooted): its evacuations stop and it is fenced
        again before any other instance leaves it. A device that cannot
        be read proves nothing either way: the next step reads again.
        """
        if reading.on:
            wf.kdump = False
            wf.kdump_deadline = self.env.clock.monotonic()
            wf.proven_at = None
            self._transition(wf, S.FENCING, reason=(
                'powered on again (%s): fenced again before any further '
                'evacuation' % reading.detail)[:250])
            return
        wait = min(STEP_RETRY * 2 ** wf.step_errors, float(self.conf.poll))
        wf.step_errors += 1
        wf.retry_at = self.env.clock.monotonic() + wait
        self._emit(events.POWER_UNPROVEN, wf.host,
                   reason=reading.detail[:200], retry_in=int(wait))

    def _evacuation_complete(self, wf: HostWorkflow,
                             progress: evac_base.Progress) -> None:
        strategy = self.drivers.evacuation
        failed = dict(sorted(progress.failed.items()))
        forgive = (self.conf.force_enable and not strategy.tracks)
        give_up = bool(failed) and not forgive
        reservation = self.drivers.reservation
        snapshot = self.snapshot
        spare = wf.spare
        release = (spare is not None and spare not in progress.landed_on)
        if give_up:
            note = ('%d instance(s) not evacuated; fix them, then run '
                    '"instanceha-manage hosts clear %s"; ids: %s' % (
                        len(failed), wf.host, ','.join(failed)))
        else:
            note = ''

        def finish():
            if release:
                reservation.release(self.env, wf.host, spare, snapshot)
            elif spare:
                reservation.forget(spare)
            if give_up:
                self._mark(wf, S.FAILED, note)
            else:
                # Released or kept in service: no longer ours to claim.
                self._mark(wf, S.EVACUATED, spare=None)

        def done(_):
            wf.spare = None
            if release:
                self._emit(events.SPARE_RELEASED, wf.host, spare=spare)
            if not progress.settled:
                self._aftercare[wf.host] = dataclasses.replace(
                    wf, future=None, on_done=None)
            wf.job = None
            if give_up:
                self._transition(wf, S.FAILED, failed=tuple(failed),
                                 action=operator_action(wf.host))
                for server_id, why in failed.items():
                    LOG.error('host %s: instance %s not evacuated: %s',
                              wf.host, server_id, why)
                LOG.error(OPERATOR_STEPS, {'host': wf.host})
            else:
                self._transition(wf, S.EVACUATED,
                                 evacuated=len(progress.succeeded),
                                 failed=len(failed))

        self._submit(wf, finish, done)

    def _step_evacuated(self, wf: HostWorkflow) -> None:
        if not self.env.coordinator.is_leader():
            return
        if self.conf.leave_disabled:
            self._submit(wf, lambda: self._mark(wf, S.LEFT_DISABLED),
                         lambda _: self._transition(wf, S.LEFT_DISABLED))
            return
        if wf.kdump:
            # A crash-dumping host reboots by itself; never power-cycle it
            # (the dump would be lost). Wait until it stops sending.
            last = self.env.kdump.last_message(wf.host) if self.env.kdump \
                else None
            quiet = datetime.timedelta(
                seconds=self._kdump_opt('message_timeout', 30))
            if last is not None and self.env.clock.now() - last < quiet:
                return
            self._submit(wf, lambda: self._mark(wf, S.WAITING_UP),
                         lambda _: self._transition(wf, S.WAITING_UP,
                                                    kdump=True))
            return
        self._submit(wf, lambda: self._mark(wf, S.POWERING_ON),
                     lambda _: self._transition(wf, S.POWERING_ON))

    def _step_powering_on(self, wf: HostWorkflow) -> None:
        if not self.env.coordinator.is_leader():
            return
        fencer = self.env.fencer

        def power_on():
            self._ours(wf)
            result = fencer.unfence(wf.host)
            self._mark(wf, S.WAITING_UP)
            return result

        def done(result):
            if isinstance(result, Exception):
                wf.attempts += 1
                wf.reason = str(result)
                if wf.attempts > self.conf.power_on_retries:
                    self._fail(wf, 'power on failed %d time(s): %s' % (
                        wf.attempts, str(result)[:80]))
                    return
                wf.retry_at = self.env.clock.monotonic() + self._backoff(
                    wf.attempts)
                self._emit(events.STEP_ERROR, wf.host,
                           state=wf.state.value, reason=wf.reason)
                return
            self._transition(wf, S.WAITING_UP, level=result.level)

        self._submit(wf, self._catching(power_on, exceptions.FencingError),
                     done)

    def _fail(self, wf: HostWorkflow, why: str) -> None:
        action = 'power %s on and check it, then run "instanceha-manage ' \
                 'hosts clear %s"' % (wf.host, wf.host)
        self._submit(wf, lambda: self._mark(wf, S.FAILED,
                                            ('%s; %s' % (why, action))[:200]),
                     lambda _: self._transition(wf, S.FAILED, reason=why,
                                                action=action))

    def _step_waiting_up(self, wf: HostWorkflow) -> None:
        """Clear forced_down, then wait until Nova reports the host up.

        Nova reports a forced-down service down whatever its heartbeats,
        and refuses to clear forced_down while ``done`` evacuation records
        remain, i.e. until the host's compute has started and cleaned up:
        that refusal is expected and simply retried.
        """
        svc = self.snapshot.service(wf.host) if self.snapshot else None
        if svc is None or not self.env.coordinator.is_leader():
            return
        if wf.up_after is None:
            wf.up_after = wf.entered
        if wf.cleared_at is None:
            # We forced it down ourselves: clear it now (idempotent, also
            # after a restart), whatever an older snapshot says.
            def clear():
                try:
                    self._mark(wf, S.WAITING_UP,
                               forced_down=False)
                except exceptions.CloudError as exc:
                    return exc
                return None

            def done(exc):
                if exc is None:
                    wf.cleared_at = self.env.clock.now()
                    self._emit(events.FORCED_DOWN_CLEARED, wf.host)
                else:
                    LOG.info('host %s: forced_down not cleared yet: %s',
                             wf.host, exc)
                    wf.retry_at = (self.env.clock.monotonic() +
                                   min(self.conf.poll, STEP_RETRY))

            self._submit(wf, clear, done)
            return
        if self.snapshot.taken_at < wf.cleared_at:
            return  # read before the clear: it proves nothing
        if svc.forced_down:
            wf.cleared_at = None  # forced down again since: clear again
            return
        # Only a heartbeat newer than the power-on proves the host is back
        # (R11): an older 'up' is the dead host's last word.
        if svc.state != model.UP or (
                svc.updated_at is not None and svc.updated_at <=
                self.snapshot.nova_now(wf.up_after)):  # Nova's clock
            return
        self._transition(wf, S.ENABLING)
        self._step_enabling(wf)

    def _step_enabling(self, wf: HostWorkflow) -> None:
        if not self.env.coordinator.is_leader():
            return

        def enable():
            svc = self._ours(wf)
            if marker_mod.Marker.parse(svc.disabled_reason) is None:
                # Enabled meanwhile (hosts clear --enable): nothing to do.
                return
            self.env.cloud.update_service(svc, status=model.ENABLED,
                                          forced_down=False)

        self._submit(wf, enable, lambda _: self._transition(
            wf, S.HEALTHY, enabled=True))
