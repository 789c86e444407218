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

"""The recovery engine: one explicit workflow per failed host.

``Engine.tick()`` is one step of the service. Every ``poll`` seconds (by
the environment's clock) it reads a snapshot of the cloud, adopts hosts
whose Nova marker says a recovery is under way (so a restarted service or
a new leader resumes exactly where the last one stopped), asks
:func:`instanceha.engine.decide.make_plan` which failed hosts to recover
and starts their workflows. On every tick it advances each workflow by at
most one step. Slow work (fencing, Nova calls, power-on) runs as jobs on
``env.executor``; a tick only looks at finished futures, so a BMC that
takes a minute never delays anything else.

A host's way through the table of :mod:`instanceha.engine.states`::

    suspect -> fencing -> fenced -> evacuating -> evacuated
            -> powering_on -> waiting_up -> enabling -> healthy

* fencing: a host that cannot be fenced (no configuration, every
  level failed) goes to fence_failed and is retried with back-off; it is
  never evacuated. With kdump checking, a host first gets
  ``kdump_timeout`` seconds to announce a crash dump; a dumping host
  counts as fenced and is never power-cycled.
* fenced: forced down and disabled with a marker, then a spare is
  claimed and the marker says ``evacuating``.
* evacuating: the evacuation strategy's job is stepped until it is
  complete; any instance given up means FAILED (always with smart
  evacuation; with fire-and-forget, unless ``force_enable``).
* evacuated: ``leave_disabled`` ends in left_disabled; otherwise the
  host is powered on (not a kdump host), ``forced_down`` is cleared, and
  it is enabled once Nova reports it ``up``.

Safety: every side effect passes the environment's leadership guard at
the moment it is made (see :class:`instanceha.engine.guard.LeaderGuard`);
the steps' own leadership checks only avoid submitting work that would be
refused. Each job holds the coordinator's lock on its host. Evacuate
calls need a fresh proof that the host is off (``prove_off``); a host an
operator disabled with a reason of their own leaves our hands
(:class:`instanceha.engine.workflow.OperatorTookOver`). A stopping service
changes nothing more, marks nothing FAILED and leaves the markers and our
locks for the next start.
"""

from collections.abc import Callable
import dataclasses

from instanceha.engine import aftercare
from instanceha.engine import events
from instanceha.engine import instance_failure
from instanceha.engine import locks
from instanceha.engine import migration_records
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import pause as pause_mod
from instanceha.engine import poll
from instanceha.engine import ports
from instanceha.engine import process_failure
from instanceha.engine import reads
from instanceha.engine import rebuild_pace
from instanceha.engine import runtime_loop
from instanceha.engine.states import HostState
from instanceha.engine import steps
from instanceha.engine import unforce
from instanceha.engine import watch
from instanceha.engine import workflow
from instanceha.engine.workflow import HostWorkflow
from instanceha.engine.workflow import S


class Engine(poll.Poll, steps.Steps):
    """Drives every failed host's workflow; see the module docstring."""

    def __init__(self, conf, drivers, env: ports.Environment, *,
                 planner: Callable | None = None):
        """Build an engine; it acts only when ticked.

        :param planner: ``(snapshot, now, recovering) -> Plan``; the
            default is :func:`instanceha.engine.decide.make_plan` with the
            configured detectors, filters and gates.
        """
        self.conf = conf
        self.drivers = drivers
        # Every event about a host in recovery, the evacuation jobs' too,
        # carries that recovery's id.
        self.env = dataclasses.replace(env, events=events.RecoveryIdSink(
            env.events, self.recovery_id))
        self._planner = planner
        self._workflows: dict[str, HostWorkflow] = {}
        #: Evacuation slots granted to each host being evacuated (the cap
        #: is handed out round robin, see Evacuating._budget).
        self._grants: dict[str, int] = {}
        self._next_poll: float | None = None
        self._leader: bool | None = None
        #: Monotonic time this copy last began to lead (None: not leading).
        self._leader_since: float | None = None
        #: The latest cycle read Nova (its plan is current).
        self._fresh = False
        #: Ticks so far, and the tick of the latest cycle that read Nova:
        #: a power-off starts only in the tick of such a cycle (see
        #: Steps._judged_now).
        self._ticks = 0
        self._judged_tick: int | None = None
        self._stopping = False
        self.pause = pause_mod.PauseWatch(env.pause, env.events, env.clock)
        self.snapshot: model.Snapshot | None = None
        self._init_reads()
        #: This tick's one listing of evacuation records (see _advance).
        self._listing: migration_records.SharedListing | None = None
        #: Monotonic time of each evacuation job's last step.
        self._stepped: dict[str, float] = {}
        #: How long Nova's rebuilds take (paces every job's listings).
        self._rebuild_pace = rebuild_pace.RebuildPace()
        self.plan, self.cycles = None, 0
        #: Polls that every host's health answered without a full read.
        self.quiet_polls = 0
        #: The gates' reasons of the current whole-plan block (or none).
        self._blocked_by: tuple[str, ...] = ()
        #: The one workflow runtime (the kinds moved onto it so far).
        self.workflows = runtime_loop.Runtime(self.env, leading=self._leading)
        self._declare()
        #: A dead nova-compute on a living host (asked by each cycle).
        self._process = process_failure.ProcessFailures(conf, self.env,
                                                        self.workflows)
        self._unforce = unforce.Unforcer(conf, self)  # see handback
        #: Crashed instances (its own timer, every poll).
        self._instances = instance_failure.InstanceFailures(
            conf, drivers, self.env, self.workflows)
        #: Our locks an earlier copy left on hosts nobody adopted.
        self._locks = locks.LockSweep(conf, self.env, self.workflows)
        self._aftercare = aftercare.Aftercare(conf, self.env,
                                              self.workflows, drivers)

    def _init_reads(self) -> None:
        """What schedules and keeps this copy's reads of Nova."""
        self._watch = watch.ServiceWatch(self._services_interval(),
                                         self._nova_down_time())
        #: Our service writes counted when the latest read began.
        self._writes_read = 0
        #: (monotonic time, snapshot) of the latest read of the services.
        self._services_read: tuple[float, model.Snapshot] | None = None
        #: This tick's services read alone: (monotonic time, snapshot or
        #: None when Nova did not answer); None when none was due.
        self._watched: tuple[float, model.Snapshot | None] | None = None
        self._reads = reads.FocusedReads(self.conf, self.drivers,
                                         self.env.clock)

    def host_states(self) -> dict[str, HostState]:
        """Every host in a workflow and its state, sorted by host."""
        return {h: self._workflows[h].state for h in sorted(self._workflows)}

    def recovery_id(self, host: str) -> str | None:
        """The id of ``host``'s recovery, None when it is in none."""
        wf = self._workflows.get(host)
        if wf is None:
            return self._aftercare.recovery(host)
        return wf.durable.recovery or None

    def workflows(self) -> dict[str, HostWorkflow]:
        return dict(self._workflows)

    def busy(self) -> bool:
        """True while any job is running."""
        return self.workflows.busy()

    def tick(self) -> None:
        """One step; never blocks on slow work.

        Results of finished jobs are applied only while this copy leads:
        a copy that lost its lease forgets them and, leading again,
        resumes from Nova's markers.
        """
        if self._stopping:
            self.workflows.drop_results()
            return
        leader = self._check_leadership()
        now = self.env.clock.monotonic()
        if not leader:
            self._leader_since = None
            self.workflows.drop_results()
            return
        if self._leader_since is None:
            # Leading from here on (a start, or leadership gained): look
            # for locks a copy before us left behind.
            self._leader_since = now
            self._locks.want('leadership gained')
            self._instances.forget()
        self._ticks += 1
        # Results of the jobs finished before the services read only: the
        # read is newer than every write whose result is applied, and the
        # steps submitted from here on write on its strength (see
        # Plumbing._current_service). A job finishing meanwhile waits for
        # the next tick.
        finished = self._finished()
        # Made afresh by _advance: a step taken on a job's result before
        # that lists its own records (see Evacuating._step_evacuation).
        self._listing = None
        self._read_services(now)
        self._harvest(only=finished)
        self._poll_if_due(now)
        if self.conf.disabled:
            return
        # The instances of a host in our hands are its recovery's.
        self.workflows.owners.hold_hosts(
            ownership.Owner.HOST_RECOVERY,
            [h for h in set(self._workflows) | self._aftercare.hosts()
             if self._in_hands(h)])
        if self._fresh:
            # After a full read adopted every host whose marker is ours.
            self._locks.tick(now, self._in_hands)
        # Not while Nova cannot be read (the latest cycle failed).
        self._instances.tick(now, self.snapshot if self._fresh else None,
                             self.plan,
                             frozenset(self._workflows),
                             self.env.clock.now(),
                             paused=self._paused_now)
        self._advance()
        self.workflows.run()

    def _poll_if_due(self, now: float) -> None:
        """Read Nova in full and plan, when the poll or a step wants it."""
        # A plan that waited on gates (veto hooks asked on the executor)
        # is made again as soon as they have answered.
        answered = self.plan is not None and self.plan.answered
        # (Not while Nova cannot be read: the hosts wait for the poll.)
        judge = self._fresh and self._power_off_due(now)
        if not self._full_read_due(now, answered or judge):
            return
        if not judge or self._next_poll is None or now >= self._next_poll:
            # (A read only to judge a power-off keeps the poll's phase.)
            self._next_poll = now + self.conf.poll
        self._cycle()
        if self._fresh:
            self._judged_tick = self._ticks
            self._watch.seen = self._attention()
            self._watch.news = False

    def _in_hands(self, host: str) -> bool:
        """Whether a job of ours looks after our locks on ``host``'s instances.

        Its aftercare, a running job, or a workflow that has yet to
        evacuate (its job reads our locks when it lists the servers). Not
        a workflow that only waits (left disabled, failed, waiting for the
        host to come up): nothing of it would ever unlock an instance that
        a job of an earlier copy locked and did not live to unlock.
        """
        if self._aftercare.watching(host):
            return True
        wf = self._workflows.get(host)
        return wf is not None and (wf.job is not None or
                                   wf.state in workflow.NEEDS_SERVERS)

    def _busy(self) -> int:
        """Workflows holding one of the ``workers`` recovery slots."""
        return sum(1 for wf in self._workflows.values()
                   if wf.state in workflow.BUSY_STATES)

    def _power_off_due(self, now: float) -> bool:
        """Whether a host not yet fenced is to be powered off this tick.

        A power-off is started only on a plan made in the same tick: a
        wait before it (a first kdump message awaited, a fencing retry
        backing off, workers all busy) leaves the latest plan up to a
        poll old, and the host may have come back meanwhile (its
        heartbeat heard again: only cut off, not dead). Such a tick reads
        Nova in full and judges the host again first.
        """
        busy = self._busy()
        for wf in self._workflows.values():
            if not self._due(wf, now):
                continue
            if wf.state is S.FENCE_FAILED:
                return True
            if wf.state is S.SUSPECT and busy < self.conf.workers:
                return True
            deadline = wf.local.kdump_deadline
            if wf.state is S.FENCING and (deadline is None or
                                          now >= deadline):
                return True
        return False

    def _paused_now(self) -> bool:
        """Read the operator's pause now (not only at full reads)."""
        return self.pause.check() is not None

    def wait_hint(self) -> float:
        """Seconds until the compute services should be read again."""
        nxt = self._watch.next_at(self._read_need())
        if nxt is None:
            return 0.0
        return max(0.0, nxt - self.env.clock.monotonic())

    def shutdown(self, timeout: float) -> None:
        """Stop taking new work; let running jobs reach their end.

        A stopping copy changes nothing any more (the leadership guard
        refuses every side effect from here on, clean-ups included):
        the markers in Nova and our locks on instances stay as they are,
        and the next start (or another leader) resumes from them.
        """
        self._stopping = True
        self.env.guard.halt('stopping')
        deadline = self.env.clock.monotonic() + timeout
        running = sorted([wf.host for wf in self._all()
                          if self._running(wf.host)] +
                         self._aftercare.running())
        self.env.events.emit(events.SHUTDOWN, in_flight=tuple(running))
        futures = self.workflows.futures()
        while futures and self.env.clock.monotonic() < deadline:
            if all(f.done() for f in futures):
                break
            self.env.clock.sleep(0.1)
        self.workflows.drop_results()

    def _advance(self) -> None:
        """Advance every workflow by at most one step (see steps.STEPS)."""
        now = self.env.clock.monotonic()
        # One listing of evacuation records this tick for every host
        # being evacuated or watched (read by the first job needing it).
        watched = self._aftercare.watching
        since = [wf.since for wf in self._all()
                 if (wf.state is S.EVACUATING or watched(wf.host))
                 and wf.since is not None] + [
            rec.durable.since for rec in self._aftercare.watched()
            if rec.durable.since is not None]
        self._listing = migration_records.SharedListing(
            self.env.cloud, min(since, default=None))
        busy = self._busy()
        for host in sorted(self._workflows):
            wf = self._workflows.get(host)
            if wf is None or not self._due(wf, now):
                continue
            if self._awaits_fence(wf) and not self._fresh:
                continue  # judged on data Nova could not refresh
            if wf.state is S.SUSPECT:
                if busy >= self.conf.workers:
                    continue
                busy += 1
            step = steps.STEPS.get(wf.state)
            if step is not None:
                step(self, wf)
        for host in sorted(self._workflows):
            # Fenced in this loop (a live crash dump): evacuating at once.
            wf = self._workflows[host]
            if (wf.state is S.EVACUATING and wf.local.unmarked and
                    self._due(wf, now)):
                self._step_evacuation(wf)
        self._aftercare.step(self.snapshot, self._listing)
