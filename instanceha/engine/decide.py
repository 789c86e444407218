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

"""snapshot -> detectors -> filters -> gates -> plan, without side effects.

The order of questions for each host, first answer wins:

1. In recovery already (our marker in ``disabled_reason``, or the caller
   says so)? -> RECOVERING; host filters are not asked again (the host is
   disabled by us and may have no instances left), instance filters are.
2. Dropped by an out-of-scope filter (disabled by an operator on purpose)?
   -> IGNORED, not monitored, not counted by the threshold.
3. The detectors' combined verdict (``[detection] combine``): alive ->
   HEALTHY, unknown -> UNKNOWN, isolated -> ISOLATED, disputed ->
   DISPUTED.
4. Failed: the other host filters, then the instance filters (a host with
   instances none of which is eligible is IGNORED) -> a candidate.
5. The gates, in order, on the candidates -> RECOVER or BLOCKED.

Failed hosts dropped in step 4 still count as failed for the gates.
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import datetime

from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import reasons
from instanceha.engine import states
from instanceha.plugins.detectors import base as det_base
from instanceha.plugins.gates import base as gate_base

D = plan_mod.Decision
V = det_base.Verdict

FAILED = 'failed'
ALIVE = 'alive'
ISOLATED = 'isolated'
DISPUTED = 'disputed'
UNKNOWN = 'unknown'

#: Appended to the reasons of a disputed host, so the log says why nothing
#: happens (Nova sees it up / no witness speaks for Nova).
DISPUTED_REASON = ('disputed: Nova still sees the host up; no action yet, '
                   'judged again next poll')
DISPUTED_NO_NOVA_REASON = ('disputed: witnesses disagree and none speaks '
                           'for Nova; no action yet, judged again next poll')
#: Appended when a warming-up witness holds a failure (see Verdict.HOLD).
HELD_REASON = ('held: a witness cannot tell yet; no action until it can, '
               'judged again next poll')

#: Caller states of hosts started but not yet fenced: judged again like
#: any failed host (a host back up, or a gate now refusing, ends the
#: workflow), but the gates know they already passed (``started``).
UNREAD_REASON = ('its servers were not listed in this read; judged again '
                 'at the next one')

_STARTED = frozenset({states.HostState.SUSPECT,
                      states.HostState.FENCE_FAILED})

#: Workflow states in which we keep a host out of service until an
#: operator hands it back (``instanceha-manage hosts clear``).
_HELD = frozenset({states.HostState.LEFT_DISABLED, states.HostState.FAILED})

#: Workflow states that are not (or no longer) a recovery in progress.
#: (A process failure's service_down marker is ours but no workflow: the
#: host is judged like any other and recovered if it fails as a whole.)
_NOT_RECOVERING = frozenset({states.HostState.HEALTHY,
                             states.HostState.SERVICE_DOWN}) | _STARTED


def snapshot_needs(drivers) -> dict:
    """Keyword arguments for :meth:`CloudPort.snapshot` the drivers need."""
    return {'images': any(f.needs_images for f in drivers.filters)}


def combine(evidence: list[det_base.Evidence], mode: str,
            detectors: int | None = None) -> tuple[str, tuple[str, ...]]:
    """Fold several detectors' evidence on one host into one verdict.

    Returns (failed|alive|isolated|disputed|unknown, reasons). See the
    help of ``[detection] combine`` for the modes. ``detectors`` is how
    many are enabled: under ``all`` a detector saying nothing on the host
    is a missing witness.

    A disagreement (one says failed, another alive) has two directions:
    Nova (the control plane) says failed while the host's own witness says
    alive -> isolated, a partition; Nova still sees the host alive
    (or does not vote) while another witness says failed -> disputed.
    Neither is acted on; both are judged again next poll.

    A witness saying HOLD (it cannot tell yet, e.g. a listener warming
    up, or a host frozen by its announced reboot) turns a failed verdict
    into unknown, in every mode: it has not had the chance to veto.

    A host whose own witness says it announced its power-off (evidence
    ``announced``, the failover shutdown policy) is failed in every mode.
    """
    detectors = len(evidence) if detectors is None else detectors
    reasons = tuple(e.reason for e in evidence)
    holding = [e for e in evidence if e.verdict is V.HOLD]
    if holding:
        evidence = [e for e in evidence if e.verdict is not V.HOLD]
        verdict, reasons = combine(evidence, mode, detectors)
        if verdict == FAILED or verdict == UNKNOWN and any(
                e.verdict is V.FAILED for e in evidence):
            # A witness that could not have heard the host yet holds
            # the decision (no fencing) instead of letting the others
            # decide alone: it may be the one that says "alive".
            return UNKNOWN, reasons + tuple(e.reason for e in holding) + (
                HELD_REASON,)
        return verdict, reasons + tuple(e.reason for e in holding)
    if any(e.announced and e.verdict is V.FAILED for e in evidence):
        # The host said itself that it powers off (failover policy): Nova
        # sees it up until service_down_time; waiting for that is what
        # the policy asks not to do. Off is proven by reading its fencing
        # devices before anything is evacuated.
        return FAILED, reasons
    return _vote(evidence, mode, detectors, reasons)


def _vote(evidence: list[det_base.Evidence], mode: str, detectors: int,
          reasons: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The verdict of witnesses that all had their say (see combine)."""
    votes = {e.verdict for e in evidence}
    failed = V.FAILED in votes
    alive = V.ALIVE in votes
    if mode == 'any':
        verdict = FAILED if failed else ALIVE if alive else UNKNOWN
    elif failed and alive:
        if any(e.control_plane and e.verdict is V.FAILED for e in evidence):
            verdict = ISOLATED
        else:
            verdict = DISPUTED
            nova_up = any(e.control_plane and e.verdict is V.ALIVE
                          for e in evidence)
            reasons += (DISPUTED_REASON if nova_up
                        else DISPUTED_NO_NOVA_REASON,)
    elif mode == 'all':
        if votes == {V.FAILED} and len(evidence) >= detectors:
            verdict = FAILED
        else:
            verdict = ALIVE if votes == {V.ALIVE} else UNKNOWN
    else:  # veto
        verdict = FAILED if failed else ALIVE if alive else UNKNOWN
    return verdict, reasons


def recovery_state(service: model.Service | None,
                   recovering: Mapping[str, states.HostState],
                   host: str) -> states.HostState | None:
    """The host's workflow state if it is in recovery, else None.

    The caller's state wins (it is newer than Nova's marker); a marker is
    trusted only on a disabled service, as our workflow always disables.
    """
    state = recovering.get(host)
    if state is None and service is not None and service.disabled:
        parsed = reasons.of_service(service).marker
        state = parsed.state if parsed else None
    if state is None or state in _NOT_RECOVERING:
        return None
    return state


def _marker_reason(service: model.Service | None) -> str | None:
    parsed = reasons.of_service(service).marker
    if not parsed:
        return None
    note = parsed.details()
    text = 'marker %s since %s' % (parsed.state.value,
                                   parsed.when.isoformat())
    return '%s (%s)' % (text, note) if note else text


def _host_reasons(filters, host, snapshot) -> list[str]:
    return [r for r in (f.host_reason(host, snapshot) for f in filters) if r]


def _instance_reason(filters, server, snapshot) -> str | None:
    """Why a server is dropped (None = eligible), honouring any_of groups."""
    groups: dict[str, list[str]] = {}
    kept_groups: set[str] = set()
    for f in filters:
        why = f.instance_reason(server, snapshot)
        if f.any_of:
            if why:
                groups.setdefault(f.any_of, []).append(why)
            else:
                kept_groups.add(f.any_of)
        elif why:
            return why
    for group, whys in sorted(groups.items()):
        if group not in kept_groups:
            return ' and '.join(whys)
    return None


def host_reasons(filters, host: str, snapshot: model.Snapshot
                 ) -> list[str]:
    """Why the host filters leave ``host`` out (empty: they keep it).

    The host half of the one eligibility rule (an aggregate tag, a host
    name skipped): evacuation and instance failure handling both use it.
    """
    return _host_reasons(filters, host, snapshot)


def eligible_servers(filters, host: str, snapshot: model.Snapshot,
                     context: model.Snapshot | None = None
                     ) -> tuple[tuple[model.Server, ...], list[str]]:
    """The host's servers the instance filters keep, and why others not.

    The instance half of the one eligibility rule: evacuation and
    instance failure handling both use it. ``context``: the snapshot the
    filters judge by (every server, image and aggregate read), when
    ``snapshot`` holds only the servers to judge.
    """
    return _eligible_servers(filters, host, snapshot, context)


def _eligible_servers(filters, host, snapshot, context=None
                      ) -> tuple[tuple[model.Server, ...], list[str]]:
    kept, dropped = [], []
    for server in snapshot.servers_on(host):
        why = _instance_reason(filters, server, context or snapshot)
        if why:
            dropped.append('%s (%s): %s' % (server.name, server.id, why))
        else:
            kept.append(server)
    return tuple(kept), dropped


@dataclasses.dataclass
class _Sorting:
    """The hosts of one plan, as they are judged one by one."""

    decided: dict = dataclasses.field(default_factory=dict)
    #: Failed hosts to recover unless a gate says no: (reasons, servers).
    candidates: dict = dataclasses.field(default_factory=dict)
    monitored: set = dataclasses.field(default_factory=set)
    failed: set = dataclasses.field(default_factory=set)
    in_recovery: set = dataclasses.field(default_factory=set)
    held: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class _Gated:
    """What the gates said of the candidates."""

    blocked_by: list = dataclasses.field(default_factory=list)
    blocking_gates: list = dataclasses.field(default_factory=list)
    #: host -> (why, the gate's name)
    blocked: dict = dataclasses.field(default_factory=dict)
    waiting: list = dataclasses.field(default_factory=list)


def make_plan(snapshot: model.Snapshot, drivers, conf,
              now: datetime.datetime,
              recovering: Mapping[str, states.HostState] | None = None,
              submit: Callable | None = None) -> plan_mod.Plan:
    """Decide, for every compute host, what this cycle should do.

    :param drivers: anything with ``detectors``, ``filters`` and ``gates``
        lists (normally :class:`instanceha.plugins.loader.Drivers`).
    :param conf: the configuration (``[detection] combine`` is read).
    :param recovering: the caller's own view of hosts in a workflow; it
        takes precedence over the markers read from Nova. Hosts in
        suspect or fence_failed are decided again like new failures.
    :param submit: the engine executor's ``submit``: gates that ask
        someone (veto hooks) do it there and the plan lists what it waits
        for (``Plan.waiting``); None asks them in place.
    """
    recovering = recovering or {}
    started = frozenset(h for h, s in recovering.items() if s in _STARTED)
    evidence = [det.detect(snapshot, now) for det in drivers.detectors]
    # Under ``all``, every witness that votes on every host must vote.
    witnesses = sum(not det.reports_failures_only
                    for det in drivers.detectors)
    sorting = _Sorting()
    for host in sorted({s.host for s in snapshot.services} |
                       set(recovering)):
        said = [ev[host] for ev in evidence if host in ev]
        verdict, reasons = combine(said, conf.detection.combine, witnesses)
        _judge_host(sorting, host, verdict, list(reasons), snapshot,
                    drivers.filters, recovering)
        if (host in sorting.monitored and
                any(getattr(e, 'mass_loss', False) for e in said)):
            # Lost with many others at once: part of a mass failure for
            # the gates, even while Nova still sees it up.
            sorting.failed.add(host)
    gated = _gate(sorting, drivers.gates, snapshot, now, started, submit)
    decided = sorting.decided
    for host, (reasons, servers) in sorting.candidates.items():
        if host in gated.blocked:
            why, gate = gated.blocked[host]
            decided[host] = plan_mod.HostDecision(
                host, D.BLOCKED, tuple(reasons + [why]), servers,
                snapshot.service(host), verdict=FAILED, gate=gate)
        else:
            decided[host] = plan_mod.HostDecision(
                host, D.RECOVER, tuple(reasons), servers,
                snapshot.service(host), verdict=FAILED)
    return plan_mod.Plan(
        taken_at=snapshot.taken_at,
        decisions=tuple(decided[h] for h in sorted(decided)),
        blocked_by=tuple(gated.blocked_by),
        blocking_gates=tuple(gated.blocking_gates),
        waiting=tuple(gated.waiting))


def _judge_host(sorting: _Sorting, host: str, verdict: str,
                reasons: list[str], snapshot: model.Snapshot, filters,
                recovering: Mapping[str, states.HostState]) -> None:
    """Decide ``host`` on its verdict, or make it a candidate for gates."""
    service = snapshot.service(host)
    rstate = recovery_state(service, recovering, host)
    decided = sorting.decided
    if rstate is not None:
        # Every host in a workflow is unhealthy for the gates, also
        # those we keep out of service (left_disabled, FAILED) until
        # an operator hands them back: else a slow cascade takes a
        # cloud out one host at a time, each under the threshold.
        sorting.monitored.add(host)
        sorting.in_recovery.add(host)
        if rstate in _HELD:
            sorting.held.add(host)
        marker = _marker_reason(service)
        servers, _dropped = _eligible_servers(filters, host, snapshot)
        decided[host] = plan_mod.HostDecision(
            host, D.RECOVERING, tuple(([marker] if marker else []) + reasons),
            servers, service, rstate, verdict)
        return
    if service is None:
        return
    out = _host_reasons([f for f in filters if f.out_of_scope], host,
                        snapshot)
    if out:
        decided[host] = plan_mod.HostDecision(
            host, D.IGNORED, tuple(reasons + out), (), service,
            verdict=verdict)
        return
    sorting.monitored.add(host)
    if verdict != FAILED:
        decision = {ALIVE: D.HEALTHY, ISOLATED: D.ISOLATED,
                    DISPUTED: D.DISPUTED}.get(verdict, D.UNKNOWN)
        decided[host] = plan_mod.HostDecision(
            host, decision, tuple(reasons), (), service, verdict=verdict)
        return
    sorting.failed.add(host)
    if not snapshot.servers_known(host):
        # Its servers were not listed in this read (a witness spoke
        # up after it): never decided as a host without instances.
        decided[host] = plan_mod.HostDecision(
            host, D.UNKNOWN, tuple(reasons + [UNREAD_REASON]), (),
            service, verdict=verdict)
        return
    out = _host_reasons([f for f in filters if not f.out_of_scope], host,
                        snapshot)
    servers, dropped = _eligible_servers(filters, host, snapshot)
    if not out and dropped and not servers:
        out = ['no eligible instance: %s' % '; '.join(dropped)]
    if out:
        decided[host] = plan_mod.HostDecision(
            host, D.IGNORED, tuple(reasons + out), (), service,
            verdict=verdict)
        return
    if dropped:
        reasons.append('not evacuated: %s' % '; '.join(dropped))
    sorting.candidates[host] = (reasons, servers)


def _gate(sorting: _Sorting, gates, snapshot: model.Snapshot,
          now: datetime.datetime, started: frozenset,
          submit: Callable | None) -> _Gated:
    """Ask each gate in turn about the candidates not yet blocked."""
    gated = _Gated()
    candidates = sorting.candidates
    remaining = set(candidates)
    for gate in gates:
        if not remaining:
            break
        judged = gate.check(gate_base.GateContext(
            snapshot=snapshot, now=now, candidates=frozenset(remaining),
            failed=frozenset(sorting.failed),
            recovering=frozenset(sorting.in_recovery),
            held=frozenset(sorting.held),
            monitored=frozenset(sorting.monitored),
            started=frozenset(remaining) & started,
            reasons={h: tuple(candidates[h][0]) for h in remaining},
            servers={h: candidates[h][1] for h in remaining},
            submit=submit))
        gated.waiting.extend(getattr(judged, 'waiting', ()))
        if judged.block_all:
            why = '%s: %s' % (gate.name, judged.block_all)
            gated.blocked_by.append(why)
            gated.blocking_gates.append(gate.name)
            gated.blocked.update(
                (h, ('gate ' + why, gate.name)) for h in remaining)
            remaining.clear()
        for host, hwhy in sorted(judged.blocked_hosts.items()):
            if host in remaining:
                gated.blocked[host] = ('gate %s: %s' % (gate.name, hwhy),
                                       gate.name)
                remaining.discard(host)
    return gated
