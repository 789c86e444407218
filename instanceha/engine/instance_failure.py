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

"""Crashed instances on healthy hosts: restart, relocate, then error.

Masakari's *instance failure*; the counters are Proxmox ha-manager's
``max_restart`` / ``max_relocate``. Each poll, on hosts the plan calls
healthy, the eligible instances (the evacuation filters) that the
configured detector finds stopped without anyone asking are handed to
the configured strategy, which says: restart in place, relocate (cold
migration, Nova's scheduler choosing the host, then a start), or give
up (the error state: Nova's ERROR plus our metadata item, which only
``instanceha-manage instances clear`` removes).

The counters live in Nova, in the instance's metadata (``KEY``), so a
restarted service or a new leader continues them. They are written
*before* the action, so an action whose answer was lost still counts: a
crashing instance can only ever walk the chain once. Both reset only
after a successful start: the instance ran ``stable_time`` seconds.

Limits: at most ``max_per_cycle`` crashes are acted on a poll; above
``storm_size`` crashed instances at once nothing new is started (a
storm has a common cause); a pause holds new actions.
Every Nova write passes the guarded cloud port.
"""

import dataclasses
import datetime
import logging
import typing

from instanceha.conf import instance_failure as instance_failure_conf
from instanceha.engine import events
from instanceha.engine import instance_reads
from instanceha.engine import instance_record as irec
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class Crash:
    server: model.Server
    record: irec.Record | None
    #: The stop no user asked for (None: a step that failed).
    stop: model.InstanceAction | None
    reason: str


#: The options' defaults, for a conf without the group (unit tests).
_DEFAULTS = {opt.dest: opt.default for opt in instance_failure_conf.OPTS}


def _opt(conf, name: str):
    try:
        return getattr(conf.instance_failure, name)
    except Exception:  # a conf without the group: its default
        return _DEFAULTS[name]


def _context(snapshot: model.Snapshot,
             servers: tuple[model.Server, ...]) -> model.Snapshot:
    """The full read with ``servers`` (newer) in place of their old selves.

    A filter's "nothing tagged" rule looks at every server of the read;
    the stopped servers alone would make it conclude too much.
    """
    ids = {s.id for s in servers}
    return dataclasses.replace(snapshot, servers=tuple(
        s for s in snapshot.servers if s.id not in ids) + tuple(servers))


class InstanceFailures:
    """One poll's work on crashed instances; see the module docstring."""

    def __init__(self, conf, drivers, env: ports.Environment):
        self.conf = conf
        self.drivers = drivers
        self.env = env
        self.detector = drivers.instance_detector
        self.strategy = drivers.instance_recovery
        #: SHUTOFF servers already judged not crashed (their user stopped
        #: them): not read again while they stay stopped.
        self._judged: set[str] = set()
        self._held: tuple = ()
        #: Servers with a step under way or a start not yet stable: when
        #: they are not stopped, taken from the listing of the changes or
        #: read one by one (see :mod:`.instance_reads`).
        self._tracked: set[str] = set()
        self._next: float | None = None
        #: The stopped servers, and how they are read again.
        self._reads = instance_reads.StoppedServers(env, self._tracked)

    def forget(self) -> None:
        """List every watched server again at the next read.

        When this copy starts leading: what it knew is from before.
        """
        self._reads.forget()

    def watching(self) -> bool:
        """Whether crashed instances are looked for at all."""
        return bool(_opt(self.conf, 'enabled') and self.detector
                    and self.strategy)

    # -- the poll --------------------------------------------------------

    def tick(self, mono: float, snapshot: model.Snapshot | None,
             plan: plan_mod.Plan | None, busy, now: datetime.datetime,
             paused: bool | typing.Callable[[], bool] = False) -> None:
        """Every ``poll`` seconds: read the stopped servers and act.

        Runs on its own timer, not on the engine's full reads (those list
        only hosts being decided, and none while every host is healthy):
        a crashed guest changes no compute service. ``snapshot`` gives the
        services (kept fresh by the service watch) and the aggregates and
        images the filters need; ``busy`` the hosts in a workflow.
        ``paused`` may be a callable, asked only when this cycle runs: the
        engine's full reads (where the pause is otherwise read) may not
        happen for a long time in a quiet cloud, and an operator's pause
        must hold a restart from the moment it is set.
        """
        if not self.watching() or snapshot is None:
            return
        if self._next is not None and mono < self._next:
            return
        self._next = mono + float(self.conf.poll)
        servers = self._reads.read(snapshot, now,
                                   int(_opt(self.conf, 'full_read_every')))
        if servers is None:
            return
        view = dataclasses.replace(snapshot, servers=servers)
        if callable(paused):
            paused = paused()
        self.cycle(view, plan, now, paused, busy,
                   context=_context(snapshot, servers))

    def _in_scope(self, snapshot: model.Snapshot, plan, busy,
                  now: datetime.datetime) -> set[str]:
        """Hosts whose crashed instances are ours to restart.

        Plainly healthy in Nova's services (up, fresh, enabled), not in a
        workflow, and healthy in the latest plan: a failed host's
        instances are evacuated, an operator's host is left alone.
        """
        from instanceha.engine import watch
        attention = watch.attention(snapshot, now, self.conf.delta)
        decisions = {d.host: d.decision for d in plan.decisions} if plan \
            else {}
        return {s.host for s in snapshot.services
                if s.host not in attention and s.host not in busy and
                decisions.get(s.host, plan_mod.Decision.HEALTHY)
                is plan_mod.Decision.HEALTHY}

    def cycle(self, snapshot: model.Snapshot, plan: plan_mod.Plan | None,
              now: datetime.datetime, paused: bool = False,
              busy=frozenset(),
              context: model.Snapshot | None = None) -> None:
        """Act on the crashed instances among ``snapshot.servers``.

        Only eligible ones: the host filters (an aggregate tag, a host
        name skipped) and the instance filters keep them, as for an
        evacuation. ``context`` is what the filters judge by (the
        engine's latest full read, which always holds the aggregates,
        with these servers in it); default ``snapshot``.
        """
        if not self.watching():
            return
        servers = self._eligible(snapshot, context or snapshot,
                                 self._in_scope(snapshot, plan, busy, now))
        # From here on every time is on Nova's clock: the records' (read
        # back by any copy), and the instance actions' they are compared
        # with.
        now, skew = snapshot.nova_now(now), snapshot.clock_skew
        reads = int(_opt(self.conf, 'action_reads_per_cycle'))
        crashes: list[Crash] = []
        stopped = set()
        for srv in servers:
            if irec.ERROR_KEY in srv.metadata:
                self._tracked.discard(srv.id)
                continue
            rec = irec.Record.parse(srv.metadata.get(irec.KEY))
            if rec is not None:
                rec = rec.on_nova_clock(skew)
            if rec is not None and rec.state in irec.IN_PROGRESS:
                self._tracked.add(srv.id)
                crash = self._progress(srv, rec, now)
                if crash is not None:
                    crashes.append(crash)
                continue
            if not self.detector.suspect(srv):
                if rec is not None and rec.state in (irec.RUNNING, irec.STOPPED):
                    self._check_stable(srv, rec, now)
                continue
            stopped.add(srv.id)
            if srv.id in self._judged or reads <= 0:
                continue
            reads -= 1
            actions = self._actions(srv)
            if actions is None:
                continue
            stop = self.detector.crashed(srv, actions)
            if stop is None or (rec is not None and rec.stop ==
                                stop.request_id):
                self._judged.add(srv.id)
                continue
            crashes.append(Crash(srv, rec, stop, 'stopped by no user '
                                 '(%s %s)' % (stop.action, stop.request_id)))
        self._judged &= stopped
        self._act_on(crashes, now, paused)

    def _eligible(self, snapshot: model.Snapshot, context: model.Snapshot,
                  in_scope: set[str]) -> list[model.Server]:
        """The servers of ``in_scope`` hosts the filters keep."""
        from instanceha.engine import decide
        filters = self.drivers.filters
        servers = []
        for host in sorted(in_scope):
            if decide.host_reasons(filters, host, context):
                continue  # never its instances (e.g. an untagged host)
            servers.extend(decide.eligible_servers(
                filters, host, snapshot, context)[0])
        return servers

    def _actions(self, srv: model.Server
                 ) -> list[model.InstanceAction] | None:
        try:
            return self.env.cloud.server_actions(srv.id)
        except exceptions.InstanceHAError as exc:
            LOG.warning('instance %s: cannot read its actions: %s', srv.id,
                        exc)
            return None

    def _act_on(self, crashes: list[Crash],
                now: datetime.datetime, paused: bool) -> None:
        names = tuple(c.server.name or c.server.id for c in crashes)
        storm = int(_opt(self.conf, 'storm_size'))
        if paused:
            self._report(names, 'instance HA is paused')
            return
        if storm and len(crashes) > storm:
            self._report(names, 'storm: %d crashed instances at once, more '
                         'than [instance_failure] storm_size (%d); nothing is '
                         'restarted' % (len(crashes), storm))
            return
        cap = int(_opt(self.conf, 'max_per_cycle'))
        for crash in crashes[:cap]:
            self._act(crash, now)
        self._report(names[cap:], 'cap of %d per cycle ([instance_failure] '
                     'max_per_cycle); next cycle' % cap)

    def _report(self, servers: tuple, reason: str) -> None:
        """Say once per change which crashes wait, and why."""
        key = (servers, reason) if servers else ()
        if key != self._held:
            self._held = key
            if servers:
                self.env.events.emit(events.INSTANCE_FAILURE_HELD,
                                     servers=servers, reason=reason)

    # -- deciding a crash ------------------------------------------------

    def _act(self, crash: Crash, now: datetime.datetime) -> None:
        from instanceha.plugins.instance_failure import base
        srv = crash.server
        rec = crash.record or irec.Record(nova_clock=True)
        stable = int(_opt(self.conf, 'stable_time'))
        reason = crash.reason
        if (rec.at is not None and crash.stop
                is not None and crash.stop.start_time is not None and
                (crash.stop.start_time - rec.at).total_seconds() >= stable):
            # Its last start was a success after all.
            rec = irec.Record(nova_clock=True)
            reason += '; ran %ds since its last start: counters reset' % (
                stable)
        step = self.strategy.next_step(base.Counters(rec.restarts,
                                                     rec.relocations))
        emit = self.env.events.emit
        emit(events.INSTANCE_CRASHED, srv.host, server=srv.name,
             next=step.value, restarts=rec.restarts,
             relocations=rec.relocations, reason=reason)
        stop_id = crash.stop.request_id if crash.stop else rec.stop
        cloud = self.env.cloud
        self._tracked.add(srv.id)
        try:
            if step is base.Step.RESTART:
                self._write(srv, irec.Record(
                    rec.restarts + 1, rec.relocations, irec.RESTARTING, now,
                    stop_id, srv.host, nova_clock=True))
                cloud.start_server(srv.id)
                emit(events.INSTANCE_START_REQUESTED, srv.host,
                     server=srv.name, after='restart')
            elif step is base.Step.RELOCATE:
                self._write(srv, irec.Record(
                    rec.restarts, rec.relocations + 1, irec.RELOCATING, now,
                    stop_id, srv.host, nova_clock=True))
                cloud.cold_migrate(srv.id)
                emit(events.INSTANCE_RELOCATE_REQUESTED, srv.host,
                     server=srv.name)
            else:
                cloud.set_server_metadata(srv.id, irec.ERROR_KEY, irec.error_text(
                    srv.name or srv.id, rec, now))
                cloud.reset_server_state(srv.id, 'error')
                emit(events.INSTANCE_GAVE_UP, srv.host, server=srv.name,
                     restarts=rec.restarts, relocations=rec.relocations,
                     action='find out why it keeps crashing, then run '
                     '"instanceha-manage instances clear %s"'
                     % (srv.name or srv.id))
        except exceptions.InstanceHAError as exc:
            # Counted already: the next poll finds the step failed.
            emit(events.INSTANCE_RECOVERY_FAILED, srv.host, server=srv.name,
                 reason=str(exc)[:300])

    def _write(self, srv: model.Server, rec: irec.Record) -> None:
        self.env.cloud.set_server_metadata(srv.id, irec.KEY, rec.render())

    # -- steps under way -------------------------------------------------

    def _progress(self, srv: model.Server, rec: irec.Record,
                  now: datetime.datetime) -> Crash | None:
        """Move a restart or relocation on; a Crash when it failed."""
        if srv.task_state:
            return None  # Nova is still at it
        waited = (now - rec.at).total_seconds() if rec.at else 0.0
        timeout = int(_opt(self.conf, 'start_timeout'))
        if srv.status == 'ERROR':
            return Crash(srv, rec, None, 'the %s ended in ERROR' % (
                'relocation' if rec.state == irec.RELOCATING else 'start'))
        try:
            if srv.status == 'ACTIVE':
                self._write(srv, dataclasses.replace(rec, state=irec.RUNNING,
                                                     at=now))
                self.env.events.emit(events.INSTANCE_RUNNING, srv.host,
                                     server=srv.name)
            elif rec.state == irec.RELOCATING:
                return self._relocating(srv, rec, now)
            elif srv.status == 'SHUTOFF':
                return self._not_started(srv, rec, waited, timeout)
        except exceptions.InstanceHAError as exc:
            self.env.events.emit(events.INSTANCE_RECOVERY_FAILED, srv.host,
                                 server=srv.name, reason=str(exc)[:300])
        return None

    def _relocating(self, srv: model.Server, rec: irec.Record,
                    now: datetime.datetime) -> Crash | None:
        cloud = self.env.cloud
        if srv.status == 'VERIFY_RESIZE':
            cloud.confirm_resize(srv.id)
            return None
        if srv.status != 'SHUTOFF':
            return None
        if srv.host == rec.source:
            _rid, errors = cloud.action_errors(srv.id, 'migrate')
            return Crash(srv, rec, None, 'relocation failed: %s' % (
                '; '.join(errors) or 'it is still on %s' % srv.host))
        self.env.events.emit(events.INSTANCE_RELOCATED, rec.source,
                             server=srv.name, dest=srv.host)
        self._write(srv, dataclasses.replace(rec, state=irec.STARTING, at=now))
        cloud.start_server(srv.id)
        self.env.events.emit(events.INSTANCE_START_REQUESTED, srv.host,
                             server=srv.name, after='relocation')
        return None

    def _not_started(self, srv: model.Server, rec: irec.Record, waited: float,
                     timeout: int) -> Crash | None:
        """SHUTOFF after our start: crashed again, failed, or a user."""
        actions = self._actions(srv)
        if actions is None:
            return None
        stop = self.detector.crashed(srv, actions)
        if stop is not None and stop.request_id != rec.stop:
            return Crash(srv, rec, stop, 'crashed again %ds after its %s '
                         '(%s %s)' % (waited, 'restart' if rec.state ==
                                      irec.RESTARTING else 'relocation',
                                      stop.action, stop.request_id))
        newest = actions[0] if actions else None
        if newest is not None and newest.action == 'stop' and \
                newest.user_id:
            # Its user stopped it: never undone; the counters stay.
            self._write(srv, dataclasses.replace(rec, state=irec.STOPPED))
            return None
        if newest is not None and newest.action == 'start' and (
                newest.message or '').lower() == 'error':
            return Crash(srv, rec, None, 'its start failed (%s)'
                         % newest.request_id)
        if waited > timeout:
            return Crash(srv, rec, None, 'not running %ds after its start '
                         '([instance_failure] start_timeout)' % waited)
        return None

    def _check_stable(self, srv: model.Server, rec: irec.Record,
                      now: datetime.datetime) -> None:
        """A start that lasted stable_time: a success; counters reset."""
        if rec.state == irec.STOPPED and srv.status == 'ACTIVE':
            # Its user started it again: from now on it is running.
            self._write(srv, dataclasses.replace(rec, state=irec.RUNNING,
                                                 at=now))
            return
        stable = int(_opt(self.conf, 'stable_time'))
        if (srv.status != 'ACTIVE' or rec.at is None or
                (now - rec.at).total_seconds() < stable):
            return
        try:
            self.env.cloud.delete_server_metadata(srv.id, irec.KEY)
        except exceptions.InstanceHAError as exc:
            LOG.warning('instance %s: cannot reset its counters: %s',
                        srv.id, exc)
            return
        self._tracked.discard(srv.id)
        self.env.events.emit(events.INSTANCE_RECOVERED, srv.host,
                             server=srv.name, restarts=rec.restarts,
                             relocations=rec.relocations)
