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

"""What one host failure costs Nova, call by call, in the simulator.

The scenario of ``tests/unit/test_call_budget.py`` (one host of five
instances loses power, ``poll`` 15, rebuilds of about two seconds), run
with and without the failure in each evacuation mode. Printed per mode:
the steady reads (calls per poll of the run without the failure, by
kind), the failure's calls beyond them by kind (the port method making
them), and per evacuated instance; and where the time goes, in simulated
seconds: power-off confirmed to the first evacuate call, first evacuate
to the last instance rebuilt (by Nova), and that against one rebuild's
time (1.0: every instance rebuilt as soon as the first; above 1 in smart
mode when the instances do not all fit in ``max_in_flight`` at once, see
``--workers``; fire-and-forget bounds only the evacuate calls running at
once, and the simulator's calls take no time). Each mode twice: with the
services read as scheduled by heartbeats (the default, ``[detection]
nova_service_down_time``, ``--nova-service-down-time``, 60 s as Nova's
own) and every interval (``nova_service_down_time = 0``). Each failure's
calls are set against the floor of a host failure, N + 4 for N
instances (the host's servers listed, one evacuate per instance, the
disable and forced-down write, the evacuation records read before the
power-on, the enable): ``above floor``. The simulator ticks once a
second: the services read every interval are 60 a minute there, 120 in
the service. As JSON with ``--json``::

    python benchmarks/failure_calls.py
    python benchmarks/failure_calls.py --rebuild-time 20 --json
    python benchmarks/failure_calls.py --workers 8
    python benchmarks/failure_calls.py --nova-service-down-time 6

Deterministic (simulated time): one run per mode says it all.
"""

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.unit import test_call_budget as budget  # noqa: E402

MODES = {'fire-and-forget': '', 'smart': 'smart_evacuation = true'}
POLL = 15


def _times(lines: list[str]) -> dict:
    """Simulated times of the failure's milestones, from the story."""
    def first(*words):
        for line in lines:
            if all(w in line for w in words):
                return float(line.split()[0])
        return None

    rebuilt = [float(line.split()[0]) for line in lines
               if ' nova compute-0 rebuilt ' in line]
    return {'fenced': first('compute-0 host_state', 'new=fenced'),
            'first_evacuate': first('compute-0 evacuate_requested'),
            'last_rebuilt': max(rebuilt) if rebuilt else None,
            'enabled': first('compute-0 host_state enabled=true')}


def measure(extra: str, end: int, rebuild_time: float) -> dict:
    topology = budget.TOPOLOGY.replace(
        '{schedule_time: 1, rebuild_time: 1}',
        '{schedule_time: 1, rebuild_time: %s}' % rebuild_time)
    with tempfile.TemporaryDirectory() as quiet, \
            tempfile.TemporaryDirectory() as fail:
        base, _, steady = budget.failure_calls(quiet, '', extra, end=end,
                                               topology=topology)
        calls, lines, failed = budget.failure_calls(
            fail, '30 power-off compute-0\n', extra, end=end,
            topology=topology)
    text = '\n'.join(lines)
    if 'violations=0' not in text or \
            'compute-0 host_state enabled=true new=healthy' not in text:
        raise SystemExit('the failure was not recovered within %d s:\n%s'
                         % (end, text))
    kinds = steady.by_kind()
    extra_kinds = {k: n - kinds.get(k, 0)
                   for k, n in failed.by_kind().items()
                   if n != kinds.get(k, 0)}
    polls = end / float(POLL)
    t = _times(lines)
    # Nova's own time for one rebuild here: a second to schedule, then
    # the rebuild (the topology's timing).
    one = 1 + rebuild_time
    span = t['last_rebuilt'] - t['first_evacuate']
    return {
        'fenced_to_first_evacuate_s': t['first_evacuate'] - t['fenced'],
        'first_evacuate_to_last_rebuilt_s': span,
        'last_rebuilt_vs_first_evacuate_plus_rebuild': round(
            span / one, 2),
        'power_off_to_enabled_s': t['enabled'] - 30,
        'steady_calls_per_poll': round(base / polls, 2),
        'steady_services_reads_per_minute': round(
            kinds.get('read_services', 0) * 60.0 / end, 1),
        'steady_by_kind_per_poll': {k: round(n / polls, 2)
                                    for k, n in kinds.items()},
        'failure_calls': calls - base,
        'failure_by_kind': dict(sorted(extra_kinds.items())),
        'calls_per_instance': round((calls - base) / budget.INSTANCES, 2),
        'above_floor': calls - base - floor(budget.INSTANCES),
    }


def floor(instances: int) -> int:
    """A host failure's calls that cannot be done without (see above)."""
    return instances + 4


def table(results: dict) -> str:
    modes = list(results)
    kinds = sorted({k for r in results.values()
                    for k in r['failure_by_kind']})
    rows = [[''] + modes]
    rows.append(['steady: calls per poll'] + [
        str(results[m]['steady_calls_per_poll']) for m in modes])
    rows.append(['steady: services reads a minute'] + [
        str(results[m]['steady_services_reads_per_minute']) for m in modes])
    for k in sorted({k for r in results.values()
                     for k in r['steady_by_kind_per_poll']}):
        rows.append(['  %s per poll' % k] + [
            str(results[m]['steady_by_kind_per_poll'].get(k, 0))
            for m in modes])
    rows.append(['failure: calls beyond steady'] + [
        str(results[m]['failure_calls']) for m in modes])
    for k in kinds:
        rows.append(['  %s' % k] + [
            str(results[m]['failure_by_kind'].get(k, 0)) for m in modes])
    rows.append(['calls per evacuated instance'] + [
        str(results[m]['calls_per_instance']) for m in modes])
    rows.append(['above the floor (N + 4)'] + [
        str(results[m]['above_floor']) for m in modes])
    for key, title in (
            ('fenced_to_first_evacuate_s', 'fenced to first evacuate (s)'),
            ('first_evacuate_to_last_rebuilt_s',
             'first evacuate to last rebuilt (s)'),
            ('last_rebuilt_vs_first_evacuate_plus_rebuild',
             '  / one rebuild\'s time'),
            ('power_off_to_enabled_s', 'power-off to enabled again (s)')):
        rows.append([title] + [str(results[m][key]) for m in modes])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return '\n'.join('  '.join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--end', type=int, default=400,
                   help='simulated seconds of each run (default 400)')
    p.add_argument('--rebuild-time', type=float, default=1,
                   help='seconds Nova takes to rebuild, after a second '
                        'to schedule (default 1)')
    p.add_argument('--workers', type=int, default=None,
                   help='[DEFAULT] workers (the cap on evacuations at once; '
                        'default 4, one less than the instances)')
    p.add_argument('--nova-service-down-time', type=float, default=60,
                   help='[detection] nova_service_down_time of the '
                        'scheduled columns (default 60, Nova\'s default '
                        'and the option\'s)')
    p.add_argument('--json', action='store_true')
    args = p.parse_args(argv)
    more = '\nworkers = %d' % args.workers if args.workers else ''
    modes = {}
    for name, down_time in (('', args.nova_service_down_time),
                            (', every interval', 0)):
        # The last section of the file: [DEFAULT] is written before it.
        detection = '\n[detection]\nnova_service_down_time = %s' % down_time
        modes.update({mode + name: extra + more + detection
                      for mode, extra in MODES.items()})
    results = {mode: measure(extra, args.end, args.rebuild_time)
               for mode, extra in modes.items()}
    doc = {'setup': {'instances': budget.INSTANCES, 'poll': POLL,
                     'end': args.end, 'rebuild_time': args.rebuild_time,
                     'workers': args.workers or 4,
                     'nova_service_down_time': args.nova_service_down_time},
           'results': results}
    print(json.dumps(doc, indent=2) if args.json else table(results))
    return 0


if __name__ == '__main__':
    sys.exit(main())
