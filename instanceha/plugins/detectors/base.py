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

"""Detectors say which hosts look failed, and why."""

import abc
import dataclasses
import datetime
import enum

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.plugins import base


class Verdict(str, enum.Enum):
    ALIVE = 'alive'
    FAILED = 'failed'
    #: The detector cannot tell (e.g. no data yet); it has no vote.
    UNKNOWN = 'unknown'
    #: The detector cannot tell *yet* but will soon (a listener warming
    #: up after a start): no host may be judged failed meanwhile. Unlike
    #: UNKNOWN this holds the decision instead of abstaining, so a
    #: freshly restarted service never fences a host its witness would
    #: have shown alive.
    HOLD = 'hold'


@dataclasses.dataclass(frozen=True)
class Evidence:
    host: str
    verdict: Verdict
    #: Human-readable, names the detector's observation.
    reason: str
    #: Said by the witness that speaks for Nova's control plane (the nova
    #: detector). A disagreement is a partition (isolated) only when it is
    #: the control plane that says failed; the reverse is disputed.
    control_plane: bool = False
    #: FAILED because the host itself announced it is going off (the
    #: failover shutdown policy): decisive even while Nova still sees the
    #: host up, since fencing will prove it off by reading its devices.
    announced: bool = False
    #: The witness lost this host together with many others at once (a
    #: mass loss): whatever the verdict, the host counts as unhealthy for
    #: the gates, so a mass failure that Nova only sees host by host is
    #: still one mass failure to the threshold.
    mass_loss: bool = False


@dataclasses.dataclass(frozen=True)
class ServiceView:
    """What a compute service alone shows of its host (the failed rule)."""

    verdict: Verdict
    #: What was seen, for operators (the heartbeat's age, the state).
    seen: str
    #: No heartbeat within ``[DEFAULT] delta`` by Nova's clock, or none
    #: readable (whatever the state).
    stale: bool


class Detector(base.Driver):
    """One witness of a host's health."""

    #: True for a witness whose verdicts are :meth:`judge_service` of each
    #: compute service and nothing else (the Nova detector). When every
    #: configured witness is one, the compute services alone show every
    #: failure they could report, so the engine reads the full picture
    #: only when the services show something (see
    #: :mod:`instanceha.engine.watch`).
    judges_services_only: bool = False
    #: True for a witness that only ever reports failures (kdump speaks up
    #: only while a host dumps): its silence is not a missing vote, so
    #: ``[detection] combine = all`` does not wait for it.
    reports_failures_only: bool = False
    #: True for a witness that judges from Nova's compute services alone
    #: (the nova detector): when every witness does, reading the services
    #: shows every failure and the full picture is read less often.
    judges_services_only: bool = False
    #: True for a witness that can name, before the cloud is read, the
    #: hosts it may say failed (:meth:`suspects`): only those hosts'
    #: servers are listed. False: every server of the cloud is read.
    supports_suspects: bool = False
    #: True for a witness with listener counters (:meth:`stats`) for the
    #: metrics.
    supports_stats: bool = False
    #: Where a detector that listens to the hosts gets its listener in
    #: ``start()``: the environment's factory, set by whoever builds the
    #: environment (UDP sockets in the service, the simulated hosts in
    #: the simulator). None: the service's UDP listeners.
    listeners: ports.ListenerFactory | None = None

    @staticmethod
    def judge_service(service: model.Service, nova_now: datetime.datetime,
                      delta: float) -> ServiceView:
        """The one rule for "this compute service shows its host failed".

        FAILED when Nova forces it down or reports it down, or reports it
        up with a heartbeat (``updated_at``) older than ``delta`` seconds
        on Nova's clock (``nova_now``: our clock would make every host
        look failed once it runs ahead). UNKNOWN, no vote, for a state
        Nova should not report or a heartbeat time it did not give or
        that could not be read: a parsing problem never looks like a
        dead host. ALIVE otherwise.

        The Nova detector votes by it; the engine's fast path asks it of
        every service it reads between two full reads, whichever
        witnesses are configured (a host not ALIVE, or disabled, calls
        for a full read, see :mod:`instanceha.engine.watch`). It is the
        contract's, not a witness's: a witness that judges otherwise says
        so in :meth:`detect` and :meth:`suspects`.
        """
        age = (None if service.updated_at is None else
               (nova_now - service.updated_at).total_seconds())
        if age is not None:
            seen = 'last heartbeat %ds ago' % age
        elif service.updated_at_raw:
            seen = 'malformed updated_at %r' % service.updated_at_raw[:64]
        else:
            seen = 'no updated_at'
        stale = age is None or age > delta
        if service.forced_down:
            return ServiceView(Verdict.FAILED, 'forced down (%s)' % seen,
                               stale)
        if service.state == model.DOWN:
            return ServiceView(Verdict.FAILED, 'state down (%s)' % seen,
                               stale)
        if service.state != model.UP:
            return ServiceView(Verdict.UNKNOWN, 'unexpected state %r (%s)'
                               % (service.state, seen), stale)
        if service.updated_at is None:
            return ServiceView(Verdict.UNKNOWN, 'state up but %s' % seen,
                               stale)
        if stale:
            return ServiceView(Verdict.FAILED, 'state up but %s > delta %ds'
                               % (seen, delta), stale)
        return ServiceView(Verdict.ALIVE, 'state up, %s' % seen, stale)

    @abc.abstractmethod
    def detect(self, snapshot: model.Snapshot,
               now: datetime.datetime) -> dict[str, Evidence]:
        """Evidence for the hosts this detector has an opinion on."""

    def suspects(self, services: tuple[model.Service, ...],
                 now: datetime.datetime) -> frozenset[str]:
        """Hosts this witness may say failed at the next decision.

        Asked (only when :attr:`supports_suspects`) before the cloud is
        read, so that only those hosts' servers are listed; it must
        change nothing (no counting, no logging). Hosts whose compute
        service is not ALIVE by :meth:`judge_service` or is disabled are
        read anyway.
        """
        return frozenset()

    def stats(self) -> dict:
        """Listener counters (only when :attr:`supports_stats`)."""
        return {}
