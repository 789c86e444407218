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

"""What a soak run checks, against physical truth, after every fault.

Written from what must be true, not from instanceha's code: the BMCs'
power histories (every real power change, with its time), Nova's
migration records and servers through Nova's API, and the soak's own
record of what it did (its faults, the operator's holds). Each rule
returns breaches: sentences that say what broke, on which host or
instance, and when.
"""

import dataclasses
import datetime

#: How every reason instanceha writes into Nova begins (its markers,
#: locks, announced shutdowns, maintenance).
OUR_PREFIX = 'instanceha'
#: How long an agent must have been beating before a power-off of its
#: host is a breach: the service judged the host from an older silence
#: (heartbeat timeout 3 s, a poll of 2 s) and a fencing device takes a
#: moment to act; a host that comes back meanwhile is fenced rightly.
BEATING_GRACE = 10.0
#: Grace for an effect already on its way when an operator's pause
#: begins (a job submitted a tick before): the guard reads the pause at
#: its next poll of the pause store.
PAUSE_GRACE = 3.0


@dataclasses.dataclass
class Truth:
    """What the soak knows of the world, gathered for one audit.

    Plain data (JSON-able): a run can write it out and the rules can be
    checked again on it later (``benchmarks/soak.py --audit FILE``).
    """

    #: host -> [(time, 'on'/'off'), ...], every real power change.
    power: dict
    #: The evacuation migration records: dicts with source, dest,
    #: instance, created (epoch seconds).
    evacuations: list
    #: Nova's servers: dicts with id, name, host, status, locked,
    #: locked_reason.
    servers: list
    #: Nova's compute services: dicts (:func:`service_dict`).
    services: list
    #: host -> the reason an operator holds it with (in force).
    held: dict
    #: host -> [(start, end, why)]: windows its BMC could prove nothing
    #: (it lied "on", answered nothing, or the service had a wrong
    #: password for it); end None: now.
    unprovable: dict
    #: [(start, end)]: operator pauses (end None: now).
    pauses: list
    #: (time, host) of every power-off the soak itself made at a BMC.
    own_power_offs: list
    #: host -> [(start, end)]: when its heartbeat agent was beating.
    beating: dict = dataclasses.field(default_factory=dict)
    #: [(start, end, [hosts])]: more than the threshold of the hosts cut
    #: off at once (a mass failure).
    partitions: list = dataclasses.field(default_factory=list)
    #: host -> [(start, end, reason)]: every operator hold (a disable, a
    #: maintenance).
    holds: dict = dataclasses.field(default_factory=dict)
    #: host -> [time, ...]: when the soak made something happen to it.
    host_faults: dict = dataclasses.field(default_factory=dict)
    #: ``[evacuation] retries`` of the service copies.
    retries: int = 5
    #: Gathered once the faults stopped and the cloud had its time to
    #: settle: the end-state rules apply too.
    final: bool = False


def service_dict(svc) -> dict:
    """The fields of a Nova compute service the rules read."""
    return {'host': svc.host, 'status': svc.status, 'state': svc.state,
            'forced_down': svc.forced_down,
            'disabled_reason': svc.disabled_reason}


def power_at(history: list, when: float) -> str:
    """The host's real power at ``when`` (its last change before)."""
    state = history[0][1] if history else 'on'
    for at, value in history:
        if at > when:
            break
        state = value
    return state


def _in(windows: list, when: float, grace: float = 0.0) -> bool:
    return any(w[0] + grace <= when and (w[1] is None or when <= w[1])
               for w in windows)


def service_power_offs(t: Truth) -> list[tuple]:
    """(time, host) of every power-off the soak did not make itself.

    A Redfish change lands a moment after its request, so the soak's own
    are matched within a second or two.
    """
    own = {(host, round(at)) for at, host in t.own_power_offs}
    return [(at, host) for host, history in sorted(t.power.items())
            for at, value in history[1:]
            if value == 'off' and not any((host, round(at) + d) in own
                                          for d in (-2, -1, 0, 1, 2))]


def no_rebuild_while_source_runs(t: Truth) -> list[str]:
    """An evacuation is started only while its source host is off.

    A guest runs only on a powered host: an evacuation whose source was
    powered at the moment Nova recorded it is an instance that may run
    on two hosts at once.
    """
    out = []
    for ev in t.evacuations:
        if power_at(t.power.get(ev['source'], []), ev['created']) != 'off':
            out.append('instance %s evacuated from %s to %s at %s while '
                       '%s was powered on' % (
                           ev['instance'], ev['source'], ev['dest'],
                           _ts(ev['created']), ev['source']))
    return out


def no_evacuation_unproven(t: Truth) -> list[str]:
    """A BMC that cannot prove power-off: nothing of its host evacuated.

    A BMC that lies "on", answers nothing or refuses the service's
    password proves nothing. Each such window opens on a host with no recovery under way, so an
    evacuation inside it rests on no proof of power-off.
    """
    out = []
    for ev in t.evacuations:
        for start, end, why in t.unprovable.get(ev['source'], []):
            if start <= ev['created'] and (end is None or
                                           ev['created'] <= end):
                out.append('instance %s evacuated from %s at %s while its '
                           'BMC could prove nothing (%s)' % (
                               ev['instance'], ev['source'],
                               _ts(ev['created']), why))
    return out


def no_fence_while_paused(t: Truth) -> list[str]:
    """A pause fences nothing new: no power-off but the soak's own."""
    return ['%s powered off at %s during an operator\'s pause' % (
        host, _ts(at)) for at, host in service_power_offs(t)
        if _in(t.pauses, at, PAUSE_GRACE)]


def operator_holds_kept(t: Truth) -> list[str]:
    """A host an operator disabled stays disabled with its reason."""
    out = []
    for svc in t.services:
        reason = t.held.get(svc['host'])
        if reason is None:
            continue
        if svc['status'] != 'disabled' or svc['disabled_reason'] != reason:
            out.append('%s: the operator disabled it (%r), now %s with '
                       'reason %r' % (svc['host'], reason, svc['status'],
                                      svc['disabled_reason']))
    return out


def operator_hosts_left_alone(t: Truth) -> list[str]:
    """A host an operator holds is neither fenced nor evacuated.

    Held: disabled by hand or in maintenance; even when it fails.
    """
    out = ['%s powered off at %s while an operator held it' % (host, _ts(at))
           for at, host in service_power_offs(t)
           if _in(t.holds.get(host, []), at)]
    out.extend('instance %s evacuated from %s at %s while an operator '
               'held it' % (ev['instance'], ev['source'], _ts(ev['created']))
               for ev in t.evacuations
               if _in(t.holds.get(ev['source'], []), ev['created']))
    return out


def fence_only_silent_hosts(t: Truth) -> list[str]:
    """The service powers off only a host whose agent stopped beating.

    A host whose agent beats is alive (a dead nova-compute there is a
    process failure, never fenced). An agent back for less than
    :data:`BEATING_GRACE` is a host that came back while being fenced.
    """
    return ['%s powered off at %s while its heartbeat agent had been '
            'beating since %s' % (host, _ts(at), _ts(start))
            for at, host in service_power_offs(t)
            for start, end in t.beating.get(host, [])
            if start + BEATING_GRACE < at and (end is None or at < end)]


def no_action_on_a_mass_failure(t: Truth) -> list[str]:
    """A mass failure: none of its hosts is fenced or evacuated.

    More than the threshold of the hosts failed at once, for as long as
    it lasts.
    """
    out = []
    for start, end, hosts in t.partitions:
        window = [(start, end)]
        out.extend('%s powered off at %s during a mass failure of %s' % (
            host, _ts(at), ', '.join(hosts))
            for at, host in service_power_offs(t)
            if host in hosts and _in(window, at))
        out.extend('instance %s evacuated from %s at %s during a mass '
                   'failure of %s' % (ev['instance'], ev['source'],
                                      _ts(ev['created']), ', '.join(hosts))
                   for ev in t.evacuations
                   if ev['source'] in hosts and _in(window, ev['created']))
    return out


def one_fencing_per_failure(t: Truth) -> list[str]:
    """A host is powered off by the service at most once per failure.

    Between two power-offs of the service there must be something the
    soak did to that host (a new failure); otherwise the service fenced
    a host it had already fenced and powered on (a flapping recovery).
    """
    out = []
    by_host: dict = {}
    for at, host in service_power_offs(t):
        by_host.setdefault(host, []).append(at)
    for host, times in by_host.items():
        faults = t.host_faults.get(host, [])
        for first, second in zip(times, times[1:]):
            if not any(first < f < second for f in faults):
                out.append('%s powered off by the service at %s and again '
                           'at %s with no new failure between' % (
                               host, _ts(first), _ts(second)))
    return out


def evacuations_within_retries(t: Truth) -> list[str]:
    """At most ``retries`` + 1 evacuations of an instance per failure.

    Counted per source host and per failure of that host.
    """
    out = []
    tries: dict = {}
    for ev in t.evacuations:
        tries.setdefault((ev['instance'], ev['source']), []).append(
            ev['created'])
    for (instance, source), times in sorted(tries.items()):
        faults = t.host_faults.get(source, [])
        episodes: dict = {}
        for at in times:
            began = max((f for f in faults if f <= at), default=0.0)
            episodes[began] = episodes.get(began, 0) + 1
        for began, count in episodes.items():
            if count > t.retries + 1:
                out.append('instance %s evacuated %d times from %s for one '
                           'failure (retries %d)' % (instance, count, source,
                                                     t.retries))
    return out


def counts(t: Truth) -> dict:
    """The figures physical truth gives: fencing power-offs, evacuations."""
    return {'fencing_power_offs': len(service_power_offs(t)),
            'evacuations': len(t.evacuations)}


def settled(t: Truth) -> list[str]:
    """The end state once faults have stopped and the bound has passed.

    Every instance ACTIVE on an enabled, up host (or on a host the
    operator holds); no host disabled or forced down by us; no marker,
    no lock of ours; every disabled host has a reason an operator can
    read.
    """
    out = []
    hosts = {s['host']: s for s in t.services}
    for srv in t.servers:
        svc = hosts.get(srv['host'])
        if srv['status'] != 'ACTIVE':
            out.append('instance %s (%s) is %s on %s' % (
                srv['name'], srv['id'], srv['status'], srv['host']))
        elif svc is None or (svc['state'] != 'up' and srv['host'] not in
                             t.held):
            out.append('instance %s is ACTIVE on %s, whose compute is '
                       'not up' % (srv['name'], srv['host']))
        if srv['locked'] and (srv['locked_reason'] or '').startswith(
                OUR_PREFIX):
            out.append('instance %s still carries our lock (%s)' % (
                srv['name'], srv['locked_reason']))
    for svc in t.services:
        if svc['host'] in t.held:
            continue
        if svc['status'] != 'enabled' or svc['forced_down']:
            out.append('%s left %s%s, reason %r' % (
                svc['host'], svc['status'],
                ' and forced down' if svc['forced_down'] else '',
                svc['disabled_reason']))
        if svc['status'] == 'disabled' and not (svc['disabled_reason'] or
                                                '').strip():
            out.append('%s disabled without a reason' % svc['host'])
    return out


#: Checked after every fault (settled only at the end).
ALWAYS = (no_rebuild_while_source_runs, no_evacuation_unproven,
          no_fence_while_paused, operator_holds_kept,
          operator_hosts_left_alone, fence_only_silent_hosts,
          no_action_on_a_mass_failure, one_fencing_per_failure,
          evacuations_within_retries)


def check(t: Truth, final: bool = False) -> list[str]:
    """Every rule's breaches; the end state's too if ``final``."""
    out = []
    for rule in ALWAYS + ((settled,) if final or t.final else ()):
        out.extend(rule(t))
    return out


def _ts(when: float) -> str:
    return datetime.datetime.fromtimestamp(
        when, datetime.timezone.utc).strftime('%H:%M:%S.%f')[:-3]
