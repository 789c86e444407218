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

"""The clean shutdown's workflow kind: its states, table and records.

See :mod:`instanceha.engine.clean_shutdown` for what the kind does; here
are the values it is made of: the states and their table, the durable
part of a record, the world its steps look at and the context (settings,
ports, the service's maintenance work) they act through.
"""

from collections.abc import Mapping
import dataclasses
import datetime
import enum
import typing

from instanceha.engine import events
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import reasons
from instanceha.engine import runtime
from instanceha.engine import shutdown
from instanceha.engine.states import HostState


#: The workflow kind's name in the runtime.
KIND = 'shutdown'

H = HostState


class Phase(enum.Enum):
    """The states of a ``shutdown`` workflow (one per announced host)."""

    #: Heard (or heard anew): its policy is looked up and announced.
    HEARD = 'heard'
    #: The policy's action is to be taken (freeze, record, drain) or was
    #: left to someone else (local ``left``; migrate: ``skipped``).
    ANNOUNCED = 'announced'
    #: failover: the announcement is in Nova (or need not be).
    RECORDED = 'recorded'
    #: Frozen, or drained (durable ``drained``): waits for the return.
    FROZEN = 'frozen'
    #: Not back in time: judged like any host, until it is back.
    OVERDUE = 'overdue'
    #: A record in Nova no announcement in memory explains.
    FOUND = 'found'
    #: Back, and enabled if it was ours: until a read newer than that
    #: (local ``enabled_at``) the snapshot may still show our record.
    SETTLING = 'settling'
    DONE = 'done'


P = Phase

#: The table of transitions (HEARD again from every state: the host
#: announced anew).
TRANSITIONS: Mapping[Phase, frozenset] = {
    P.HEARD: frozenset({P.ANNOUNCED, P.DONE}),
    P.ANNOUNCED: frozenset({P.ANNOUNCED, P.RECORDED, P.FROZEN, P.OVERDUE,
                            P.SETTLING, P.HEARD, P.DONE}),
    P.RECORDED: frozenset({P.SETTLING, P.HEARD, P.DONE}),
    P.FROZEN: frozenset({P.OVERDUE, P.SETTLING, P.HEARD, P.DONE}),
    P.OVERDUE: frozenset({P.SETTLING, P.HEARD, P.DONE}),
    P.FOUND: frozenset({P.SETTLING, P.HEARD, P.DONE}),
    P.SETTLING: frozenset({P.HEARD, P.DONE}),
}

OVERDUE_REASON = ('not back within [shutdown] return_timeout: judged like '
                  'any host from now on')


@dataclasses.dataclass(frozen=True)
class Durable:
    """What outlives a state: the announcement and what its policy says.

    ``drained``: migrate's drain ended (the agent is answered drained).
    """

    ann: shutdown.Announcement
    policy: str = ''
    source: str = ''
    action: str = shutdown.FREEZE
    drained: bool = False

    def heard(self, ann: shutdown.Announcement) -> bool:
        """Whether ``ann`` is this workflow's announcement (repeated)."""
        return (self.ann.boot_id, self.ann.kind) == (ann.boot_id, ann.kind)


@dataclasses.dataclass(frozen=True)
class World:
    """What the steps look at, read once a tick by the service.

    ``pending``: every host's latest announcement; ``returned``: hosts
    heard from a later agent run than their announcement's; ``ages``:
    seconds since each host's last heartbeat (None: never); ``now``: the
    listener's monotonic clock of the announcements' times;
    ``recovering``: hosts in a recovery of the engine.
    """

    snapshot: model.Snapshot
    pending: Mapping[str, shutdown.Announcement]
    returned: frozenset
    ages: Mapping[str, float | None]
    now: float
    recovering: frozenset
    paused: bool = False


class Effects(typing.Protocol):
    """Maintenance work the service wires in (above the engine)."""

    def drain(self, host: str, now: datetime.datetime, note: str,
              resumed: bool) -> list:
        """Move ``host``'s instances away (a job); their outcomes."""

    def end(self, host: str) -> None:
        """End the maintenance of a drained host (a job)."""


def host_state(old: HostState, new: HostState, **details) -> runtime.Emit:
    """The host_state event of a change of what the host shows."""
    if old is new:
        return ()
    return runtime.emit(events.HOST_STATE, old=old.value, new=new.value,
                        **details)


def shown(rec: runtime.Record) -> HostState:
    """What the host shows (host_state events) in ``rec``'s state."""
    return H.FROZEN if rec.state in (P.FROZEN, P.FOUND) else H.HEALTHY


def is_back(svc: model.Service) -> bool:
    return svc.state == model.UP and not svc.forced_down


def back_but_forced(svc: model.Service, skew: float | None) -> bool:
    """Reporting again, but forced down, under a shutdown record of ours.

    A host that carries our record owns its ``forced_down`` (as the
    ``unforce`` workflow sees it): one a recovery left there and no copy
    could clear (the operator who took the host enabled it while no copy
    knew the flag was ours) keeps Nova saying down for ever. Its
    nova-compute reporting after the record was written says it is
    back: the return then enables it and clears the flag.
    """
    fr = reasons.of_disabled(svc).frozen
    return (svc.forced_down and fr is not None and
            svc.reported_after(fr.on_nova(fr.since, skew)))


@dataclasses.dataclass(frozen=True)
class Context:
    """What the steps act through: settings, the engine's ports, effects."""

    conf: typing.Any
    env: ports.Environment
    effects: Effects
