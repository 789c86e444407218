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
#: Grace for an effect already on its way when an operator's pause
#: begins (a job submitted a tick before): the guard reads the pause at
#: its next poll of the pause store.
PAUSE_GRACE = 3.0


@dataclasses.dataclass
class Truth:
    """What the soak knows of the world, gathered for one audit."""

    #: host -> [(time, 'on'/'off'), ...], every real power change.
    power: dict
    #: The evacuation migration records: dicts with source, dest,
    #: instance, created (epoch seconds).
    evacuations: list
    #: Nova's servers: dicts with id, name, host, status, locked,
    #: locked_reason.
    servers: list
    #: Nova's compute services: model.Service.
    services: list
    #: host -> the reason the soak's operator disabled it with (in force).
    held: dict
    #: host -> [(start, end)]: windows its BMC was lying (end None: now).
    lying: dict
    #: [(start, end)]: operator pauses (end None: now).
    pauses: list
    #: (time, host) of every power-off the soak itself made at a BMC.
    own_power_offs: list


def power_at(history: list, when: float) -> str:
    """The host's real power at ``when`` (its last change before)."""
    state = history[0][1] if history else 'on'
    for at, value in history:
        if at > when:
            break
        state = value
    return state


def _in(windows: list, when: float, grace: float = 0.0) -> bool:
    return any(start + grace <= when and (end is None or when <= end)
               for start, end in windows)


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


def no_evacuation_on_a_lying_bmc(t: Truth) -> list[str]:
    """A BMC that always says "on" proves nothing: nothing is evacuated."""
    return ['instance %s evacuated from %s at %s while its BMC could not '
            'be believed' % (ev['instance'], ev['source'],
                             _ts(ev['created']))
            for ev in t.evacuations
            if _in(t.lying.get(ev['source'], []), ev['created'])]


def no_fence_while_paused(t: Truth) -> list[str]:
    """A pause fences nothing new: no power-off but the soak's own."""
    own = {(host, round(at)) for at, host in t.own_power_offs}
    out = []
    for host, history in t.power.items():
        for at, value in history[1:]:
            if (value == 'off' and _in(t.pauses, at, PAUSE_GRACE)
                    and not any((host, round(at) + d) in own
                                for d in (-1, 0, 1))):
                out.append('%s powered off at %s during an operator\'s '
                           'pause' % (host, _ts(at)))
    return out


def operator_holds_kept(t: Truth) -> list[str]:
    """A host an operator disabled stays disabled with its reason."""
    out = []
    for svc in t.services:
        reason = t.held.get(svc.host)
        if reason is None:
            continue
        if svc.status != 'disabled' or svc.disabled_reason != reason:
            out.append('%s: the operator disabled it (%r), now %s with '
                       'reason %r' % (svc.host, reason, svc.status,
                                      svc.disabled_reason))
    return out


def settled(t: Truth) -> list[str]:
    """The end state once faults have stopped and the bound has passed.

    Every instance ACTIVE on an enabled, up host (or on a host the
    operator holds); no host disabled or forced down by us; no marker,
    no lock of ours; every disabled host has a reason an operator can
    read.
    """
    out = []
    hosts = {s.host: s for s in t.services}
    for srv in t.servers:
        svc = hosts.get(srv['host'])
        if srv['status'] != 'ACTIVE':
            out.append('instance %s (%s) is %s on %s' % (
                srv['name'], srv['id'], srv['status'], srv['host']))
        elif svc is None or (svc.state != 'up' and srv['host'] not in
                             t.held):
            out.append('instance %s is ACTIVE on %s, whose compute is '
                       'not up' % (srv['name'], srv['host']))
        if srv['locked'] and (srv['locked_reason'] or '').startswith(
                OUR_PREFIX):
            out.append('instance %s still carries our lock (%s)' % (
                srv['name'], srv['locked_reason']))
    for svc in t.services:
        if svc.host in t.held:
            continue
        if svc.status != 'enabled' or svc.forced_down:
            out.append('%s left %s%s, reason %r' % (
                svc.host, svc.status,
                ' and forced down' if svc.forced_down else '',
                svc.disabled_reason))
        if svc.status == 'disabled' and not (svc.disabled_reason or
                                             '').strip():
            out.append('%s disabled without a reason' % svc.host)
    return out


#: Checked after every fault (settled only at the end).
ALWAYS = (no_rebuild_while_source_runs, no_evacuation_on_a_lying_bmc,
          no_fence_while_paused, operator_holds_kept)


def check(t: Truth, final: bool = False) -> list[str]:
    out = []
    for rule in ALWAYS + ((settled,) if final else ()):
        out.extend(rule(t))
    return out


def _ts(when: float) -> str:
    return datetime.datetime.fromtimestamp(
        when, datetime.timezone.utc).strftime('%H:%M:%S.%f')[:-3]
