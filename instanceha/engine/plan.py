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

"""One cycle's plan: a decision, with its reasons, for every compute host.

The plan is the boundary between deciding and acting. It is built by
:func:`instanceha.engine.decide.make_plan` without side effects, logged
as one line per host, printed by ``instanceha-manage plan`` and executed
by the recovery workflow, which only ever starts hosts whose decision is
:attr:`Decision.RECOVER` and keeps driving those in
:attr:`Decision.RECOVERING`.
"""

import dataclasses
import datetime
import enum

from instanceha.engine import model
from instanceha.engine import states


class Decision(str, enum.Enum):
    #: Every witness says the host is alive.
    HEALTHY = 'healthy'
    #: Out of scope: disabled by an operator, no (eligible) instances,
    #: not tagged, skipped by name. Never acted on, whatever its health.
    IGNORED = 'ignored'
    #: Failed, eligible and allowed by every gate: start recovering it.
    RECOVER = 'recover'
    #: Failed and eligible, but a gate refused (see the reasons).
    BLOCKED = 'blocked'
    #: Already in a recovery workflow (a marker in Nova's disabled_reason
    #: or the caller's own state); ``recovery_state`` says where.
    RECOVERING = 'recovering'
    #: The witnesses disagree and Nova is the one saying failed (e.g. Nova
    #: says down, the host's own heartbeat says alive): a partition, not a
    #: failure. No action.
    ISOLATED = 'isolated'
    #: The witnesses disagree the other way: Nova still sees the host alive
    #: (or does not vote) while another witness says failed (a kdump
    #: message, a stopped heartbeat). No action yet; judged again every
    #: poll (Nova usually follows within service_down_time).
    DISPUTED = 'disputed'
    #: No witness could tell (e.g. a malformed heartbeat time stamp).
    #: Reported, never treated as a failure.
    UNKNOWN = 'unknown'

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class HostDecision:
    host: str
    decision: Decision
    #: Human-readable, each prefixed by who said it (detector, filter,
    #: gate), in the order they were found.
    reasons: tuple[str, ...] = ()
    #: The eligible instances (instance filters applied), for RECOVER,
    #: BLOCKED and RECOVERING; empty otherwise.
    servers: tuple[model.Server, ...] = ()
    #: The compute service as read in this cycle (None if Nova no longer
    #: lists the host).
    service: model.Service | None = None
    #: For RECOVERING: the workflow state (from the marker or the caller).
    recovery_state: states.HostState | None = None
    #: What the detectors said, combined per ``[detection] combine``:
    #: failed, alive, isolated, disputed or unknown (None if nobody
    #: looked).
    verdict: str | None = None
    #: For BLOCKED: the name of the gate that blocked the host (None when
    #: something other than a gate held it).
    gate: str | None = None

    def line(self) -> str:
        """One log line: ``host3 recover: nova: state down; 2 instances``."""
        parts = list(self.reasons)
        if self.decision in (Decision.RECOVER, Decision.BLOCKED,
                             Decision.RECOVERING):
            parts.append('%d eligible instance(s)' % len(self.servers))
        head = '%s %s' % (self.host, self.decision.value)
        if self.recovery_state is not None:
            head += ' (%s)' % self.recovery_state.value
        return '%s: %s' % (head, '; '.join(parts)) if parts else head

    def as_dict(self) -> dict:
        return {
            'host': self.host,
            'decision': self.decision.value,
            'verdict': self.verdict,
            'reasons': list(self.reasons),
            'servers': [{'id': s.id, 'name': s.name, 'status': s.status}
                        for s in self.servers],
            'recovery_state': (self.recovery_state.value
                               if self.recovery_state else None),
        }


@dataclasses.dataclass(frozen=True)
class Plan:
    taken_at: datetime.datetime
    #: One per host, sorted by host name.
    decisions: tuple[HostDecision, ...] = ()
    #: Messages of the gates that blocked the whole plan ("gate: why").
    blocked_by: tuple[str, ...] = ()
    #: Names of the gates behind ``blocked_by``, in the same order.
    blocking_gates: tuple[str, ...] = ()
    #: Jobs a gate waits on (veto hooks asked on the executor): the hosts
    #: they concern are BLOCKED in this plan; plan again once all are done.
    waiting: tuple = ()

    @property
    def answered(self) -> bool:
        """True when the plan waited on gates that have all answered."""
        return bool(self.waiting) and all(f.done() for f in self.waiting)

    def decision(self, host: str) -> HostDecision | None:
        for d in self.decisions:
            if d.host == host:
                return d
        return None

    def by_decision(self, decision: Decision) -> list[HostDecision]:
        return [d for d in self.decisions if d.decision is decision]

    def to_recover(self) -> list[HostDecision]:
        """Hosts to start recovering now (gates already applied)."""
        return self.by_decision(Decision.RECOVER)

    def lines(self) -> list[str]:
        """The plan as log lines: one per host, then what blocked it."""
        out = [d.line() for d in self.decisions]
        out.extend('plan blocked by %s' % why for why in self.blocked_by)
        return out

    def as_dicts(self) -> list[dict]:
        return [d.as_dict() for d in self.decisions]
