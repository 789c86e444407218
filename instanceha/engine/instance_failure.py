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
import enum
import logging
import typing

from instanceha.conf import instance_failure as instance_failure_conf
from instanceha.engine import events
from instanceha.engine import instance_effects as fx
from instanceha.engine import instance_judge as judge
from instanceha.engine import instance_reads
from instanceha.engine import instance_record as irec
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import plan as plan_mod
from instanceha.engine import ports
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: The poll's workflow kind in the runtime (one at a time).
SCAN = 'instance_scan'
_POLL = 'poll'


class Scan(enum.Enum):
    """A poll: read (a job), judge (a job for the actions), report."""

    READ = 'read'
    REPORT = 'report'
    DONE = 'done'


@dataclasses.dataclass(frozen=True)
class Context:
    """What the tick gave a poll when it began (its state-local data)."""

    snapshot: model.Snapshot
    plan: plan_mod.Plan | None
    busy: frozenset
    paused: bool | typing.Callable[[], bool]
    reads: instance_reads.Plan
    #: When the poll began (our clock): the snapshot's services are
    #: judged fresh or stale as of then.
    now: datetime.datetime


@dataclasses.dataclass(frozen=True)
class Entry:
    """A server the poll looks at, and what it must read about it.

    ``what``: ``error`` (given up on), ``progress`` (a step of ours
    under way), ``stable`` (running since our start), ``suspect``
    (stopped: crashed?); ``ask``: ``actions``, ``errors`` (of its
    migration) or None.
    """

    what: str
    server: model.Server
    record: irec.Record | None
    ask: str | None = None


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


def _ask(cloud: ports.CloudPort, entries: tuple[Entry, ...]) -> dict:
    """The reads the judging needs (a job): server id -> answer.

    An answer is the server's actions (None when they could not be
    read) or, for a relocation back on its source, its migration's
    errors (or the error that kept them from being read).
    """
    answers: dict[str, typing.Any] = {}
    for entry in entries:
        sid = entry.server.id
        if entry.ask == 'errors':
            try:
                answers[sid] = cloud.action_errors(sid, 'migrate')[1]
            except exceptions.InstanceHAError as exc:
                answers[sid] = exc
        elif entry.ask == 'actions':
            try:
                answers[sid] = cloud.server_actions(sid)
            except exceptions.InstanceHAError as exc:
                LOG.warning('instance %s: cannot read its actions: %s',
                            sid, exc)
                answers[sid] = None
    return answers


class InstanceFailures:
    """Crashed instances, polled on a timer; see the module docstring."""

    def __init__(self, conf, drivers, env: ports.Environment,
                 workflows: runtime_loop.Runtime | None = None):
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
        self.workflows = workflows
        if workflows is None:
            return  # the reads alone (their tests)
        self._effects = fx.Effects(env, workflows, self._tracked.discard)
        workflows.register(runtime.Kind(
            name=SCAN,
            transitions={Scan.READ: frozenset({Scan.REPORT, Scan.DONE}),
                         Scan.REPORT: frozenset({Scan.DONE})},
            steps={Scan.READ: self._read, Scan.REPORT: self._report_step},
            final=frozenset({Scan.DONE}), on_error=self._broke))

    def forget(self) -> None:
        """List every watched server again at the next read.

        When this copy starts leading: what it knew is from before.
        """
        self._reads.forget()
        if self.workflows is not None:
            # Decided on reads from before (their jobs, if running, are
            # dropped unapplied while this copy does not lead).
            self.workflows.forget(SCAN)
            self.workflows.forget(fx.KIND)

    def watching(self) -> bool:
        """Whether crashed instances are looked for at all."""
        return bool(_opt(self.conf, 'enabled') and self.detector
                    and self.strategy)

    # -- the poll --------------------------------------------------------

    def tick(self, mono: float, snapshot: model.Snapshot | None,
             plan: plan_mod.Plan | None, busy, now: datetime.datetime,
             paused: bool | typing.Callable[[], bool] = False) -> None:
        """Every ``poll`` seconds: begin a poll (a workflow) and step it.

        Runs on its own timer, not on the engine's full reads (those list
        only hosts being decided, and none while every host is healthy):
        a crashed guest changes no compute service. ``snapshot`` gives the
        services (kept fresh by the service watch) and the aggregates and
        images the filters need; ``busy`` the hosts in a workflow.
        ``paused`` may be a callable, asked only once the stopped servers
        are read: the engine's full reads (where the pause is otherwise
        read) may not happen for a long time in a quiet cloud, and an
        operator's pause must hold a restart from the moment it is set.
        """
        if not self.watching() or snapshot is None:
            return
        if self._next is not None and mono < self._next:
            return
        self._next = mono + float(self.conf.poll)
        if self.workflows.get(SCAN, _POLL) is None:
            reads = self._reads.plan(snapshot, now, int(_opt(
                self.conf, 'full_read_every')))
            self.workflows.start(SCAN, _POLL, Scan.READ, local={
                'ctx': Context(snapshot, plan, frozenset(busy), paused,
                               reads, now)})
        self.workflows.run(kinds=(SCAN, fx.KIND))

    def _read(self, view: runtime.View) -> runtime.Outcome:
        """The listing of the stopped servers, as a job."""
        cloud, ctx = self.env.cloud, view.record.local['ctx']
        return runtime.Job(run=lambda: instance_reads.fetch(cloud, ctx.reads),
                           then=self._listed, lock=False)

    def _listed(self, view: runtime.View,
                listing: instance_reads.Listing) -> runtime.Outcome:
        """Keep the listing; read what judging the servers needs."""
        ctx: Context = view.record.local['ctx']
        servers = self._reads.apply(listing)
        if servers is None:
            return runtime.Go(Scan.DONE)
        snapshot = dataclasses.replace(ctx.snapshot, servers=servers)
        paused = ctx.paused() if callable(ctx.paused) else ctx.paused
        entries = self._sort(snapshot, ctx, _context(ctx.snapshot, servers))

        def judged(v, answers):
            return self._decide(snapshot, entries, paused, answers)
        asks = tuple(e for e in entries if e.ask)
        if not asks:
            return judged(view, {})
        cloud = self.env.cloud
        return runtime.Job(run=lambda: _ask(cloud, asks), then=judged,
                           lock=False)

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

    def _sort(self, snapshot: model.Snapshot, ctx: Context,
              context: model.Snapshot) -> tuple[Entry, ...]:
        """What to look at among ``snapshot.servers``, in order.

        Only eligible ones: the host filters (an aggregate tag, a host
        name skipped) and the instance filters keep them, as for an
        evacuation; ``context`` is what the filters judge by. Not one
        another workflow owns, nor one a step of ours acts on now.
        """
        owners = self.workflows.owners
        servers = self._eligible(snapshot, context, self._in_scope(
            snapshot, ctx.plan, ctx.busy, ctx.now))
        skew = snapshot.clock_skew
        reads = int(_opt(self.conf, 'action_reads_per_cycle'))
        entries, stopped, under_way = [], set(), {}
        for srv in servers:
            if fx.owned_elsewhere(owners, srv) or \
                    self.workflows.get(fx.KIND, srv.id) is not None:
                continue  # another's, or ours under way
            if irec.ERROR_KEY in srv.metadata:
                entries.append(Entry('error', srv, None))
                continue
            rec = irec.Record.parse(srv.metadata.get(irec.KEY))
            if rec is not None:
                rec = rec.on_nova_clock(skew)
            if rec is not None and rec.state in irec.IN_PROGRESS:
                under_way[srv.id] = srv.host
                entries.append(Entry('progress', srv, rec,
                                     judge.progress_read(srv, rec)))
            elif not self.detector.suspect(srv):
                if rec is not None and rec.state in (irec.RUNNING,
                                                     irec.STOPPED):
                    entries.append(Entry('stable', srv, rec))
            else:
                stopped.add(srv.id)
                if srv.id not in self._judged and reads > 0:
                    reads -= 1
                    entries.append(Entry('suspect', srv, rec, 'actions'))
        self._judged &= stopped
        # Ours by the record in Nova, until it says the step settled.
        owners.hold_instances(ownership.Owner.INSTANCE_FAILURE, under_way)
        return tuple(entries)

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

    def _report_step(self, view: runtime.View) -> runtime.Outcome:
        """Once the poll's effects are done: say which crashes wait."""
        if self.workflows.records(fx.KIND):
            return runtime.Wait()
        servers, reason = view.record.local['held']
        key = (servers, reason) if servers else ()
        if key == self._held:
            return runtime.Go(Scan.DONE)
        self._held = key
        return runtime.Go(Scan.DONE, emit=runtime.emit_on(
            None, events.INSTANCE_FAILURE_HELD, servers=servers,
            reason=reason) if servers else ())

    @staticmethod
    def _broke(view: runtime.View, exc: BaseException) -> runtime.Outcome:
        """A poll that broke: said; the next one reads afresh."""
        LOG.error('instance failure: a poll failed: %s', exc, exc_info=exc)
        return runtime.Go(Scan.DONE)

    # -- deciding --------------------------------------------------------

    def _decide(self, snapshot: model.Snapshot, entries: tuple[Entry, ...],
                paused: bool, answers: dict) -> runtime.Outcome:
        """Decide every entry; start the effects, in the poll's order."""
        # From here on every time is on Nova's clock: the records' (read
        # back by any copy), and the instance actions' they are compared
        # with.
        now = snapshot.nova_now(self.env.clock.now())
        timeout = int(_opt(self.conf, 'start_timeout'))
        stable_time = int(_opt(self.conf, 'stable_time'))
        crashes, plans, told = [], [], ()
        for entry in entries:
            srv, rec = entry.server, entry.record
            answer = answers.get(srv.id)
            if entry.what == 'error':
                self._tracked.discard(srv.id)
                continue
            if entry.what == 'progress':
                self._tracked.add(srv.id)
                got = judge.progress(srv, rec, now, answer, self.detector,
                                     timeout)
            elif entry.what == 'stable':
                got = judge.stable(srv, rec, now, stable_time)
            else:
                got = self._suspect(srv, rec, answer)
            if isinstance(got, judge.Crash):
                crashes.append(got)
            elif isinstance(got, judge.Plan):
                plans.append(got)
            elif got:
                told += got
        held = self._act_on(crashes, now, paused, stable_time, plans)
        for rank, plan in enumerate(plans):
            self._effects.start(plan.effect, fx.Order(
                plan.server, rank, crash=plan.crash, before=plan.before,
                now=now), plan.record)
        return runtime.Go(Scan.REPORT, local={'held': held}, emit=told)

    def _suspect(self, srv: model.Server, rec: irec.Record | None,
                 actions) -> judge.Crash | None:
        """A stopped server: crashed, or stopped by its user?"""
        if actions is None:
            return None
        stop = self.detector.crashed(srv, actions)
        if stop is None or (rec is not None and rec.stop ==
                            stop.request_id):
            self._judged.add(srv.id)
            return None
        return judge.Crash(srv, rec, stop, 'stopped by no user (%s %s)' % (
            stop.action, stop.request_id))

    def _act_on(self, crashes: list, now: datetime.datetime, paused: bool,
                stable_time: int, plans: list) -> tuple:
        """Plan the crashes acted on now; (names, why) of those held."""
        names = tuple(c.server.name or c.server.id for c in crashes)
        storm = int(_opt(self.conf, 'storm_size'))
        if paused:
            return names, 'instance HA is paused'
        if storm and len(crashes) > storm:
            return names, ('storm: %d crashed instances at once, more '
                           'than [instance_failure] storm_size (%d); '
                           'nothing is restarted' % (len(crashes), storm))
        cap = int(_opt(self.conf, 'max_per_cycle'))
        for crash in crashes[:cap]:
            self._tracked.add(crash.server.id)
            plans.append(judge.act(crash, now, stable_time, self.strategy))
        return names[cap:], ('cap of %d per cycle ([instance_failure] '
                             'max_per_cycle); next cycle' % cap)
