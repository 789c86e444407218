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

"""What one steady-state read of Nova costs the service in CPU.

Builds the production cloud port (:class:`instanceha.adapters.nova.NovaCloud`)
in this process against the real peers the functional tests use (a real
keystone, a real nova with fake-driver computes) and times this process's
CPU (user + system) over ``--reads`` calls of the services read alone
(``read_services``, the read made every ``[detection]
services_interval``) and of the steady stopped-servers listing
(``stopped_servers`` with ``changes-since``). Nova and keystone run in
their own processes: their CPU is not counted.

    flock /tmp/instanceha-heavy.lock python benchmarks/read_cost.py \\
        [--reads 400] [--profile 25] [--json]

``--profile N`` also prints the N most expensive functions of the
services read (cProfile on CPU time, by own and by cumulative time).
"""

import argparse
import cProfile
import datetime
import io
import json
import os
import pstats
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from oslo_config import cfg  # noqa: E402

from instanceha.adapters import nova  # noqa: E402
from instanceha import conf as ha_conf  # noqa: E402
from tests.functional import peers  # noqa: E402


def make_cloud(keystone, nova_peer, directory: str) -> nova.NovaCloud:
    text = ('[nova]\ntimeout = 30\nauth_type = password\nauth_url = %s\n'
            'username = %s\npassword = %s\nproject_name = %s\n'
            'user_domain_name = %s\nproject_domain_name = %s\n'
            'region_name = %s\nendpoint_override = %s\n' % (
                keystone.auth_url, keystone.admin_user,
                keystone.admin_password, keystone.admin_project,
                keystone.user_domain, keystone.project_domain,
                keystone.region, nova_peer.endpoint))
    path = os.path.join(directory, 'instanceha.conf')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    conf = cfg.ConfigOpts()
    ha_conf.parse_args(['--config-file', path], conf,
                       default_config_files=[])
    return nova.NovaCloud(conf)


def cpu_per_call(fn, reads: int) -> dict:
    """CPU and wall milliseconds per call of ``fn`` (after a warm-up)."""
    for _ in range(5):
        fn()
    cpu0, wall0 = time.process_time(), time.monotonic()
    for _ in range(reads):
        fn()
    cpu1, wall1 = time.process_time(), time.monotonic()
    return {'cpu_ms': round((cpu1 - cpu0) * 1000 / reads, 3),
            'wall_ms': round((wall1 - wall0) * 1000 / reads, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--hosts', type=int, default=4)
    p.add_argument('--servers', type=int, default=12)
    p.add_argument('--reads', type=int, default=400)
    p.add_argument('--profile', type=int, default=0, metavar='N')
    p.add_argument('--json', action='store_true')
    args = p.parse_args(argv)
    fixtures = []
    try:
        keystone = peers.KeystonePeer()
        keystone.setUp()
        fixtures.append(keystone)
        nova_peer = peers.NovaPeer(hosts=args.hosts, keystone=keystone)
        nova_peer.setUp()
        fixtures.append(nova_peer)
        client = nova_peer.client()
        per_host, extra = divmod(args.servers, args.hosts)
        for i, host in enumerate(nova_peer.hosts):
            count = per_host + (1 if i < extra else 0)
            if count:
                nova_peer.create_servers(count, host=host,
                                         name='vm-' + host, client=client)
        with tempfile.TemporaryDirectory() as directory:
            cloud = make_cloud(keystone, nova_peer, directory)
            since = datetime.datetime.now(datetime.timezone.utc)
            out = {'hosts': args.hosts, 'servers': args.servers,
                   'reads': args.reads,
                   'read_services': cpu_per_call(cloud.read_services,
                                                 args.reads),
                   'stopped_servers_changes': cpu_per_call(
                       lambda: cloud.stopped_servers(since=since),
                       max(1, args.reads // 4))}
            if args.profile:
                prof = cProfile.Profile(time.process_time)
                prof.enable()
                for _ in range(args.reads):
                    cloud.read_services()
                prof.disable()
                text = io.StringIO()
                stats = pstats.Stats(prof, stream=text)
                stats.sort_stats('cumulative').print_stats(args.profile)
                stats.sort_stats('tottime').print_stats(args.profile)
                print(text.getvalue(), file=sys.stderr)
    finally:
        for fixture in reversed(fixtures):
            fixture.cleanUp()
    print(json.dumps(out, indent=None if not args.json else 2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
