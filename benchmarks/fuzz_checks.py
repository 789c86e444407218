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

"""What the randomized scenarios check, against the simulated world.

Used by benchmarks/scenario_fuzz.py (see there): the simulator's own
invariants named from its CHECK messages, the power-offs of hosts that
must live (watched as they are asked), and the state at rest at the end
of a run (the operator's disable kept, our locks released, nothing of
ours left behind, no instance left on a host whose recovery is over).
A ``case`` is a scenario_fuzz.Case.
"""

import re

#: Invariant names, from the simulator's CHECK messages.
INVARIANTS = (
    ('leader-only', re.compile(r'which is not the leader')),
    ('fenced-before-evacuate', re.compile(r'no fencing device confirmed|'
                                          r'where its guest still runs')),
    ('one-running-copy', re.compile(r'running on .* at once')),
    ('evacuated-once', re.compile(r'evacuated twice')),
    ('gate-respected', re.compile(r'although a gate blocked')),
    ('detect-only-acts-not', re.compile(r'while \[DEFAULT\] disabled')),
    ('watchdog-counts-resets', re.compile(r'counted off by its watchdog')),
    ('response-protected-only', re.compile(r'excluded from recovery')),
    ('response-isolated-only', re.compile(r'partitioned, not isolated')),
)
OPERATOR_WINS = 'operator-wins'
LOCKS_RELEASED = 'locks-released'
ISOLATED_LIVES = 'isolated-host-not-fenced'
HEALTHY_LIVES = 'healthy-host-not-fenced'
MARKER_LEFT = 'no-marker-left-behind'
STRANDED = 'instances-recovered'
#: The checks of the end state (at_rest, and the power-offs watched).
AT_REST = (OPERATOR_WINS, LOCKS_RELEASED, ISOLATED_LIVES, HEALTHY_LIVES,
           MARKER_LEFT, STRANDED)
#: Seconds without anything happening (to a host, or to the service, its
#: pause and Nova) after which the end state is judged settled.
SETTLE = 240.0
#: Seconds after its rebuild ended within which an instance's lock of
#: ours may still be on (the recovery reads the end at its next poll).
LOCK_SETTLE = 60.0
#: Timeline commands that touch the service as a whole.
GLOBAL = ('service', 'coordination', 'pause', 'resume', 'reload', 'set',
          'clock', 'nova')
#: Markers of ours that a host running and reporting for SETTLE seconds
#: no longer carries: it is enabled again (a host left disabled or given
#: up on waits for an operator and keeps its marker).
TRANSIENT = re.compile(r'^instanceha:(powering_on|waiting_up|enabling|'
                       r'service_down) |^instanceha-shutdown ')
#: Markers of a recovery that is over: every instance it could evacuate
#: is off the dead host (the others are named in gave_up).
RECOVERED = re.compile(r'^instanceha:(evacuated|powering_on|waiting_up|'
                       r'enabling|left_disabled) ')
#: The note of a marker an operator's ``instanceha-manage hosts clear``
#: wrote (see instanceha/cmd/manage_hosts.py).
CLEARED = 'cleared by operator'
#: Timeline commands after which a host may rightly be fenced.
FAILURES = ('power-off', 'crash', 'cut-network', 'isolate', 'stop-compute',
            'kdump', 'watchdog', 'partition', 'agent')
#: ... and an announced shutdown: a frozen host that does not come back
#: in time is recovered like a failed one.
MAY_BE_FENCED = FAILURES + ('announce',)


def invariant_of(violation: str) -> str:
    for name, pattern in INVARIANTS:
        if pattern.search(violation):
            return name
    return 'other'


class StuckGuard:
    """Ends a run whose simulated time stops moving (a livelock)."""

    LIMIT = 20000

    def __init__(self, sim):
        self.sim = sim
        self.t = None
        self.same = 0
        self.stuck_at = None

    def __call__(self) -> bool:
        t = self.sim.clock.t
        self.same = self.same + 1 if t == self.t else 0
        self.t = t
        if self.same >= self.LIMIT:
            self.stuck_at = t
            return True
        return False


def refenced(log, actor: str | None, host: str) -> bool:
    """Whether ``actor`` fences ``host`` again mid-evacuation.

    A host powered on in the middle of its evacuation is fenced again
    before any further evacuation (the rule that keeps every evacuation
    proven): its recovery was decided on earlier evidence, not on the
    silence of a host that runs now.
    """
    for ev in reversed(log.events):
        if ev.event == 'host_state' and ev.host == host and \
                ev.source == actor:
            return (ev.details.get('old'), ev.details.get('new')) == (
                'evacuating', 'fencing')
    return False


def watch_power_offs(world, case, log) -> list[tuple[str, str]]:
    """Record power-off requests for hosts that must live.

    A host that never failed in the timeline; and, with the heartbeat
    detector (whose fresh heartbeat must veto Nova's "failed" for a host
    cut off from Nova alone), a running, heartbeating host -- unless it
    is fenced again in the middle of its evacuation (:func:`refenced`).
    """
    found: list[str] = []
    heartbeat = 'heartbeat' in case.options['detection.detectors']
    failed_at = {}
    for t, name, args in case.timeline:
        host = (args[1] if name == 'fencing' and len(args) > 1
                else args[0] if name in MAY_BE_FENCED else None)
        if host is not None:  # a failure, or an operator's power-off
            failed_at[host] = min(t, failed_at.get(host, t))
    for h in case.markers:
        # Forced down with a marker of ours: declared down in Nova (a
        # recovery still going on, an adopted claim, or a host an
        # operator enables without clearing forced_down): it may rightly
        # be fenced.
        failed_at[h] = 0
    # An operator's "fencing off" powers the host off through the same
    # devices (in the minutes after the command): not ours to judge.
    by_hand = [(t, args[1]) for t, name, args in case.timeline
               if name == 'fencing' and args[:1] == ('off',)]
    request = world.device_request

    def checked(name, state, remaining):
        h = world.hosts.get(world.device(name).host)
        now = world.clock.t
        if h is not None and any(host == h.name and 0 <= now - t <= 150
                                 for t, host in by_hand):
            return request(name, state, remaining)
        if state == 'off' and h is not None:
            # (An agent that announced a shutdown stopped: the host is
            # shutting down, not isolated; failover fences a rebooting
            # host for real.)
            if heartbeat and h.agent_alive and h.agent_running \
                    and not h.agent_hung and not h.agent_killed \
                    and h.service_link_ok and not h.beating \
                    and not refenced(log, world.actor, h.name):
                found.append((ISOLATED_LIVES, 't=%g power off %s (device '
                              '%s) while it runs and its heartbeat gets '
                              'through' % (now, h.name, name)))
            elif failed_at.get(h.name, now + 1) > now:
                found.append((HEALTHY_LIVES, 't=%g power off %s (device '
                              '%s), which never failed' % (now, h.name,
                                                           name)))
        return request(name, state, remaining)

    world.device_request = checked
    return found


def settled_since(case) -> tuple[float, dict[str, float]]:
    """When the service, and each host, last had something happen."""
    names = set(case.hosts) | set(case.pdus.values())
    device_host = {pdu: h for h, pdu in case.pdus.items()}
    last_global = float('-inf')
    last: dict[str, float] = {h: 0.0 for h in case.markers}
    for t, name, args in case.timeline:
        if name in GLOBAL:
            last_global = max(last_global, t)
        for arg in args:
            if arg in names:
                host = device_host.get(arg, arg)
                last[host] = max(last.get(host, t), t)
    return last_global, last


def left_behind(sim, case) -> list[tuple[str, str]]:
    """Markers of ours on hosts long fine, instances left on dead ones.

    Judged only once everything has settled: no command to the service
    (restarts, pause, reloads, Nova faults) for SETTLE seconds, nothing
    paused, a leader, and per host nothing done to it for as long.
    """
    w, end = sim.world, sim.clock.t
    last_global, last = settled_since(case)
    if (end - last_global < SETTLE or sim.pause_store.pause is not None
            or not sim.election.backend_up
            or sim.election.leader() is None):
        return []
    found = []
    topology = case.topology()
    start = topology['instances']
    initial = {h: spec.get('disabled_reason')
               for h, spec in topology['hosts'].items()}
    for h in sorted(w.hosts.values(), key=lambda h: h.name):
        if (end - last.get(h.name, float('-inf')) < SETTLE
                or h.name in w.deleted_services):
            # (A record Nova deleted holds nothing of ours: a running
            # nova-compute makes it anew only when it starts again.)
            continue
        reason = h.disabled_reason or ''
        # A shutdown record ends when the host's agent is back, its
        # nova-compute reporting or not (then it is a process failure).
        back = h.agent_alive and h.agent_running and (
            h.beating or reason.startswith('instanceha-shutdown '))
        if back and TRANSIENT.match(reason):
            found.append((MARKER_LEFT, 'host %s runs%s but ends disabled '
                          'with %r' % (h.name, ' and reports' if h.beating
                                       else '', reason)))
        if (h.powered and h.os_running or not RECOVERED.match(reason)
                or RECOVERED.match(initial.get(h.name) or '')
                or CLEARED in reason):
            # (A marker the cloud starts with that says the recovery is
            # over claims what no copy of this run did: the copies rightly
            # believe it, whatever the generated cloud left on the host.
            # An operator's "hosts clear" hands the host back: what is
            # left on it is theirs, as the FAILED host's message asks.)
            continue
        for srv in sorted(w.servers.values(), key=lambda s: s.name):
            if (srv.host == h.name and srv.status == 'ACTIVE'
                    and not srv.task_state and not srv.running_on
                    and not start.get(srv.name, {}).get('locked')
                    and srv.id not in reason and srv.name not in reason):
                found.append((STRANDED, 'instance %s ends ACTIVE on %s, '
                              'which is off, while its recovery is over '
                              '(%r)' % (srv.name, h.name, reason)))
    return found


def at_rest(sim, case) -> list[tuple[str, str]]:
    """The end state of a run the engine did not crash in.

    The operator's disable kept, our locks released, nothing of ours
    left behind, no instance left on a host whose recovery is over.
    """
    found = []
    recreated = [(ev.t, ev.host) for ev in sim.log.events
                 if ev.event == 'service_recreated']
    for host, reason in sorted(case.expected_operator_reasons(
            recreated).items()):
        h = sim.world.hosts.get(host)
        if h is not None and (h.status != 'disabled'
                              or h.disabled_reason != reason):
            found.append((OPERATOR_WINS, 'host %s: the operator '
                          'disabled it (%r) but it ends %s (%r)' % (
                              host, reason, h.status,
                              h.disabled_reason)))
    # Our locks end with the recovery: an instance not locked at the
    # start, at rest at the end, is not left locked.
    start = case.topology()['instances']
    recovering = {h.name for h in sim.world.hosts.values()
                  if re.match(r'instanceha:(fenced|evacuating) ',
                              h.disabled_reason or '')}
    # Or as a running copy holds it: an operator who enabled a host
    # mid-evacuation erased the marker, not the evacuation.
    for copy in sim.copies.values():
        if copy.running and hasattr(copy.engine, 'host_states'):
            recovering.update(
                h for h, st in copy.engine.host_states().items()
                if getattr(st, 'value', st) in ('fenced', 'evacuating'))
    # A lock is released once the recovery reads that its rebuild ended
    # (a poll later at most): a rebuild that ended in the run's last
    # LOCK_SETTLE seconds has not come to rest yet.
    end = sim.clock.t
    moving = {m.server_id for m in sim.world.migrations
              if end - m.updated_at < LOCK_SETTLE}
    for name, srv in sorted(sim.world.servers.items()):
        m = re.match(r'instanceha: evacuating from (\S+)',
                     srv.locked_reason or '')
        if m and (m.group(1) in recovering or srv.id in moving):
            continue  # its recovery is still going on at the end
        if (srv.locked and not start.get(name, {}).get('locked')
                and not srv.task_state):
            found.append((LOCKS_RELEASED, 'instance %s ends locked '
                          '(%s) on %s, status %s' % (
                              name, srv.locked_reason, srv.host,
                              srv.status)))
    found += left_behind(sim, case)
    return found
