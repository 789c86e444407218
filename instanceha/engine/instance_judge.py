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

"""What a poll of the instance-failure path decides about one instance.

Plain functions of what the poll read (the server, its record in Nova,
the answers of the reads made for it): they call nobody. Each returns
what to do, a :class:`Plan` (one effect of
:mod:`instanceha.engine.instance_effects`), a :class:`Crash` to hand to
the strategy, or nothing.
"""

import dataclasses
import datetime
import typing

from instanceha.engine import events
from instanceha.engine import instance_effects as fx
from instanceha.engine import instance_record as irec
from instanceha.engine import model
from instanceha.engine import runtime


@dataclasses.dataclass
class Crash:
    server: model.Server
    record: irec.Record | None
    #: The stop no user asked for (None: a step that failed).
    stop: model.InstanceAction | None
    reason: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """One effect to start: what, on which server, the record it leaves.

    ``before``: the record the server had; ``crash``: the details of the
    ``instance_crashed`` event told first.
    """

    effect: fx.Effect
    server: model.Server
    record: irec.Record | None
    before: irec.Record | None = None
    crash: tuple = ()


def progress(srv: model.Server, rec: irec.Record, now: datetime.datetime,
             answer: typing.Any, detector, timeout: int
             ) -> Crash | Plan | runtime.Emit | None:
    """Move a restart or relocation on; a Crash when it failed.

    ``answer``: the server's actions, or for a relocation back on its
    source the migration's errors (an exception: they could not be
    read: said as an event).
    """
    if srv.task_state:
        return None  # Nova is still at it
    if srv.status == 'ERROR':
        return Crash(srv, rec, None, 'the %s ended in ERROR' % (
            'relocation' if rec.state == irec.RELOCATING else 'start'))
    if srv.status == 'ACTIVE':
        return Plan(fx.Effect.MARK_RUNNING, srv, dataclasses.replace(
            rec, state=irec.RUNNING, at=now), before=rec)
    if rec.state == irec.RELOCATING:
        return _relocating(srv, rec, now, answer)
    if srv.status == 'SHUTOFF':
        waited = (now - rec.at).total_seconds() if rec.at else 0.0
        return _not_started(srv, rec, waited, timeout, answer, detector)
    return None


def progress_read(srv: model.Server, rec: irec.Record) -> str | None:
    """What :func:`progress` needs read about ``srv`` (see ``answer``)."""
    if srv.task_state or srv.status in ('ERROR', 'ACTIVE'):
        return None
    if rec.state == irec.RELOCATING:
        return ('errors' if srv.status == 'SHUTOFF' and
                srv.host == rec.source else None)
    return 'actions' if srv.status == 'SHUTOFF' else None


def _relocating(srv: model.Server, rec: irec.Record,
                now: datetime.datetime, answer
                ) -> Crash | Plan | runtime.Emit | None:
    if srv.status == 'VERIFY_RESIZE':
        return Plan(fx.Effect.CONFIRM, srv, rec, before=rec)
    if srv.status != 'SHUTOFF':
        return None
    if srv.host == rec.source:
        if isinstance(answer, BaseException):
            return runtime.emit_on(srv.host,
                                   events.INSTANCE_RECOVERY_FAILED,
                                   server=srv.name,
                                   reason=str(answer)[:300])
        return Crash(srv, rec, None, 'relocation failed: %s' % (
            '; '.join(answer or ()) or 'it is still on %s' % srv.host))
    return Plan(fx.Effect.START_RELOCATED, srv, dataclasses.replace(
        rec, state=irec.STARTING, at=now), before=rec)


def _not_started(srv: model.Server, rec: irec.Record, waited: float,
                 timeout: int, actions, detector) -> Crash | Plan | None:
    """SHUTOFF after our start: crashed again, failed, or a user."""
    if actions is None:
        return None
    stop = detector.crashed(srv, actions)
    if stop is not None and stop.request_id != rec.stop:
        return Crash(srv, rec, stop, 'crashed again %ds after its %s '
                     '(%s %s)' % (waited, 'restart' if rec.state ==
                                  irec.RESTARTING else 'relocation',
                                  stop.action, stop.request_id))
    # A host recovery's evacuation of it since (an action Nova records
    # too) tells nothing of our start or of its user.
    newest = next((a for a in actions if a.action != 'evacuate'), None)
    if newest is not None and newest.action == 'stop' and \
            newest.user_id:
        # Its user stopped it: never undone; the counters stay.
        return Plan(fx.Effect.MARK_STOPPED, srv, dataclasses.replace(
            rec, state=irec.STOPPED), before=rec)
    if newest is not None and newest.action == 'start' and (
            newest.message or '').lower() == 'error':
        return Crash(srv, rec, None, 'its start failed (%s)'
                     % newest.request_id)
    if waited > timeout:
        return Crash(srv, rec, None, 'not running %ds after its start '
                     '([instance_failure] start_timeout)' % waited)
    return None


def stable(srv: model.Server, rec: irec.Record, now: datetime.datetime,
           stable_time: int) -> Plan | None:
    """A start that lasted ``stable_time``: a success; counters reset."""
    if rec.state == irec.STOPPED and srv.status == 'ACTIVE':
        # Its user started it again: from now on it is running.
        return Plan(fx.Effect.MARK_RUNNING, srv, dataclasses.replace(
            rec, state=irec.RUNNING, at=now), before=rec)
    if (srv.status != 'ACTIVE' or rec.at is None or
            (now - rec.at).total_seconds() < stable_time):
        return None
    return Plan(fx.Effect.RESET, srv, rec, before=rec)


def act(crash: Crash, now: datetime.datetime, stable_time: int,
        strategy) -> Plan:
    """What the strategy says for ``crash``, with its new counters."""
    from instanceha.plugins.instance_failure import base
    srv = crash.server
    rec = crash.record or irec.Record(nova_clock=True)
    reason = crash.reason
    if (rec.at is not None and crash.stop
            is not None and crash.stop.start_time is not None and
            (crash.stop.start_time - rec.at).total_seconds() >= stable_time):
        # Its last start was a success after all.
        rec = irec.Record(nova_clock=True)
        reason += '; ran %ds since its last start: counters reset' % (
            stable_time)
    step = strategy.next_step(base.Counters(rec.restarts, rec.relocations))
    told = (('server', srv.name), ('next', step.value),
            ('restarts', rec.restarts), ('relocations', rec.relocations),
            ('reason', reason))
    stop_id = crash.stop.request_id if crash.stop else rec.stop
    if step is base.Step.RESTART:
        return Plan(fx.Effect.RESTART, srv, irec.Record(
            rec.restarts + 1, rec.relocations, irec.RESTARTING, now,
            stop_id, srv.host, nova_clock=True), before=rec, crash=told)
    if step is base.Step.RELOCATE:
        return Plan(fx.Effect.RELOCATE, srv, irec.Record(
            rec.restarts, rec.relocations + 1, irec.RELOCATING, now,
            stop_id, srv.host, nova_clock=True), before=rec, crash=told)
    return Plan(fx.Effect.GIVE_UP, srv, rec, before=rec, crash=told)
