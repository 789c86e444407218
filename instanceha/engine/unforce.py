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
it never sees its return. So the flag is cleared, as the one write of a
workflow of kind ``unforce``, run on the workflow runtime:

* read again under the host's lock first: a host that carries a reason of
  ours again (a new recovery's marker, a process failure's, a shutdown
  record) belongs to that workflow, which owns the flag now;
* Nova may refuse to clear it (HTTP 400) until the host has booted and
  completed its evacuation records: taken again a poll later.
"""

import enum
import logging

from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: The workflow kind's name in the runtime.
KIND = 'unforce'


class Unforce(enum.Enum):
    """The states of an ``unforce`` workflow: one write, then done."""

    CLEAR = 'clear'
    DONE = 'done'


#: What the job found: cleared, nothing to do, or refused for now.
CLEARED, NOTHING, REFUSED = 'cleared', 'nothing', 'refused'


class Unforcer:
    """Clears the forced_down a recovery left on a host an operator took."""

    def __init__(self, conf, env: ports.Environment,
                 workflows: runtime.Runtime):
        self.conf = conf
        self.env = env
        self.workflows = workflows
        workflows.register(runtime.Kind(
            name=KIND,
            transitions={Unforce.CLEAR: frozenset({Unforce.DONE})},
            steps={Unforce.CLEAR: self._clear},
            final=frozenset({Unforce.DONE}),
            max_backoff=max(5.0, float(conf.poll))))

    def start(self, host: str) -> None:
        """Clear ``host``'s forced_down (tick thread; once per host)."""
        self.workflows.start(KIND, host, Unforce.CLEAR)

    def _clear(self, view: runtime.View) -> runtime.Outcome:
        host = view.record.key
        cloud = self.env.cloud

        def clear() -> str:
            svc = cloud.read_services().service(host)
            if svc is None or not svc.forced_down:
                return NOTHING
            reading = reasons.of_disabled(svc)
            if reading.marker is not None or reading.frozen is not None:
                return NOTHING  # another workflow of ours owns it now
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
            return runtime.Retry(float(self.conf.poll),
                                 'Nova refuses to clear forced_down yet')
        if result == CLEARED:
            return runtime.Go(Unforce.DONE, emit=runtime.emit(
                events.FORCED_DOWN_CLEARED))
        return runtime.Go(Unforce.DONE)


def needed(svc: model.Service | None) -> bool:
    """Whether ``svc`` still carries a forced_down to clear."""
    return svc is not None and svc.forced_down
