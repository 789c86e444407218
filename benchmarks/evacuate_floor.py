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

"""How fast this Nova can evacuate many failed hosts at all: the floor.

A bare script, no instanceha: on the functional tests' real nova (API,
conductor, scheduler, placement; fake-driver computes, see
``tests/functional/peers``) ``--failed`` hosts of ``--per-host`` servers
each lose their nova-compute at once; the script forces every one of
them down and disables it, then asks Nova to evacuate every server of
those hosts at once (one thread per call), and waits until each server
is ACTIVE on another host with its evacuation record done. Nothing
is checked, fenced or paced: what it measures is the time Nova itself
needs, the floor any recovery of the same hosts on the same Nova can
only approach. Printed (and as JSON with ``--json``), seconds from the
first write:

- ``marked``: every host forced down and disabled;
- ``asked``: every evacuate call answered;
- ``all_active``: every server ACTIVE elsewhere, its record done;
- ``first_evacuate_to_all_active``: from the first evacuate call;
- ``finished``, ``evacuated`` and ``records`` (the evacuation records
  by status): how far it got when ``--timeout`` ran out.

Use it under the heavy lock (it starts nova, about 300 MB)::

    flock /tmp/instanceha-heavy.lock python benchmarks/evacuate_floor.py
    ... --failed 8 --per-host 10 --spare 4 --json
"""

import argparse
import concurrent.futures
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.functional import peers  # noqa: E402
from tests.functional.peers import base as peer_base  # noqa: E402

#: Seconds the evacuations may take before the run is called unfinished.
TIMEOUT = 600


def boot(nova, client, hosts: list[str], per_host: int) -> dict:
    """``per_host`` servers on each of ``hosts``; server id -> host."""
    placed = {}
    for host in hosts:
        for server in nova.create_servers(per_host, host=host,
                                          name='floor-%s' % host,
                                          wait=False, client=client):
            placed[server.id] = host
    for sid in placed:
        nova.wait_for_server(sid, 'ACTIVE', timeout=300, client=client)
    return placed


def progress(client, placed: dict) -> dict:
    """How many servers are evacuated, and the records' statuses."""
    servers = {s.id: s for s in client.servers.list(
        search_opts={'all_tenants': 1}, limit=-1)}
    records = {}
    for m in client.migrations.list(migration_type='evacuation'):
        if m.instance_uuid in placed:
            records[m.instance_uuid] = m.status
    statuses: dict[str, int] = {}
    for status in records.values():
        statuses[status] = statuses.get(status, 0) + 1
    moved = sum(1 for sid, host in placed.items()
                if records.get(sid) in ('done', 'completed') and
                sid in servers and servers[sid].status == 'ACTIVE' and
                getattr(servers[sid], 'OS-EXT-SRV-ATTR:host') != host and
                not getattr(servers[sid], 'OS-EXT-STS:task_state'))
    return {'evacuated': moved, 'records': statuses}


def evacuated(client, placed: dict) -> bool:
    """Every server ACTIVE off its failed host, its last record done."""
    return progress(client, placed)['evacuated'] == len(placed)


def run(args) -> dict:
    hosts = ['host%d' % i for i in range(1, args.failed + args.spare + 1)]
    failed = hosts[:args.failed]
    with peers.NovaPeer(hosts=hosts, driver='fake.FakeDriver',
                        report_interval=args.report_interval,
                        service_down_time=args.service_down_time) as nova:
        client = nova.client()
        placed = boot(nova, client, failed, args.per_host)
        for host in failed:
            nova.control.kill(host)
        ids = {s.host: s.id for s in client.services.list(
            binary='nova-compute')}
        t0 = time.monotonic()
        for host in failed:
            client.services.force_down(ids[host], True)
            client.services.disable_log_reason(ids[host], 'floor benchmark')
        marked = time.monotonic() - t0
        first = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(placed)) as pool:
            list(pool.map(lambda sid: client.servers.evacuate(sid),
                          placed))
        asked = time.monotonic() - t0
        try:
            peer_base.wait_until(lambda: evacuated(client, placed),
                                 args.timeout, interval=0.25,
                                 what='every server evacuated')
            finished = True
        except peer_base.PeerError:
            finished = False  # said below, with how far it got
        end = time.monotonic()
        seen = progress(client, placed)
    return {'finished': finished, 'evacuated': seen['evacuated'],
            'records': seen['records'],
            'failed_hosts': args.failed, 'per_host': args.per_host,
            'servers': len(placed), 'spare_hosts': args.spare,
            'nova_report_interval': args.report_interval,
            'nova_service_down_time': args.service_down_time,
            'marked_s': round(marked, 2), 'asked_s': round(asked, 2),
            'all_active_s': round(end - t0, 2),
            'first_evacuate_to_all_active_s': round(end - first, 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--failed', type=int, default=8,
                   help='hosts that fail at once (default 8)')
    p.add_argument('--per-host', type=int, default=10,
                   help='servers on each failed host (default 10)')
    p.add_argument('--spare', type=int, default=4,
                   help='hosts left to evacuate to (default 4)')
    p.add_argument('--report-interval', type=int, default=2,
                   help='Nova\'s report_interval (default 2)')
    p.add_argument('--service-down-time', type=int, default=6,
                   help='Nova\'s service_down_time (default 6)')
    p.add_argument('--timeout', type=float, default=TIMEOUT,
                   help='seconds the evacuations may take (default %d)'
                        % TIMEOUT)
    p.add_argument('--json', action='store_true')
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print('%s  %s' % (key.ljust(width), value))
    return 0 if result['finished'] else 1


if __name__ == '__main__':
    sys.exit(main())
