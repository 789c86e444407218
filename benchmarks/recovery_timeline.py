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

"""How fast a host failure is recovered, against real peers.

The real ``instanceha-service`` process runs against the peers the
functional tests use (``tests/functional/peers``): a real keystone, a real
nova (API, conductor, scheduler, placement) with fake-driver computes, and
one IPMI BMC emulator per host driven by the real ipmitool (powering a host
off at its BMC stops its nova-compute). The service reaches Nova through a
small counting proxy in this process, so every call it makes (and the
bytes of every answer) is counted and time-stamped; the benchmark watches
Nova and the BMCs directly, outside that count.

Each run waits for a calm cloud, lets the service run one ``--warmup``
(default one ``poll``: its first full read after a start, the reads that
follow a hand-back), measures a steady-state window (every host
healthy), then powers the host holding the most servers off at its BMC
at a random moment of the poll cycle, and records, in seconds after the
power-off:

- ``nova_down``: Nova reports the host's compute service down: its last
  heartbeat plus Nova's ``service_down_time`` (when its state turns;
  ``nova_down_seen``: when this benchmark's watch saw it), and
  ``nova_down_to_fencing``: from there to the service's fencing;
- ``fencing``: the service starts fencing (its log), ``fenced``: the
  power-off is confirmed;
- ``first_evacuate``: the first evacuate call reaches Nova;
  ``last_evacuate``: the last one does (``first_to_last_evacuate``: how
  long the evacuate calls of the host's instances took to be made);
- ``all_active``: every server of the host runs elsewhere (its
  evacuation record done, status back to what it was, no task);
- ``power_on``: the service powered the host back on (BMC);
- ``nova_up``: the host's nova-compute reports again: Nova's ``updated_at``
  of it newer than the power-on (Nova itself says ``up`` only once
  ``forced_down`` is cleared, which instanceha does with the enable), or
  Nova says up;
- ``enabled``: the host is enabled, up and not forced down.

And the service's Nova calls: per minute in the steady window, in the
failure window beyond the steady rate (``per failure``), that divided by
the servers moved (``per instance``); answer bytes per steady minute; the
service's CPU seconds per steady minute and during the failure, and its
largest RSS. ``min / median / max`` over the runs are printed as a table,
everything as JSON with ``--json`` (or into ``--json-file``)::

    flock /tmp/instanceha-heavy.lock python benchmarks/recovery_timeline.py
    ... --runs 5 --strategy smart --poll 15 --delta 10 --json-file out.json

Nova's time is compressed the way the functional tests compress it
(``report_interval`` 2 s, ``service_down_time`` 6 s; ``--report-interval
10 --service-down-time 60`` for Nova's defaults), and the service is told
Nova's ``service_down_time``. Use it under the
shared lock: it starts keystone, nova and the BMCs (about 400 MB).
"""

import argparse
import datetime
import http.client
import http.server
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from urllib import parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.functional import peers  # noqa: E402
from tests.functional.peers import base as peer_base  # noqa: E402
from tests.functional.peers import ipmi_peer  # noqa: E402

#: A run that does not end within this many seconds is reported unfinished.
RUN_TIMEOUT = 240
#: How often Nova and the BMCs are looked at (not counted: not the service).
WATCH_INTERVAL = 0.2

_ACTION = re.compile(r'^/v2\.1/servers/[^/]+/action$')
_LOG_TIME = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})')


# -- the counting proxy -----------------------------------------------------

def classify(method: str, path: str, body: bytes) -> str:
    """What one call to Nova was, in a few words."""
    path = parse.urlsplit(path).path.rstrip('/')
    if method == 'POST' and _ACTION.match(path):
        try:
            return 'action:%s' % next(iter(json.loads(body or b'{}')))
        except (ValueError, StopIteration, TypeError):
            return 'action:?'
    parts = [p for p in path.split('/') if p][1:]  # drop the version
    if not parts:
        return '%s version' % method
    name = parts[0]
    if name == 'servers' and len(parts) == 2 and parts[1] != 'detail':
        name = 'server'
    elif name == 'servers' and len(parts) > 1:
        name = 'servers/' + '/'.join(parts[1:])
    return '%s %s' % (method, name)


class CountingProxy(object):
    """A reverse proxy in front of Nova that records every call."""

    def __init__(self, target_endpoint: str):
        url = parse.urlsplit(target_endpoint)
        self.target = (url.hostname, url.port)
        self.records: list[tuple[float, str, int, int]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *args):
                pass

            def _forward(self):
                # When the call reaches Nova (not when Nova answers: an
                # evacuate takes Nova a few hundred milliseconds).
                arrived = time.monotonic()
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else b''
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ('connection', 'keep-alive',
                                                'host')}
                conn = http.client.HTTPConnection(*proxy.target, timeout=120)
                try:
                    conn.request(self.command, self.path, body=body or None,
                                 headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in ('connection', 'keep-alive',
                                             'transfer-encoding',
                                             'content-length'):
                            self.send_header(k, v)
                    self.send_header('Content-Length', str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    conn.close()
                with proxy.lock:
                    proxy.records.append((
                        arrived,
                        classify(self.command, self.path, body),
                        len(body), len(data)))

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward
            do_HEAD = _forward

        self.server = http.server.ThreadingHTTPServer(
            (peer_base.LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = 'http://%s:%d/v2.1' % (peer_base.LOOPBACK, self.port)
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def between(self, start: float, end: float) -> list[tuple]:
        with self.lock:
            return [r for r in self.records if start <= r[0] <= end]

    def first(self, kind: str, after: float) -> float | None:
        with self.lock:
            for r in self.records:
                if r[0] >= after and r[1] == kind:
                    return r[0]
        return None

    def last(self, kind: str, after: float, before: float) -> float | None:
        times = [r[0] for r in self.between(after, before) if r[1] == kind]
        return max(times) if times else None

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# -- the service process ------------------------------------------------------

def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process, children excluded."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    ticks = os.sysconf('SC_CLK_TCK')
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_mb(pid: int) -> float:
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024.0
    return 0.0


def write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(text)


def service_config(directory, keystone, proxy, bmc, hosts, options) -> str:
    secret = os.path.join(directory, 'bmc-password')
    write_private(secret, bmc.password)
    lines = ['hosts:']
    for host in hosts:
        lines += ['  %s:' % host, '    driver: ipmi',
                  '    address: 127.0.0.1',
                  '    port: %d' % bmc.ports[host],
                  '    username: %s' % bmc.username,
                  '    password_file: %s' % secret]
    fencing = os.path.join(directory, 'fencing.yaml')
    write_private(fencing, '\n'.join(lines) + '\n')
    groups = {
        'DEFAULT': {'debug': 'false'},
        'nova': {'auth_type': 'password', 'auth_url': keystone.auth_url,
                 'username': keystone.admin_user,
                 'password': keystone.admin_password,
                 'project_name': keystone.admin_project,
                 'user_domain_name': keystone.user_domain,
                 'project_domain_name': keystone.project_domain,
                 'region_name': keystone.region,
                 'endpoint_override': proxy.endpoint, 'timeout': 30},
        'fencing': {'config_file': fencing, 'device_timeout': 20},
        'coordination': {'backend_url': 'file://%s/coord' % directory,
                         'heartbeat_interval': 0.5, 'lease_time': 3},
        'health': {'port': peer_base.free_port()},
    }
    for key, value in options.items():
        group, _, name = key.rpartition('.')
        groups.setdefault(group or 'DEFAULT', {})[name] = value
    text = ''
    for group, opts in groups.items():
        text += '[%s]\n' % group + ''.join(
            '%s = %s\n' % kv for kv in opts.items())
    path = os.path.join(directory, 'instanceha.conf')
    write_private(path, text)
    return path


def log_times(path: str, *patterns: str) -> list[float]:
    """Wall-clock times (epoch s) of the service log lines holding all."""
    out = []
    with open(path, errors='replace') as f:
        for line in f:
            if all(p in line + ' ' for p in patterns):
                m = _LOG_TIME.match(line)
                if m:
                    out.append(datetime.datetime.strptime(
                        m.group(1), '%Y-%m-%d %H:%M:%S.%f').timestamp())
    return out


def stamp_of(svc) -> float | None:
    """Nova's ``updated_at`` of ``svc`` (UTC) as a time stamp; None."""
    raw = (getattr(svc, 'updated_at', None) or '').rstrip('Z')
    try:
        return datetime.datetime.fromisoformat(raw).replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


def reported_after(svc, when: float) -> bool:
    """Whether Nova stamped ``svc`` (``updated_at``, UTC) after ``when``.

    Nova stamps a forced-down service with nova-compute's reports too;
    here, on the machine of Nova and the benchmark, one clock.
    """
    stamp = stamp_of(svc)
    return stamp is not None and stamp > when


# -- one run -------------------------------------------------------------------

class Bench(object):
    def __init__(self, args):
        self.args = args
        self.fixtures = []

    def use(self, fixture):
        fixture.setUp()
        self.fixtures.append(fixture)
        return fixture

    def start(self):
        a = self.args
        self.keystone = self.use(peers.KeystonePeer())
        self.nova = self.use(peers.NovaPeer(
            hosts=a.hosts, keystone=self.keystone,
            report_interval=a.report_interval,
            service_down_time=a.service_down_time))
        self.bmc = self.use(ipmi_peer.IpmiBmcPeer(hosts=self.nova.hosts,
                                                  nova=self.nova))
        self.client = self.nova.client()
        per_host, extra = divmod(a.servers, a.hosts)
        for i, host in enumerate(self.nova.hosts):
            count = per_host + (1 if i < extra else 0)
            if count:
                self.nova.create_servers(count, host=host, name='vm-' + host,
                                         client=self.client)
        self.proxy = CountingProxy(self.nova.endpoint)
        self.dir = tempfile.mkdtemp(prefix='instanceha-timeline-')

    def start_service(self, strategy: str):
        a = self.args
        # Nova's own service_down_time, as an operator tells it (--set
        # detection.nova_service_down_time=0 reads every interval).
        options = {'poll': a.poll, 'delta': a.delta,
                   'evacuation.strategy': strategy,
                   'detection.nova_service_down_time': a.service_down_time}
        options.update(dict(kv.split('=', 1) for kv in a.set))
        conf = service_config(self.dir, self.keystone, self.proxy, self.bmc,
                              self.nova.hosts, options)
        self.log = os.path.join(self.dir, 'service-%s.log' % strategy)
        script = os.path.join(os.path.dirname(sys.executable),
                              'instanceha-service')
        self.out = open(self.log, 'ab')
        self.proc = subprocess.Popen(
            [script, '--config-file', conf], stdout=self.out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ, OS_NOVA_DISABLE_EVENTLET_PATCHING='true'))
        started = time.monotonic()
        peer_base.wait_until(
            lambda: self.proxy.first('GET os-services', started), 60,
            what='the service to read Nova')

    def stop_service(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.out.close()

    def servers(self) -> dict:
        return {s.id: s for s in self.client.servers.list(
            search_opts={'all_tenants': 1})}

    def service(self, host):
        return self.client.services.list(host=host, binary='nova-compute')[0]

    def settle(self):
        """Every host up and enabled, nothing moving."""
        def calm():
            svcs = self.client.services.list(binary='nova-compute')
            if any(s.state != 'up' or s.status != 'enabled' or s.forced_down
                   for s in svcs):
                return False
            return all(s.status in ('ACTIVE', 'SHUTOFF') and not getattr(
                s, 'OS-EXT-STS:task_state') for s in self.servers().values())
        peer_base.wait_until(calm, 180, interval=0.5, what='a calm cloud')

    def run_once(self) -> dict:
        a = self.args
        self.settle()
        # Not measured: what a start or the last hand-back still does
        # (without it, the first run's steady CPU counted start-up work).
        time.sleep(a.poll if a.warmup is None else a.warmup)
        # Steady state: every host healthy for a whole window.
        pid = self.proc.pid
        s_start, cpu0 = time.monotonic(), proc_cpu(pid)
        time.sleep(a.steady)
        s_end, cpu1 = time.monotonic(), proc_cpu(pid)
        steady = self.proxy.between(s_start, s_end)
        minutes = (s_end - s_start) / 60.0
        # The host holding most servers fails at a random poll phase.
        servers = self.servers()
        by_host: dict[str, list] = {}
        for s in servers.values():
            by_host.setdefault(getattr(s, 'OS-EXT-SRV-ATTR:host'),
                               []).append(s)
        host = max(sorted(by_host), key=lambda h: len(by_host[h]))
        victims = {s.id: s.status for s in by_host[host]}
        time.sleep(random.uniform(0, a.poll))
        last_read = max((r[0] for r in self.proxy.between(s_start,
                                                          time.monotonic())
                         if r[1] == 'GET os-services'), default=None)
        t0_wall, t0 = time.time(), time.monotonic()
        proc = self.bmc.ipmitool(host, 'chassis', 'power', 'off')
        if proc.returncode:
            raise RuntimeError('power off %s: %s' % (host, proc.stderr))
        marks: dict[str, float] = {}
        rss = proc_rss_mb(pid)
        deadline = t0 + RUN_TIMEOUT

        def mark(name, when=None):
            if name not in marks:
                marks[name] = round((when or time.monotonic()) - t0, 2)

        # The host's last heartbeat: its updated_at while no one wrote
        # its service record (not forced down, enabled).
        last_beat = None
        while time.monotonic() < deadline and 'enabled' not in marks:
            svc = self.service(host)
            if 'nova_down' not in marks and not svc.forced_down and \
                    svc.status == 'enabled':
                last_beat = stamp_of(svc) or last_beat
            if svc.state == 'down':
                mark('nova_down')
            if 'power_on' not in marks and \
                    self.bmc.power_state(host) == 'on':
                mark('power_on')
            if 'power_on' in marks and (
                    svc.state == 'up' or reported_after(
                        svc, t0_wall + marks['power_on'])):
                mark('nova_up')
            if ('power_on' in marks and svc.state == 'up' and
                    svc.status == 'enabled' and not svc.forced_down):
                mark('enabled')
            if 'all_active' not in marks:
                now = self.servers()
                if all(getattr(now[v], 'OS-EXT-SRV-ATTR:host') != host and
                       now[v].status == status and
                       not getattr(now[v], 'OS-EXT-STS:task_state')
                       for v, status in victims.items() if v in now):
                    mark('all_active')
            rss = max(rss, proc_rss_mb(pid))
            time.sleep(WATCH_INTERVAL)
        t_end = time.monotonic()
        cpu2 = proc_cpu(pid)
        first = self.proxy.first('action:evacuate', t0)
        if first is not None:
            marks['first_evacuate'] = round(first - t0, 2)
        last = self.proxy.last('action:evacuate', t0, t_end)
        if last is not None:
            marks['last_evacuate'] = round(last - t0, 2)
        for name, state in (('fencing', 'fencing'), ('fenced', 'fenced')):
            times = [t for t in log_times(self.log, 'host_state %s ' % host,
                                          ' new=%s ' % state)
                     if t >= t0_wall - 0.5]
            if times:
                marks[name] = round(times[0] - t0_wall, 2)
        window = self.proxy.between(t0, t_end)
        kinds: dict[str, int] = {}
        for r in window:
            kinds[r[1]] = kinds.get(r[1], 0) + 1
        extra_kinds = beyond_steady(kinds, _count(steady), s_end - s_start,
                                    t_end - t0)
        extra = sum(extra_kinds.values())
        if 'nova_down' in marks and last_beat is not None:
            # The moment Nova's own state turned (the loop above sees it
            # up to a turn of the loop later): the last heartbeat plus
            # Nova's service_down_time, on the one clock of this machine.
            marks['nova_down_seen'] = marks['nova_down']
            marks['nova_down'] = min(marks['nova_down'], round(
                last_beat + self.nova.service_down_time - t0_wall, 2))
        if 'fencing' in marks and 'nova_down' in marks:
            marks['nova_down_to_fencing'] = round(
                marks['fencing'] - marks['nova_down'], 2)
        if 'first_evacuate' in marks and 'fenced' in marks:
            marks['fenced_to_first_evacuate'] = round(
                marks['first_evacuate'] - marks['fenced'], 2)
        if 'first_evacuate' in marks and 'all_active' in marks:
            marks['first_evacuate_to_all_active'] = round(
                marks['all_active'] - marks['first_evacuate'], 2)
        if 'first_evacuate' in marks and 'last_evacuate' in marks:
            marks['first_to_last_evacuate'] = round(
                marks['last_evacuate'] - marks['first_evacuate'], 2)
        return dict(
            marks, host=host, instances=len(victims),
            finished='enabled' in marks,
            poll_phase=(round((t0 - last_read) % a.poll, 2)
                        if last_read else None),
            steady_calls_per_min=round(len(steady) / minutes, 2),
            steady_bytes_per_min=round(sum(r[3] for r in steady) / minutes),
            steady_calls_by_kind=_count(steady),
            failure_calls=len(window),
            failure_calls_beyond_steady=round(extra, 1),
            calls_per_instance=round(extra / max(1, len(victims)), 2),
            failure_calls_by_kind=kinds,
            failure_calls_beyond_steady_by_kind=extra_kinds,
            # When each call of the failure reached Nova (s after the
            # power-off), to read the calls against the service's log.
            failure_call_times=[[round(r[0] - t0, 2), r[1]]
                                for r in window],
            cpu_s_per_steady_min=round((cpu1 - cpu0) / minutes, 3),
            cpu_s_failure=round(cpu2 - cpu1, 3),
            rss_mb_max=round(rss, 1))

    def close(self):
        for fixture in reversed(self.fixtures):
            try:
                fixture.cleanUp()
            except Exception as exc:  # noqa: best effort on the way out
                print('cleanup: %s' % exc, file=sys.stderr)
        if getattr(self, 'proxy', None):
            self.proxy.close()


def beyond_steady(kinds: dict, steady: dict, steady_s: float,
                  window_s: float) -> dict:
    """The failure window's calls of each kind beyond its steady rate.

    A kind the steady window also made (the services read, the stopped
    servers) counts only what exceeds its steady rate over the failure
    window, never less than nothing: a read that happened to fall just
    outside the window is not a call saved by the failure.
    """
    out = {}
    for kind, n in kinds.items():
        more = n - steady.get(kind, 0) / steady_s * window_s
        if more > 0.5:
            out[kind] = round(more, 1)
    return dict(sorted(out.items()))


def _count(records) -> dict:
    out: dict[str, int] = {}
    for r in records:
        out[r[1]] = out.get(r[1], 0) + 1
    return dict(sorted(out.items()))


ROWS = [
    ('nova_down', 'Nova reports the host down (s)'),
    ('fencing', 'fencing starts (s)'),
    ('nova_down_to_fencing', 'Nova reports it down to fencing (s)'),
    ('fenced', 'power-off confirmed (s)'),
    ('first_evacuate', 'first evacuate call (s)'),
    ('last_evacuate', 'last evacuate call (s)'),
    ('all_active', 'every server ACTIVE elsewhere (s)'),
    ('fenced_to_first_evacuate', 'power-off confirmed to first evacuate (s)'),
    ('first_evacuate_to_all_active', 'first evacuate to all ACTIVE (s)'),
    ('first_to_last_evacuate', 'first evacuate to last evacuate (s)'),
    ('power_on', 'host powered on (s)'),
    ('nova_up', 'Nova reports it up (s)'),
    ('enabled', 'host enabled again (s)'),
    ('poll_phase', 'power-off this long after a poll (s)'),
    ('steady_calls_per_min', 'Nova calls per minute, steady'),
    ('steady_bytes_per_min', 'Nova answer bytes per minute, steady'),
    ('failure_calls_beyond_steady', 'Nova calls per failure (beyond steady)'),
    ('calls_per_instance', 'Nova calls per evacuated instance'),
    ('cpu_s_per_steady_min', 'service CPU s per minute, steady'),
    ('cpu_s_failure', 'service CPU s during the failure'),
    ('rss_mb_max', 'service RSS MB, max'),
]


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key, _ in ROWS:
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            out[key] = {'min': min(values),
                        'median': round(statistics.median(values), 3),
                        'max': max(values)}
    return out


def table(results: dict) -> str:
    strategies = list(results)
    head = ['', ] + ['%s min / median / max' % s for s in strategies]
    cells = [head]
    for key, title in ROWS:
        row = [title]
        for s in strategies:
            v = results[s]['summary'].get(key)
            row.append('%s / %s / %s' % (v['min'], v['median'], v['max'])
                       if v else '-')
        cells.append(row)
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return '\n'.join('  '.join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
                     for r in cells)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--runs', type=int, default=3)
    p.add_argument('--hosts', type=int, default=4)
    p.add_argument('--servers', type=int, default=12)
    p.add_argument('--poll', type=int, default=15)
    p.add_argument('--delta', type=int, default=10)
    p.add_argument('--report-interval', type=int, default=2,
                   help='Nova\'s report_interval (default 2; Nova\'s own '
                        'default is 10)')
    p.add_argument('--service-down-time', type=int, default=6,
                   help='Nova\'s service_down_time (default 6; Nova\'s '
                        'own default is 60); told to the service as '
                        '[detection] nova_service_down_time')
    p.add_argument('--steady', type=float, default=30.0,
                   help='seconds of steady state measured before each '
                        'failure (default 30)')
    p.add_argument('--warmup', type=float, default=None,
                   help='seconds the calm cloud runs before the steady '
                        'window is measured (default: one poll)')
    p.add_argument('--strategy', nargs='+',
                   default=['fire-and-forget', 'smart'])
    p.add_argument('--set', action='append', default=[], metavar='OPT=VAL',
                   help='another service option, e.g. --set workers=8')
    p.add_argument('--seed', type=int, default=None)
    p.add_argument('--json', action='store_true')
    p.add_argument('--json-file')
    args = p.parse_args(argv)
    random.seed(args.seed)
    bench = Bench(args)
    results: dict = {}
    load_before = load_average()
    try:
        bench.start()
        for strategy in args.strategy:
            bench.start_service(strategy)
            runs = []
            try:
                for i in range(args.runs):
                    runs.append(bench.run_once())
                    print('%s run %d: %s' % (strategy, i + 1, json.dumps(
                        {k: v for k, v in runs[-1].items()
                         if not isinstance(v, dict)})), file=sys.stderr)
            finally:
                bench.stop_service()
            results[strategy] = {'summary': summarize(runs), 'runs': runs}
    finally:
        bench.close()
    doc = {'setup': {'hosts': args.hosts, 'servers': args.servers,
                     'poll': args.poll, 'delta': args.delta,
                     'runs': args.runs, 'steady_s': args.steady,
                     'warmup_s': (args.poll if args.warmup is None
                                  else args.warmup),
                     'options': args.set,
                     'nova_service_down_time': bench.nova.service_down_time,
                     'nova_report_interval': bench.nova.report_interval,
                     'load_average_before': load_before,
                     'load_average_after': load_average(),
                     'cpus': os.cpu_count()},
           'results': results}
    if args.json_file:
        with open(args.json_file, 'w') as f:
            json.dump(doc, f, indent=2)
    print(json.dumps(doc, indent=2) if args.json else table(results))
    unfinished = [r for res in results.values() for r in res['runs']
                  if not r['finished']]
    return 1 if unfinished else 0


if __name__ == '__main__':
    sys.exit(main())
