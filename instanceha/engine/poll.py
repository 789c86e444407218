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

"""The poll half of the recovery engine: snapshot, adopt, plan, start.

Every ``poll`` seconds the engine reads a snapshot of the cloud, adopts
hosts whose Nova marker says a recovery is under way (so a restarted
service or a new leader resumes exactly where the last one stopped),
follows an operator's hand-back, asks
:func:`instanceha.engine.decide.make_plan` which failed hosts to recover,
starts their workflows, and says every poll what waits for whom
(reminders, detect-only reports).
"""

import dataclasses
import datetime
import logging

from instanceha.engine import events
from instanceha.engine import handback
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import watch
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import LOG
from instanceha.engine.workflow import S
from instanceha import exceptions


class Poll(handback.HandBack):
    """The cycle: snapshot, adoption, hand-back, plan, new workflows."""

    def _detection_opt(self, name: str) -> float:
        """A ``[detection]`` number; 0 when the conf has no such option.

        (A conf without ``[detection]`` is a bare one of a test: the
        service's options always have them, with their defaults.)
        """
        try:
            return float(getattr(self.conf.detection, name) or 0.0)
        except (AttributeError, KeyError, TypeError,
                ValueError):  # a conf without the option: the default
            return 0.0

    def _services_interval(self) -> float:
        return self._detection_opt('services_interval')

    def _nova_down_time(self) -> float:
        return self._detection_opt('nova_service_down_time')

    def _services_tell_all(self) -> bool:
        """Whether the compute services alone show every failure.

        True when every configured detector judges from Nova's services
        only; another witness (heartbeats, kdump) may see a failure Nova
        does not, so then the full picture is read every poll as well.
        """
        return all(d.judges_services_only for d in self.drivers.detectors)

    def _read_services(self, mono: float) -> None:
        """Read the services alone when due (see :mod:`.watch`).

        Done at the start of the tick, before job results are applied:
        the steps those results submit write markers on the strength of
        this read (the operator's record, see :meth:`_current_service`),
        so it must be newer than anything they saw.
        """
        self._watched = None
        w = self._watch
        if (self.snapshot is None or w.seen is None or
                not w.due(mono, self._read_need())):
            return
        writes = self._writes()
        snap = w.read(self.env.cloud, mono)
        self._watched = mono, snap
        if snap is None:
            return  # the full read reports Nova's trouble
        self._read_done(snap, writes, mono)
        self._services_read = (mono, snap)
        self.snapshot = dataclasses.replace(
            self.snapshot, services=snap.services,
            taken_at=snap.taken_at, clock_skew=snap.clock_skew)
        self._taken_over(snap)

    def _attention(self) -> dict[str, tuple]:
        """What the services show of hosts not ours (see watch.attention).

        Also says whether all is quiet: nothing shown, nothing in our
        hands, and the services alone show every failure.
        """
        seen = watch.attention(self.snapshot, self.env.clock.now(),
                               self.conf.delta, skip=self._workflows)
        self._watch.quiet = (not seen and not self._workflows and
                             self._services_tell_all())
        return seen

    def _read_need(self) -> str:
        """What the services are needed for now (see :mod:`.watch`).

        Always :data:`watch.NOW` (every interval) when ``[detection]
        nova_service_down_time`` is 0.
        """
        if self._watch.down is None:
            return watch.NOW
        if self._writes() != self._writes_read:
            return watch.NOW  # a write of ours the last read may not show
        need = watch.CALM
        for wf in self._workflows.values():
            if self._power_on_near(wf):
                return watch.NOW
            if wf.state in workflow.WATCHED:
                need = watch.WAIT
        return need

    def _power_on_near(self, wf: HostWorkflow) -> bool:
        """Whether ``wf``'s power-on waits for a read newer than its step.

        See :meth:`Steps._step_powering_on`: evacuated (its rebuilds
        ended, no crash dump to wait for) or powering on, and no read
        since. One read at the tick it comes, not a wait of
        :data:`watch.WAIT_INTERVAL`.
        """
        if self._rebuilding(wf.host):
            return False
        if wf.state is S.EVACUATED:
            return not wf.durable.kdump
        return wf.state is S.POWERING_ON and (
            self.snapshot is None or self.snapshot.taken_at < max(
                wf.entered, wf.local.failed_at or wf.entered))

    def _writes(self) -> int:
        """Our service writes so far (the guarded cloud counts them)."""
        return self.env.cloud.service_writes

    def _read_done(self, snap: model.Snapshot, writes: int,
                   mono: float) -> None:
        """Schedule the next services read (see :mod:`.watch`).

        ``writes``: our service writes counted when the read began at
        ``mono``.
        """
        self._writes_read = writes
        self._watch.read_done(mono, snap, self.env.clock.now(),
                              self.conf.delta, self.conf.poll)

    def _full_read_due(self, mono: float, answered: bool) -> bool:
        """Is a full read needed now (after :meth:`_read_services`)?

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
        if self._watched is not None and self._watched[0] == mono:
            if self._watched[1] is None:
                return poll_due  # the full read reports Nova's trouble
            seen = self._attention()
            w.news = seen != w.seen
            if w.news and self._fresh:
                return True
        if poll_due and w.quiet:
            # A poll's worth of reading, answered by the services alone:
            # a good read of Nova for readiness, like a full cycle.
            self._next_poll = mono + self.conf.poll
            self.quiet_polls += 1
            return False
        return poll_due

    def _plan(self, snapshot, now, recovering):
        if self._planner is not None:
            return self._planner(snapshot, now, recovering)
        from instanceha.engine import decide
        return decide.make_plan(snapshot, self.drivers, self.conf, now,
                                recovering=recovering,
                                submit=self.env.executor.submit)

    def _take_snapshot(self, services: model.Snapshot | None
                       ) -> model.Snapshot:
        kwargs = {}
        try:
            from instanceha.engine import decide
            kwargs = decide.snapshot_needs(self.drivers)
        except (ImportError, AttributeError):
            pass
        # Servers only of the hosts being decided (see engine.reads): the
        # workflows that still need their instances listed, and whatever
        # the services of this very read show unhealthy.
        listed = {h for h, wf in self._workflows.items()
                  if self._needs_servers(wf)}
        return self._reads.snapshot(
            self.env.cloud, extra=listed,
            skip=set(self._workflows) - listed,
            clock_skew=self.snapshot.clock_skew if self.snapshot else None,
            services=services, **kwargs)

    def _needs_servers(self, wf: HostWorkflow) -> bool:
        """Whether a full read lists the servers of ``wf``'s host again.

        A host is read once when it is decided; its workflow keeps what
        was listed then (``wf.servers``) and its evacuation job learns
        the rest from Nova's migration records. Only a host judged again
        every cycle (suspect, fence_failed) and a resumed workflow whose
        job has not begun (it starts from the plan's listing) need them
        listed each time.
        """
        if wf.state not in workflow.NEEDS_SERVERS:
            return False
        return (wf.state in workflow.NEEDS_FRESH_PLAN or
                self._awaits_fence(wf) or
                (wf.resumed and wf.job is None))

    def _cycle(self) -> None:
        """One poll: read Nova, plan, start and review the workflows."""
        self.cycles += 1
        snapshot = self._read_cycle()
        if snapshot is None:
            return
        now = self.env.clock.now()
        if not self.conf.disabled:
            self._adopt(snapshot)
        # Hosts not fenced yet (suspect, fencing with no power-off under
        # way: a kdump wait, fence_failed) are judged again every cycle (a
        # host back up, or a gate now blocking, ends their workflow); the
        # planner knows they were started already (per-cycle cap).
        # (A kdump wait is judged like a suspect host: see awaits_fence.)
        recovering = {h: S.SUSPECT if self._awaits_fence(wf) and
                      wf.state is S.FENCING else wf.state
                      for h, wf in self._workflows.items()}
        plan = self._plan(snapshot, now, recovering)
        if not self.conf.disabled:  # an operator's pause holds new work
            plan = self.pause.apply(plan, snapshot.clock_skew)
        self.plan = plan
        self._log_plan(plan, blocks=not self.conf.disabled)
        self._report_block(plan.blocked_by if not self.conf.disabled
                           else ())
        if self.conf.disabled:
            self._report_held(snapshot, now, recovering)
            return
        self._process.cycle(snapshot, plan, now,
                            paused=self.pause.active is not None)
        to_recover = {d.host: d for d in plan.to_recover()}
        self._start_workflows(to_recover, now)
        for host in sorted(self._workflows):
            self._review(self._workflows[host], snapshot, plan, to_recover,
                         now)

    def _read_cycle(self) -> model.Snapshot | None:
        """The poll's snapshot of Nova; None when Nova did not answer."""
        # The services read of this very tick is used instead of listing
        # them again; not an earlier one, however young: the job results
        # applied in this tick may have written markers after it.
        fresh = self._watched
        if fresh is not None and fresh[1] is None:
            fresh = None  # Nova did not answer it
        writes = self._writes()
        try:
            snapshot = self._take_snapshot(fresh[1] if fresh else None)
        except exceptions.InstanceHAError as exc:
            # The plan that chose the hosts waiting to be fenced may be
            # stale now (a mass failure may be under way): they wait for a
            # cycle that reads Nova again (see _advance).
            self._fresh = False
            held = tuple(h for h, wf in sorted(self._workflows.items())
                         if self._awaits_fence(wf))
            details = {'held': held} if held else {}
            self._emit(events.SNAPSHOT_FAILED, reason=str(exc), **details)
            return None
        self._fresh = True
        self.snapshot = snapshot
        if fresh is None:
            self._services_read = (self.env.clock.monotonic(), snapshot)
            self._read_done(snapshot, writes, self._services_read[0])
        else:
            self._services_read = (fresh[0], snapshot)
        # Fencing keys are matched against every Nova host name: a short
        # key naming two hosts serves neither.
        self.env.fencer.learn_hosts(s.host for s in snapshot.services)
        return snapshot

    def _start_workflows(self, to_recover: dict, now) -> None:
        """A workflow, in suspect, for each host to recover that has none."""
        for host in sorted(to_recover):
            if host not in self._workflows:
                self._begin_record(HostWorkflow(
                    host=host, state=S.HEALTHY, entered=now, detected=now,
                    servers=tuple(to_recover[host].servers),
                    durable=workflow.Durable(
                        recovery=workflow.new_recovery_id())))
                self._transition(self._workflows[host], S.SUSPECT,
                                 reason='; '.join(to_recover[host].reasons))

    def _review(self, wf: HostWorkflow, snapshot: model.Snapshot, plan,
                to_recover: dict, now) -> None:
        """What this poll says of a workflow: ended, pending, overdue."""
        host = wf.host
        if self._awaits_fence(wf):
            if host not in to_recover:
                decision = plan.decision(host)
                why = ('; '.join(decision.reasons) if decision else
                       'no longer listed by Nova')
                self._transition(wf, S.HEALTHY,
                                 reason='no longer to recover: %s'
                                 % (why or decision.decision.value))
                return
            wf.servers = tuple(to_recover[host].servers)
        if (wf.state in (S.WAITING_UP, S.FAILED, S.LEFT_DISABLED)
                and not self._running(host)
                and snapshot.service(host) is None):
            # Its compute service was deleted: no marker left to keep
            # and nothing to enable. Should it come back with our
            # marker, the marker is adopted again.
            self._transition(wf, S.HEALTHY, reason=(
                'its nova-compute service is no longer listed by Nova '
                '(deleted); nothing left to recover'))
            return
        retry_at = self._retry_at(wf)
        if (wf.state is S.FENCE_FAILED
                and retry_at > self.env.clock.monotonic()):
            self._emit(events.FENCE_PENDING, host,
                       attempts=wf.local.attempts,
                       retry_in=int(max(0, retry_at -
                                        self.env.clock.monotonic())),
                       reason=wf.local.reason)
        elif wf.state is S.WAITING_UP:
            self._check_up_timeout(wf, now)
        elif wf.state is S.FAILED and not self._running(host):
            self._emit(events.HOST_FAILED_PENDING, host,
                       action=workflow.operator_action(host))

    @staticmethod
    def _log_plan(plan: plan_mod.Plan, blocks: bool = True) -> None:
        """Healthy hosts at debug; anything else is news (logged).

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
        gates = [g for g in self.drivers.gates
                 if g.pure and not g.detect_only]
        drivers = dataclasses.replace(self.drivers, gates=gates)
        return decide.make_plan(snapshot, drivers, self.conf, now,
                                recovering=recovering)

    def _report_held(self, snapshot, now, recovering) -> None:
        """Detect-only mode: say every poll what is not being done.

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
                   check=workflow.UP_OVERDUE_CHECK % {'host': wf.host})
