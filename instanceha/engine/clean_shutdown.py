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

"""An announced clean shutdown, as a workflow kind of the runtime.

The policy's decisions (:mod:`instanceha.engine.shutdown`) and the
heartbeat detector's (a frozen host is held, a failover host is failed at
once) say what an announced host is; this kind does what is left, by the
leading copy only, through the engine's guarded ports and as jobs of the
workflow runtime (:mod:`instanceha.engine.runtime`):

* freeze: the host's compute service is disabled with a record of its own
  (:class:`~instanceha.engine.reasons.Frozen`: durable in Nova; the
  ``enabled`` filter keeps the host out of scope, so nothing fences it
  even after a restart of the service);
* failover: the announcement is recorded the same way (``action=
  failover``) before the agent is answered; the engine's recovery then
  reads the host off instead of power-cycling it;
* migrate: the host goes into maintenance and its instances are
  live-migrated away (the :class:`Effects` wired by the service) while
  the host's agent waits for the answer ``drained``;
* the host returns (a heartbeat from its next boot and Nova reports it
  up): it is enabled again; not back within ``[shutdown]
  return_timeout``: it is enabled and from then on judged like any host.

A record in Nova that no announcement in memory explains (this copy
started, or became the leader, after it was heard) is a workflow too: it
ends the same way when the host is back or overdue.

An operator's reason wins: a host disabled by someone else is never
disabled or enabled here. The workflow's key is the host; what its
steps look at is a :class:`World`, read once a tick by the service.
"""

import functools
import logging

from instanceha.engine import events
from instanceha.engine import ownership
from instanceha.engine import ports
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha.engine import shutdown
from instanceha.engine import shutdown_acts as acts
from instanceha.engine import shutdown_flow as flow
from instanceha.engine.shutdown_flow import Durable
from instanceha.engine.shutdown_flow import Effects
from instanceha.engine.shutdown_flow import KIND
from instanceha.engine.shutdown_flow import P
from instanceha.engine.shutdown_flow import World

LOG = logging.getLogger(__name__)


class CleanShutdowns:
    """The ``shutdown`` kind: its table and its steps (see the module)."""

    def __init__(self, conf, env: ports.Environment,
                 workflows: runtime_loop.Runtime, effects: Effects):
        self.conf = conf
        self.workflows = workflows
        self.ctx = flow.Context(conf=conf, env=env, effects=effects)
        workflows.register(runtime.Kind(
            name=KIND, transitions=flow.TRANSITIONS,
            steps={P.HEARD: self._heard,
                   **{state: self._stepped(self._announced) for state in (
                       P.ANNOUNCED, P.RECORDED, P.FROZEN, P.OVERDUE)},
                   P.FOUND: self._stepped(functools.partial(acts.found,
                                                            self.ctx)),
                   P.SETTLING: self._stepped(self._settling)},
            final=frozenset({P.DONE}), on_error=self._failed, settle=True,
            owner=ownership.Owner.DRAIN,
            on_conflict=functools.partial(acts.gives_way, self.ctx)))

    # -- what the service asks, every tick and from the listener ---------

    def heard(self, world: World) -> None:
        """Begin a workflow for each announcement and orphan (tick)."""
        for host in sorted(world.pending):
            if self.workflows.get(KIND, host) is None:
                self.workflows.start(KIND, host, P.HEARD)
        for svc in world.snapshot.services:
            if (svc.host not in world.pending and
                    self.workflows.get(KIND, svc.host) is None and
                    acts.found_due(self.ctx, world, svc) is not None):
                self.workflows.start(KIND, svc.host, P.FOUND)

    def action(self, policy: str, kind: str, paused: bool) -> str:
        """The policy's action; migrate freezes while instance HA is paused.

        A pause holds everything new: no host is put into maintenance
        and nothing is moved; a frozen host is still never fenced.
        """
        action = shutdown.effective(policy, kind)
        return shutdown.FREEZE if (action == shutdown.MIGRATE and
                                   paused) else action

    def noted(self, host: str, ann: shutdown.Announcement) -> Durable | None:
        """The workflow's durable part if it is ``ann``'s, else None."""
        rec = self.workflows.get(KIND, host)
        d = rec.durable if rec is not None else None
        return d if isinstance(d, Durable) and d.heard(ann) else None

    def settled(self, host: str) -> bool:
        """Whether ``host``'s return is done (its announcement forgotten)."""
        rec = self.workflows.get(KIND, host)
        return rec is not None and rec.state is P.SETTLING

    def known(self, host: str) -> bool:
        """Whether the next copy would know what this one decided.

        The agent is answered ``noted`` only then: until it is answered
        it repeats its announcement, so a copy that starts (or leads)
        meanwhile hears it again.
        """
        rec = self.workflows.get(KIND, host)
        return rec is not None and (
            rec.state not in (P.HEARD, P.ANNOUNCED) or
            rec.local.get('left') is not None)

    def drain_answer(self, host: str) -> str:
        """migrate: ``draining``, ``drained`` or ``skipped``."""
        rec = self.workflows.get(KIND, host)
        if rec is None or self.workflows.running(KIND, host):
            return 'draining'
        if isinstance(rec.durable, Durable) and rec.durable.drained:
            return 'drained'
        return 'skipped' if rec.local.get('skipped') else 'draining'

    # -- the steps ----------------------------------------------------------

    def _again(self, view: runtime.View) -> runtime.Outcome | None:
        """A new announcement starts over; a forgotten one ends."""
        world: World = view.world
        ann = world.pending.get(view.record.key)
        d = view.record.durable
        if ann is None:
            return None if view.record.state in (
                P.FOUND, P.SETTLING) else runtime.Go(P.DONE)
        if isinstance(d, Durable) and d.heard(ann) and \
                view.record.state is not P.FOUND:
            return None
        return runtime.Go(P.HEARD, durable=None)

    def _heard(self, view: runtime.View) -> runtime.Outcome:
        world: World = view.world
        if not isinstance(world, World):
            return runtime.Wait()
        host = view.record.key
        ann = world.pending.get(host)
        if ann is None:
            return runtime.Go(P.DONE)
        policy, source = shutdown.policy_of(self.conf, world.snapshot, host)
        action = self.action(policy, ann.kind, world.paused)
        return runtime.Go(
            P.ANNOUNCED, durable=Durable(ann=ann, policy=policy,
                                         source=source, action=action),
            emit=runtime.emit(events.SHUTDOWN_ANNOUNCED, kind=ann.kind,
                              policy=policy, origin=source, action=action))

    def _stepped(self, body: runtime.Step) -> runtime.Step:
        """``body`` as a step: a new announcement first starts over.

        A run without the listener's world (the engine's own, which only
        applies finished jobs) decides nothing.
        """
        def step(view: runtime.View) -> runtime.Outcome:
            if not isinstance(view.world, World):
                return runtime.Wait()
            again = self._again(view)
            return again if again is not None else body(view)
        return step

    def _announced(self, view: runtime.View) -> runtime.Outcome:
        """announced, recorded, frozen, overdue: act, or await the return."""
        world: World = view.world
        host, d, state = view.record.key, view.record.durable, \
            view.record.state
        svc = world.snapshot.service(host)
        if svc is None:
            return runtime.Wait()
        if host in world.returned:
            return acts.returned(self.ctx, view, svc)
        silent = world.now - world.pending[host].last
        late = silent > self.conf.shutdown.return_timeout
        if state is not P.ANNOUNCED:
            return (acts.overdue(self.ctx, view, svc, silent)
                    if state is P.FROZEN and late else runtime.Wait())
        if d.action == shutdown.FAILOVER:
            return acts.record(self.ctx, view, svc)
        if late:
            return acts.overdue(self.ctx, view, svc, silent)
        if d.action == shutdown.FREEZE:
            return acts.freeze(self.ctx, view, svc, silent)
        if view.record.local.get('skipped'):
            return runtime.Wait()
        return acts.drain(self.ctx, view, svc)

    def _settling(self, view: runtime.View) -> runtime.Outcome:
        """Done once the announcement is forgotten and a read shows us.

        Until a read newer than our enable, the snapshot still shows our
        record: it is no orphan to enable again.
        """
        world: World = view.world
        when = view.record.local.get('enabled_at')
        if view.record.key in world.pending:
            return runtime.Wait()  # forgotten by the service first
        if when is None or world.snapshot.taken_at > when:
            return runtime.Go(P.DONE)
        return runtime.Wait()

    @staticmethod
    def _failed(view: runtime.View, exc: BaseException) -> runtime.Outcome:
        LOG.warning('host %s: shutdown policy step failed (tried again '
                    'next tick): %s', view.record.key, exc)
        return runtime.Retry(0.5, str(exc))
