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

"""A dead nova-compute on a living host: keep Nova from scheduling there.

Masakari calls it a *process failure*. The plan says ``isolated`` when
Nova reports a host down while the host's own witness (its heartbeat)
says it is alive. Its instances run and must not be touched: fencing it
would kill them, evacuating it would run them twice. But Nova keeps
scheduling new instances onto it until ``service_down_time`` and every
one of them fails. So the compute service is disabled with our marker
(state ``service_down``), an operator is told (``process_failure``, a
warning every notifier and the metrics see), and the service is enabled
again as soon as nova-compute reports ``up``.

The rules every action follows:

* Only our marker is ever removed: a host an operator disabled is out of
  scope in the plan (``ignored``), and one the operator disables while
  our marker is on carries the operator's reason from then on.
* A partition of many hosts is not many process failures: when more
  than one host and more than ``[process_failure] threshold`` percent of
  the monitored hosts are isolated, nothing new is disabled; at most
  ``max_per_cycle`` services are disabled a cycle.
* Every Nova write goes through the guarded cloud port (leadership at
  the moment of the call), as a job of the workflow runtime
  (:mod:`instanceha.engine.runtime`), never on the tick thread: a
  disable or an enable is a workflow of kind ``process_failure`` that
  runs one write and ends; its event is emitted when the write's result
  is applied, in the tick thread.
* A host that fails as a whole later (its heartbeat stops too) is
  planned like any other failed host; the recovery's marker replaces
  ours.
* One disable per episode, and an operator's enable ends the episode.
  The episode's record is our marker in Nova: a host carrying it is ours
  (also for a restarted copy or a new leader, which adopt it). When the
  marker goes while nova-compute is still down (an operator enabled the
  host, or replaced our reason), the episode is the operator's: nothing
  disables the host again until its nova-compute has been seen up.
  Nova clears ``disabled_reason`` on an enable, so what is left after it
  is an enabled isolated host: a copy disables such a host only if it
  saw its nova-compute up itself (since it started or became leader).
  A copy that never did cannot tell a failure it missed from an episode
  an operator ended, and leaves the host enabled (it says so, with the
  ``process_failure_held`` event): an operator's word is never undone on
  a guess.
"""

import dataclasses
import datetime
import enum
import logging

from instanceha.engine import decide
from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha.engine.states import HostState
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: The marker's note: what happened and what happens next.
NOTE = ('nova-compute down while the host is alive (its heartbeat); '
        'enabled again when nova-compute reports up')

#: Why an isolated host is left enabled (the held event's reasons).
ENDED_BY_OPERATOR = ('enabled by someone else during this nova-compute '
                     'outage (their decision wins): left enabled until '
                     'nova-compute has reported up again')
NOT_SEEN_UP = ('nova-compute already down when this copy first read '
               'it (an operator may have enabled the host on purpose): '
               'left enabled; disable it by hand if it should take no '
               'new instances')


class Write(enum.Enum):
    """The states of a ``process_failure`` workflow: one write, then done."""

    DISABLE = 'disable'
    ENABLE = 'enable'
    DONE = 'done'


#: The workflow kind's name in the runtime.
KIND = 'process_failure'


@dataclasses.dataclass(frozen=True)
class _Change:
    """What one workflow writes to a compute service, and what it tells.

    ``failed``: the warning logged when Nova refuses the write (with the
    host and the error); ``event``: emitted once the write is done.
    """

    service: model.Service
    changes: tuple
    failed: str
    event: str
    details: tuple


#: A write's result when the service changed since it was decided.
_TAKEN = 'taken'


def _still_ours(state: Write, svc: model.Service | None) -> bool:
    """Whether ``svc``, read again, is still the one ``state`` writes to.

    A disable is for an enabled service only; an enable lifts our
    marker only (an operator's reason written over it is theirs).
    """
    if svc is None:
        return False
    if state is Write.DISABLE:
        return not svc.disabled
    return reasons.of_disabled(svc).service_down is not None


def _opt(conf, name: str, default):
    try:
        return getattr(conf.process_failure, name)
    except (AttributeError, KeyError, Exception):  # a conf without it
        return default


class ProcessFailures:
    """Disables and re-enables the services of isolated hosts."""

    def __init__(self, conf, env: ports.Environment,
                 workflows: runtime_loop.Runtime):
        self.conf = conf
        self.env = env
        self.workflows = workflows
        workflows.register(runtime.Kind(
            name=KIND,
            transitions={Write.DISABLE: frozenset({Write.DONE}),
                         Write.ENABLE: frozenset({Write.DONE})},
            steps={Write.DISABLE: self._write, Write.ENABLE: self._write},
            final=frozenset({Write.DONE}), on_error=self._failed))
        self._held: dict[str, tuple] = {}
        #: Hosts whose nova-compute this copy saw up since it last led
        #: and whose outage, if any, nobody else has ended: only these
        #: may be disabled.
        self._armed: set[str] = set()
        #: Hosts that carried our marker at the previous cycle.
        self._marked: set[str] = set()
        #: Hosts out of scope at the previous cycle (someone else's
        #: disable; instanceha's own reasons aside).
        self._foreign: set[str] = set()
        #: Isolated hosts whose outage someone else ended (an enable).
        self._ended: set[str] = set()

    def forget(self) -> None:
        """This copy stopped leading: what it saw may be stale."""
        self._armed.clear()
        self._marked.clear()
        self._foreign.clear()
        self._ended.clear()

    def cycle(self, snapshot: model.Snapshot, plan: plan_mod.Plan,
              now: datetime.datetime, paused: bool = False) -> None:
        """One poll: enable what came back, disable what died."""
        # Turned off, it still hands back the hosts it disabled (their
        # marker says so): only new outages are left to be reported.
        self._enable_returned(snapshot, plan, now)
        self._run()
        if not _opt(self.conf, 'enabled', True):
            return
        decisions = {d.host: d for d in plan.decisions}
        self._episodes(snapshot, decisions)
        isolated = sorted(
            h for h, d in decisions.items()
            if d.decision is plan_mod.Decision.ISOLATED)
        candidates = [h for h in isolated
                      if not snapshot.service(h).disabled]
        new = [h for h in candidates if h in self._armed]
        self._report('operator', tuple(
            h for h in candidates if h in self._ended), ENDED_BY_OPERATOR)
        self._report('unseen', tuple(
            h for h in candidates
            if h not in self._armed and h not in self._ended), NOT_SEEN_UP)
        if paused:
            self._report('hold', tuple(new), 'instance HA is paused')
            return
        monitored = [d for d in plan.decisions
                     if d.decision is not plan_mod.Decision.IGNORED]
        threshold = int(_opt(self.conf, 'threshold', 30))
        # One host alone is never a partition.
        if (new and threshold and len(isolated) > 1 and
                len(isolated) * 100 >
                threshold * max(1, len(monitored))):
            self._report('hold', tuple(new), 'partition: %d of %d '
                         'monitored hosts isolated is above '
                         '[process_failure] threshold (%d%%); no compute '
                         'service is disabled'
                         % (len(isolated), len(monitored), threshold))
            return
        cap = int(_opt(self.conf, 'max_per_cycle', 5))
        for host in new[:cap]:
            self._disable(snapshot.service(host), decisions[host],
                          snapshot.nova_now(now))
        self._run()
        self._report('hold', tuple(new[cap:]), 'cap of %d per cycle '
                     '([process_failure] max_per_cycle); next cycle' % cap)

    def _episodes(self, snapshot: model.Snapshot, decisions: dict) -> None:
        """Follow each host's outage: whose it is, and whether it is over.

        Armed: nova-compute seen up (every witness says alive). Disarmed:
        our marker went while nova-compute is still down, or an isolated
        host someone else had disabled is enabled again -- in both cases
        the host's compute service is someone else's decision now.
        """
        ended = self._ended
        marked, foreign = set(), set()
        for svc in snapshot.services:
            host = svc.host
            d = decisions.get(host)
            alive = d is not None and d.verdict == decide.ALIVE
            reading = reasons.of_disabled(svc)
            if reading.service_down is not None:
                marked.add(host)
                self._armed.discard(host)
                ended.discard(host)
            elif svc.disabled:
                if not reading.prefixed:
                    foreign.add(host)
            elif not alive and (host in self._marked or
                                host in self._foreign):
                if host in self._armed or host in self._marked:
                    LOG.warning(
                        'process failure on %s: its compute service was '
                        'enabled by someone else while nova-compute is '
                        'still down; instanceha leaves it enabled until '
                        'nova-compute has reported up again', host)
                self._armed.discard(host)
                ended.add(host)
            if alive:
                self._armed.add(host)
                ended.discard(host)
        self._marked, self._foreign = marked, foreign

    def _report(self, kind: str, hosts: tuple, reason: str = '') -> None:
        """Say once per change which isolated hosts are held, and why."""
        key = (hosts, reason) if hosts else ()
        if key == self._held.get(kind, ()):
            return
        self._held[kind] = key
        if hosts:
            self.env.events.emit(events.PROCESS_FAILURE_HELD, hosts=hosts,
                                 reason=reason)

    def _write(self, view: runtime.View) -> runtime.Outcome:
        """The step of both states: the one write, as a job.

        The service is read again first: the snapshot the write was
        decided on may be older than an operator's disable (or enable)
        of the host, which then wins and nothing is written.
        """
        change: _Change = view.record.durable
        cloud, state = self.env.cloud, view.record.state
        host = change.service.host

        def write():
            try:
                current = cloud.read_services().service(host)
                if not _still_ours(state, current):
                    return _TAKEN
                cloud.update_service(current, **dict(change.changes))
            except exceptions.InstanceHAError as exc:
                return exc
            return None
        # No host lock: one guarded write, as the tick made it before.
        return runtime.Job(run=write, then=self._written, lock=False)

    def _written(self, view: runtime.View, error) -> runtime.Outcome:
        """The write's result, applied in the tick thread."""
        change: _Change = view.record.durable
        if error is _TAKEN:
            LOG.info('process failure on %s: its compute service changed '
                     'before our write (%s): left as it is',
                     change.service.host, view.record.state.value)
            return runtime.Go(Write.DONE)
        if error is not None:
            LOG.warning(change.failed, change.service.host, error)
            return runtime.Go(Write.DONE)
        if view.record.state is Write.DISABLE:
            # Ours from now on: an enable seen at the very next read
            # (before any read showed the marker) ends the episode too.
            self._marked.add(change.service.host)
        return runtime.Go(Write.DONE, emit=runtime.emit(
            change.event, **dict(change.details)))

    @staticmethod
    def _failed(view: runtime.View, exc: BaseException) -> runtime.Outcome:
        """A write that broke: said, and never replayed later.

        The next poll judges the host afresh; a write retried on its own
        could disable a host that came back meanwhile.
        """
        change: _Change = view.record.durable
        LOG.error(change.failed, change.service.host, exc, exc_info=exc)
        return runtime.Go(Write.DONE)

    def _run(self) -> None:
        """Let the runtime take this kind's steps (its writes) now."""
        self.workflows.run(kinds=(KIND,))

    def _start(self, state: Write, change: _Change) -> None:
        self.workflows.start(KIND, change.service.host, state, change)

    def _disable(self, svc: model.Service, decision,
                 nova_now: datetime.datetime) -> None:
        """Disable ``svc`` with our marker (``nova_now``: Nova's clock)."""
        reason = marker_mod.Marker(state=HostState.SERVICE_DOWN,
                                   when=nova_now, nova_clock=True,
                                   note=NOTE).render()
        self._start(Write.DISABLE, _Change(
            service=svc,
            changes=(('status', model.DISABLED),
                     ('disabled_reason', reason)),
            failed=('process failure on %s: could not disable its '
                    'compute service: %s'),
            event=events.PROCESS_FAILURE,
            details=(('reason', '; '.join(decision.reasons)),
                     ('disabled', True))))

    def _enable_returned(self, snapshot: model.Snapshot,
                         plan: plan_mod.Plan,
                         now: datetime.datetime) -> None:
        """Enable our services whose nova-compute reports up again.

        Up means every witness says alive (the plan says healthy): Nova's
        own ``state`` lags by ``service_down_time`` and still says up
        while the heartbeats have already stopped. And Nova's
        ``updated_at`` must be newer than our disable: Nova stamps the
        service on every write, ours too, so right after the disable it
        looks like a fresh report although nova-compute is still down.
        """
        skew = snapshot.clock_skew or 0.0
        for svc in sorted(snapshot.services, key=lambda s: s.host):
            mark = reasons.of_disabled(svc).service_down
            if mark is None:
                continue
            d = plan.decision(svc.host)
            if d is None or d.decision is not plan_mod.Decision.HEALTHY:
                continue
            # On Nova's clock, as updated_at (a marker of an earlier
            # version has it on ours).
            ours_at = mark.on_nova(mark.when, skew)
            if svc.updated_at is not None and not svc.reported_after(
                    ours_at):
                continue  # our own write's time stamp, not a report
            self._start(Write.ENABLE, _Change(
                service=svc, changes=(('status', model.ENABLED),),
                failed='could not enable the compute service of %s '
                       'again: %s',
                event=events.PROCESS_RECOVERED,
                details=(('down_for', int((now - mark.ours(mark.when, skew))
                                          .total_seconds())),)))
