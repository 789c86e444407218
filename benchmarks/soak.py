#!/usr/bin/env python3
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

"""A chaos soak on the real peers (see tests/soak/harness.py).

    benchmarks/soak.py --seed 7 --minutes 60 [--hosts 8] [--json FILE]
    benchmarks/soak.py --audit TRUTH.json

Starts real nova with N fake computes and servers on every host, IPMI
BMC emulators (and the Redfish emulator for the last hosts), a heartbeat
agent per host, etcd or redis (by the seed, or --backend), a
fault-injecting proxy in front of Nova and two copies of
instanceha-service; injects faults for the given time, audits physical
truth after each, lets the cloud settle and prints the figures (a table,
and JSON with --json). Exit status 1 on any breach, with the seed and
the timeline that replays it. --truth writes what the audit saw at the
end; --audit checks such a file again with the rules of this checkout.
"""

import argparse
import dataclasses
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'true')

from tests.soak import audit  # noqa: E402
from tests.soak import harness  # noqa: E402


def reaudit(path: str) -> int:
    """Check a run's recorded truth again: breaches, one a line.

    The end-state rules apply only to a truth gathered once the run had
    settled (a run that breached earlier wrote an intermediate one).
    """
    with open(path) as f:
        found = audit.check(audit.Truth(**json.load(f)))
    print('\n'.join(found) or 'no breach')
    return 1 if found else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--minutes', type=float, default=5.0,
                        help='how long faults are injected (default 5)')
    parser.add_argument('--hosts', type=int, default=8)
    parser.add_argument('--per-host', type=int, default=2,
                        help='servers booted on each host (default 2)')
    parser.add_argument('--copies', type=int, default=2)
    parser.add_argument('--redfish-hosts', type=int, default=2,
                        help='hosts behind the Redfish emulator (default 2)')
    parser.add_argument('--no-keystone', action='store_true',
                        help='no keystone: nova without authentication')
    parser.add_argument('--backend', choices=harness.BACKENDS,
                        help='coordination backend (default: by the seed, '
                        'even etcd, odd redis)')
    parser.add_argument('--kinds', default='',
                        help='comma-separated fault kinds (default all: %s)'
                        % ', '.join(harness.FAULTS))
    parser.add_argument('--keep-logs', default='/tmp/instanceha-soak-%d',
                        metavar='DIR', help='where a breach leaves the '
                        'service copies\' logs (%%d: the seed; default '
                        '%(default)s)')
    parser.add_argument('--json', metavar='FILE',
                        help='also write the figures as JSON to FILE')
    parser.add_argument('--truth', metavar='FILE',
                        help='write what the last audit saw to FILE')
    parser.add_argument('--audit', metavar='FILE',
                        help='only check a --truth FILE again and exit')
    args = parser.parse_args(argv)
    if args.audit:
        return reaudit(args.audit)
    kinds = tuple(k for k in args.kinds.split(',') if k) or None
    for kind in kinds or ():
        if kind not in harness.FAULTS:
            parser.error('unknown fault kind %r' % kind)
    soak = harness.Soak(hosts=args.hosts, per_host=args.per_host,
                        copies=args.copies, seed=args.seed,
                        backend=args.backend,
                        keystone=not args.no_keystone,
                        redfish_hosts=args.redfish_hosts,
                        # The peers end themselves after this: the run,
                        # its settling and an hour to spare.
                        max_lifetime=args.minutes * 60 + 3600,
                        log=lambda line: print(line, flush=True))
    with soak:
        try:
            figures = soak.run(args.minutes * 60, kinds=kinds)
        except harness.Breach as exc:
            print(exc, flush=True)
            figures = soak.figures()
            kept = shutil.copytree(soak.cloud.dir, args.keep_logs % args.seed,
                                   dirs_exist_ok=True,
                                   ignore=shutil.ignore_patterns('coord'))
            print('the service copies\' logs and configuration: %s' % kept)
        print(harness.table(figures))
        if args.truth:
            with open(args.truth, 'w') as f:
                json.dump(dataclasses.asdict(soak.truth()), f)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(figures, f, indent=2, sort_keys=True)
    return 1 if figures['breaches'] else 0


if __name__ == '__main__':
    sys.exit(main())
