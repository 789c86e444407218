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

"""The evacuating state of a host's recovery: its steps.

From the marker that begins it (the prelude of the first step, the spare
enabled) through the steps of the evacuation job (its share of the
``max_in_flight`` slots, the power proof of every step) to its end (the
spare given back, the evacuated or FAILED marker). A step runs in the
tick thread; its job works on a :class:`instanceha.engine.workflow.Draft`
of the record and returns a :class:`instanceha.engine.evacuation_tasks.Progress`.
"""

from collections.abc import Callable
import math

from instanceha.conf import evacuation as evacuation_conf
from instanceha.engine import evacuation_job
from instanceha.engine import evacuation_tasks
from instanceha.engine import events
from instanceha.engine import guard
from instanceha.engine import migration_records
from instanceha.engine import ports
from instanceha.engine import retry
from instanceha.engine import runtime
from instanceha.engine import tick
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import LOG
from instanceha.engine.workflow import S


class Evacuating(tick.Plumbing):
    """The evacuating state's steps (the rest: :mod:`.steps`)."""

    def _step_evacuated(self, wf: HostWorkflow) -> None:
        """The next state's step, taken at once on the straight path.

        :class:`instanceha.engine.steps.Steps` defines it.
        """
        raise NotImplementedError

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
        free = max(0, cap - sum(held(other) for other in self._all()) -
                   self._aftercare.holding())
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
        if not self._running(wf.host):
            return running
        budget, in_flight = self._slots.get(wf.host, (0, 0))
        return max(running, in_flight) + budget

    def _sharing(self) -> list[HostWorkflow]:
        """The hosts being evacuated that want more slots."""
        return [w for w in self._workflows.values()
                if w.state is S.EVACUATING and (
                    w.job is None or w.job.view.wants_more)]

    def _step_evacuation(self, wf: HostWorkflow) -> None:
        # At most one step a tick_interval: the service loop also wakes
        # when a job finishes, which must not turn watching rebuilds
        # into a busy loop of Nova calls.
        mono = self.env.clock.monotonic()
        last = self._stepped.get(wf.host)
        if last is not None and mono - last < self.conf.tick_interval:
            return
        # Nor while it only waits for rebuilds not yet expected to end
        # (EvacuationJob.due): their records are listed when they are.
        if wf.job is not None and not wf.job.due(mono, self._budget()):
            return
        self._stepped[wf.host] = mono
        if wf.job is None:
            wf.job = self._begin(wf)
        budget, waits = self._grant(wf)
        tracks = self.drivers.evacuation.tracks
        # Slots used again within the step: tracked, the slots of the
        # rebuilds it sees ending, while no other host shares the cap;
        # fire-and-forget, a call's slot the moment it returns, while no
        # other host waits for a slot (the budget stays held meanwhile).
        reuse = len(self._sharing()) <= 1 if tracks else not waits
        in_flight = wf.job.view.in_flight if reuse and tracks else 0
        draft = workflow.Draft(wf.host, wf.durable)
        ctx = self._step_context(wf, draft, budget, reuse)
        job = wf.job

        def done(progress):
            if progress.unproven is not None:
                self._unproven(wf, progress.unproven)
                return
            if progress.complete and not self.conf.disabled:
                self._evacuation_complete(wf, progress)

        self._submit(wf, lambda _: job.step(ctx), done, draft=draft,
                     slots=(budget, in_flight))

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
                      budget: int, reuse: bool
                      ) -> evacuation_job.StepContext:
        """What the evacuation step of ``wf`` gets (tick thread).

        Its marker writes (the prelude, what was given up) and its power
        proof work on the job's ``draft``, never on ``wf``.
        """
        listing = self._listing
        if listing is None or not listing.covers(wf.since):
            # Stepped on a job's result, before this tick's listing.
            listing = migration_records.SharedListing(self.env.cloud,
                                                      wf.since)

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
        wait = retry.backoff(workflow.STEP_RETRY, self._errors(wf) + 1,
                             float(self.conf.poll))
        self._retry(wf, wait, 'no proof it is off', count=True,
                    emit=runtime.emit(events.POWER_UNPROVEN,
                                      reason=reading.detail[:200],
                                      retry_in=int(wait)))

    def _evacuation_complete(self, wf: HostWorkflow,
                             progress: evacuation_tasks.Progress) -> None:
        failed = dict(sorted(progress.failed.items()))
        forgive = (self.conf.force_enable and
                   not self.drivers.evacuation.tracks)
        give_up = bool(failed) and not forgive
        spare = wf.durable.spare
        release = (spare is not None and spare not in progress.landed_on)

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
        straight = (not give_up and not left and spare is None and
                    not self.conf.leave_disabled and not wf.durable.kdump)

        def done(_):
            wf.record(spare=None)
            if release:
                self._emit(events.SPARE_RELEASED, wf.host, spare=spare)
            if not progress.settled:
                self._aftercare.watch(wf)
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
        self._submit(wf, self._finishing(
            wf.host, spare, release, failed if give_up else {}), done)

    def _finishing(self, host: str, spare: str | None, release: bool,
                   given_up: dict[str, str]
                   ) -> Callable[[workflow.Draft], None]:
        """The job that ends an evacuation (job thread).

        The spare given back (``release``) or forgotten, then the marker:
        FAILED when instances were ``given_up``, else evacuated.
        """
        reservation, snapshot = self.drivers.reservation, self.snapshot

        def finish(draft: workflow.Draft) -> None:
            if release:
                reservation.release(self.env, host, spare, snapshot)
            elif spare:
                reservation.forget(spare)
            if given_up:
                self._mark(draft, S.FAILED, (
                    '%d instance(s) not evacuated; fix them, then run '
                    '"instanceha-manage hosts clear %s"; ids: %s' % (
                        len(given_up), host, ','.join(given_up))))
            else:
                # Released or kept in service: no longer ours to claim.
                self._mark(draft, S.EVACUATED, spare=None)
        return finish
