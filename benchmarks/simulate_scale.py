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

"""How the real engine copes with a large cloud, in the simulator.

For each size (100, 1,000 and 5,000 compute hosts by default, 20
instances per host) 5 % of the hosts lose power at once. The production
engine and drivers, with the configuration's defaults unless overridden,
detect, fence, evacuate and bring back those hosts in a simulated cloud.
Reported per size:

- wall and CPU seconds per poll cycle (the tick that reads Nova and
  plans), mean and max;
- Nova API calls per snapshot (must not grow with the number of hosts)
  and in total;
- simulated seconds from the failure to every instance of the failed
  hosts rebuilt elsewhere, and to every failed host back in service
  (``None`` when that did not happen within two simulated hours; the
  ``rebuilt`` column then says how far it got);
- wall seconds for the whole run.

Then, for every host healthy (100, 1,000, 5,000 and 20,000 hosts by
default, ``--steady-hosts``), what the steady state costs Nova: calls and
answer bytes per minute over ``--steady-minutes`` simulated minutes
(after a first minute of start-up, not counted; the default 15 minutes
hold one of the instance failure loop's periodic full listings of the
stopped servers, ``[instance_failure] full_read_every``). A share of the
instances (``--stopped``, 10 % by default) is SHUTOFF, as users keep
them; the listings of the stopped servers (and of their changes) are
also shown on their own, and the instance-action reads with which the
loop judges each stopped instance once after a start (at most
``action_reads_per_cycle`` a poll, so they go on for a while in a large
cloud). The simulator ticks once a second, so it reads the services at
most once a second.
Bytes are estimated from the records each call returns, at the sizes
measured on the functional tests' real Nova 34 (microversion 2.94, see
:data:`RECORD_BYTES`), so they follow the calls the engine really makes.

Printed as tables, and as JSON with ``--json`` (or written to a file
with ``--json-file``)::

    python benchmarks/simulate_scale.py                 # 100, 1000, 5000
    python benchmarks/simulate_scale.py --hosts 1000 --json
    python benchmarks/simulate_scale.py --hosts --steady-hosts 100 1000
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import yaml

from instanceha.engine import model
from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

FAIL_AT = 60.0
#: Simulated seconds a run may last (a slow recovery is cut off here and
#: reported as not finished, with how many instances were rebuilt).
END = 7200


#: Bytes of one record in Nova's answers, measured on the functional
#: tests' Nova 34 at microversion 2.94 (4 computes, 12 servers with the
#: embedded flavor): a compute service 238, a server 1,747 (``detail``),
#: an aggregate 282, an evacuation record 450; plus about 20 bytes of
#: envelope per answer. An image is counted like an aggregate; an instance
#: action (not measured) at the size of its eight fields, about 280.
RECORD_BYTES = {model.Service: 238, model.Server: 1747,
                model.Aggregate: 282, model.Migration: 450,
                model.Image: 282, model.InstanceAction: 280}
ENVELOPE_BYTES = 20


def answer_bytes(result) -> int:
    """Estimated size of Nova's answer(s) behind one port call's result."""
    if isinstance(result, model.Snapshot):
        parts = [result.services, result.servers, result.aggregates,
                 tuple(result.images.values()), result.migrations]
        return sum(answer_bytes(tuple(p)) for p in parts)
    if isinstance(result, (tuple, list)):
        return ENVELOPE_BYTES + sum(RECORD_BYTES.get(type(r), 0)
                                    for r in result)
    if isinstance(result, dict):
        return answer_bytes(tuple(result.values()))
    return ENVELOPE_BYTES + RECORD_BYTES.get(type(result), 0)


class ByteCounter(object):
    """Counts the estimated answer bytes of every read of a SimCloud.

    Wraps the cloud object's own read methods (instance attributes, no
    module patching); calls are still counted by the cloud itself.
    """

    READS = ('snapshot', 'read_services', 'servers_of', 'get_server',
             'migrations', 'aggregates', 'update_service', 'stopped_servers',
             'changed_servers', 'locked_servers', 'server_actions',
             'action_errors', 'host_vcpus')

    def __init__(self, cloud, clock):
        self.cloud = cloud
        self.clock = clock
        #: (simulated time, calls, answer bytes, port method) of each
        #: port call.
        self.calls: list[tuple[float, int, int, str]] = []
        for name in self.READS:
            fn = getattr(cloud, name, None)
            if callable(fn):
                setattr(cloud, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def counted(*args, **kwargs):
            before = self.cloud.api_calls
            result = fn(*args, **kwargs)
            self.calls.append((self.clock.t, self.cloud.api_calls - before,
                               answer_bytes(result), name))
            return result
        return counted

    def since(self, t: float, *kinds: str) -> tuple[int, int]:
        """Calls and bytes from simulated time ``t`` on (of ``kinds``)."""
        rows = [c for c in self.calls
                if c[0] >= t and (not kinds or c[3] in kinds)]
        return sum(c[1] for c in rows), sum(c[2] for c in rows)


def make_case(directory: str, hosts: int, per_host: int, failing: float,
              options: dict, stopped: float = 0.0
              ) -> sim_scenario.Scenario:
    names = ['compute-%05d' % i for i in range(hosts)]
    shutoff = round(hosts * per_host * stopped)
    # Spread the failed hosts over the cloud, not one rack.
    failed = []
    if failing > 0:
        step = max(1, round(1 / failing))
        failed = names[::step][:max(1, round(hosts * failing))]
    topology = {
        # Heartbeats at their own moments, as in a real cloud (a services
        # read scheduled by them is then as frequent as it gets).
        'simulation': {'end': END, 'timing': {'heartbeat_spread': True}},
        'defaults': {'vcpus': per_host * 3},
        'hosts': {n: {} for n in names},
        'flavors': {'m1.small': {'vcpus': 1}},
        'images': {'cirros': {}},
        'instance_groups': [{'prefix': 'vm-', 'count': hosts * per_host -
                             shutoff, 'hosts': names, 'flavor': 'm1.small',
                             'image': 'cirros'}],
    }
    if shutoff:
        # Stopped by their users, spread over the hosts.
        topology['instance_groups'].append({
            'prefix': 'off-', 'count': shutoff, 'hosts': names,
            'flavor': 'm1.small', 'image': 'cirros', 'status': 'SHUTOFF'})
    with open(os.path.join(directory, 'fencing.yaml'), 'w') as f:
        yaml.safe_dump({'hosts': {n: {'driver': 'sim'} for n in names}}, f)
    groups: dict[str, list[str]] = {'DEFAULT': [],
                                    'fencing': ['config_file = fencing.yaml']}
    for key, value in sorted(options.items()):
        group, _, name = key.rpartition('.')
        groups.setdefault(group or 'DEFAULT', []).append(
            '%s = %s' % (name, value))
    lines = []
    for group, opts in groups.items():
        lines += ['[%s]' % group] + opts
    with open(os.path.join(directory, 'instanceha.conf'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    timeline = [sim_scenario.Command(FAIL_AT, 'power-off', (h,), i + 1)
                for i, h in enumerate(failed)]
    return sim_scenario.Scenario(
        name='scale-%d' % hosts, path=directory, topology=topology,
        state={}, config_file=os.path.join(directory, 'instanceha.conf'),
        timeline=timeline), failed


#: Port methods listing the stopped servers (in full or the changes).
STOPPED_READS = ('stopped_servers', 'changed_servers')


def steady(hosts: int, per_host: int, minutes: float,
           options: dict, stopped: float = 0.1) -> dict:
    """Nova calls and bytes per minute while every host is healthy.

    The first simulated minute (start-up: the first full read) is left
    out; the ``minutes`` after it are measured.
    """
    with tempfile.TemporaryDirectory() as tmp:
        sc, _ = make_case(tmp, hosts, per_host, 0.0, options, stopped)
        sc.timeline = []
        sc.topology['simulation']['end'] = (minutes + 1) * 60
        built = time.perf_counter()
        sim = runner.Simulation(sc)
        sim.world.verbose_nova = False
        counter = ByteCounter(sim.cloud, sim.clock)
        started = time.perf_counter()
        sim.run()
        wall = time.perf_counter() - started
    polls = sim.tick_stats
    calls, nbytes = counter.since(60.0)
    listed, listed_bytes = counter.since(60.0, *STOPPED_READS)
    judged, _ = counter.since(60.0, 'server_actions')
    services, _ = counter.since(60.0, 'read_services')
    return {
        'hosts': hosts,
        'instances': hosts * per_host,
        'stopped': round(hosts * per_host * stopped),
        'simulated_min': minutes,
        'nova_calls_per_min': round(calls / minutes, 2),
        'nova_bytes_per_min': round(nbytes / minutes),
        'stopped_list_calls_per_min': round(listed / minutes, 2),
        'stopped_list_bytes_per_min': round(listed_bytes / minutes),
        'action_reads_per_min': round(judged / minutes, 2),
        'services_reads_per_min': round(services / minutes, 2),
        'nova_calls_per_read': max(sim.snapshot_calls or [0]),
        'reads_per_min': round(len(sim.snapshot_calls) / minutes, 2),
        'poll_cpu_s_mean': round(statistics.fmean(
            [c for _, c, _ in polls]), 4) if polls else None,
        'setup_wall_s': round(started - built, 2),
        'run_wall_s': round(wall, 2),
    }


def run(hosts: int, per_host: int, failing: float, options: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        sc, failed = make_case(tmp, hosts, per_host, failing, options)
        built = time.perf_counter()
        sim = runner.Simulation(sc)
        sim.world.verbose_nova = False
        world = sim.world
        down = set(failed)
        victims = {s.id: s.host for s in world.servers.values()
                   if s.host in down}
        marks = {}

        def done() -> bool:
            t = sim.clock.t
            if 'rebuilt' not in marks and t > FAIL_AT and all(
                    world.servers[v].host != origin and
                    not world.servers[v].task_state
                    for v, origin in victims.items()):
                marks['rebuilt'] = t
            if 'rebuilt' in marks and all(
                    world.hosts[h].status == 'enabled' and
                    world.service_state(world.hosts[h]) == 'up' and
                    not world.hosts[h].forced_down for h in failed):
                marks['back'] = t
                return True
            return False

        started = time.perf_counter()
        result = sim.run(stop_when=done)
        wall = time.perf_counter() - started
    polls = sim.tick_stats
    walls = [w for w, _, _ in polls]
    cpus = [c for _, c, _ in polls]
    return {
        'hosts': hosts,
        'instances': hosts * per_host,
        'failed_hosts': len(failed),
        'instances_to_recover': len(victims),
        'poll_cycles': len(polls),
        'poll_wall_s_mean': round(statistics.fmean(walls), 4),
        'poll_wall_s_max': round(max(walls), 4),
        'poll_cpu_s_mean': round(statistics.fmean(cpus), 4),
        'poll_cpu_s_max': round(max(cpus), 4),
        'nova_calls_per_snapshot': max(sim.snapshot_calls),
        'nova_calls_total': sim.cloud.api_calls,
        'sim_s_failure_to_instances_rebuilt': (
            marks['rebuilt'] - FAIL_AT if 'rebuilt' in marks else None),
        'sim_s_failure_to_hosts_back': (
            marks['back'] - FAIL_AT if 'back' in marks else None),
        'instances_rebuilt_at_end': sum(
            1 for v, origin in victims.items()
            if world.servers[v].host != origin
            and not world.servers[v].task_state),
        'simulated_s': sim.clock.t,
        'end_s': END,
        'invariant_violations': len(result.violations),
        'setup_wall_s': round(started - built, 2),
        'run_wall_s': round(wall, 2),
    }


COLUMNS = [
    ('hosts', 'hosts', '%d'),
    ('instances', 'instances', '%d'),
    ('failed_hosts', 'failed', '%d'),
    ('poll_wall_s_mean', 'poll wall s', '%.4f'),
    ('poll_cpu_s_mean', 'poll cpu s', '%.4f'),
    ('poll_cpu_s_max', 'max cpu s', '%.4f'),
    ('nova_calls_per_snapshot', 'nova/poll', '%d'),
    ('nova_calls_total', 'nova total', '%d'),
    ('instances_rebuilt_at_end', 'rebuilt', '%d'),
    ('sim_s_failure_to_instances_rebuilt', 'to rebuilt s', '%s'),
    ('sim_s_failure_to_hosts_back', 'to back s', '%s'),
    ('invariant_violations', 'violations', '%d'),
    ('run_wall_s', 'run wall s', '%.2f'),
]


STEADY_COLUMNS = [
    ('hosts', 'hosts', '%d'),
    ('instances', 'instances', '%d'),
    ('stopped', 'stopped', '%d'),
    ('nova_calls_per_min', 'nova calls/min', '%.2f'),
    ('nova_bytes_per_min', 'nova bytes/min', '%d'),
    ('stopped_list_calls_per_min', 'stopped-list calls/min', '%.2f'),
    ('stopped_list_bytes_per_min', 'stopped-list bytes/min', '%d'),
    ('action_reads_per_min', 'action reads/min', '%.2f'),
    ('services_reads_per_min', 'services reads/min', '%.2f'),
    ('nova_calls_per_read', 'calls/full read', '%d'),
    ('reads_per_min', 'full reads/min', '%.2f'),
    ('poll_cpu_s_mean', 'tick cpu s', '%s'),
    ('run_wall_s', 'run wall s', '%.2f'),
]


def table(rows: list[dict], columns=None) -> str:
    columns = columns or COLUMNS
    cells = [[title for _, title, _ in columns]]
    for row in rows:
        cells.append([fmt % row[key] for key, _, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return '\n'.join('  '.join(c.rjust(w) for c, w in zip(r, widths))
                     for r in cells)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--hosts', type=int, nargs='*', default=[100, 1000, 5000],
                   help='sizes of the failure runs (none: skip them)')
    p.add_argument('--steady-hosts', type=int, nargs='*',
                   default=[100, 1000, 5000, 20000],
                   help='sizes of the steady-state runs (none: skip them)')
    p.add_argument('--steady-minutes', type=float, default=15.0,
                   help='simulated minutes of steady state (default 15)')
    p.add_argument('--stopped', type=float, default=0.1,
                   help='share of the instances SHUTOFF in the steady-state '
                        'runs (default 0.1)')
    p.add_argument('--per-host', type=int, default=20)
    p.add_argument('--failing', type=float, default=0.05,
                   help='share of hosts that fail (default 0.05)')
    p.add_argument('--set', action='append', default=[], metavar='OPT=VAL',
                   help='an option, e.g. --set workers=16 or --set '
                        'evacuation.max_in_flight=100')
    p.add_argument('--json', action='store_true',
                   help='print JSON instead of the table')
    p.add_argument('--json-file', help='also write the JSON here')
    args = p.parse_args(argv)
    options = dict(kv.split('=', 1) for kv in args.set)
    rows = []
    for n in args.hosts:
        rows.append(run(n, args.per_host, args.failing, options))
        if not args.json:
            print('done: %d hosts in %.1f s' % (n, rows[-1]['run_wall_s']),
                  file=sys.stderr)
    steady_rows = []
    for n in args.steady_hosts:
        steady_rows.append(steady(n, args.per_host, args.steady_minutes,
                                  options, args.stopped))
        if not args.json:
            print('done: steady state, %d hosts in %.1f s' % (
                n, steady_rows[-1]['run_wall_s']), file=sys.stderr)
    doc = {'failure': rows, 'steady': steady_rows}
    if args.json_file:
        with open(args.json_file, 'w') as f:
            json.dump(doc, f, indent=2)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        if rows:
            print(table(rows))
        if steady_rows:
            print('\nSteady state (every host healthy):')
            print(table(steady_rows, STEADY_COLUMNS))
    return 1 if any(r['invariant_violations'] for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main())
