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

"""Whose a host is: markers adopted, hosts an operator took or handed back.

A restarted copy or a new leader resumes every host whose Nova marker
says a recovery of ours is under way (:meth:`HandBack._adopt`); a host an
operator disabled with a reason of their own leaves our hands from
whatever state (:meth:`HandBack._hand_over`), at the services read that
shows it (:meth:`HandBack._taken_over`); a host an operator handed back
(our marker cleared, or enabled) ends its workflow
(:meth:`HandBack._handed_back`).
"""

from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import tick
from instanceha.engine import unforce
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import S

#: The states of a recovery whose host's instances were moved: an
#: operator who takes the host from one of them gets it back into service
#: without our forced_down (:mod:`instanceha.engine.unforce`).
AFTER_EVACUATION = frozenset({S.EVACUATED, S.POWERING_ON, S.WAITING_UP,
                              S.ENABLING, S.FAILED, S.LEFT_DISABLED})


class HandBack(tick.Plumbing):
    """Adoption and hand-over of hosts (a part of the poll half)."""

    def _taken_over(self, snap: model.Snapshot) -> None:
        """Hand over at once the hosts an operator took since the poll.

        The services read shows an operator's reason within a second;
        waiting for the next full read would let the steps taken in
        between go on (a fence retried, new evacuations, a power-on) on
        a host that is no longer ours. A host whose job is running is
        handed over at the read after it ended.
        """
        for host in sorted(self._workflows):
            wf = self._workflows.get(host)
            svc = snap.service(host)
            why = workflow.operators_reason(svc)
            if wf is None or why is None or self._running(host):
                continue
            if wf.state in workflow.NEEDS_FRESH_PLAN:
                self._hand_over(wf, why)  # not fenced (again)
            else:
                self._handed_back(wf, svc, reasons.of_service(svc).marker)

    def _adopt(self, snapshot: model.Snapshot) -> None:
        """Resume hosts whose Nova marker says a recovery is under way."""
        for svc in sorted(snapshot.services, key=lambda s: s.host):
            parsed = reasons.of_disabled(svc).marker
            wf = self._workflows.get(svc.host)
            if wf is not None:
                self._handed_back(wf, svc, parsed)
                continue
            if parsed is None or parsed.state not in workflow.RESUMABLE:
                continue
            # The marker's times on our clock as it runs now (they are on
            # Nova's: ours may have been stepped since they were written).
            skew = snapshot.clock_skew or 0.0
            state = parsed.state
            when = min(parsed.ours(parsed.when, skew), self.env.clock.now())
            since = (parsed.ours(parsed.fenced_at, skew) or
                     when) - workflow.MIGRATION_SLACK
            # A spare named by a later marker is a stale name (released
            # or in service): see Durable.adopted.
            durable = workflow.Durable.adopted(
                parsed, svc.disabled_reason,
                fenced_at=workflow.fence_time(since, skew),
                recovery=parsed.recovery or workflow.new_recovery_id())
            wf = HostWorkflow(host=svc.host, state=state, entered=when,
                              detected=when, resumed=True, durable=durable,
                              servers=tuple(snapshot.servers_on(svc.host)),
                              since=since, since_skew=skew)
            if durable.spare:
                self.drivers.reservation.adopt(svc.host, durable.spare)
            self._begin_record(wf)
            strategy = self.drivers.evacuation
            if state not in (S.FENCED, S.EVACUATING) and not strategy.tracks:
                # Fire-and-forget moved on before the rebuilds ended; the
                # previous run's aftercare is lost: watch them again so
                # they are unlocked and their power state restored.
                job = strategy.begin(svc.host, [], since=wf.since)
                job.since_skew = wf.since_skew
                self._aftercare.watch(wf, job=job)
            self._emit(events.HOST_RESUMED, svc.host, state=state.value)

    def _handed_back(self, wf: HostWorkflow, svc: model.Service,
                     parsed) -> None:
        """Follow an operator's ``instanceha-manage hosts clear``.

        Only hosts waiting for an operator (failed, left_disabled) or to
        come up (waiting_up) are handed back; the marker we wrote (or
        left, :attr:`workflow.Durable.marked`) is gone or replaced, so the
        table says where the host goes: waiting_up
        (``hosts clear``: enabled once Nova reports it up) or healthy
        (``--enable``, or disabled with the operator's own reason, which
        takes it out of our hands).
        """
        if self._running(wf.host):
            return
        why = workflow.operators_reason(svc)
        if why is not None and wf.state not in (
                workflow.NEEDS_FRESH_PLAN | {S.FAILED, S.LEFT_DISABLED,
                                             S.WAITING_UP}):
            self._hand_over(wf, why)
            return
        if wf.state not in (S.FAILED, S.LEFT_DISABLED, S.WAITING_UP):
            return
        if (svc.disabled and wf.durable.marked is not None
                and svc.disabled_reason == wf.durable.marked):
            # Our own marker, as we left it: waiting up after our
            # power-on, Nova keeps the one written before it.
            return
        marker = parsed.state if parsed else None
        if marker is S.WAITING_UP:
            if wf.state is not S.WAITING_UP:
                self._transition(wf, S.WAITING_UP,
                                 reason='cleared by operator')
            return
        if marker is wf.state:
            return
        if marker is not None and marker in workflow.RESUMABLE:
            why = 'marker changed to %s by someone else' % marker.value
        elif svc.disabled:
            why = 'disabled by an operator: %s' % (
                svc.disabled_reason or 'no reason')
        else:
            why = 'enabled by an operator'
        self._transition(wf, S.HEALTHY, reason=why[:200])
        if marker is None:
            self._unforce_after(wf)

    def _hand_over(self, wf: HostWorkflow, why: str,
                   errors: int | None = None) -> None:
        """An operator took the host: our workflow ends where it stood.

        Nothing more is done to the host (no marker, no power-on, no
        enable). Rebuilds already running are watched to their end so
        that their instances are unlocked; nothing new is started.
        ``errors``: its steps failed in a row (default: the runtime's
        count).
        """
        if errors is None:
            errors = self._errors(wf)
        if wf.job is not None and wf.local.unmarked:
            wf.job = None  # taken before its marker: nothing was started
        if wf.job is not None:
            wf.job.stop('left to the operator: %s' % why)
            # Always through aftercare, settled or not: its next step
            # unlocks the instances we locked that wait for a retry
            # (the stopped job gives them up), then ends.
            self._aftercare.watch(wf, errors=errors)
            wf.job = None
        elif wf.state is S.EVACUATING:
            # No job to watch its rebuilds (none begun since a restart):
            # our locks on its instances are looked for in Nova.
            self._locks.want('host taken by an operator')
        if wf.durable.spare:
            self.drivers.reservation.forget(wf.durable.spare)
        state = wf.state
        self._transition(wf, S.HEALTHY, reason=(
            'taken over by an operator (%s); instanceha leaves it as it is'
            % why)[:250])
        if state in AFTER_EVACUATION:
            self._unforce_after(wf)

    def _unforce_after(self, wf: HostWorkflow) -> None:
        """Clear the forced_down our fence left (see :mod:`.unforce`).

        Only once the host's instances were moved (before that, an
        operator who took the host may evacuate the rest by hand, which
        Nova allows only while the host reads down), and once the
        operator put the host back into service (enabled it).
        """
        svc = self.snapshot.service(wf.host) if self.snapshot else None
        if unforce.needed(svc):
            self._unforce.start(wf.host)
