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

"""The per-state steps of a host's recovery workflow.

:data:`STEPS` maps each state of :data:`instanceha.engine.states.TRANSITIONS`
that the engine moves on by itself to its step; states without one wait
for someone else (an operator, a detector). A step runs in the tick
thread, never blocks, and submits its slow work as a job
(:meth:`instanceha.engine.tick.Plumbing._submit`) whose result is applied
in the tick thread.
"""

from collections.abc import Callable
import datetime

from instanceha.engine import evacuating
from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import shutdown
from instanceha.engine.states import HostState
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import LOG
from instanceha.engine.workflow import S
from instanceha import exceptions
from instanceha.plugins.detectors import base as det_base


class Steps(evacuating.Evacuating):
    """One step per state (see :data:`STEPS`)."""

    def _step_suspect(self, wf: HostWorkflow) -> None:
        self._transition(wf, S.FENCING)
        self._step_fencing(wf)

    def _step_fence_failed(self, wf: HostWorkflow) -> None:
        self._transition(wf, S.FENCING, keep=('attempts',),
                         attempt=wf.local.attempts + 1)
        self._step_fencing(wf)

    def _step_fencing(self, wf: HostWorkflow) -> None:
        clock = self.env.clock
        local = wf.local
        if self._kdump_on() and local.attempts == 0:
            if local.kdump_deadline is None:
                timeout = self._kdump_opt('kdump_timeout', 30)
                local.kdump_deadline = clock.monotonic() + timeout
                self._emit(events.KDUMP_WAIT, wf.host, timeout=timeout)
            # Only a dump in progress proves the host runs nothing: its
            # messages must still arrive now (the last one within one
            # message interval). A dump that ended may have been followed
            # by a reboot.
            last = self.env.kdump.last_message(wf.host)
            live = self._kdump_live_window()
            if last is not None and clock.now() - last <= live:
                self._fenced(wf, ports.FenceResult(
                    host=wf.host, level=0, devices=(), kdump=True))
                return
            if clock.monotonic() < local.kdump_deadline:
                return
        if not self._judged_now():
            return  # judged again at this tick's read first
        fencer = self.env.fencer
        host = wf.host

        def fence(_):
            if not fencer.configured(host):
                raise exceptions.FencingError(
                    'host %s has no fencing configuration; it will not be '
                    'evacuated' % host)
            if not self.env.coordinator.is_leader():
                raise exceptions.CoordinationError('not the leader')
            return fencer.fence(host)

        def done(result):
            self._fenced(wf, result)

        self._submit(wf, self._catching(fence, exceptions.FencingError),
                     done)

    def _judged_now(self) -> bool:
        """Whether this tick read Nova and judged every failed host again.

        The rule of every power-off: the host is fenced only on the
        strength of a plan made in the same tick (see
        :meth:`instanceha.engine.recovery.Engine._power_off_due`, which
        asks for that read). A host no longer judged failed by then has
        left its workflow already.
        """
        return self._judged_tick == self._ticks

    def _fenced(self, wf: HostWorkflow, result) -> None:
        if isinstance(result, Exception):
            attempts = wf.local.attempts + 1
            wait = self._backoff(attempts)
            self._transition(wf, S.FENCE_FAILED, reason=str(result),
                             attempts=attempts, retry_in=int(wait))
            wf.local.attempts, wf.local.reason = attempts, str(result)
            self._retry(wf, wait, 'fencing failed')
            return
        wf.record(kdump=bool(result.kdump),
                  shutdown=(shutdown.POWEROFF if result.shutdown ==
                            shutdown.POWEROFF else None))
        details = {'kdump': True} if wf.durable.kdump else {
            'level': result.level, 'devices': tuple(result.devices)}
        if result.announced:
            # Read off, no power operation: say what proved it.
            details = {'proven': 'read', 'level': result.level,
                       'devices': ()}
        if result.shutdown:
            details['shutdown'] = result.shutdown
        self._transition(wf, S.FENCED, **details)
        if not self.conf.disabled:  # else held here (detect-only mode)
            self._step_fenced(wf)

    def _step_fenced(self, wf: HostWorkflow) -> None:
        """Force down + disable with a marker, reserve, evacuate.

        No job of its own, no tick in between: the marker (with a spare claimed:
        the claim first, the spare enabled, then the marker saying
        ``evacuating``) is the prelude of the first evacuation step, made
        at the same time as that step's reads (its records, the host's
        power) and before its first evacuate call (see
        :meth:`_marking`). The workflow is evacuating from here on; until
        the marker is in Nova, every step of it writes the marker first.
        """
        snapshot = self.snapshot
        if wf.since is None:
            wf.since_skew = (self.snapshot.clock_skew or 0.0
                             if self.snapshot is not None else None)
            wf.since = self.env.clock.now() - workflow.MIGRATION_SLACK
            wf.record(fenced_at=workflow.fence_time(wf.since, wf.since_skew))
            wf.first_job = True
        # The claim is an in-memory choice; it is in Nova (the fenced
        # marker) before the spare is enabled, see _marking.
        claimed = wf.durable.spare or (self.drivers.reservation.claim(
            wf.host, snapshot) if snapshot is not None else None)
        wf.record(spare=claimed)
        if claimed:
            self._emit(events.SPARE_CLAIMED, wf.host, spare=claimed)
        self._transition(wf, S.EVACUATING, forced_down=True, spare=claimed)
        wf.local.unmarked = True
        # Its first step comes in this very tick (Engine._advance), with
        # every other host fenced by now sharing the evacuation slots.

    def _step_evacuated(self, wf: HostWorkflow) -> None:
        if self.conf.leave_disabled:
            self._submit(wf, lambda draft: self._mark(draft,
                                                      S.LEFT_DISABLED),
                         lambda _: self._transition(wf, S.LEFT_DISABLED))
            return
        if wf.durable.kdump:
            # A crash-dumping host reboots by itself; never power-cycle it
            # (the dump would be lost). Wait until it stops sending.
            last = self.env.kdump.last_message(wf.host) if self.env.kdump \
                else None
            quiet = datetime.timedelta(
                seconds=self._kdump_opt('message_timeout', 30))
            if last is not None and self.env.clock.now() - last < quiet:
                return
            fencer, host = self.env.fencer, wf.host

            def mark(draft: workflow.Draft) -> bool:
                # Powered off (fenced again after its dump, perhaps by a
                # copy that stopped before writing so), it never reboots
                # by itself: powered on as any fenced host instead.
                if fencer.power_state(host).off:
                    return False
                self._mark(draft, S.WAITING_UP)
                return True

            def done(rebooting: bool) -> None:
                if rebooting:
                    self._transition(wf, S.WAITING_UP, kdump=True)
                    return
                wf.record(kdump=False)
                self._transition(wf, S.POWERING_ON)
                self._step_powering_on(wf)
            self._submit(wf, mark, done)
            return
        if self._rebuilding(wf.host):
            return
        if wf.durable.shutdown == shutdown.POWEROFF:
            # Switched off on purpose (announced) and only read off: it is
            # not powered on (nothing power-cycled it); it is enabled when
            # someone starts it and Nova reports it up.
            self._submit(wf, lambda draft: self._mark(draft, S.WAITING_UP),
                         lambda _: self._transition(
                             wf, S.WAITING_UP, shutdown=wf.durable.shutdown,
                             reason='powered off on purpose: left off, '
                             'enabled when it comes back'))
            return
        # No marker of its own (see _step_powering_on).
        self._transition(wf, S.POWERING_ON)
        self._step_powering_on(wf)

    def _rebuilding(self, host: str) -> bool:
        """Whether rebuilds of ``host``'s instances may still be running.

        A host is powered on only once they have all ended, in every
        mode: a compute that starts while its instances are still being
        rebuilt elsewhere may never complete their records, and Nova
        then keeps the host forced down. Fire-and-forget moves on when
        its calls are accepted; its rebuilds are watched (aftercare)
        until they end.
        """
        return self._aftercare.watching(host)

    def _step_powering_on(self, wf: HostWorkflow) -> None:
        """Power the host on; no marker (Nova keeps the one before).

        The host stays disabled and forced down, marked as it was, until
        its nova-compute reports (:meth:`_step_waiting_up`): then one
        write enables it and clears forced_down. A copy resuming from that
        marker finds every rebuild ended and powers it on again, which
        changes nothing, and waits from then on (a later start than the
        true one: never a heartbeat older than the power-on taken for a
        report).
        """
        if self._rebuilding(wf.host):
            return
        # Powered on only on a view of its service read since this step
        # began (or last failed): an operator who took the host meanwhile
        # (a reason of their own) is seen before its power changes.
        since = max(wf.entered, wf.local.failed_at or wf.entered)
        if self.snapshot is None or self.snapshot.taken_at < since:
            return
        fencer, host = self.env.fencer, wf.host

        def power_on(_):
            self._ours(host)
            return fencer.unfence(host)

        def done(result):
            if isinstance(result, Exception):
                local = wf.local
                local.attempts += 1
                local.reason = str(result)
                if local.attempts > self.conf.power_on_retries:
                    self._fail(wf, 'power on failed %d time(s): %s' % (
                        local.attempts, str(result)[:80]))
                    return
                self._retry(wf, self._backoff(local.attempts), local.reason,
                            emit=runtime.emit(events.STEP_ERROR,
                                              state=wf.state.value,
                                              reason=local.reason))
                return
            self._transition(wf, S.WAITING_UP, level=result.level)
            # Powered on by now: only a report stamped after it counts.
            wf.local.up_after = self._nova_now()

        self._submit(wf, self._catching(power_on, exceptions.FencingError),
                     done)

    def _fail(self, wf: HostWorkflow, why: str) -> None:
        action = 'power %s on and check it, then run "instanceha-manage ' \
                 'hosts clear %s"' % (wf.host, wf.host)
        self._submit(wf, lambda draft: self._mark(
            draft, S.FAILED, ('%s; %s' % (why, action))[:200]),
                     lambda _: self._transition(wf, S.FAILED, reason=why,
                                                action=action))

    def _step_waiting_up(self, wf: HostWorkflow) -> None:
        """Hand the host back once its nova-compute reports again.

        Nothing is written while it waits: after our power-on it stays
        forced down and disabled with its marker. Nova reports a
        forced-down service down whatever its reports, but keeps stamping
        its ``updated_at`` with them (the servicegroup reports regardless
        of forced_down): a stamp later than the power-on (or than the
        waiting_up marker of a host that starts by itself: a kdump host, an
        announced power-off, ``hosts clear``) by more than
        :data:`model.OWN_WRITE` is a report of the restarted service,
        never the dead one's last word nor a write of ours. One report is
        enough, as for Nova's own ``up``: the service runs again. The
        enable step then enables it and clears forced_down in one write.
        """
        svc = self.snapshot.service(wf.host) if self.snapshot else None
        if svc is None:
            return
        local = wf.local
        if local.up_after is None:
            # On Nova's clock, that of the stamps it is compared with
            # (ours may be stepped while the host boots).
            local.up_after = self.snapshot.nova_now(wf.entered)
        if svc.updated_at is None:
            # A cloud without time stamps: Nova's word alone (up only
            # once forced_down is cleared).
            back = not svc.forced_down and svc.state == model.UP
        elif svc.forced_down:
            # ...and a report recent enough not to be judged failed at
            # once (not stale by the failed rule), had a read been missed.
            back = svc.reported_after(local.up_after) and not (
                det_base.Detector.judge_service(
                    svc, self.snapshot.nova_now(self.snapshot.taken_at),
                    self.conf.delta).stale)
        else:
            back = (svc.reported_after(local.up_after) and
                    svc.state == model.UP)
        if not back:
            return
        self._transition(wf, S.ENABLING, forced_down=svc.forced_down)
        self._step_enabling(wf)

    def _nova_now(self) -> datetime.datetime:
        """Now on Nova's clock, by the skew the latest read measured.

        Times kept to be compared with later reads are kept on it: our
        clock may be stepped in between, Nova's is not.
        """
        return self.snapshot.nova_now(self.env.clock.now())

    def _step_enabling(self, wf: HostWorkflow) -> None:
        host = wf.host

        def enable(_):
            svc = self._ours(host)
            if reasons.of_service(svc).marker is None:
                # Enabled meanwhile (hosts clear --enable): nothing to do.
                return True, False
            try:
                self.env.cloud.update_service(svc, status=model.ENABLED,
                                              forced_down=False)
            except exceptions.CloudError as exc:
                if not (svc.forced_down and
                        getattr(exc, 'status', None) == 400):
                    raise
                # Reported before it completed its evacuation records:
                # the next tick asks again.
                LOG.info('host %s: not enabled yet: %s', host, exc)
                return False, False
            return True, svc.forced_down

        def done(result):
            enabled, cleared = result
            if cleared:
                self._emit(events.FORCED_DOWN_CLEARED, wf.host)
            if enabled:
                self._transition(wf, S.HEALTHY, enabled=True)
            else:
                self._retry(wf, float(self.conf.tick_interval),
                            'not enabled yet')

        self._submit(wf, enable, done)


#: The step of each state the engine moves on by itself, beside the
#: table of transitions (:data:`instanceha.engine.states.TRANSITIONS`).
#: Healthy, failed and left_disabled have none: they wait for a
#: detector or an operator. To add a state: a row there, a step here.
STEPS: dict[HostState, Callable[[Steps, HostWorkflow], None]] = {
    S.SUSPECT: Steps._step_suspect,
    S.FENCING: Steps._step_fencing,
    S.FENCE_FAILED: Steps._step_fence_failed,
    S.FENCED: Steps._step_fenced,
    S.EVACUATING: Steps._step_evacuation,
    S.EVACUATED: Steps._step_evacuated,
    S.POWERING_ON: Steps._step_powering_on,
    S.WAITING_UP: Steps._step_waiting_up,
    S.ENABLING: Steps._step_enabling,
}

#: States without a step: someone else moves them on (service_down is no
#: workflow at all: see instanceha.engine.process_failure; frozen and
#: draining: the clean shutdown's kind, instanceha.engine.clean_shutdown).
WAITING = frozenset({S.HEALTHY, S.FAILED, S.LEFT_DISABLED, S.SERVICE_DOWN,
                     S.FROZEN, S.DRAINING})
