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

"""Our locks that outlived the copy that took them: found and taken off.

An evacuation job unlocks the instances it locked once their rebuilds
end, and a copy that resumes a host from its marker watches that host's
rebuilds again (:mod:`instanceha.engine.evacuation_job`). A host that left
our hands while no copy could watch it (an operator disabled it with a
reason of their own while the leader was down or about to lose its
lease: our marker is gone) is adopted by nobody, and its instances would
stay locked for good. This sweep is the net for those:

* Nova's listing of locked servers (``locked=true``, one small call)
  is read when this copy gains leadership (after its first full read,
  so every host whose marker is ours is adopted by then) and when an
  operator takes a host from us, never while every host is plainly
  healthy;
* an instance whose lock reason is ours (it names the host it was
  evacuated from, see :class:`instanceha.engine.reasons.Lock`)
  is left alone while a job of ours looks after that host's instances
  (its evacuation, its aftercare, or a recovery yet to evacuate, whose
  job reads our locks) and while it is being rebuilt (Nova's task
  state); otherwise, if it was rebuilt elsewhere, the status its lock
  reason recorded (``was SHUTOFF``, ``was ERROR``) is restored, and it is
  unlocked;
* a lock whose reason is not ours (a user's, an operator's, or none) is
  never touched;
* while some were still being rebuilt (or an unlock failed), the listing
  is read again every ``poll`` seconds until none is left; a host whose
  job held some of ours has them looked at again once no job of ours
  looks after them. A host left disabled, failed or waiting to come up
  no longer does: a lock its evacuation job did not live to take off
  (the copy stopped after a rebuild failed) is found then.

It is a workflow of kind ``lock_sweep`` on the runtime
(:mod:`instanceha.engine.runtime`): the listing and the unlocks are its
jobs, never a call on the tick thread; what they found is applied in
the tick thread. It runs only while this copy leads and ``[DEFAULT]
disabled`` is false; every write passes the guarded cloud port
(leadership at the moment of the call). The unlocks own their instances
(:mod:`instanceha.engine.ownership`) while they run: a host recovery
that takes their host meanwhile has them left to it; and each instance
is read again right before it is touched.
"""

from collections.abc import Callable
import dataclasses
import enum
import logging

from instanceha.engine import evacuation
from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import ownership
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: The workflow kind's name in the runtime (one sweep at a time).
KIND = 'lock_sweep'
_SWEEP = 'sweep'


class Sweep(enum.Enum):
    """The states of a sweep: list (then unlock), done."""

    LIST = 'list'
    DONE = 'done'


@dataclasses.dataclass(frozen=True)
class Release:
    """One instance of ours to unlock: as listed, where it was taken."""

    server: model.Server
    source: str
    was: str | None


@dataclasses.dataclass(frozen=True)
class Released:
    """The unlock job's value: what to tell, how many to look at again."""

    emit: runtime.Emit
    left: int


class LockSweep:
    """Finds instances locked by an earlier copy and unlocks them."""

    def __init__(self, conf, env: ports.Environment,
                 workflows: runtime_loop.Runtime):
        self.conf = conf
        self.env = env
        self.workflows = workflows
        #: Why a sweep is wanted (None: none is).
        self._why: str | None = None
        #: Monotonic time before which no sweep is read (None: at once).
        self._next: float | None = None
        #: Hosts in our hands whose instances carried our lock at the
        #: latest sweep: swept again once their recovery has ended (a
        #: new failure of a host may not know an earlier one's locks).
        self._waiting: set[str] = set()
        #: Sweeps read so far (for tests and benchmarks).
        self.sweeps = 0
        workflows.register(runtime.Kind(
            name=KIND, transitions={Sweep.LIST: frozenset({Sweep.DONE})},
            steps={Sweep.LIST: self._list}, final=frozenset({Sweep.DONE}),
            on_error=self._broke, owner=ownership.Owner.LOCK_SWEEP,
            on_conflict=self._gives_way))

    def want(self, why: str) -> None:
        """Read the locked servers at the next chance (``why``: logged)."""
        self._why = why
        self._next = None

    def tick(self, mono: float, in_hands: Callable[[str], bool]) -> None:
        """Sweep when one is wanted and due (the tick thread, as leader).

        ``in_hands(host)``: whether a job of ours looks after our locks
        on ``host``'s instances; asked when the listing is applied.
        """
        if self._why is None and self._waiting:
            ended = sorted(h for h in self._waiting if not in_hands(h))
            if ended:
                self._waiting.difference_update(ended)
                self.want('evacuation of %s ended' % ', '.join(ended))
        if self._why is not None and (self._next is None or
                                      mono >= self._next) and \
                self.workflows.get(KIND, _SWEEP) is None:
            why, self._why = self._why, None
            self.sweeps += 1
            self.workflows.start(KIND, _SWEEP, Sweep.LIST, local={
                'why': why, 'in_hands': in_hands})
        self.workflows.run(kinds=(KIND,))

    def _list(self, view: runtime.View) -> runtime.Outcome:
        """The listing of the locked servers, as a job."""
        return runtime.Job(run=self.env.cloud.locked_servers,
                           then=self._listed, lock=False)

    def _listed(self, view: runtime.View, found) -> runtime.Outcome:
        """Sort the listing (tick thread); unlock ours that are at rest."""
        in_hands = view.record.local['in_hands']
        left, todo = 0, []
        self._waiting = set()
        for srv in sorted(found, key=lambda s: s.id):
            lock = reasons.of_lock(srv).lock
            if lock is None:
                continue  # not ours: never touched
            if in_hands(lock.host):
                self._waiting.add(lock.host)  # its workflow watches it
            elif srv.task_state:
                LOG.debug('instance %s (locked while evacuated from %s) is '
                          'still %s: unlocked when that ends', srv.id,
                          lock.host, srv.task_state)
                left += 1
            else:
                todo.append(Release(srv, lock.host, lock.was))
        if not todo:
            return self._finish(view, left)
        cloud, why = self.env.cloud, view.record.local['why']
        return runtime.Job(
            run=lambda: _release_all(cloud, tuple(todo), why),
            then=lambda v, done: self._finish(v, left + done.left,
                                              done.emit),
            lock=False, acts_on=tuple((r.server.id, r.source)
                                      for r in todo))

    def _finish(self, view: runtime.View, left: int,
                told: runtime.Emit = ()) -> runtime.Outcome:
        """Some of ours to look at again: the listing again next poll."""
        if left and self._why is None:
            self._why = view.record.local['why']
            self._next = view.now + float(self.conf.poll)
        return runtime.Go(Sweep.DONE, emit=told)

    def _broke(self, view: runtime.View, exc: BaseException
               ) -> runtime.Outcome:
        if isinstance(exc, exceptions.InstanceHAError):
            LOG.warning('instances locked by an earlier copy of instanceha: '
                        'cannot look for them now (%s); trying again in '
                        '%s s', exc, self.conf.poll)
        else:
            LOG.error('lock sweep: unexpected error', exc_info=exc)
        return self._finish(view, 1)

    def _gives_way(self, view: runtime.View, rule: ownership.Rule,
                   holder: ownership.Claim) -> runtime.Outcome:
        """A workflow took one of the instances: all are looked at later."""
        return self._finish(view, 1)


def _release_all(cloud: ports.CloudPort, todo: tuple[Release, ...],
                 why: str) -> Released:
    """Unlock each (a job); what to tell and how many are left."""
    told: list = []
    left = 0
    for rel in todo:
        try:
            left += _release(cloud, rel, why, told)
        except exceptions.CloudError as exc:
            if getattr(exc, 'status', None) == 404:
                continue  # deleted meanwhile
            LOG.warning('instance %s: cannot unlock it now: %s',
                        rel.server.id, exc)
            left += 1
    return Released(tuple(told), left)


def _release(cloud: ports.CloudPort, rel: Release, why: str,
             told: list) -> int:
    """Restore its status if it was rebuilt elsewhere, then unlock.

    Read again first: a rebuild begun since the listing leaves it for
    later (1), a lock that is no longer ours is not touched.
    """
    srv = cloud.get_server(rel.server.id)
    lock = reasons.of_lock(srv).lock
    if not srv.locked or lock is None or lock.host != rel.source:
        return 0
    if srv.task_state:
        return 1
    if srv.host and srv.host != rel.source:
        restored = evacuation.restore_status(cloud, srv, rel.was)
        if restored:
            told.extend(runtime.emit_on(
                rel.source, events.POWER_STATE_RESTORED, server=srv.id,
                status=restored))
    cloud.set_server_lock(srv.id, False)
    told.extend(runtime.emit_on(rel.source, events.SERVER_UNLOCKED,
                                server=srv.id, found=why))
    return 0
