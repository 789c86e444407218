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

"""Tick plumbing of the recovery engine: submit, harvest, transition.

Slow work runs as jobs on ``env.executor`` (:meth:`Plumbing._submit`);
their results are applied in the tick thread only, by
:meth:`Plumbing._harvest`, and only while this copy leads. Every state
change passes :meth:`Plumbing._transition` (the table of
:mod:`instanceha.engine.states`), every marker :meth:`Plumbing._mark`.
"""

from collections.abc import Callable
import dataclasses
import datetime

from instanceha.engine import aftercare
from instanceha.engine import boundary
from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import retry
from instanceha.engine import states
from instanceha.engine.states import HostState
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import LOG
from instanceha.engine.workflow import S
from instanceha import exceptions

#: "The workflow's own" (a marker argument left as it is).
_SAME = object()

#: Seconds the engine's services read serves as the operator's record
#: before a marker write (see Plumbing._current_service).
OPERATOR_READ_AGE = 1.0


@dataclasses.dataclass(frozen=True)
class Finished:
    """The jobs finished before a read: their results applied after it.

    ``futures``: host workflows' (ids); ``aftercare``: the runtime's keys
    of the aftercare steps.
    """

    futures: frozenset[int]
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
                        if self._workflows[host].sched.future is None:
                            del self._workflows[host]
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

    def _transition(self, wf: HostWorkflow, new: HostState, *,
                    keep: tuple[str, ...] = (), **details) -> None:
        """Move ``wf`` to ``new`` (the table's rule); say so.

        The old state's own data is cleared (:class:`workflow.StateLocal`)
        but for what ``keep`` names: a fence_failed host keeps counting
        its attempts when it is fenced again.
        """
        states.check_transition(wf.host, wf.state, new)
        old = wf.state
        wf.state = new
        wf.entered = self.env.clock.now()
        wf.local = wf.local.kept(keep)
        wf.sched.retry_at = 0.0
        self._emit(events.HOST_STATE, wf.host, old=old.value,
                   new=new.value, **details)
        if new is S.HEALTHY:
            self._workflows.pop(wf.host, None)

    def _submit(self, wf: HostWorkflow, fn: Callable[[workflow.Draft], object],
                on_done: Callable, *,
                draft: workflow.Draft | None = None) -> None:
        """Run ``fn(draft)`` as a job holding the host's lock.

        ``draft`` (made here unless given): the job's own copy of the
        workflow's durable record, the only one it changes (its markers
        are written from it); the record itself refuses the job's writes
        (:mod:`instanceha.engine.boundary`). Later, in the tick thread,
        the draft's changes are applied and ``on_done(result)`` is called
        (or the job's error is reported and the step retried). Nothing is
        submitted while this copy does not lead (:meth:`_leading`): the
        step is taken again on a later tick.
        """
        if not self._leading():
            return
        if draft is None:
            draft = workflow.Draft(wf.host, wf.durable)
        wf.sched.on_done, wf.sched.draft = on_done, draft
        wf.sched.future = boundary.submit(
            self.env, '%s step of %s' % (wf.state.value, wf.host),
            lambda: fn(draft), lock=wf.host)

    def _wrote(self, wf: HostWorkflow, draft: workflow.Draft) -> None:
        """Apply what a finished job wrote into Nova (tick thread).

        Its durable changes, and the evacuating marker in Nova: the
        spare it names is enabled, the evacuation's prelude is done
        (:meth:`instanceha.engine.evacuating.Evacuating._marking`).
        """
        wf.record(**draft.changes())
        if S.EVACUATING in draft.written:
            wf.local.unmarked, wf.spare_enabled = False, True

    def _finished(self) -> Finished:
        """The jobs finished by now (see :meth:`_harvest`)."""
        return Finished(
            futures=frozenset(
                id(wf.sched.future) for wf in self._all()
                if wf.sched.future is not None and wf.sched.future.done()),
            aftercare=self.workflows.finished(kinds=(aftercare.KIND,)))

    def _harvest(self, apply: bool = True,
                 only: Finished | None = None) -> None:
        """Apply the results of finished jobs (``only``: these).

        The host workflows' first, then their aftercare's (which a copy
        no longer leading keeps, see :mod:`.aftercare`).
        """
        self._harvest_workflows(apply, only)
        if apply:
            self._aftercare.harvest(None if only is None
                                    else only.aftercare)

    def _harvest_workflows(self, apply: bool,
                           only: Finished | None) -> None:
        for wf in self._all():
            fut = wf.sched.future
            if fut is None or not fut.done():
                continue
            if only is not None and id(fut) not in only.futures:
                continue
            wf.sched.future, on_done, wf.sched.on_done = None, wf.sched.on_done, None
            wf.sched.budget = wf.sched.step_in_flight = 0
            if wf.sched.draft is not None:
                # What the job wrote into Nova, whether it ended well.
                self._wrote(wf, wf.sched.draft)
                wf.sched.draft = None
            if not apply:
                continue  # forgotten: the next leader resumes from Nova
            exc = fut.exception()
            if isinstance(exc, workflow.OperatorTookOver):
                self._hand_over(wf, str(exc))
                continue
            if exc is not None:
                # Back off while it keeps failing (Nova down for an hour
                # is one warning a poll, not one every 5 s), never beyond
                # a poll.
                wf.sched.step_errors += 1
                wait = retry.backoff(
                    workflow.STEP_RETRY, wf.sched.step_errors,
                    max(workflow.STEP_RETRY, float(self.conf.poll)))
                self._emit(events.STEP_ERROR, wf.host, state=wf.state.value,
                           reason='%s: %s' % (type(exc).__name__, exc),
                           retry_in=int(wait))
                if not isinstance(exc, exceptions.InstanceHAError):
                    LOG.error('host %s: unexpected error in state %s',
                              wf.host, wf.state, exc_info=exc)
                wf.sched.retry_at = self.env.clock.monotonic() + wait
                wf.sched.failed_at = self.env.clock.now()
                continue
            wf.sched.step_errors = 0
            if on_done is not None:
                on_done(fut.result())

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
