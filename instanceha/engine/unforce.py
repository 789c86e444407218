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

"""Our ``forced_down`` lifted from a host an operator took after evacuation.

A recovery forces its host down when it is fenced and clears the flag
itself only in its last write (the enable, once nova-compute reports).
An operator who takes the host after its instances were moved -- enables
it, or disables it with a reason of their own -- ends the recovery there,
and their word stands: nothing is enabled or disabled on their behalf.
But ``forced_down`` is ours, not theirs, and left set it makes Nova
report a running nova-compute down for ever: a host the operator put back
into service then looks like a dead nova-compute on a living host and is
disabled again by the process-failure path, and an announced shutdown of
it never sees its return. So the flag is cleared when the operator puts
the host back into service, as the one write of a workflow of kind
``unforce``, run on the workflow runtime:

* while the operator holds the host (disabled with their reason) nothing
  is written: the flag keeps Nova from taking a fenced host for up, and
  the operator may still evacuate by hand;
* read again under the host's lock first: a host that carries a reason of
  ours again (a new recovery's marker, a process failure's, a shutdown
  record) belongs to that workflow, which owns the flag now;
* Nova may refuse to clear it (HTTP 400) until the host has booted and
  completed its evacuation records: taken again a poll later.

The wait for an operator who holds the host is this copy's memory only:
a copy that starts meanwhile finds nothing in Nova that tells our flag
from one an operator set, and leaves it. No durable fact can tell them
apart safely: the operator's reason replaced our marker (the one record
of ours on the service), Nova keeps no author of ``forced_down``, and
what the recovery left elsewhere (the evacuation records from the host,
our lock reasons on its instances) says the host was evacuated, not
that the flag is still ours: an operator who evacuates or fences by hand
forces the host down themselves, and may have done so since. Clearing
it on such evidence could overrule an operator, so a restarted copy
leaves the flag for the operator to lift (``openstack compute service
set --up``).
"""

from collections.abc import Callable
import enum
import logging
import typing

from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import runtime_loop
from instanceha import exceptions

LOG = logging.getLogger(__name__)


class Engine(typing.Protocol):
    """What the unforcer reads of the engine that owns it."""

    env: ports.Environment
    workflows: runtime_loop.Runtime
    snapshot: model.Snapshot | None


#: The workflow kind's name in the runtime.
KIND = 'unforce'


class Unforce(enum.Enum):
    """The states of an ``unforce`` workflow: one write, then done."""

    CLEAR = 'clear'
    DONE = 'done'


#: One write, then done.
TRANSITIONS = {Unforce.CLEAR: frozenset({Unforce.DONE})}

#: What the job found: cleared, nothing to do, refused for now, or the
#: host held by an operator again.
CLEARED, NOTHING, REFUSED, HELD = 'cleared', 'nothing', 'refused', 'held'


class Unforcer:
    """Clears the forced_down a recovery left on a host an operator took."""

    def __init__(self, conf, engine: 'Engine'):
        """``engine``: its environment, runtime and latest services read."""
        #: Seconds between two tries while Nova refuses the write.
        self.poll = float(conf.poll)
        self.env, self.workflows = engine.env, engine.workflows
        self._snapshot: Callable[[], model.Snapshot | None] = (
            lambda: engine.snapshot)
        self.workflows.register(runtime.Kind(
            name=KIND, transitions=TRANSITIONS,
            steps={Unforce.CLEAR: self._clear},
            final=frozenset({Unforce.DONE}),
            max_backoff=max(5.0, self.poll)))

    def start(self, host: str) -> None:
        """Clear ``host``'s forced_down (tick thread; once per host)."""
        self.workflows.start(KIND, host, Unforce.CLEAR)

    def _clear(self, view: runtime.View) -> runtime.Outcome:
        host = view.record.key
        snap = self._snapshot()
        verdict = _judge(snap.service(host) if snap is not None else None)
        if verdict == NOTHING:
            return runtime.Go(Unforce.DONE)
        if verdict == HELD:
            return runtime.Wait()  # until the operator enables it
        cloud = self.env.cloud

        def clear() -> str:
            svc = cloud.read_services().service(host)
            verdict = _judge(svc)
            if verdict != CLEARED:
                return verdict
            try:
                cloud.update_service(svc, forced_down=False)
            except exceptions.CloudError as exc:
                if getattr(exc, 'status', None) != 400:
                    raise
                LOG.info('host %s: forced_down not cleared yet: %s',
                         host, exc)
                return REFUSED
            return CLEARED
        return runtime.Job(run=clear, then=self._cleared)

    def _cleared(self, view: runtime.View, result: str) -> runtime.Outcome:
        if result == REFUSED:
            return runtime.Retry(self.poll,
                                 'Nova refuses to clear forced_down yet')
        if result == CLEARED:
            return runtime.Go(Unforce.DONE, emit=runtime.emit(
                events.FORCED_DOWN_CLEARED))
        if result == HELD:
            return runtime.Wait()
        return runtime.Go(Unforce.DONE)


def needed(svc: model.Service | None) -> bool:
    """Whether ``svc`` still carries a forced_down to clear."""
    return svc is not None and svc.forced_down


def _judge(svc: model.Service | None) -> str:
    """CLEARED: clear it now; HELD: an operator holds the host; NOTHING."""
    if not needed(svc):
        return NOTHING
    reading = reasons.of_disabled(svc)
    if reading.marker is not None or reading.frozen is not None:
        return NOTHING  # another workflow of ours owns the flag now
    return HELD if svc.disabled else CLEARED
