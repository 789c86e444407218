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
import math

from instanceha.conf import evacuation as evacuation_conf
from instanceha.engine import evacuation_job
from instanceha.engine import evacuation_tasks
from instanceha.engine import events
from instanceha.engine import guard
from instanceha.engine import migration_records
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import shutdown
from instanceha.engine.states import HostState
from instanceha.engine import tick
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import LOG
from instanceha.engine.workflow import S
from instanceha import exceptions
from instanceha.plugins.detectors import base as det_base


class Steps(tick.Plumbing):
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
            wf.sched.retry_at = self.env.clock.monotonic() + wait
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

    def _marking(self, wf: HostWorkflow,
                 draft: workflow.Draft) -> Callable[[], None]:
        """The marker of an evacuation that begins (job thread).

        The claim is in Nova (the fenced marker) before the spare is
        enabled: a copy resuming in between enables the same spare, none
        is ever lost from the pool. Without a spare, one write: forced
        down, disabled, marked evacuating. Written from the job's
        ``draft``; the tick learns from it that the spare is enabled and
        the marker in Nova (:meth:`instanceha.engine.tick.Plumbing._wrote`).
        """
        snapshot, host = self.snapshot, wf.host
        claimed = wf.durable.spare
        enabled = wf.spare_enabled
        reservation = self.drivers.reservation

        def mark() -> None:
            if claimed is not None:
                self._mark(draft, S.FENCED, spare=claimed, forced_down=True)
            # A spare this copy enabled already is not enabled again; a
            # retry after an error asks the reservation again (enabling
            # is idempotent there).
            spare = claimed if enabled else reservation.reserve(
                self.env, host, snapshot)
            self._mark(draft, S.EVACUATING, spare=spare, **(
                {} if claimed is not None else {'forced_down': True}))
        return mark

    def _budget(self, wf: HostWorkflow | None = None) -> int:
        """How many evacuations the next step of ``wf`` may start.

        Tracked strategies count the rebuilds they are watching (the
        ``[evacuation] max_in_flight``, by default ``workers``);
        fire-and-forget does not wait for rebuilds, so for it the cap
        bounds the evacuate calls running at any moment (see
        :meth:`_grant`). The cap is shared fairly: each host being
        evacuated may hold at most its share of it (so the first host in
        name order cannot starve the others while it retries).
        """
        return self._grant(wf)[0]

    def _grant(self, wf: HostWorkflow | None = None) -> tuple[int, bool]:
        """(``wf``'s budget, whether another host waits for a slot).

        Another host waits when it wants slots but holds none and is
        handed none of those free now. While none waits, a
        fire-and-forget step may start every ready instance of its host,
        its budget then bounding the calls running at once (a slot is
        used again the moment its call returns); one that does wait gets
        its turn at the next step instead.
        """
        cap = evacuation_conf.max_in_flight(self.conf)
        held = self._holding
        free = max(0, cap - sum(held(other) for other in self._all()))
        if wf is None:
            return free, False
        sharing = self._sharing()
        if len(sharing) <= 1:
            return free, False
        share = -(-cap // len(sharing))
        grants = self._grants
        for host in [h for h in grants
                     if h not in {w.host for w in sharing}]:
            del grants[host]  # done with: starts afresh next time

        # The free slots are handed out one at a time, each to the host
        # holding the fewest now, then to the one granted the fewest so
        # far (round robin), never by name: with fewer slots than hosts,
        # every host gets its turn. A slot handed to a host whose step is
        # running waits for its next step.
        given = {w.host: 0 for w in sharing}
        for _ in range(free):
            open_ = [w for w in sharing if held(w) + given[w.host] < share]
            if not open_:
                break
            best = min(open_, key=lambda w: (
                held(w) + given[w.host], grants.get(w.host, 0) +
                given[w.host], w.host))
            given[best.host] += 1
        mine = given.get(wf.host, 0)
        if mine:
            grants[wf.host] = grants.get(wf.host, 0) + mine
        waits = any(held(w) + given[w.host] == 0 for w in sharing
                    if w is not wf)
        return mine, waits

    def _holding(self, wf: HostWorkflow) -> int:
        """The slots of the cap ``wf`` holds (see :meth:`_budget`).

        Its rebuilds in flight (tracked strategies), and while its step
        runs, its budget too; a step that may start new evacuations in
        the slots of the rebuilds it sees ending (``StepContext.reuse``)
        holds those slots until it ends.
        """
        tracks = self.drivers.evacuation.tracks
        # The view its job handed over (never the tasks of a running job).
        running = wf.job.view.in_flight if (wf.job and tracks) else 0
        if wf.sched.future is None:
            return running
        return max(running, wf.sched.step_in_flight) + wf.sched.budget

    def _sharing(self) -> list[HostWorkflow]:
        """The hosts being evacuated that want more slots."""
        return [w for w in self._workflows.values()
                if w.state is S.EVACUATING and (
                    w.job is None or w.job.view.wants_more)]

    def _step_evacuation(self, wf: HostWorkflow,
                         aftercare: bool = False) -> None:
        # At most one step a tick_interval: the service loop also wakes
        # when a job finishes, which must not turn watching rebuilds
        # into a busy loop of Nova calls.
        key = ('aftercare ' if aftercare else '') + wf.host
        mono = self.env.clock.monotonic()
        last = self._stepped.get(key)
        if last is not None and mono - last < self.conf.tick_interval:
            return
        # Nor while it only waits for rebuilds not yet expected to end
        # (EvacuationJob.due): their records are listed when they are.
        if wf.job is not None and not wf.job.due(
                mono, 0 if aftercare else self._budget()):
            return
        self._stepped[key] = mono
        if wf.job is None:
            wf.job = self._begin(wf)
        budget, waits = (0, True) if aftercare else self._grant(wf)
        wf.sched.budget = budget
        tracks = self.drivers.evacuation.tracks
        # Slots used again within the step: tracked, the slots of the
        # rebuilds it sees ending, while no other host shares the cap;
        # fire-and-forget, a call's slot the moment it returns, while no
        # other host waits for a slot (the budget stays held meanwhile).
        reuse = not aftercare and (len(self._sharing()) <= 1 if tracks
                                   else not waits)
        wf.sched.step_in_flight = wf.job.view.in_flight if reuse and tracks else 0
        draft = workflow.Draft(wf.host, wf.durable)
        ctx = self._step_context(wf, draft, budget, reuse, aftercare)
        job = wf.job

        def done(progress):
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
        self._submit(wf, lambda _: job.step(ctx), done, lock=not aftercare,
                     draft=draft)

    def _begin(self, wf: HostWorkflow) -> evacuation_job.EvacuationJob:
        """The evacuation job of ``wf``'s host, begun now (tick thread)."""
        servers = list(wf.servers)
        if wf.resumed and self.plan is not None:
            decision = self.plan.decision(wf.host)
            if decision is not None:
                servers = list(decision.servers)
        new_failure, wf.first_job = wf.first_job, False
        job = self.drivers.evacuation.begin(
            wf.host, servers,
            spare=(wf.durable.spare
                   if self.drivers.reservation.rebuild_on_spare else None),
            since=(wf.since + workflow.MIGRATION_SLACK -
                   workflow.NEW_FAILURE_SLACK if new_failure
                   else wf.since))
        # The skew when wf.since was read from our clock (see
        # EvacuationJob._records).
        job.since_skew = wf.since_skew
        job.pace = self._rebuild_pace
        job.new_failure = new_failure
        return job

    def _step_context(self, wf: HostWorkflow, draft: workflow.Draft,
                      budget: int, reuse: bool,
                      aftercare: bool) -> evacuation_job.StepContext:
        """What the evacuation step of ``wf`` gets (tick thread).

        Its marker writes (the prelude, what was given up) and its power
        proof work on the job's ``draft``, never on ``wf``.
        """
        listing = self._listing
        if listing is None or not listing.covers(wf.since):
            # Stepped on a job's result, before this tick's listing.
            listing = migration_records.SharedListing(self.env.cloud,
                                                      wf.since)
        if aftercare:
            return evacuation_job.StepContext(
                env=self.env, snapshot=self.snapshot, budget=budget,
                gave_up=wf.durable.gave_up, stopped=wf.durable.stopped,
                listing=listing, reuse=reuse)

        def record(gave_up: tuple[str, ...], stopped: bool) -> None:
            # Into the marker (job thread): a resumed copy reads them
            # there and evacuates none of them again.
            draft.update(gave_up=gave_up, stopped=stopped)
            self._mark(draft, S.EVACUATING)

        return evacuation_job.StepContext(
            env=self.env, snapshot=self.snapshot, budget=budget,
            prove_off=self._prover(wf, draft), record=record,
            gave_up=wf.durable.gave_up, stopped=wf.durable.stopped,
            listing=listing, reuse=reuse,
            prelude=self._marking(wf, draft) if wf.local.unmarked else None)

    def _prover(self, wf: HostWorkflow, draft: workflow.Draft
                ) -> Callable[[], ports.PowerReading]:
        """Proof, read now, that ``wf.host`` runs nothing (job thread).

        A host found crash-dumping counts right after a fresh fence_kdump
        message only (see :meth:`_kdump_reading`); otherwise, or once its
        dump has ended, its fencing devices are read, level by level.
        """
        host, kdump = wf.host, wf.durable.kdump
        window = self._kdump_live_window().total_seconds()

        def prove() -> ports.PowerReading:
            if kdump and self.env.kdump is not None:
                reading = self._kdump_reading(host, window)
                if reading is not None:
                    return reading
            reading = self.env.fencer.power_state(host)
            if kdump and reading.off:
                # Its devices say off: the dump is over and the host will
                # not reboot by itself (fenced again, possibly by a copy
                # that stopped before writing so): it is powered on as
                # any fenced host, never left waiting for a reboot.
                draft.update(kdump=False)
            return reading
        return prove

    def _kdump_reading(self, host: str,
                       window: float) -> ports.PowerReading | None:
        """A fence_kdump message that arrived just now, or None (job thread).

        A message proves only that the dump was live when it was sent: it
        may end, and the host reboot, a moment later. So only a message
        at most :data:`guard.KDUMP_FRESH` old proves the host off, and
        only for what is left of that time. While the dump looks live
        (its last message at most ``window``, ``[kdump] message_interval``,
        old) the step waits for its next message and acts right after it;
        none within the window means the dump ended (None: the devices
        are read instead).
        """
        clock, watch = self.env.clock, self.env.kdump
        deadline = clock.monotonic() + window
        while True:
            last = watch.last_message(host)
            if last is None:
                return None
            age = (clock.now() - last).total_seconds()
            # A message stamped ahead of our clock (a step back of the
            # clock) is no fresher than any other: wait for a new one.
            if -guard.KDUMP_FRESH <= age < guard.KDUMP_FRESH:
                return ports.PowerReading(
                    host=host, off=True, valid_for=guard.KDUMP_FRESH - age,
                    detail='crash-dumping (fence_kdump message %.1fs old)'
                    % max(age, 0.0))
            now = clock.monotonic()
            if age > window or now >= deadline:
                return None
            # Wake on a fixed grid of the monotonic clock, not after a
            # sum of steps, which drifts.
            step = guard.KDUMP_POLL
            clock.sleep(max((math.floor(now / step + 1e-6) + 1) * step - now,
                            1e-3))

    def _unproven(self, wf: HostWorkflow,
                  reading: ports.PowerReading) -> None:
        """No proof the host is off now: fence it again, or wait.

        Devices reporting it on mean someone powered it on (or its dump
        ended and it rebooted): its evacuations stop and it is fenced
        again before any other instance leaves it. A device that cannot
        be read proves nothing either way: the next step reads again.
        """
        if reading.on:
            what = ('its crash dump ended (no fence_kdump message for '
                    '[kdump] message_interval) and it runs again'
                    if wf.durable.kdump else 'powered on again')
            wf.record(kdump=False)
            self._transition(wf, S.FENCING, reason=(
                '%s (%s): fenced again before any further evacuation'
                % (what, reading.detail))[:250])
            # No kdump message awaited again: fenced at the next step.
            wf.local.kdump_deadline = self.env.clock.monotonic()
            return
        wait = min(workflow.STEP_RETRY * 2 ** wf.sched.step_errors, float(self.conf.poll))
        wf.sched.step_errors += 1
        wf.sched.retry_at = self.env.clock.monotonic() + wait
        self._emit(events.POWER_UNPROVEN, wf.host,
                   reason=reading.detail[:200], retry_in=int(wait))

    def _evacuation_complete(self, wf: HostWorkflow,
                             progress: evacuation_tasks.Progress) -> None:
        strategy = self.drivers.evacuation
        failed = dict(sorted(progress.failed.items()))
        forgive = (self.conf.force_enable and not strategy.tracks)
        give_up = bool(failed) and not forgive
        reservation = self.drivers.reservation
        snapshot = self.snapshot
        spare = wf.durable.spare
        release = (spare is not None and spare not in progress.landed_on)
        if give_up:
            note = ('%d instance(s) not evacuated; fix them, then run '
                    '"instanceha-manage hosts clear %s"; ids: %s' % (
                        len(failed), wf.host, ','.join(failed)))
        else:
            note = ''

        # Straight on to the power-on: no marker is written in between
        # (nor after it, until the enable); a copy resuming from the
        # evacuating marker finds every rebuild ended and powers on again,
        # which changes nothing. Not while instances stay on the host that
        # such a copy could take for pending: one Nova would not evacuate
        # (PAUSED, say) is SHUTOFF once the host has booted, and would be
        # evacuated from the powered-on host (after fencing it again);
        # "evacuated" says the evacuation is over. (Instances given up
        # are in the evacuating marker already: never evacuated again.)
        handled = set(progress.succeeded) | set(failed)
        left = any(srv.id not in handled for srv in wf.servers)
        straight = (not give_up and not left and spare is None
                    and not self.conf.leave_disabled and not wf.durable.kdump)

        host = wf.host

        def finish(draft):
            if release:
                reservation.release(self.env, host, spare, snapshot)
            elif spare:
                reservation.forget(spare)
            if give_up:
                self._mark(draft, S.FAILED, note)
            else:
                # Released or kept in service: no longer ours to claim.
                self._mark(draft, S.EVACUATED, spare=None)

        def done(_):
            wf.record(spare=None)
            if release:
                self._emit(events.SPARE_RELEASED, wf.host, spare=spare)
            if not progress.settled:
                self._aftercare[wf.host] = workflow.aftercare(wf)
            wf.job = None
            if give_up:
                self._transition(wf, S.FAILED, failed=tuple(failed),
                                 action=workflow.operator_action(wf.host))
                for server_id, why in failed.items():
                    LOG.error('host %s: instance %s not evacuated: %s',
                              wf.host, server_id, why)
                LOG.error(workflow.OPERATOR_STEPS, {'host': wf.host})
            else:
                self._transition(wf, S.EVACUATED,
                                 evacuated=len(progress.succeeded),
                                 failed=len(failed))
                if straight:
                    self._step_evacuated(wf)

        if straight:
            done(None)
            return
        self._submit(wf, finish, done)

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
        return host in self._aftercare

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
        since = max(wf.entered, wf.sched.failed_at or wf.entered)
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
                wf.sched.retry_at = self.env.clock.monotonic() + self._backoff(
                    local.attempts)
                self._emit(events.STEP_ERROR, wf.host,
                           state=wf.state.value, reason=local.reason)
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
                wf.sched.retry_at = self.env.clock.monotonic() + float(
                    self.conf.tick_interval)

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
#: draining: the shutdown policy's handler, instanceha.daemon.shutdown_handler).
WAITING = frozenset({S.HEALTHY, S.FAILED, S.LEFT_DISABLED, S.SERVICE_DOWN,
                     S.FROZEN, S.DRAINING})
