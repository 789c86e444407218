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

"""Gates allow or block the plan as a whole or per host."""

import abc
from collections.abc import Callable
from collections.abc import Mapping
from concurrent.futures import Future
import dataclasses
import datetime

from instanceha.engine import model
from instanceha.plugins import base


@dataclasses.dataclass(frozen=True)
class GateVerdict:
    #: Set when the whole plan is blocked: why.
    block_all: str | None = None
    #: Hosts blocked individually, with why.
    blocked_hosts: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Jobs whose answer the gate still waits for (its hosts are blocked
    #: meanwhile): the engine plans again as soon as they are done.
    waiting: tuple[Future, ...] = ()


@dataclasses.dataclass(frozen=True)
class GateContext:
    """What a gate sees of one cycle. Every set holds host names."""

    snapshot: model.Snapshot
    now: datetime.datetime
    #: Failed, eligible, not yet in recovery and not blocked by an
    #: earlier gate: the hosts this cycle would start recovering.
    candidates: frozenset[str]
    #: Every monitored host detected failed this cycle and not in
    #: recovery, whether or not the filters kept it.
    failed: frozenset[str]
    #: Hosts in a recovery workflow, every state (also left_disabled and
    #: FAILED): they count as unhealthy until they are healthy again or
    #: an operator hands them back.
    recovering: frozenset[str]
    #: Every host in scope: all nova-compute hosts except those an
    #: out-of-scope filter dropped (operator-disabled ones).
    monitored: frozenset[str]
    #: Candidates whose workflow already started in an earlier cycle
    #: (waiting for a worker, or fencing failed and is retried): judged
    #: again, but not new starts.
    started: frozenset[str] = frozenset()
    #: For each candidate, what the detectors said: for gates that
    #: explain the proposal to someone else (veto hooks).
    reasons: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict)
    #: For each candidate, its eligible instances (what would move).
    servers: Mapping[str, tuple[model.Server, ...]] = dataclasses.field(
        default_factory=dict)
    #: The part of ``recovering`` we keep out of service (left_disabled,
    #: FAILED) until an operator hands it back: for the gates' messages.
    held: frozenset[str] = frozenset()
    #: Runs slow work (asking someone) as a job on the engine's executor
    #: and returns its future; None: the gate asks in place (dry run).
    submit: Callable[..., Future] | None = None

    @property
    def unhealthy(self) -> frozenset[str]:
        return self.failed | self.recovering


class Gate(base.Driver):
    """A safety check on the set of hosts about to be recovered."""

    #: True when ``check`` only looks at the context (no call to anyone):
    #: such a gate may also be asked hypothetically, to tell an operator
    #: what detect-only mode (``[DEFAULT] disabled``) holds back.
    pure: bool = False
    #: True for the gate of detect-only mode (``[DEFAULT] disabled``):
    #: left out when the engine says what that mode holds back.
    detect_only: bool = False

    @abc.abstractmethod
    def check(self, ctx: GateContext) -> GateVerdict:
        """Judge ``ctx.candidates``; only called when there are some."""
