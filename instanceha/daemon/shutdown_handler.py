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

"""The shutdown policy's side effects: freeze, migrate, and the return.

The decisions are in :mod:`instanceha.engine.shutdown` and in the
heartbeat detector (a frozen host is held, a failover host is failed at
once); failover then is the engine's ordinary recovery, with the fencing
port reading the host off instead of power-cycling it. What is left is
done here, after every tick of the engine, by the leading copy only and
through the engine's guarded ports:

* freeze: the host's compute service is disabled with a reason of its own
  (:class:`~instanceha.engine.reasons.Frozen`: durable in Nova, shown by
  ``instanceha-manage hosts list``; the ``enabled`` filter keeps the host
  out of scope, so nothing fences it even after a restart of this
  service);
* migrate: the host goes into maintenance (:mod:`instanceha.ops.maintenance`)
  and its instances are live-migrated away while the host's agent waits
  for the answer ``drained``;
* the host returns (a heartbeat from its next boot and Nova reports it up):
  it is enabled again; it does not return within ``[shutdown]
  return_timeout``: it is enabled and from then on judged like any host,
  i.e. failed, fenced and evacuated.

An operator's reason wins: a host disabled by someone else is never
disabled or enabled here.
"""

from collections.abc import Callable
import concurrent.futures
import dataclasses
import datetime
import logging

from instanceha.engine import boundary
from instanceha.engine import events
from instanceha.engine import marker as marker_mod
from instanceha.engine import model
from instanceha.engine import reasons
from instanceha.engine import shutdown
from instanceha.engine import states
from instanceha.heartbeat import protocol
from instanceha.ops import maintenance

LOG = logging.getLogger(__name__)

S = states.HostState

#: Seconds between two looks at moves an earlier leader started.
DRAIN_RECHECK = 5.0


@dataclasses.dataclass(slots=True)
class _Host(boundary.TickOwned):
    """What this copy does about one announced host.

    Written in the tick only: its jobs return values (see
    :mod:`instanceha.engine.boundary`).
    """

    ann: shutdown.Announcement
    policy: str
    source: str
    action: str
    state: S = S.HEALTHY
    #: migrate: None (not decided), running, done or skipped.
    drain: str | None = None
    future: concurrent.futures.Future | None = None
    on_done: Callable | None = None
    overdue: bool = False
    #: Why nothing is done (logged once).
    left: str | None = None
    #: failover: the announcement is recorded in Nova (or need not be).
    recorded: bool = False

    def durable(self) -> bool:
        """Whether the next copy would know what this one decided.

        The agent is answered ``noted`` only then: until it is answered
        it repeats its announcement, so a copy that starts (or leads)
        meanwhile hears it again.
        """
        return (self.recorded or self.overdue or self.left is not None
                or self.state is not S.HEALTHY)


class ShutdownHandler:
    """Freeze, drain and enable announced hosts; answer their agents.

    :param engine: the recovery engine (its snapshot, environment and
        workflows are read; nothing of it is changed).
    :param detector: the heartbeat detector, whose listener heard the
        announcements.
    :param run_all: runs the live migrations of one host (see
        :class:`instanceha.ops.maintenance.Maintenance`).
    """

    def __init__(self, conf, engine, detector,
                 run_all: Callable = maintenance.threaded_map):
        self.conf = conf
        self.engine = engine
        self.detector = detector
        self._run_all = run_all
        self._hosts: dict[str, _Host] = {}
        #: host -> when we enabled it again: until a read newer than that,
        #: the snapshot still shows our freeze (not an orphan to enable).
        self._enabled: dict[str, datetime.datetime] = {}
        self._leader = False

    @property
    def env(self):
        return self.engine.env

    # -- the listener's question: what to answer an agent ---------------

    def respond(self, ann: shutdown.Announcement) -> str | None:
        """The reply to an announcement (listener thread); None: none.

        Only the leading copy answers. migrate: ``draining`` until the
        host's instances were moved, then ``drained``; otherwise
        ``noted``.
        """
        if not self._leads():
            return None
        if self.conf.disabled:
            return protocol.NOTED  # detect-only: nothing will be drained
        h = self._hosts.get(ann.host)
        if h is not None and (h.ann.boot_id, h.ann.kind) == (
                ann.boot_id, ann.kind):
            action = h.action
        else:
            h = None
            policy, _ = shutdown.policy_of(self.conf, self.engine.snapshot,
                                           ann.host)
            action = self._action(policy, ann.kind)
        if action != shutdown.MIGRATE:
            # Noted once what was decided is in Nova (see _Host.durable);
            # no answer yet: the agent asks again a second later.
            return protocol.NOTED if h is not None and h.durable() else None
        if h is None or h.drain in (None, 'running'):
            return protocol.DRAINING
        return protocol.DRAINED if h.drain == 'done' else protocol.NOTED

    def _action(self, policy: str, kind: str) -> str:
        """The policy's action; migrate freezes while instance HA is paused.

        A pause holds everything new: no host is put into maintenance
        and nothing is moved; a frozen host is still never fenced.
        """
        action = shutdown.effective(policy, kind)
        pause = getattr(self.engine, 'pause', None)
        if action == shutdown.MIGRATE and getattr(pause, 'active', None):
            return shutdown.FREEZE
        return action

    def _skew(self) -> float | None:
        """Seconds our clock is ahead of Nova's, as last measured."""
        snapshot = self.engine.snapshot
        return snapshot.clock_skew if snapshot is not None else None

    def _nova_now(self) -> datetime.datetime:
        """Now on Nova's clock: the clock of the records we keep in Nova.

        A copy that reads them back (after a restart, or a new leader)
        may run on a clock stepped since: only Nova's names the same
        moment for both.
        """
        return marker_mod.to_nova(self.env.clock.now(), self._skew())

    def _leads(self) -> bool:
        return bool(self.env.coordinator.is_leader()
                    and not self.env.guard.halted)

    # -- every tick ---------------------------------------------------------

    def step(self) -> None:
        listener = self.detector.listener
        if listener is None:
            return
        if getattr(listener, 'responder', None) is None:
            listener.responder = self.respond
        self._leader = self._leads()
        self._harvest()
        snapshot = self.engine.snapshot
        if not self._leader or snapshot is None or self.conf.disabled:
            return
        pending = listener.announced()
        for host in sorted(set(self._hosts) - set(pending)):
            if self._hosts[host].future is None:
                del self._hosts[host]
        for host in sorted(pending):
            self._one(listener, pending[host], snapshot)
        for host, when in list(self._enabled.items()):
            if snapshot.taken_at > when:
                del self._enabled[host]
        for svc in snapshot.services:
            if svc.host in pending or svc.host in self._enabled:
                continue
            reading = reasons.of_disabled(svc)
            if reading.frozen:
                self._orphan(listener, svc, reading.frozen)
            elif reading.drain:
                self._orphan_drain(listener, svc)

    def _harvest(self) -> None:
        for h in list(self._hosts.values()):
            fut = h.future
            if fut is None or not fut.done():
                continue
            h.future, on_done, h.on_done = None, h.on_done, None
            exc = fut.exception()
            if exc is not None:
                LOG.warning('host %s: shutdown policy step failed (tried '
                            'again next tick): %s', h.ann.host, exc)
                if h.drain == 'running':
                    h.drain = None
                    self._move(h, S.HEALTHY, reason='drain failed: %s'
                               % str(exc)[:200])
                continue
            if self._leader:
                on_done(fut.result())

    def _submit(self, h: _Host, fn: Callable, on_done: Callable) -> None:
        coordinator = self.env.coordinator

        def job():
            with coordinator.host_lock(h.ann.host):
                return fn()

        h.on_done = on_done
        h.future = self.env.executor.submit(boundary.as_job(
            'shutdown step of %s' % h.ann.host, job))

    def _emit(self, event: str, host: str, **details) -> None:
        self.env.events.emit(event, host, **details)

    def _move(self, h: _Host, new: S, **details) -> None:
        if new is h.state:
            return
        states.check_transition(h.ann.host, h.state, new)
        old, h.state = h.state, new
        self._emit(events.HOST_STATE, h.ann.host, old=old.value,
                   new=new.value, **details)

    # -- one announced host -------------------------------------------------

    def _one(self, listener, ann: shutdown.Announcement,
             snapshot: model.Snapshot) -> None:
        host = ann.host
        h = self._hosts.get(host)
        if h is None or (h.ann.boot_id, h.ann.kind) != (ann.boot_id,
                                                        ann.kind):
            if h is not None and h.future is not None:
                return  # the previous one's step ends first
            policy, source = shutdown.policy_of(self.conf, snapshot, host)
            h = self._hosts[host] = _Host(
                ann=ann, policy=policy, source=source,
                action=self._action(policy, ann.kind))
            self._emit(events.SHUTDOWN_ANNOUNCED, host, kind=ann.kind,
                       policy=policy, origin=source, action=h.action)
        h.ann = ann
        svc = snapshot.service(host)
        if h.future is not None or svc is None:
            return
        if listener.returned(host):
            self._returned(h, svc, listener)
            return
        if h.overdue:
            return  # the engine's recovery
        if h.action == shutdown.FAILOVER:
            self._record(h, svc)
            return  # the engine's recovery
        silent = listener.now() - ann.last
        if silent > self.conf.shutdown.return_timeout:
            self._overdue(h, svc, silent)
        elif h.action == shutdown.FREEZE and h.state is S.HEALTHY:
            self._freeze(h, svc, silent)
        elif h.action == shutdown.MIGRATE and h.drain is None:
            self._drain(h, svc)

    def _not_ours(self, h: _Host, svc: model.Service) -> str | None:
        """Why the host must be left as it is (None: it may be changed)."""
        if h.ann.host in self.engine.host_states():
            return 'it is being recovered'
        if svc.disabled:
            return 'its compute service is disabled (reason: %s)' % (
                svc.disabled_reason or 'none')
        return None

    def _leave(self, h: _Host, why: str) -> None:
        if h.left != why:
            h.left = why
            LOG.info('host %s announced a %s: %s; the shutdown policy '
                     'leaves it as it is', h.ann.host, h.ann.kind, why)

    def _freeze(self, h: _Host, svc: model.Service, silent: float) -> None:
        if reasons.of_disabled(svc).frozen:
            self._move(h, S.FROZEN, reason='frozen by an earlier leader')
            return
        why = self._not_ours(h, svc)
        if why:
            self._leave(h, why)
            return
        now = self._nova_now()
        left = max(0, int(self.conf.shutdown.return_timeout - silent))
        reason = reasons.Frozen(
            since=now, kind=h.ann.kind,
            until=now + datetime.timedelta(seconds=left), nova_clock=True,
            note='policy %s (%s)' % (h.policy, h.source)).render()
        cloud = self.env.cloud

        def freeze():
            cloud.update_service(svc, status=model.DISABLED,
                                 disabled_reason=reason)

        self._submit(h, freeze, lambda _: self._move(
            h, S.FROZEN, kind=h.ann.kind, policy=h.policy, expect_in=left))

    def _record(self, h: _Host, svc: model.Service) -> None:
        """failover: disable the host with the announcement's record.

        The engine recovers the host (it is in scope: see
        :class:`~instanceha.engine.reasons.Frozen`); the record makes
        the announcement durable before the agent is answered, so a copy
        that resumes before the host is proven off still reads it off
        instead of power-cycling it. Nothing is written over another
        reason (an operator's, or the recovery's marker once fenced): the
        service is read again under the host's lock first.
        """
        if h.recorded:
            return
        if svc.disabled:
            h.recorded = True
            if not (reasons.of_disabled(svc).frozen or
                    reasons.of_service(svc).marker):
                self._leave(h, 'its compute service is disabled (reason: '
                            '%s)' % (svc.disabled_reason or 'none'))
            return
        now = self._nova_now()
        reason = reasons.Frozen(
            since=now, kind=h.ann.kind, action=reasons.FAILOVER,
            nova_clock=True, until=now + datetime.timedelta(
                seconds=self.conf.shutdown.return_timeout),
            note='policy %s (%s): recovered elsewhere once proven off'
            % (h.policy, h.source)).render()
        cloud = self.env.cloud
        host = h.ann.host

        def record():
            current = cloud.read_services().service(host)
            if current is not None and not current.disabled:
                cloud.update_service(current, status=model.DISABLED,
                                     disabled_reason=reason)

        self._submit(h, record, lambda _: setattr(h, 'recorded', True))

    def _maintenance(self, purpose: str) -> maintenance.Maintenance:
        """Nova maintenance work, its progress logged as ``purpose``'s."""
        return maintenance.Maintenance(
            self.env.cloud, out=lambda text: LOG.info(
                'shutdown %s: %s', purpose, text), clock=self.env.clock,
            run_all=self._run_all)

    def _drain(self, h: _Host, svc: model.Service) -> None:
        # A drain an earlier leader started is ours: it is resumed (what
        # is left is moved, moves under way are waited for), never taken
        # for finished.
        resumed = reasons.of_disabled(svc).drain
        why = (None if resumed else self._not_ours(h, svc)) or (
            'its compute service is down: nothing can be live-migrated'
            if svc.state != model.UP or svc.forced_down else None)
        if why:
            h.drain = 'skipped'
            self._leave(h, why)
            return
        h.drain = 'running'
        self._move(h, S.DRAINING, kind=h.ann.kind, policy=h.policy,
                   **({'reason': 'resumed: started by an earlier leader'}
                      if resumed else {}))
        work = self._maintenance('drain')
        now = self.env.clock.now()
        note = '%s %s announced' % (reasons.DRAIN_NOTE, h.ann.kind)
        timeout = self.conf.shutdown.drain_timeout

        clock = self.env.clock
        cloud = self.env.cloud
        host = h.ann.host

        def still_ours() -> bool:
            # An operator who enabled the host (or gave it a reason of
            # their own) meanwhile took it: it is not disabled again.
            return reasons.of_disabled(
                cloud.read_services().service(host)).drain

        def drain():
            deadline = clock.monotonic() + timeout
            outcomes: list = []
            again = resumed
            while True:
                if again and not still_ours():
                    return outcomes
                outcomes = work.start(host, now, note=note, wait=True,
                                      timeout=timeout,
                                      concurrency=max(1, self.conf.workers))
                # Moves another copy started are not followed by start():
                # asked again until they have ended.
                if (not any(o.result == 'running' for o in outcomes)
                        or clock.monotonic() >= deadline):
                    return outcomes
                again = True
                clock.sleep(DRAIN_RECHECK)

        def done(outcomes):
            h.drain = 'done'
            moved = sum(1 for o in outcomes if o.result == 'moved')
            self._emit(events.SHUTDOWN_DRAINED, h.ann.host, moved=moved,
                       left=len(outcomes) - moved)
            self._move(h, S.FROZEN, reason='instances moved away')

        self._submit(h, drain, done)

    def _enable_frozen(self, host: str) -> Callable:
        """The job enabling ``host`` if it still carries our record.

        Read again under the host's lock: the recovery (failover) may
        have replaced the record with its marker meanwhile, and an
        operator may have taken the host.
        """
        cloud = self.env.cloud

        def enable():
            current = cloud.read_services().service(host)
            if current is not None and reasons.of_disabled(current).frozen:
                cloud.update_service(current, status=model.ENABLED)

        return enable

    def _enable(self, h: _Host, svc: model.Service) -> Callable | None:
        """The job that enables the host again, None if it is not ours."""
        if reasons.of_disabled(svc).frozen:
            return self._enable_frozen(h.ann.host)
        if reasons.of_disabled(svc).drain:
            work = self._maintenance('return')
            return lambda: work.end(h.ann.host)
        return None

    def _returned(self, h: _Host, svc: model.Service, listener) -> None:
        if svc.state != model.UP or svc.forced_down:
            return  # heartbeating again; nova-compute not yet up
        after = int(listener.now() - h.ann.first)
        job = self._enable(h, svc)

        def done(_):
            if job is not None:
                self._enabled[h.ann.host] = self.env.clock.now()
            self._emit(events.SHUTDOWN_RETURNED, h.ann.host,
                       kind=h.ann.kind, after=after,
                       enabled=job is not None)
            self._move(h, S.HEALTHY, reason='back')
            forget = getattr(listener, 'forget_announcement', None)
            if forget is not None:
                forget(h.ann.host)
            self._hosts.pop(h.ann.host, None)

        if job is None:
            done(None)
        else:
            self._submit(h, job, done)

    def _overdue(self, h: _Host, svc: model.Service, silent: float) -> None:
        h.overdue = True
        self._emit(events.SHUTDOWN_OVERDUE, h.ann.host, kind=h.ann.kind,
                   silent=int(silent))
        job = self._enable(h, svc)
        reason = ('not back within [shutdown] return_timeout: judged like '
                  'any host from now on')

        if job is None:
            if h.state is not S.HEALTHY:
                self._move(h, S.HEALTHY, reason=reason)
            return
        self._submit(h, job, lambda _: self._move(h, S.HEALTHY,
                                                  reason=reason))

    def _orphan(self, listener, svc: model.Service,
                fr: reasons.Frozen) -> None:
        """A freeze in Nova that no announcement in memory explains.

        This copy did not hear the announcement (it started, or became
        the leader, later): the host is back when its agent beats again
        (an agent stops beating when it announces) and Nova reports it
        up; past the freeze's ``until`` it is overdue.
        """
        host = svc.host
        h = self._hosts.get(host)
        if h is not None and h.future is not None:
            return
        now = self.env.clock.now()
        age = listener.age(host)
        back = (svc.state == model.UP and not svc.forced_down
                and age is not None
                and age <= self.conf.heartbeat.timeout)
        # Its times on our clock as it runs now (see _nova_now).
        skew = self._skew()
        fr = dataclasses.replace(fr, since=fr.ours(fr.since, skew),
                                 until=fr.ours(fr.until, skew),
                                 nova_clock=False)
        if not back and (fr.failover or now <= fr.until):
            # A failover record stays until the recovery replaces it.
            return
        ann = shutdown.Announcement(host=host, kind=fr.kind, boot_id=b'',
                                    first=0.0, last=0.0)
        h = self._hosts[host] = _Host(ann=ann, policy='', source='',
                                      action=shutdown.FREEZE, state=S.FROZEN)
        enable = self._enable_frozen(host)

        if back:
            self._submit(h, enable, lambda _: (
                self._enabled.__setitem__(host, self.env.clock.now()),
                self._emit(events.SHUTDOWN_RETURNED, host, kind=fr.kind,
                           after=int((now - fr.since).total_seconds()),
                           enabled=True),
                self._move(h, S.HEALTHY, reason='back'),
                self._hosts.pop(host, None)))
        else:
            h.overdue = True
            self._emit(events.SHUTDOWN_OVERDUE, host, kind=fr.kind,
                       silent=int((now - fr.since).total_seconds()))
            self._submit(h, enable, lambda _: (
                self._enabled.__setitem__(host, self.env.clock.now()),
                self._move(h, S.HEALTHY, reason=(
                    'not back within [shutdown] return_timeout: judged '
                    'like any host from now on')),
                self._hosts.pop(host, None)))

    def _orphan_drain(self, listener, svc: model.Service) -> None:
        """A drain in Nova that no announcement in memory explains.

        Its host is back when its agent beats again (an agent stops
        beating when it announces) and Nova reports it up: maintenance
        ends as for a host whose return this copy saw.
        """
        host = svc.host
        h = self._hosts.get(host)
        if h is not None and h.future is not None:
            return
        age = listener.age(host)
        if not (svc.state == model.UP and not svc.forced_down
                and age is not None
                and age <= self.conf.heartbeat.timeout):
            return
        parsed = reasons.of_service(svc).maintenance
        kind = (shutdown.REBOOT if parsed and 'reboot' in parsed.note
                else shutdown.POWEROFF)
        ann = shutdown.Announcement(host=host, kind=kind, boot_id=b'',
                                    first=0.0, last=0.0)
        h = self._hosts[host] = _Host(ann=ann, policy='', source='',
                                      action=shutdown.MIGRATE, state=S.FROZEN,
                                      drain='done')
        work = self._maintenance('return')
        now = self.env.clock.now()
        since = parsed.since if parsed else now
        self._submit(h, lambda: work.end(host), lambda _: (
            self._enabled.__setitem__(host, self.env.clock.now()),
            self._emit(events.SHUTDOWN_RETURNED, host, kind=kind,
                       after=int((now - since).total_seconds()),
                       enabled=True),
            self._move(h, S.HEALTHY, reason='back'),
            self._hosts.pop(host, None)))

    # The service's tick loop tells every observer about each tick.

    def tick_started(self) -> None:
        pass

    def tick_finished(self, engine, error: str | None = None) -> None:
        self.step()


def find_detector(drivers):
    """The heartbeat detector among the configured ones, or None."""
    from instanceha.plugins.detectors import heartbeat
    for det in drivers.detectors:
        if isinstance(det, heartbeat.HeartbeatDetector):
            return det
    return None
