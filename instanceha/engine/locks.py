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

It runs in the tick thread, only while this copy leads and
``[DEFAULT] disabled`` is false; every write passes the guarded cloud
port (leadership at the moment of the call).
"""

from collections.abc import Callable
import logging

from instanceha.engine import evacuation
from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha import exceptions

LOG = logging.getLogger(__name__)


class LockSweep:
    """Finds instances locked by an earlier copy and unlocks them."""

    def __init__(self, conf, env: ports.Environment):
        self.conf = conf
        self.env = env
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

    def want(self, why: str) -> None:
        """Read the locked servers at the next chance (``why``: logged)."""
        self._why = why
        self._next = None

    def tick(self, mono: float, in_hands: Callable[[str], bool]) -> None:
        """Sweep when one is wanted and due (the tick thread, as leader).

        ``in_hands(host)``: whether a job of ours looks after our locks
        on ``host``'s instances; called right before each write.
        """
        if self._why is None and self._waiting:
            ended = sorted(h for h in self._waiting if not in_hands(h))
            if ended:
                self._waiting.difference_update(ended)
                self.want('evacuation of %s ended' % ', '.join(ended))
        if self._why is None:
            return
        if self._next is not None and mono < self._next:
            return
        why, self._why = self._why, None
        self.sweeps += 1
        try:
            left = self._sweep(in_hands, why)
        except exceptions.InstanceHAError as exc:
            LOG.warning('instances locked by an earlier copy of instanceha: '
                        'cannot look for them now (%s); trying again in '
                        '%s s', exc, self.conf.poll)
            left = 1
        if left and self._why is None:
            self._why = why
            self._next = mono + float(self.conf.poll)

    def _sweep(self, in_hands: Callable[[str], bool], why: str) -> int:
        """One listing; returns how many of ours must be looked at again."""
        left = 0
        found = self.env.cloud.locked_servers()
        self._waiting = set()
        for srv in sorted(found, key=lambda s: s.id):
            lock = reasons.of_lock(srv).lock
            if lock is None:
                continue  # not ours: never touched
            source, was = lock.host, lock.was
            if in_hands(source):
                self._waiting.add(source)  # its host's workflow watches it
                continue
            if srv.task_state:
                LOG.debug('instance %s (locked while evacuated from %s) is '
                          'still %s: unlocked when that ends', srv.id,
                          source, srv.task_state)
                left += 1
                continue
            try:
                self._release(srv, source, was, why)
            except exceptions.CloudError as exc:
                if getattr(exc, 'status', None) == 404:
                    continue  # deleted meanwhile
                LOG.warning('instance %s: cannot unlock it now: %s',
                            srv.id, exc)
                left += 1
        return left

    def _release(self, srv: model.Server, source: str, was: str | None,
                 why: str) -> None:
        """Restore its status if it was rebuilt elsewhere, then unlock."""
        if srv.host and srv.host != source:
            restored = evacuation.restore_status(self.env.cloud, srv, was)
            if restored:
                self.env.events.emit(events.POWER_STATE_RESTORED, source,
                                     server=srv.id, status=restored)
        self.env.cloud.set_server_lock(srv.id, False)
        self.env.events.emit(events.SERVER_UNLOCKED, source, server=srv.id,
                             found=why)
