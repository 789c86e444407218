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

"""What the clean shutdown's steps decide: freeze, record, drain, return.

Each is a plain function of the kind's :class:`~.shutdown_flow.Context`
(settings and ports), a read-only :class:`~instanceha.engine.runtime.View`
and the host's compute service as the world's snapshot shows it, and
returns the runtime's outcome: the write to make as a job (read again
under the host's lock where another workflow or an operator may have
changed the host meanwhile), the state to go to, the events to emit.
See :mod:`instanceha.engine.clean_shutdown`.
"""

from collections.abc import Callable
import dataclasses
import datetime
import functools
import logging

from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import shutdown
from instanceha.engine.shutdown_flow import back_but_forced
from instanceha.engine.shutdown_flow import Context
from instanceha.engine.shutdown_flow import Durable
from instanceha.engine.shutdown_flow import H
from instanceha.engine.shutdown_flow import host_state
from instanceha.engine.shutdown_flow import is_back
from instanceha.engine.shutdown_flow import OVERDUE_REASON
from instanceha.engine.shutdown_flow import P
from instanceha.engine.shutdown_flow import Phase
from instanceha.engine.shutdown_flow import shown
from instanceha.engine.shutdown_flow import World

LOG = logging.getLogger(__name__)

#: Seconds a drain waits before it asks again for an instance another
#: workflow owns.
DRAIN_WAIT = 5.0


def leave(ctx: Context, view: runtime.View, why: str,
          state: Phase = P.ANNOUNCED, **local) -> runtime.Outcome:
    """Leave the host as it is (said once per reason)."""
    rec = view.record
    if rec.local.get('left') == why and rec.state is state:
        return runtime.Wait()
    if rec.local.get('left') != why:
        LOG.info('host %s announced a %s: %s; the shutdown policy '
                 'leaves it as it is', rec.key, rec.durable.ann.kind,
                 why)
    return runtime.Go(state, local=dict(local, left=why))


def not_ours(ctx: Context, view: runtime.View,
             svc: model.Service) -> str | None:
    """Why the host must be left as it is (None: it may be changed)."""
    if view.record.key in view.world.recovering:
        return 'it is being recovered'
    if svc.disabled:
        return 'its compute service is disabled (reason: %s)' % (
            svc.disabled_reason or 'none')
    return None


def nova_now(ctx: Context, world: World) -> datetime.datetime:
    """Now on Nova's clock: the clock of the records we keep in Nova.

    A copy that reads them back (after a restart, or a new leader)
    may run on a clock stepped since: only Nova's names the same
    moment for both.
    """
    return marker_mod.to_nova(ctx.env.clock.now(),
                              world.snapshot.clock_skew)


def freeze(ctx: Context, view: runtime.View, svc: model.Service,
           silent: float) -> runtime.Outcome:
    """freeze: disable the host with a record of its own (then frozen).

    Its ``until`` is what is left of ``[shutdown] return_timeout``; a
    host an earlier leader froze is frozen already; a host someone else
    disabled (or one being recovered) is left as it is, also when the
    snapshot is older than their disable: the service is read again
    under the host's lock before it is written.
    """
    if reasons.of_disabled(svc).frozen:
        return runtime.Go(P.FROZEN, emit=host_state(
            H.HEALTHY, H.FROZEN, reason='frozen by an earlier leader'))
    why = not_ours(ctx, view, svc)
    if why:
        return leave(ctx, view, why)
    d: Durable = view.record.durable
    now = nova_now(ctx, view.world)
    left = max(0, int(ctx.conf.shutdown.return_timeout - silent))
    reason = reasons.Frozen(
        since=now, kind=d.ann.kind,
        until=now + datetime.timedelta(seconds=left), nova_clock=True,
        note='policy %s (%s)' % (d.policy, d.source)).render()
    cloud, host = ctx.env.cloud, view.record.key

    def job():
        current = cloud.read_services().service(host)
        if current is None or current.disabled:
            return current  # taken meanwhile (or gone): not written
        cloud.update_service(current, status=model.DISABLED,
                             disabled_reason=reason)
        return None

    def then(now_view, taken):
        if taken is not None:
            return leave(ctx, now_view, 'its compute service is disabled '
                         '(reason: %s)' % (taken.disabled_reason or 'none'))
        return runtime.Go(P.FROZEN, emit=host_state(
            H.HEALTHY, H.FROZEN, kind=d.ann.kind, policy=d.policy,
            expect_in=left))

    return runtime.Job(run=job, then=then)


def record(ctx: Context, view: runtime.View,
           svc: model.Service) -> runtime.Outcome:
    """failover: disable the host with the announcement's record.

    The engine recovers the host (it is in scope: see
    :class:`~instanceha.engine.reasons.Frozen`); the record makes
    the announcement durable before the agent is answered, so a copy
    that resumes before the host is proven off still reads it off
    instead of power-cycling it. Nothing is written over another
    reason (an operator's, or the recovery's marker once fenced): the
    service is read again under the host's lock first.
    """
    if svc.disabled:
        if (reasons.of_disabled(svc).frozen or
                reasons.of_service(svc).marker):
            return runtime.Go(P.RECORDED)
        return leave(ctx, view, 'its compute service is disabled '
                     '(reason: %s)' % (svc.disabled_reason or 'none'),
                     P.RECORDED)
    d: Durable = view.record.durable
    now = nova_now(ctx, view.world)
    reason = reasons.Frozen(
        since=now, kind=d.ann.kind, action=reasons.FAILOVER,
        nova_clock=True, until=now + datetime.timedelta(
            seconds=ctx.conf.shutdown.return_timeout),
        note='policy %s (%s): recovered elsewhere once proven off'
        % (d.policy, d.source)).render()
    cloud, host = ctx.env.cloud, view.record.key

    def job():
        current = cloud.read_services().service(host)
        if current is not None and not current.disabled:
            cloud.update_service(current, status=model.DISABLED,
                                 disabled_reason=reason)

    return runtime.Job(run=job,
                       then=lambda v, _: runtime.Go(P.RECORDED))


def drain(ctx: Context, view: runtime.View,
          svc: model.Service) -> runtime.Outcome:
    """migrate: the service's maintenance moves the instances away.

    A drain an earlier leader started is ours: it is resumed (what is
    left is moved, moves under way are waited for), never taken for
    finished. Nothing can be live-migrated off a host whose
    nova-compute is down: such a drain is skipped.
    """
    world: World = view.world
    resumed = reasons.of_disabled(svc).drain
    why = (None if resumed else not_ours(ctx, view, svc)) or (
        'its compute service is down: nothing can be live-migrated'
        if not is_back(svc) else None)
    if why:
        return leave(ctx, view, why, skipped=True)
    d: Durable = view.record.durable
    host, effects = view.record.key, ctx.effects
    now = ctx.env.clock.now()
    note = '%s %s announced' % (reasons.DRAIN_NOTE, d.ann.kind)

    def job():
        try:
            return effects.drain(host, now, note, resumed), None
        except Exception as exc:  # noqa: said, and tried again
            return None, exc

    return runtime.Job(
        run=job, then=functools.partial(drained, ctx),
        acts_on=draining(world.snapshot, host), emit=host_state(
            H.HEALTHY, H.DRAINING, kind=d.ann.kind, policy=d.policy,
            **({'reason': 'resumed: started by an earlier leader'}
               if resumed else {})))


def draining(snapshot: model.Snapshot,
             host: str) -> tuple[tuple[str, str | None], ...]:
    """The instances a drain of ``host`` moves: every one on it.

    Owned by the drain while its job runs (:mod:`..ownership`): an
    instance another workflow owns (a restart of a crashed instance
    under way) makes the drain wait until it has settled, and no other
    workflow starts on one the drain moves.
    """
    if not snapshot.servers_known(host):
        return ()
    return tuple((srv.id, host) for srv in sorted(
        snapshot.servers_on(host), key=lambda s: s.id))


def gives_way(ctx: Context, view: runtime.View, rule: ownership.Rule,
              holder: ownership.Claim) -> runtime.Outcome:
    """Another workflow owns an instance of the host: wait, or give way.

    A drain waits for an instance-failure step (or the lock sweep) on
    one of its instances to settle, and gives way to a host recovery
    (the host failed: its instances are the recovery's).
    """
    why = 'an instance on it is owned by %s %s' % (
        holder.owner.value, holder.key)
    if rule is ownership.Rule.GIVE_WAY:
        return leave(ctx, view, why, skipped=True)
    return runtime.Retry(DRAIN_WAIT, why)


def drained(ctx: Context, view: runtime.View, result) -> runtime.Outcome:
    """The drain's end: frozen (drained), or tried again if it broke."""
    outcomes, exc = result
    if exc is not None:
        LOG.warning('host %s: shutdown policy step failed (tried again '
                    'next tick): %s', view.record.key, exc)
        return runtime.Go(P.ANNOUNCED, emit=host_state(
            H.DRAINING, H.HEALTHY,
            reason='drain failed: %s' % str(exc)[:200]))
    moved = sum(1 for o in outcomes if o.result == 'moved')
    return runtime.Go(
        P.FROZEN,
        durable=dataclasses.replace(view.record.durable, drained=True),
        emit=runtime.emit(events.SHUTDOWN_DRAINED, moved=moved,
                          left=len(outcomes) - moved) +
        host_state(H.DRAINING, H.FROZEN, reason='instances moved away'))


def enable(ctx: Context, svc: model.Service) -> Callable | None:
    """The job that enables the host again, None if it is not ours.

    A freeze is lifted only if the host still carries it, read again
    under the host's lock: the recovery (failover) may have replaced
    the record with its marker meanwhile, and an operator may have
    taken the host. A ``forced_down`` under our record is the record's
    (see :func:`~.shutdown_flow.back_but_forced`): cleared with it.
    """
    reading = reasons.of_disabled(svc)
    cloud, host, effects = ctx.env.cloud, svc.host, ctx.effects
    if reading.frozen:
        def job():
            current = cloud.read_services().service(host)
            if current is not None and \
                    reasons.of_disabled(current).frozen:
                cloud.update_service(current, status=model.ENABLED, **(
                    {'forced_down': False} if current.forced_down
                    else {}))
        return job
    if reading.drain:
        return lambda: effects.end(host)
    return None


def settle(ctx: Context, job: Callable | None,
           emit: runtime.Emit) -> runtime.Outcome:
    """Run ``job`` (if any), then settle, saying ``emit``."""
    if job is None:
        return runtime.Go(P.SETTLING, emit=emit)
    clock = ctx.env.clock
    return runtime.Job(run=job, then=lambda v, _: runtime.Go(
        P.SETTLING, local={'enabled_at': clock.now()}, emit=emit))


def returned(ctx: Context, view: runtime.View,
             svc: model.Service) -> runtime.Outcome:
    """Back: enabled again if it carries a record of ours, then settled.

    Back means a heartbeat from its next boot and Nova reporting it up
    (not forced down): only then can it take instances again.
    """
    world: World = view.world
    if not (is_back(svc) or
            back_but_forced(svc, world.snapshot.clock_skew)):
        return runtime.Wait()  # heartbeating again; not yet up
    host = view.record.key
    ann = world.pending[host]
    job = enable(ctx, svc)
    return settle(ctx, job, runtime.emit(
        events.SHUTDOWN_RETURNED, kind=ann.kind,
        after=int(world.now - ann.first), enabled=job is not None) +
        host_state(shown(view.record), H.HEALTHY, reason='back'))


def overdue(ctx: Context, view: runtime.View, svc: model.Service,
            silent: float) -> runtime.Outcome:
    """Not back within ``[shutdown] return_timeout``: enabled if ours.

    From then on the host is judged like any host (failed, fenced and
    evacuated if it does not come back); its return is still awaited.
    """
    d: Durable = view.record.durable
    said = runtime.emit(events.SHUTDOWN_OVERDUE, kind=d.ann.kind,
                        silent=int(silent))
    job = enable(ctx, svc)
    then = host_state(shown(view.record), H.HEALTHY, reason=OVERDUE_REASON)
    if job is None:
        return runtime.Go(P.OVERDUE, emit=said + then)
    return runtime.Job(run=job, emit=said, then=lambda v, _: runtime.Go(
        P.OVERDUE, emit=then))

# -- records in Nova no announcement explains ---------------------------


def found_due(ctx: Context, world: World, svc: model.Service) -> str | None:
    """What a record in Nova without an announcement needs now.

    ``back``: the host's agent beats again (an agent stops beating
    when it announces) and Nova reports it up; ``overdue``: a freeze
    past its ``until``; None: nothing yet (a failover record stays
    until the recovery replaces it).
    """
    reading = reasons.of_disabled(svc)
    if not (reading.frozen or reading.drain):
        return None
    age = world.ages.get(svc.host)
    up = is_back(svc) or back_but_forced(svc, world.snapshot.clock_skew)
    if up and age is not None and age <= ctx.conf.heartbeat.timeout:
        return 'back'
    fr = reading.frozen
    if fr is None or fr.failover:
        return None
    # Its times on our clock as it runs now (see nova_now).
    until = fr.ours(fr.until, world.snapshot.clock_skew)
    return 'overdue' if ctx.env.clock.now() > until else None


def found(ctx: Context, view: runtime.View) -> runtime.Outcome:
    """A record in Nova without an announcement: enable it when due."""
    world: World = view.world
    svc = world.snapshot.service(view.record.key)
    due = found_due(ctx, world, svc) if svc is not None else None
    if due is None:
        return runtime.Go(P.DONE)
    reading = reasons.of_disabled(svc)
    now = ctx.env.clock.now()
    skew = world.snapshot.clock_skew
    if reading.frozen:
        fr = reading.frozen
        kind, since = fr.kind, fr.ours(fr.since, skew)
    else:
        parsed = reasons.of_service(svc).maintenance
        kind = (shutdown.REBOOT if parsed and 'reboot' in parsed.note
                else shutdown.POWEROFF)
        since = parsed.since if parsed else now
    job = enable(ctx, svc)
    after = int((now - since).total_seconds())
    if due == 'back':
        return settle(ctx, job, runtime.emit(
            events.SHUTDOWN_RETURNED, kind=kind, after=after,
            enabled=True) + host_state(H.FROZEN, H.HEALTHY, reason='back'))
    return runtime.Job(
        run=job, emit=runtime.emit(events.SHUTDOWN_OVERDUE, kind=kind,
                                   silent=after),
        then=lambda v, _: runtime.Go(
            P.SETTLING, local={'enabled_at': ctx.env.clock.now()},
            emit=host_state(H.FROZEN, H.HEALTHY, reason=OVERDUE_REASON)))
