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

"""Randomized adversarial scenarios: the real engine against chaos.

Each seed builds one short simulation — a small cloud (4 to 8 hosts, one
or two failure domains, some hosts behind a PDU as a second fencing
level, sometimes a spare), a random configuration (strategy, detectors,
``leave_disabled``, one or two copies of the service, kdump) and a
random timeline of host failures and returns, BMC faults, Nova API
faults, leadership changes (copies crashing and restarting, the
coordination backend failing), operator actions (disabling a host with
a reason of their own, enabling it again), failing rebuilds and clock
skew — and runs the production engine on it in the simulator. The same
seed always builds and runs the same scenario.

Checked on every run:

* the simulator's own invariants, all the time (``CHECK`` lines): only
  the leader acts; no evacuation from a host no fencing device confirmed
  off (or that is not crash-dumping); no instance running on two hosts;
  no instance evacuated twice for one failure; nothing done to a host a
  gate blocked; nothing done in detect-only mode;
* at the end, *operator wins*: a host whose last operator action was
  ``disable`` with a reason of their own is still disabled with that
  reason (nothing we did overwrote or re-enabled it);
* *isolated hosts live* (with the heartbeat detector): no fencing device
  is asked to power off a host that runs and whose heartbeat agent gets
  through, while only its link to Nova (or its nova-compute) is down;
* *locks released*: no instance that was not locked at the start ends
  locked while at rest (our locks end with the recovery);
* *healthy hosts live*: no fencing device is asked to power off a host
  that has not failed in the timeline (e.g. through a short fencing key
  that also matches another host: some generated clouds have two hosts
  with one short name, compute-0.az1 and compute-0.az2).
* *no marker left behind*: once the service and a host have been left
  alone for SETTLE seconds (nothing paused, a leader), a host that runs
  and reports carries no transient marker of ours;
* *instances recovered*: ... and a host that is off, whose recovery is
  over, has no instance left ACTIVE on it that its marker does not name
  as given up.

The checks are in fuzz_checks.py, the fourth and fifth streams (below)
in fuzz_kinds.py, the sixth in fuzz_faults.py, the seventh in
fuzz_hostside.py, the eighth in fuzz_ops.py, next to this file.

Printed as a table (runs, violations by invariant, time) and as JSON
(``--json``, ``--json-file``), with every failing seed and its first
violation; ``--write-case DIR --seed N`` writes seed N as a scenario
directory for ``instanceha-simulate``::

    python benchmarks/scenario_fuzz.py --runs 2000
    python benchmarks/scenario_fuzz.py --runs 200 --seed 1000 --json
    python benchmarks/scenario_fuzz.py --seed 1234 --write-case /tmp/c1234

A second random stream (``EXTRA_MIX``) adds trouble timed against the
first failure, so that it lands in every state of its recovery: the
host powered back on by someone, an operator acting on it, leadership
lost with jobs queued, a second failure sharing ``max_in_flight``,
scarce capacity, veto hooks, markers left by a previous copy, clock
skew. A third (``SETTINGS_MIX``) varies settings: services reads
scheduled by heartbeats (Nova's service_down_time given right, too long
or too short), with the hosts' heartbeats spread or in step.

A fourth (``KINDS_MIX``) adds every other workflow kind and operator
command: announced shutdowns under each policy, instance crashes and
their users' actions, nova-compute deaths on live hosts, reloads,
maintenance, pause, fencing by hand, hosts and instances clear, and
restarts at random moments of those stories. Commands that cannot
happen at their moment are refused (``timeline refused``) and the run
goes on.

A fifth (``WATCHDOG_MIX``) arms the hosts' watchdogs and cuts one off.
A sixth (``FAULTS_MIX``) adds the simulator's other faults: Nova API
faults that let a few calls through first, a compute service record
deleted, rebuilds failing on one target, a reload with a broken fencing
file.

A seventh (``HOSTSIDE_MIX``) gives the hosts' agents their own side
(isolation detection, the isolation response, sometimes watchdogs) and
isolates, partitions, loses the answers of or kills the agent of one or
two hosts. An eighth (``OPS_MIX``) adds an operator who takes a failed
host mid-recovery and hands it back later (the ``unforce`` workflow),
the BMCs' hardware conditions read by the proactive checks, and BMCs
that lie "on".

``--mix`` chooses the kinds of fault (default: all of them), by name or
by group (``base``, ``extra``, ``settings``, ``kinds``, ``watchdogs``,
``faults``, ``hostside``, ``ops``); with
``--mix base,extra,settings`` a seed builds the story it built before the
fourth stream existed. The CI smoke run (tests/scenarios/test_fuzz.py) uses
every kind.
"""

import argparse
import collections
import json
import logging
import os
import random
import shlex
import sys
import tempfile
import time

import yaml

from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario
from instanceha.sim import world as sim_world

# Its two companions sit next to it (it runs as a script, and the tests
# load it from its path).
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import fuzz_checks as checks  # noqa: E402,H306
import fuzz_faults as faults  # noqa: E402
import fuzz_hostside as hostside  # noqa: E402
import fuzz_kinds as kinds  # noqa: E402
import fuzz_ops as ops  # noqa: E402

#: Kinds of trouble a timeline may contain. The first nine drive the
#: generator's main random stream (a seed found with them still builds the
#: same base story); the others are added from a second stream, timed
#: against the base story's first failure so that they land in every
#: state of its recovery.
BASE_MIX = ('host', 'return', 'bmc', 'nova', 'leader', 'operator', 'rebuild',
            'clock', 'restart')
#: poweron: someone powers a failed host back on during its recovery;
#: opstate: an operator acts on a failed host (disable, enable,
#: maintenance, pause, fencing by hand) during its recovery;
#: leadstate: the leader crashes, restarts or loses the backend during a
#: recovery, with few workers (jobs queue); pair: two hosts fail together
#: and share a small max_in_flight; scarce: little room left (small hosts,
#: capacity shrinking); veto: a veto hook that vetoes one host (or fails,
#: or is lifted later); marker: a host starts with a marker a previous
#: copy left (stale, or of a failure still going on); skew: the clock is
#: skewed from the start or steps during a recovery.
EXTRA_MIX = ('poweron', 'opstate', 'leadstate', 'pair', 'scarce', 'veto',
             'marker', 'skew')
#: Settings drawn from a third stream (seeds found before still build the
#: same stories): reads: ``[detection] nova_service_down_time`` set to 0
#: (the services read every interval), too long or too short (the
#: default, 60, is Nova's value in the simulator), the hosts' heartbeats
#: spread over Nova's report interval or not.
SETTINGS_MIX = ('reads',)
MIX_ALL = (BASE_MIX + EXTRA_MIX + SETTINGS_MIX + kinds.KINDS_MIX
           + kinds.WATCHDOG_MIX + faults.FAULTS_MIX + hostside.HOSTSIDE_MIX
           + ops.OPS_MIX)
#: Names for groups of kinds in ``--mix``: ``--mix base,extra,settings``
#: builds what the generator built before KINDS_MIX existed.
MIX_GROUPS = {'base': BASE_MIX, 'extra': EXTRA_MIX,
              'settings': SETTINGS_MIX, 'kinds': kinds.KINDS_MIX,
              'watchdogs': kinds.WATCHDOG_MIX, 'faults': faults.FAULTS_MIX,
              'hostside': hostside.HOSTSIDE_MIX, 'ops': ops.OPS_MIX,
              'all': MIX_ALL}

END = kinds.END
HEARTBEAT_KEY = 'fuzz-heartbeat-master-key-0123456789abcdef'


class Case(kinds.KindsStream, faults.FaultsStream,
           hostside.HostSideStream, ops.OpsStream):
    """One generated scenario: files, topology and timeline."""

    def __init__(self, seed: int, mix: tuple[str, ...] = MIX_ALL):
        self.seed = seed
        self.mix = mix
        #: host -> its watchdog's deadline (the fifth stream, below).
        self.watchdogs: dict[str, int] = {}
        rnd = self.rnd = random.Random(seed)
        n = rnd.randint(4, 8)
        self.zones = ['az1'] if rnd.random() < 0.5 else ['az1', 'az2']
        self.fqdn = len(self.zones) > 1 and rnd.random() < 0.5
        if self.fqdn:
            # compute-0.az1 and compute-0.az2: one short name, two hosts.
            self.hosts = ['compute-%d.%s' % (i // 2, self.zones[i % 2])
                          for i in range(n)]
        else:
            self.hosts = ['compute-%d' % i for i in range(n)]
        # Some fencing entries use the short name (ambiguous when two
        # Nova hosts share it: those hosts must then never be fenced).
        self.short_keys = {h for h in self.hosts
                           if self.fqdn and rnd.random() < 0.3}
        self.copies = ['ha-a', 'ha-b'] if (
            'leader' in mix and rnd.random() < 0.5) else ['ha']
        #: The second stream (EXTRA_MIX): decided here, used below.
        self.xr = random.Random(seed * 104729 + 17)
        self.extras = tuple(k for k in EXTRA_MIX
                            if k in mix and self.xr.random() < 0.35)
        #: Hosts that start with a marker: host -> (state, power).
        self.markers: dict[str, tuple[str, str]] = {}
        #: The veto hook's behaviour: (vetoed host or None, exit code).
        self.veto: tuple[str | None, int] | None = None
        self.spare = 'spare-1' if rnd.random() < 0.25 else None
        self.pdus = {h: 'pdu-%s' % h for h in self.hosts
                     if rnd.random() < 0.3}
        self.options = self._options()
        sr = random.Random(seed * 15485863 + 29)
        #: The hosts' heartbeats spread over Nova's report interval.
        self.spread = False
        if 'reads' in mix and sr.random() < 0.35:
            # Nova's service_down_time in the simulator is 60 s.
            self.options['detection.nova_service_down_time'] = str(
                sr.choice([0, 60, 90, 30]))
            self.spread = sr.random() < 0.5
        self.timeline: list[tuple[float, str, tuple[str, ...]]] = []
        self.operator: dict[str, str | None] = {}
        #: An aggregate whose metadata overrides the shutdown policy
        #: (drawn from the fourth stream, below).
        self.policy_override: str | None = None
        self._events()
        self._extra_options()
        self._extra_events()
        #: The fourth stream (KINDS_MIX): drawn last, so that the three
        #: streams above build what they built before it existed.
        self.kr = random.Random(seed * 32452843 + 41)
        self.kinds = tuple(k for k in kinds.KINDS_MIX
                           if k in mix and self.kr.random() < 0.3)
        self._kind_options()
        self._kind_events()
        #: The fifth stream (WATCHDOG_MIX), drawn after the fourth.
        self._watchdog_stream(seed)
        #: The sixth stream (FAULTS_MIX), drawn after the fifth.
        self._fault_events(sim_world.NOVA_CALLS, sim_world.NOVA_ERRORS)
        #: The seventh stream (HOSTSIDE_MIX), drawn after the sixth.
        self._hostside_events()
        #: The eighth stream (OPS_MIX), drawn after the seventh.
        self._ops_events()

    # -- the cloud ---------------------------------------------------------

    def topology(self) -> dict:
        rnd = random.Random(self.seed * 7919 + 1)
        zones = self.zones
        hosts = {h: {} for h in self.hosts}
        members: dict[str, list[str]] = {z: [] for z in zones}
        for i, h in enumerate(self.hosts):
            members[zones[i % len(zones)]].append(h)
        if self.spare:
            hosts[self.spare] = {'status': 'disabled',
                                 'disabled_reason': 'instanceha:reserved'}
            members[zones[0]].append(self.spare)
        aggregates = {}
        for z, hs in members.items():
            aggregates['rack-' + z] = {'hosts': hs, 'zone': z}
            if rnd.random() < 0.3:
                aggregates['rack-' + z]['metadata'] = {
                    'max_unhealthy': rnd.choice(['1', '2', '50%'])}
        if self.policy_override:
            # The last zone's rack follows a policy of its own.
            aggregates['rack-' + zones[-1]].setdefault('metadata', {})[
                'instanceha_shutdown_policy'] = self.policy_override
        instances = {}
        for h in self.hosts:
            for k in range(rnd.randint(0, 3)):
                tag = h.split('-', 1)[1].replace('.', '-')
                spec = {'host': h, 'flavor': rnd.choice(['m1.small',
                                                         'db.large']),
                        'image': 'cirros'}
                roll = rnd.random()
                if roll < 0.1:
                    spec['status'] = 'SHUTOFF'
                elif roll < 0.15:
                    spec['status'] = 'ERROR'
                elif roll < 0.2:
                    spec['locked'] = True
                instances['vm-%s-%d' % (tag, k)] = spec
        vcpus = rnd.choice([8, 16, 64])
        if 'scarce' in self.extras:
            vcpus = 8
        for h, (state, power) in self.markers.items():
            hosts[h] = {'status': 'disabled', 'forced_down': True,
                        'power': power, 'fenced': power == 'off',
                        'disabled_reason': 'instanceha:%s '
                        '2025-12-31T23:50:00Z fenced_at=2025-12-31T23:50:00Z'
                        % state}
            if power == 'off':
                hosts[h]['last_heartbeat'] = -600
        for h, deadline in self.watchdogs.items():
            hosts.setdefault(h, {})['watchdog'] = deadline
        for h, timeout in self.isolation.items():
            hosts.setdefault(h, {})['isolation'] = timeout
        return {
            # Commands that cannot happen at their moment are refused.
            'simulation': dict({'end': END, 'copies': self.copies,
                                'refusals': True}, **(
                {'timing': {'heartbeat_spread': True}} if self.spread
                else {})),
            'defaults': {'vcpus': vcpus},
            'hosts': hosts,
            'devices': {pdu: {'host': h, 'kind': 'outlet'}
                        for h, pdu in self.pdus.items()},
            'aggregates': aggregates,
            'flavors': {'m1.small': {'vcpus': 2},
                        'db.large': {'vcpus': 4, 'extra_specs': {
                            'instanceha:priority': '10'}}},
            'images': {'cirros': {}},
            'instances': instances,
        }

    def fencing(self) -> dict:
        hosts = {}
        for h in self.hosts + ([self.spare] if self.spare else []):
            bmc = {'driver': 'sim', 'name': 'bmc', 'target': h}
            key = h.split('.', 1)[0] if h in self.short_keys else h
            if h in self.pdus:
                hosts[key] = {'levels': [bmc, {'driver': 'sim',
                                               'name': 'pdu',
                                               'target': self.pdus[h]}]}
            else:
                hosts[key] = bmc
            if h in self.watchdogs:
                levels = hosts[key].get('levels') or [hosts[key]]
                hosts[key] = {'levels': levels + [
                    {'driver': 'watchdog', 'name': 'watchdog'}]}
        return {'hosts': hosts}

    def _options(self) -> dict[str, str]:
        rnd = self.rnd
        opts = {'DEFAULT.poll': '15', 'DEFAULT.delta': '30',
                'fencing.config_file': 'fencing.yaml',
                'fencing.device_timeout': '20',
                'fencing.chain_timeout': '120',
                'evacuation.strategy': rnd.choice(
                    ['smart', 'smart', 'fire-and-forget', 'orchestrated'])}
        if rnd.random() < 0.3:
            opts['DEFAULT.leave_disabled'] = 'true'
        if rnd.random() < 0.2:
            opts['DEFAULT.threshold'] = rnd.choice(['34', '75', '100'])
        detectors = ['nova']
        if rnd.random() < 0.4:
            detectors.append('heartbeat')
            opts['heartbeat.key_file'] = 'heartbeat.key'
            opts['detection.combine'] = rnd.choice(['veto', 'all'])
        if 'host' in self.mix and rnd.random() < 0.2:
            detectors.append('kdump')
            opts['kdump.check_kdump'] = 'true'
        opts['detection.detectors'] = ','.join(detectors)
        if self.spare:
            opts['reservation.strategy'] = 'reserved-hosts'
        if rnd.random() < 0.2:
            opts['evacuation.max_in_flight'] = str(rnd.randint(1, 3))
        return opts

    # -- the story ---------------------------------------------------------

    def _at(self, t: float, name: str, *args: str) -> None:
        self.timeline.append((round(t), name, args))

    def _events(self) -> None:
        rnd, mix = self.rnd, self.mix
        kinds = [k for k in mix if k != 'return' and k in BASE_MIX]
        if 'host' not in kinds:
            kinds.append('host')
        for _ in range(rnd.randint(2, 7)):
            self._event(rnd.choice(kinds), rnd.uniform(20, END - 250))

    def _event(self, kind: str, t: float) -> None:
        rnd = self.rnd
        host = rnd.choice(self.hosts)
        if kind == 'host':
            what = rnd.choice(['power-off', 'power-off', 'crash',
                               'cut-network', 'isolate', 'stop-compute',
                               'kdump'])
            if what == 'kdump':
                if 'kdump.check_kdump' not in self.options:
                    what = 'crash'
                else:
                    self._at(t, 'kdump', host, str(rnd.choice([15, 60,
                                                               150])))
                    return
            self._at(t, what, host)
            back = {'power-off': 'power-on', 'crash': 'power-on',
                    'cut-network': 'restore-network',
                    'isolate': 'unisolate',
                    'stop-compute': 'start-compute'}[what]
            # "return": someone powers a failed host back on (possibly
            # while it is being recovered).
            if rnd.random() < 0.5 and (back != 'power-on'
                                       or 'return' in self.mix):
                self._at(t + rnd.uniform(5, 200), back, host)
        elif kind == 'bmc':
            device = rnd.choice([host] + list(self.pdus.values()))
            self._at(t, 'bmc', device, rnd.choice(sim_world.BEHAVIOURS[1:]))
            if rnd.random() < 0.6:
                self._at(t + rnd.uniform(10, 200), 'bmc', device, 'ok')
        elif kind == 'nova':
            roll = rnd.random()
            if roll < 0.6:
                call = rnd.choice(sim_world.NOVA_CALLS)
                self._at(t, 'nova', 'fail', call, str(rnd.randint(1, 4)),
                         rnd.choice(sim_world.NOVA_ERRORS))
            elif roll < 0.8:
                self._at(t, 'nova', 'down')
                self._at(t + rnd.uniform(5, 90), 'nova', 'up')
            else:
                self._at(t, 'nova', 'delay-migrations',
                         str(rnd.choice([10, 30, 60])))
        elif kind == 'leader':
            if rnd.random() < 0.3:
                self._at(t, 'coordination', 'down')
                self._at(t + rnd.uniform(5, 60), 'coordination', 'up')
            else:
                copy = rnd.choice(self.copies)
                self._at(t, 'service', rnd.choice(['crash', 'restart',
                                                   'stop']), copy)
                self._at(t + rnd.uniform(1, 60), 'service', 'start', copy)
        elif kind == 'restart':
            self._at(t, 'service', 'restart', rnd.choice(self.copies))
        elif kind == 'operator':
            reason = 'operator maintenance %d' % rnd.randint(1, 99)
            self._at(t, 'disable', host, *reason.split())
            if rnd.random() < 0.4:
                self._at(t + rnd.uniform(10, 200), 'enable', host)
        elif kind == 'rebuild':
            servers = [name for name, spec in
                       self.topology()['instances'].items()]
            if servers:
                self._at(t, 'rebuild-fail', rnd.choice(servers), 'times',
                         str(rnd.randint(1, 7)))
        elif kind == 'clock':
            self._at(t, 'clock', 'skew', str(rnd.choice([-300, -40, 40,
                                                         300])))

    # -- the second stream -------------------------------------------------

    def _failures(self) -> list[tuple[float, str]]:
        return sorted((t, args[0]) for t, name, args in self.timeline
                      if name in checks.FAILURES)

    def _extra_options(self) -> None:
        xr, opts = self.xr, self.options
        if 'leadstate' in self.extras:
            opts['DEFAULT.workers'] = str(xr.choice([1, 2]))
        if 'pair' in self.extras:
            opts['evacuation.max_in_flight'] = str(xr.choice([1, 2]))
        if 'veto' in self.extras:
            opts['gates.enabled'] = ('disabled,threshold,failure-domain,'
                                     'per-cycle,veto-hook')
            opts['veto_hooks.hooks'] = 'guard'
            code = xr.choice([0, 1, 1, 1, 2])
            self.veto = (xr.choice(self.hosts), code)
        if 'marker' in self.extras:
            host = xr.choice(self.hosts)
            state = xr.choice(['fenced', 'evacuating', 'evacuating',
                               'evacuated', 'waiting_up', 'failed'])
            self.markers[host] = (state, xr.choice(['off', 'off', 'on']))

    def _extra_events(self) -> None:
        xr = self.xr
        fails = self._failures()
        t0, first = fails[0] if fails else (xr.uniform(20, 300),
                                            xr.choice(self.hosts))
        # Detection takes delta + up to a poll (30-45 s); fencing, marking
        # and evacuating follow within a minute or two: offsets up to
        # 220 s reach every state of the recovery.

        def during():
            return min(t0 + xr.uniform(25, 220), END - 100)
        if 'pair' in self.extras:
            others = [h for h in self.hosts if h != first]
            if others:
                self._at(t0 + xr.choice([0, 1, 5]), 'power-off',
                         xr.choice(others))
        if 'poweron' in self.extras:
            for _ in range(xr.randint(1, 2)):
                self._at(during(), 'power-on', first)
        if 'opstate' in self.extras:
            for _ in range(xr.randint(1, 3)):
                self._operator(during(), first)
        if 'leadstate' in self.extras:
            t = during()
            roll = xr.random()
            if roll < 0.25:
                self._at(t, 'coordination', 'down')
                self._at(t + xr.uniform(2, 40), 'coordination', 'up')
            else:
                copy = xr.choice(self.copies)
                what = xr.choice(['crash', 'restart', 'stop'])
                self._at(t, 'service', what, copy)
                if what != 'restart':
                    self._at(t + xr.uniform(1, 60), 'service', 'start',
                             copy)
        if 'scarce' in self.extras:
            for h in xr.sample(self.hosts, min(2, len(self.hosts))):
                if h != first:
                    self._at(xr.uniform(0, t0 + 60), 'capacity', h,
                             str(xr.choice([0, 2, 4])))
        if 'veto' in self.extras and xr.random() < 0.3:
            self._at(during(), 'set', 'veto_hooks.hooks', '')
        if 'skew' in self.extras:
            if xr.random() < 0.5:
                self._at(1, 'clock', 'skew', str(xr.choice(
                    [-400, -60, -25, 25, 60, 400])))
            self._at(during(), 'clock', 'skew', str(xr.choice(
                [-300, -45, -10, 10, 45, 300])))

    def _operator(self, t: float, host: str) -> None:
        """An operator acts on ``host`` at ``t`` (any state of ours)."""
        xr = self.xr
        what = xr.choice(['disable', 'disable', 'enable', 'maintenance',
                          'pause', 'fencing'])
        if what == 'disable':
            self._at(t, 'disable', host, 'operator', 'took', 'it',
                     str(xr.randint(1, 99)))
        elif what == 'enable':
            self._at(t, 'enable', host)
        elif what == 'maintenance':
            self._at(t, 'maintenance', 'start', host)
            if xr.random() < 0.5:
                self._at(t + xr.uniform(20, 200), 'maintenance', 'end',
                         host)
        elif what == 'pause':
            self._at(t, 'pause', str(xr.choice([30, 120, 400])))
            if xr.random() < 0.3:
                self._at(t + xr.uniform(5, 60), 'resume')
        else:
            self._at(t, 'fencing', xr.choice(['off', 'on']), host)

    def commands(self) -> list[sim_scenario.Command]:
        ordered = sorted(self.timeline, key=lambda c: c[0])
        return [sim_scenario.Command(float(t), name, args, i + 1)
                for i, (t, name, args) in enumerate(ordered)]

    def expected_operator_reasons(self, recreated=()) -> dict[str, str]:
        """Hosts whose last operator action is a disable -> its reason.

        ``recreated``: (time, host) of each compute service record Nova
        made anew (enabled) after a ``nova delete-service``: what an
        operator did to the host before is gone with the old record (a
        disable of a deleted record is one Nova would have refused).
        """
        last: dict[str, str | None] = {}
        story = sorted(list(self.timeline) + [
            (t, 'recreated', (h,)) for t, h in recreated],
            key=lambda c: c[0])
        for t, name, args in story:
            if name == 'recreated':
                last[args[0]] = None
            elif name == 'disable':
                last[args[0]] = ' '.join(args[1:])
            elif name == 'enable':
                last[args[0]] = None
            elif name in ('maintenance', 'fencing') and len(args) > 1:
                last[args[1]] = None  # the operator handed it over
            elif name == 'nova' and args[:1] == ('delete-service',):
                # Nova makes the record anew, enabled, when the host's
                # nova-compute reports: the disable went with the old one.
                last[args[1]] = None
        return {h: r for h, r in last.items() if r}

    # -- files -------------------------------------------------------------

    def write(self, directory: str) -> sim_scenario.Scenario:
        os.makedirs(directory, exist_ok=True)
        groups: dict[str, list[str]] = collections.OrderedDict()
        for key, value in self.options.items():
            group, _, name = key.partition('.')
            groups.setdefault(group, []).append('%s = %s' % (name, value))
        with open(os.path.join(directory, 'instanceha.conf'), 'w') as f:
            for group, lines in groups.items():
                f.write('[%s]\n%s\n\n' % (group, '\n'.join(lines)))
        with open(os.path.join(directory, 'fencing.yaml'), 'w') as f:
            yaml.safe_dump(self.fencing(), f)
        with open(os.path.join(directory, 'heartbeat.key'), 'w') as f:
            f.write(HEARTBEAT_KEY + '\n')
        topo = self.topology()
        with open(os.path.join(directory, 'topology.yaml'), 'w') as f:
            yaml.safe_dump(topo, f, sort_keys=False)
        with open(os.path.join(directory, 'timeline'), 'w') as f:
            for t, name, args in sorted(self.timeline, key=lambda c: c[0]):
                f.write('%d %s %s\n' % (t, name, ' '.join(
                    shlex.quote(a) for a in args)))
        if self.veto is not None:
            vetoed, code = self.veto
            path = os.path.join(directory, 'guard')
            with open(path, 'w') as f:
                f.write('#!/bin/sh\ncat >/dev/null\n')
                if code == 1:
                    f.write('echo \'{"veto": ["%s"], "reason": "fuzz '
                            'guard"}\'\n' % vetoed)
                elif code == 2:
                    f.write('echo "guard broken" >&2\n')
                f.write('exit %d\n' % code)
            os.chmod(path, 0o755)
        self._write_faults(directory)
        with open(os.path.join(directory, 'README.md'), 'w') as f:
            f.write('# fuzz-%d: generated by benchmarks/scenario_fuzz.py '
                    '--seed %d\n' % (self.seed, self.seed))
        return sim_scenario.Scenario(
            name='fuzz-%d' % self.seed, path=os.path.abspath(directory),
            topology=topo, state={},
            config_file=os.path.join(os.path.abspath(directory),
                                     'instanceha.conf'),
            timeline=self.commands())


def run_one(seed: int, mix: tuple[str, ...] = MIX_ALL,
            directory: str | None = None) -> dict:
    """Build and run seed ``seed``; its violations by invariant."""
    case = Case(seed, mix)
    with tempfile.TemporaryDirectory() as tmp:
        sc = case.write(directory or tmp)
        sim = runner.Simulation(sc)
        sim.world.verbose_nova = False
        sim.measure_ticks = False
        wrong_power_offs = checks.watch_power_offs(sim.world, case,
                                                   sim.log)
        started = time.perf_counter()
        error = None
        stuck = checks.StuckGuard(sim)
        try:
            result = sim.run(stop_when=stuck)
            violations = list(result.violations)
            if stuck.stuck_at is not None:
                error = ('SimulationStuck: simulated time stopped at %gs '
                         '(the same instant came back %d times)'
                         % (stuck.stuck_at, stuck.LIMIT))
        except Exception as exc:  # a crash of the engine is a finding too
            violations = []
            error = '%s: %s' % (type(exc).__name__, exc)
        wall = time.perf_counter() - started
    found = [(checks.invariant_of(v), v) for v in violations]
    found += wrong_power_offs
    if error is None:
        found += checks.at_rest(sim, case)
    else:
        found.append(('engine-error', error))
    return {'seed': seed, 'violations': found, 'wall_s': wall,
            'simulated_s': sim.clock.t, 'events': len(case.timeline)}


def run_many(seeds, mix: tuple[str, ...] = MIX_ALL) -> dict:
    started = time.perf_counter()
    by_invariant: collections.Counter = collections.Counter()
    failing = []
    runs = 0
    simulated = 0.0
    for seed in seeds:
        res = run_one(seed, mix)
        runs += 1
        simulated += res['simulated_s']
        kinds = sorted({k for k, _ in res['violations']})
        for k in kinds:
            by_invariant[k] += 1
        if res['violations']:
            failing.append({'seed': seed, 'invariants': kinds,
                            'first': res['violations'][0][1]})
    return {
        'runs': runs,
        'seeds': [min(seeds), max(seeds)] if runs else [],
        'mix': list(mix),
        'runs_with_violations': len(failing),
        'violations_by_invariant': dict(sorted(by_invariant.items())),
        'failing_seeds': failing,
        'simulated_s': round(simulated),
        'wall_s': round(time.perf_counter() - started, 2),
    }


def table(report: dict) -> str:
    names = [n for n, _ in checks.INVARIANTS] + list(checks.AT_REST) + [
        'engine-error', 'other']
    rows = [('runs', str(report['runs'])),
            ('seeds', '%s..%s' % tuple(report['seeds'])
             if report['seeds'] else '-'),
            ('mix', ','.join(report['mix'])),
            ('runs with violations', str(report['runs_with_violations']))]
    rows += [('  ' + n, str(report['violations_by_invariant'].get(n, 0)))
             for n in names]
    rows += [('simulated s', str(report['simulated_s'])),
             ('wall s', '%.2f' % report['wall_s']),
             ('runs per wall s', '%.1f' % (
                 report['runs'] / report['wall_s'] if report['wall_s']
                 else 0))]
    width = max(len(k) for k, _ in rows)
    out = ['%s  %s' % (k.ljust(width), v) for k, v in rows]
    for f in report['failing_seeds'][:20]:
        out.append('seed %d: %s: %s' % (f['seed'], ','.join(f['invariants']),
                                        f['first']))
    if len(report['failing_seeds']) > 20:
        out.append('... %d more failing seeds in the JSON'
                   % (len(report['failing_seeds']) - 20))
    return '\n'.join(out)


def parse_mix(text: str) -> tuple[str, ...]:
    """``--mix``: kinds and group names, in MIX_ALL's order."""
    named = set()
    for word in (w for w in text.split(',') if w):
        named.update(MIX_GROUPS.get(word, (word,)))
    return tuple(k for k in MIX_ALL if k in named) + tuple(
        sorted(named - set(MIX_ALL)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--runs', type=int, default=2000)
    p.add_argument('--seed', type=int, default=1,
                   help='first seed (default 1); runs use seed, seed+1, ...')
    p.add_argument('--mix', default=','.join(MIX_ALL),
                   help='kinds of fault, comma-separated, from %s, or '
                   'groups of them: %s' % (', '.join(MIX_ALL),
                                           ', '.join(MIX_GROUPS)))
    p.add_argument('--json', action='store_true',
                   help='print JSON instead of the table')
    p.add_argument('--json-file', help='also write the JSON here')
    p.add_argument('--write-case', metavar='DIR',
                   help='write scenario --seed as a case directory and run '
                        'it once (then: instanceha-simulate --log DIR)')
    args = p.parse_args(argv)
    # The engine's own log is the story of thousands of clouds: noise here.
    logging.disable(logging.CRITICAL)
    mix = parse_mix(args.mix)
    unknown = sorted(set(mix) - set(MIX_ALL))
    if unknown:
        p.error('--mix: unknown kind(s) %s; choose from %s'
                % (', '.join(unknown), ', '.join(MIX_ALL)))
    if args.write_case:
        res = run_one(args.seed, mix, args.write_case)
        for kind, what in res['violations']:
            print('%s: %s' % (kind, what))
        print('%s: seed %d, %d violation(s)' % (
            args.write_case, args.seed, len(res['violations'])))
        return 1 if res['violations'] else 0
    report = run_many(range(args.seed, args.seed + args.runs), mix)
    text = json.dumps(report, indent=2)
    if args.json_file:
        with open(args.json_file, 'w') as f:
            f.write(text + '\n')
    print(text if args.json else table(report))
    if not args.json:
        print()
        print(json.dumps({k: v for k, v in report.items()
                          if k != 'failing_seeds'}))
    return 1 if report['runs_with_violations'] else 0


if __name__ == '__main__':
    sys.exit(main())
