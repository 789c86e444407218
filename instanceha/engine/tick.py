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

"""Host recovery on the workflow runtime: transitions, jobs, markers.

Each host's recovery is a workflow of the kind :data:`KIND` on the one
runtime (:mod:`instanceha.engine.runtime_loop`): the runtime submits its
jobs (holding the host's lock, only while this copy leads), harvests
them in the tick thread, applies what they wrote into Nova whether they
returned or raised, backs off on their errors and checks every
transition against the table of :mod:`instanceha.engine.states`,
emitting it. :meth:`Plumbing._transition`,
:meth:`Plumbing._submit` and :meth:`Plumbing._retry` hand it the steps'
outcomes; every marker is written by :meth:`Plumbing._mark`.

The steps themselves are still the engine's methods
(:mod:`instanceha.engine.steps`), and the host's record beside the
runtime's is :class:`instanceha.engine.workflow.HostWorkflow`: the port
of both onto the runtime's tables goes on from here.
"""

from collections.abc import Callable
import dataclasses
import datetime

from instanceha.engine import aftercare
from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import retry
from instanceha.engine import runtime
from instanceha.engine import states
from instanceha.engine.states import HostState
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import LOG
from instanceha.engine.workflow import S
from instanceha import exceptions

#: "The workflow's own" (a marker argument left as it is).
_SAME = object()

#: The host recovery's kind on the workflow runtime (keyed by host).
KIND = 'host_recovery'

#: Seconds the engine's services read serves as the operator's record
#: before a marker write (see Plumbing._current_service).
OPERATOR_READ_AGE = 1.0


@dataclasses.dataclass(frozen=True)
class Finished:
    """The jobs finished before a read: their results applied after it.

    ``hosts``: the runtime's keys of the host recoveries' jobs;
    ``aftercare``: of the aftercare steps.
    """

    hosts: frozenset[tuple[str, str]]
    aftercare: frozenset[tuple[str, str]]


def _listed(services: model.Snapshot | None, host: str) -> model.Service:
    """``host``'s service in a read of the services; an error if missing."""
    svc = services.service(host) if services else None
    if svc is None:
        raise exceptions.CloudError('nova-compute service of %s is not '
                                    'listed by Nova' % host)
    return svc


class Plumbing:
    """Submit, harvest, transition and mark: the engine's tick plumbing."""

    def _all(self) -> list[HostWorkflow]:
        """Every host workflow, sorted by host."""
        return [self._workflows[h] for h in sorted(self._workflows)]

    def _emit(self, event: str, host: str | None = None, **details) -> None:
        self.env.events.emit(event, host, **details)

    def _leading(self) -> bool:
        """The leadership rule of the tick thread, in this one place.

        Job results are applied (:meth:`_harvest`) and new work is
        submitted (:meth:`_submit`) only while this copy leads now and is
        not stopping; each side effect passes the environment's guard
        again at the moment it is made
        (:class:`instanceha.engine.guard.LeaderGuard`).
        """
        return not self._stopping and bool(self.env.coordinator.is_leader())

    def _check_leadership(self) -> bool:
        """Apply :meth:`_leading` for this tick; report changes of it."""
        leader = self._leading()
        if leader != self._leader:
            if leader:
                if self._leader is not None:
                    # Another copy may have moved our hosts on: forget what
                    # we knew and resume from Nova's markers right away.
                    for host in sorted(self._workflows):
                        if not self._running(host):
                            del self._workflows[host]
                    self.workflows.forget(KIND)
                    self._next_poll = None
                    # ...with a full read, even if every host looked
                    # healthy when we last led: a marker another copy
                    # left is only seen there.
                    self._watch.seen = None
                    # Nor does it know who changed a compute service in
                    # the meantime (process failures).
                    self._process.forget()
                self._emit(events.LEADER)
            else:
                self._emit(events.NOT_LEADER)
            self._leader = leader
        return leader

    def _declare(self) -> None:
        """Declare the host recovery's kind to the runtime.

        Its table is :data:`states.TRANSITIONS`; its steps are taken by
        the engine (:meth:`instanceha.engine.recovery.Engine._advance`),
        so it runs only where the engine names it. A copy that stops
        leading drops its jobs' results, not its records (they are
        forgotten when it leads again, see :meth:`_check_leadership`).
        """
        self.workflows.register(runtime.Kind(
            name=KIND, transitions=states.TRANSITIONS, steps={},
            final=frozenset({S.HEALTHY}), on_error=self._step_failed,
            backoff=workflow.STEP_RETRY,
            owner=ownership.Owner.HOST_RECOVERY, named_only=True,
            survives_leadership=True))
        #: Evacuation slots each running evacuation step holds: (budget,
        #: rebuilds whose slots it may use again); see Evacuating._holding.
        self._slots: dict[str, tuple[int, int]] = {}

    def _running(self, host: str) -> bool:
        """Whether a job of ``host``'s recovery runs (not what it does)."""
        return self.workflows.running(KIND, host)

    def _retry_at(self, wf: HostWorkflow) -> float:
        """Monotonic time before which ``wf`` is not stepped."""
        rec = self.workflows.get(KIND, wf.host)
        return rec.retry_at if rec is not None else 0.0

    def _errors(self, wf: HostWorkflow) -> int:
        """Steps of ``wf`` in a row that failed (their retry backs off)."""
        rec = self.workflows.get(KIND, wf.host)
        return rec.errors if rec is not None else 0

    def _due(self, wf: HostWorkflow, now: float) -> bool:
        """Whether ``wf`` may be stepped now: no job, no retry pending."""
        return not self._running(wf.host) and now >= self._retry_at(wf)

    def _awaits_fence(self, wf: HostWorkflow) -> bool:
        return workflow.awaits_fence(wf, self._running(wf.host))

    def _begin_record(self, wf: HostWorkflow) -> None:
        """The runtime's record of a workflow begun (or adopted) now."""
        self._workflows[wf.host] = wf
        self.workflows.start(KIND, wf.host, wf.state, replace=True)

    def _transition(self, wf: HostWorkflow, new: HostState, *,
                    keep: tuple[str, ...] = (), **details) -> None:
        """Move ``wf`` to ``new`` (the table's rule); say so.

        The old state's own data is cleared (:class:`workflow.StateLocal`)
        but for what ``keep`` names: a fence_failed host keeps counting
        its attempts when it is fenced again. The runtime checks the
        move against the table, emits it and forgets any retry.
        """
        states.check_transition(wf.host, wf.state, new)
        old = wf.state
        wf.state = new
        wf.entered = self.env.clock.now()
        wf.local = wf.local.kept(keep)
        self.workflows.apply(KIND, wf.host, runtime.Go(new, emit=runtime.emit(
            events.HOST_STATE, old=old.value, new=new.value, **details)))
        if new is S.HEALTHY:
            self._workflows.pop(wf.host, None)

    def _retry(self, wf: HostWorkflow, seconds: float, why: str,
               emit: runtime.Emit = (), count: bool = False) -> None:
        """Step ``wf`` again in ``seconds`` (``count``: as a failure)."""
        self.workflows.apply(KIND, wf.host, runtime.Retry(
            seconds, why, emit=emit, count=count))

    def _submit(self, wf: HostWorkflow, fn: Callable[[workflow.Draft], object],
                on_done: Callable | None, *,
                draft: workflow.Draft | None = None,
                slots: tuple[int, int] = (0, 0)) -> None:
        """Run ``fn(draft)`` as a job of ``wf`` on the runtime.

        ``draft`` (made here unless given): the job's own copy of the
        workflow's durable record, the only one it changes (its markers
        are written from it); the record itself refuses the job's writes
        (:mod:`instanceha.engine.boundary`). At the harvest, in the tick
        thread, the draft's changes are applied (whether the job returned
        or raised) and ``on_done(result)`` is called, or the job's error
        handled (:meth:`_step_failed`). ``slots``: the evacuation slots
        it holds while it runs (budget, rebuilds whose slots it may use
        again). Nothing is submitted while this
        copy does not lead: the step is taken again on a later tick.
        """
        if draft is None:
            draft = workflow.Draft(wf.host, wf.durable)
        self._slots[wf.host] = slots

        def then(view: runtime.View, result) -> runtime.Outcome:
            if on_done is not None:
                on_done(result)
            return runtime.Wait()

        def wrote(durable):
            self._wrote(wf, draft)
            return durable
        self.workflows.apply(KIND, wf.host, runtime.Job(
            run=lambda: fn(draft), then=then, wrote=wrote))

    def _wrote(self, wf: HostWorkflow, draft: workflow.Draft) -> None:
        """Apply what a finished job wrote into Nova (tick thread).

        Its durable changes, and the evacuating marker in Nova: the
        spare it names is enabled, the evacuation's prelude is done
        (:meth:`instanceha.engine.evacuating.Evacuating._marking`). Its
        slots are free again.
        """
        self._slots.pop(wf.host, None)
        wf.record(**draft.changes())
        if S.EVACUATING in draft.written:
            wf.local.unmarked, wf.spare_enabled = False, True

    def _step_failed(self, view: runtime.View,
                     exc: BaseException) -> runtime.Outcome:
        """A job of a host's recovery raised (tick thread).

        An operator took the host: hands off. Otherwise the step is taken
        again, backing off while it keeps failing (Nova down for an hour
        is one warning a poll, not one every 5 s), never beyond a poll.
        """
        wf = self._workflows.get(view.record.key)
        if wf is None:
            return runtime.Wait()
        if isinstance(exc, workflow.OperatorTookOver):
            # Not a failure of ours: the errors in a row as they were.
            self._hand_over(wf, str(exc), errors=view.record.errors - 1)
            return runtime.Wait()
        wait = retry.backoff(workflow.STEP_RETRY, view.record.errors,
                             max(workflow.STEP_RETRY, float(self.conf.poll)))
        reason = '%s: %s' % (type(exc).__name__, exc)
        if not isinstance(exc, exceptions.InstanceHAError):
            LOG.error('host %s: unexpected error in state %s',
                      wf.host, wf.state, exc_info=exc)
        wf.local.failed_at = self.env.clock.now()
        return runtime.Retry(wait, reason, emit=runtime.emit(
            events.STEP_ERROR, state=wf.state.value, reason=reason,
            retry_in=int(wait)))

    def _finished(self) -> Finished:
        """The jobs finished by now (see :meth:`_harvest`)."""
        return Finished(
            hosts=self.workflows.finished(kinds=(KIND,)),
            aftercare=self.workflows.finished(kinds=(aftercare.KIND,)))

    def _harvest(self, only: Finished | None = None) -> None:
        """Apply the results of finished jobs (``only``: these).

        The host workflows' first, then their aftercare's (which a copy
        no longer leading keeps, see :mod:`.aftercare`).
        """
        self.workflows.harvest(kinds=(KIND,),
                               only=None if only is None else only.hosts)
        self._aftercare.harvest(None if only is None else only.aftercare)

    def _service(self, host: str) -> model.Service:
        return _listed(self.snapshot, host)

    def _mark(self, draft: workflow.Draft, state: HostState,
              note: str = '', *, spare=_SAME, **changes) -> None:
        """Write our marker (and other changes) to the host's service.

        From the job's ``draft`` (job thread), which then holds what the
        marker holds (:meth:`workflow.Durable.marked_as`).
        """
        if not self.env.coordinator.is_leader():
            raise exceptions.CoordinationError(
                'not the leader: %s left unchanged' % draft.host)
        svc = self._ours(draft.host)
        durable = draft.durable.marked_as(
            state, draft.durable.spare if spare is _SAME else spare)
        reason = self._marker(durable, state, note).render()
        # Nova takes a disabled_reason only together with status=disabled.
        changes.setdefault('status', model.DISABLED)
        self.env.cloud.update_service(svc, disabled_reason=reason,
                                      **changes)
        draft.wrote(state, dataclasses.replace(durable, marked=reason))

    def _marker(self, durable: workflow.Durable, state: HostState,
                note: str = '') -> marker_mod.Marker:
        """The marker of ``durable`` in ``state``: what a resumed copy needs.

        Its times are on Nova's clock (see :mod:`.marker`): ``when`` with
        the skew measured now, ``fenced_at`` as the fence recorded it
        (:func:`workflow.fence_time`), so that a clock stepped in between
        changes neither.
        """
        skew = self.snapshot.clock_skew if self.snapshot else None
        when = marker_mod.to_nova(self.env.clock.now(), skew)
        if state is S.FAILED:
            # An operator's note only (the workflow ends here).
            return marker_mod.Marker(state=state, when=when,
                                     recovery=durable.recovery or None,
                                     note=note[:200], nova_clock=True)
        return marker_mod.Marker(
            state=state, when=when, fenced_at=durable.fenced_at,
            nova_clock=True, spare=durable.spare, kdump=durable.kdump,
            recovery=durable.recovery or None, shutdown=durable.shutdown,
            gave_up=durable.gave_up, stopped=durable.stopped,
            note=note).fitted()

    def _ours(self, host: str) -> model.Service:
        """The host's service, unless an operator took the host.

        Checked before every write: the operator's word wins at every
        step.

        :raises workflow.OperatorTookOver: it carries a reason that is not ours.
        """
        svc = self._current_service(host)
        why = workflow.operators_reason(svc)
        if why is not None:
            raise workflow.OperatorTookOver(why)
        return svc

    def _current_service(self, host: str) -> model.Service:
        """The host's service as Nova reports it now (a job thread's read).

        Not the full read's: an operator may have disabled the host since
        it was taken, and their word must win over the write about to be
        made. The engine's own services read (made at the start of every
        tick, before job results are applied and new steps submitted) is
        that record while it is younger than :data:`OPERATOR_READ_AGE`
        (and than the services interval): a step submitted in the tick
        that read it uses it. A job that ran longer (a power-on) reads
        the services again: one small call.
        """
        read = self._services_read
        age = (self.env.clock.monotonic() - read[0]
               if read is not None else None)
        if age is not None and 0 <= age < min(OPERATOR_READ_AGE,
                                              self._watch.interval):
            current = read[1].service(host)
            if current is not None:
                return current
        return _listed(self.env.cloud.read_services(), host)

    @staticmethod
    def _catching(fn: Callable, *errors) -> Callable:
        """Wrap ``fn`` so that ``errors`` come back as results."""
        def wrapped(*args):
            try:
                return fn(*args)
            except errors as exc:
                return exc
        return wrapped

    def _backoff(self, attempts: int) -> float:
        return float(retry.backoff(self.conf.fence_retry_interval, attempts,
                                   self.conf.fence_retry_max_interval))

    def _kdump_on(self) -> bool:
        if self.env.kdump is None:
            return False
        try:
            return bool(self.conf.kdump.check_kdump)
        except Exception:  # the [kdump] group is optional
            return True

    def _kdump_live_window(self) -> datetime.timedelta:
        """How old the latest fence_kdump message of a live dump may be.

        ``[kdump] message_interval``: one window for the fence and for
        every evacuation call. A dump that ended may be followed by a
        reboot: it proves nothing once a message is missed.
        """
        return datetime.timedelta(
            seconds=self._kdump_opt('message_interval', 10))

    def _kdump_opt(self, name: str, default: int) -> int:
        try:
            return int(getattr(self.conf.kdump, name))
        except Exception:
            return default
