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

"""What the instance-failure path does to one instance, as workflows.

A poll (:mod:`instanceha.engine.instance_failure`) decides in the tick
thread; each thing it decided to do to an instance is a workflow of kind
``instance_failure`` on the runtime, keyed by the instance's id, that
runs one job and ends: the job makes the Nova calls (each through the
guarded cloud port) and returns the events to tell, which the runtime
emits when it applies the result in the tick thread. The workflow's
durable part is the instance's record as it is in Nova once the job is
done (the ``instanceha:failure`` metadata item it writes, see
:mod:`.instance_record`); its state-local data (:class:`Order`) is what
the poll saw.

While its workflow exists the instance is this kind's: the job holds
the instance in the runtime's ownership registry, and a poll decides
nothing about it. And every effect that moves or starts an instance
first reads it again and does nothing when it is no longer where the
poll saw it (another workflow moved it, or its user did): the next poll
judges it afresh.
"""

import dataclasses
import datetime
import enum
import logging
import typing

from instanceha.engine import events
from instanceha.engine import instance_record as irec
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: The workflow kind's name in the runtime.
KIND = 'instance_failure'


class Effect(enum.Enum):
    """The states of an ``instance_failure`` workflow: one effect, done."""

    RESTART = 'restart'
    RELOCATE = 'relocate'
    GIVE_UP = 'give_up'
    #: Running after our start (or its user's): recorded so.
    MARK_RUNNING = 'mark_running'
    #: Stopped by its user during our step: recorded, left alone.
    MARK_STOPPED = 'mark_stopped'
    #: Its relocation waits for a confirmation.
    CONFIRM = 'confirm_resize'
    #: Relocated: started on its new host.
    START_RELOCATED = 'start_relocated'
    #: Ran ``stable_time`` since its start: the counters go.
    RESET = 'reset'
    DONE = 'done'


#: Effects that start, move or stop an instance: each reads it again
#: first and refuses when it is not where the poll saw it.
MOVES = frozenset({Effect.RESTART, Effect.RELOCATE, Effect.GIVE_UP,
                   Effect.CONFIRM, Effect.START_RELOCATED})


@dataclasses.dataclass(frozen=True)
class Order:
    """What a poll decided for one instance (the state-local data).

    ``server``: the instance as the poll read it (its host is where the
    effect expects it); ``rank``: its place in the poll's order (its
    events are told in that order); ``crash``: the ``instance_crashed``
    event's details, told first (a crash's effects); ``before``: the
    record it had (the give-up's text counts from it); ``now``: the
    poll's time on Nova's clock.
    """

    server: model.Server
    rank: int
    crash: tuple = ()
    before: irec.Record | None = None
    now: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True)
class Done:
    """A job's value: what to tell, and whether the effect failed."""

    emit: runtime.Emit = ()
    #: Set when the counters were reset (the instance is left alone).
    reset: bool = False


class Moved(exceptions.InstanceHAError):
    """The instance is not where the poll saw it: nothing was done."""


def owned_elsewhere(owners: ownership.Owners, srv: model.Server) -> bool:
    """Whether another kind of workflow owns ``srv`` now.

    Besides the registry's claims, an instance carrying our lock reason
    is the recovery's of the host the reason names (it is being
    evacuated, or its rebuild is watched) wherever it is now, until
    that recovery (or the lock sweep) unlocks it: that claim is in Nova.
    """
    held = owners.holder(srv.id, srv.host)
    if held is not None and held.owner is not \
            ownership.Owner.INSTANCE_FAILURE:
        return True
    return reasons.of_lock(srv).lock is not None


def check_where(cloud: ports.CloudPort, srv: model.Server) -> None:
    """Read ``srv`` again; refuse to act when it moved or changed.

    It must be on the host and in the status (with no task) the poll
    saw: another workflow, its user or Nova may have moved, started or
    stopped it since.
    """
    now = cloud.get_server(srv.id)
    lock = reasons.of_lock(now).lock
    if lock is not None:
        raise Moved('the recovery of %s holds it (locked while evacuated '
                    'from there): left alone' % lock.host)
    if now.host != srv.host:
        raise Moved('it is on %s now, not on %s where it was judged: left '
                    'alone' % (now.host or 'no host', srv.host))
    if now.status != srv.status or now.task_state:
        raise Moved('it is %s%s now, not %s: left alone' % (
            now.status, ' (%s)' % now.task_state if now.task_state
            else '', srv.status))


class Effects:
    """Declares the kind and runs its effects; see the module doc."""

    def __init__(self, env: ports.Environment, workflows: runtime_loop.Runtime,
                 on_reset: typing.Callable[[str], None]):
        self.env = env
        self.workflows = workflows
        self._on_reset = on_reset
        acting = [e for e in Effect if e is not Effect.DONE]
        workflows.register(runtime.Kind(
            name=KIND,
            transitions={e: frozenset({Effect.DONE}) for e in acting},
            steps={e: self._step for e in acting},
            final=frozenset({Effect.DONE}), on_error=self._failed,
            order=lambda rec: rec.local['order'].rank,
            owner=ownership.Owner.INSTANCE_FAILURE,
            on_conflict=self._gives_way))

    def start(self, effect: Effect, order: Order,
              record: irec.Record | None) -> bool:
        """Begin ``effect`` (tick thread); False when one runs already."""
        if self.workflows.get(KIND, order.server.id) is not None:
            return False
        self.workflows.start(KIND, order.server.id, effect, record,
                             local={'order': order})
        return True

    def _step(self, view: runtime.View) -> runtime.Outcome:
        rec = view.record
        order: Order = rec.local['order']
        cloud, effect, record = self.env.cloud, rec.state, rec.durable
        return runtime.Job(
            run=lambda: _perform(cloud, effect, order, record),
            then=self._done, lock=False,
            acts_on=((order.server.id, order.server.host),))

    def _done(self, view: runtime.View, done: Done) -> runtime.Outcome:
        order: Order = view.record.local['order']
        if done.reset:
            self._on_reset(order.server.id)
        return runtime.Go(Effect.DONE, emit=_crashed(order) + done.emit)

    @staticmethod
    def _gives_way(view: runtime.View, rule: ownership.Rule,
                   holder: ownership.Claim) -> runtime.Outcome:
        """Another workflow owns the instance: nothing is done to it.

        The next poll judges it afresh (a host recovery's instances are
        out of its scope until that recovery ends).
        """
        order: Order = view.record.local['order']
        return runtime.Go(Effect.DONE, emit=_crashed(order) + _recovery_failed(
            order.server, exceptions.InstanceHAError(
                'the %s of %s owns it (%s): left alone' % (
                    holder.owner.value.replace('_', ' '), holder.key,
                    rule.value))))

    @staticmethod
    def _failed(view: runtime.View, exc: BaseException) -> runtime.Outcome:
        """An effect that broke unexpectedly: said; the next poll judges."""
        order: Order = view.record.local['order']
        LOG.error('instance %s: %s failed: %s', order.server.id,
                  view.record.state.value, exc, exc_info=exc)
        return runtime.Go(Effect.DONE, emit=_crashed(order) + _recovery_failed(
            order.server, exc))


def _crashed(order: Order) -> runtime.Emit:
    if not order.crash:
        return ()
    return runtime.emit_on(order.server.host, events.INSTANCE_CRASHED,
                           **dict(order.crash))


def _recovery_failed(srv: model.Server, exc: BaseException) -> runtime.Emit:
    return runtime.emit_on(srv.host, events.INSTANCE_RECOVERY_FAILED,
                           server=srv.name, reason=str(exc)[:300])


def _write(cloud: ports.CloudPort, srv: model.Server,
           record: irec.Record) -> None:
    cloud.set_server_metadata(srv.id, irec.KEY, record.render())


def _perform(cloud: ports.CloudPort, effect: Effect, order: Order,
             record: irec.Record | None) -> Done:
    """The effect's Nova calls, in a job; what to tell."""
    srv = order.server
    told: list = []
    try:
        if effect in MOVES:
            check_where(cloud, srv)
        if effect is Effect.RESET:
            return _reset(cloud, srv, record)
        _ACTIONS[effect](cloud, order, record, told)
    except exceptions.InstanceHAError as exc:
        if effect is Effect.MARK_RUNNING and order.before is not None and \
                order.before.state == irec.STOPPED:
            # Its user started it again; the next poll writes it again.
            LOG.warning('instance %s: cannot record it running: %s',
                        srv.id, exc)
        else:
            told.extend(_recovery_failed(srv, exc))
    return Done(emit=tuple(told))


def _reset(cloud: ports.CloudPort, srv: model.Server,
           record: irec.Record) -> Done:
    try:
        cloud.delete_server_metadata(srv.id, irec.KEY)
    except exceptions.InstanceHAError as exc:
        LOG.warning('instance %s: cannot reset its counters: %s', srv.id,
                    exc)
        return Done()
    return Done(reset=True, emit=runtime.emit_on(
        srv.host, events.INSTANCE_RECOVERED, server=srv.name,
        restarts=record.restarts, relocations=record.relocations))


def _restart(cloud, order: Order, record, told: list) -> None:
    srv = order.server
    _write(cloud, srv, record)
    cloud.start_server(srv.id)
    told.extend(runtime.emit_on(srv.host, events.INSTANCE_START_REQUESTED,
                                server=srv.name, after='restart'))


def _relocate(cloud, order: Order, record, told: list) -> None:
    srv = order.server
    _write(cloud, srv, record)
    cloud.cold_migrate(srv.id)
    told.extend(runtime.emit_on(srv.host, events.INSTANCE_RELOCATE_REQUESTED,
                                server=srv.name))


def _give_up(cloud, order: Order, record, told: list) -> None:
    srv, rec = order.server, order.before
    cloud.set_server_metadata(srv.id, irec.ERROR_KEY, irec.error_text(
        srv.name or srv.id, rec, order.now))
    cloud.reset_server_state(srv.id, 'error')
    told.extend(runtime.emit_on(
        srv.host, events.INSTANCE_GAVE_UP, server=srv.name,
        restarts=rec.restarts, relocations=rec.relocations,
        action='find out why it keeps crashing, then run '
        '"instanceha-manage instances clear %s"' % (srv.name or srv.id)))


def _mark_running(cloud, order: Order, record, told: list) -> None:
    srv = order.server
    _write(cloud, srv, record)
    if order.before is not None and order.before.state in irec.IN_PROGRESS:
        told.extend(runtime.emit_on(srv.host, events.INSTANCE_RUNNING,
                                    server=srv.name))


def _mark_stopped(cloud, order: Order, record, told: list) -> None:
    _write(cloud, order.server, record)


def _confirm(cloud, order: Order, record, told: list) -> None:
    cloud.confirm_resize(order.server.id)


def _start_relocated(cloud, order: Order, record, told: list) -> None:
    srv = order.server
    told.extend(runtime.emit_on(record.source, events.INSTANCE_RELOCATED,
                                server=srv.name, dest=srv.host))
    _write(cloud, srv, record)
    cloud.start_server(srv.id)
    told.extend(runtime.emit_on(srv.host, events.INSTANCE_START_REQUESTED,
                                server=srv.name, after='relocation'))


_ACTIONS = {
    Effect.RESTART: _restart,
    Effect.RELOCATE: _relocate,
    Effect.GIVE_UP: _give_up,
    Effect.MARK_RUNNING: _mark_running,
    Effect.MARK_STOPPED: _mark_stopped,
    Effect.CONFIRM: _confirm,
    Effect.START_RELOCATED: _start_relocated,
}
