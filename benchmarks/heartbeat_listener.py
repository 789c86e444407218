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

"""Benchmark: the heartbeat listener with 5,000 hosts on one core.

Runs the real HeartbeatListener (its own thread, as in the service) in
this process and a sender in a child process on loopback, in two phases:

* ``steady``: every host beats once per ``--interval`` seconds (5,000
  hosts every 5 s = 1,000 packets/s), signed and time-stamped as the agent
  does; reports packets/s accepted, losses and this process's CPU use
  (percent of one core);
* ``burst``: the sender sends 20 pre-signed packets per host (100,000)
  back to back; the listener's rate is what it accepted per second until
  it had handled the last one (packets the kernel dropped are "lost").

Then one ``detect()`` of the heartbeat detector over all hosts is timed.
The sender competes for the same CPUs (2 here): the max phase is a lower
bound. Bounded: each phase lasts ``--duration`` seconds (at most 60).

    python benchmarks/heartbeat_listener.py [--hosts 5000] [--interval 5]
        [--duration 10] [--json out.json]
"""

import argparse
import datetime
import json
import multiprocessing
import os
import resource
import socket
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from instanceha.heartbeat import listener as lst_mod  # noqa: E402
from instanceha.heartbeat import protocol  # noqa: E402

KEY = os.urandom(32).hex().encode()


def cpu_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def host_name(i: int) -> str:
    return 'compute-%05d.example.org' % i


def steady_sender(address, hosts, interval, duration, out):
    """Each host once per interval, spread evenly, signed on the fly."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    boots = [protocol.new_boot_id() for _ in range(hosts)]
    seqs = [0] * hosts
    rate = hosts / interval
    start = time.monotonic()
    sent = 0
    while True:
        due = int((time.monotonic() - start) * rate)
        if time.monotonic() - start >= duration:
            break
        while sent < due:
            i = sent % hosts
            seqs[i] += 1
            sock.sendto(protocol.encode(host_name(i), boots[i], seqs[i],
                                        time.time(), KEY), address)
            sent += 1
        time.sleep(0.002)
    out.put(sent)


def blast_sender(address, hosts, duration, out, rounds=20):
    """Pre-signed packets (``rounds`` per host), sent back to back."""
    boot = [protocol.new_boot_id() for _ in range(hosts)]
    now = time.time()
    packets = [protocol.encode(host_name(i), boot[i], 1 + r, now, KEY)
               for r in range(rounds) for i in range(hosts)]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    out.put('ready')
    start = time.monotonic()
    sent = 0
    for data in packets:
        if time.monotonic() - start >= duration:
            break
        sock.sendto(data, address)
        sent += 1
        if sent % 200 == 0:
            # Do not outrun the receive buffer by more than the listener
            # could ever catch up with; the goal is the listener's rate.
            time.sleep(0.0005)
    out.put(sent)


def new_listener():
    lst = lst_mod.HeartbeatListener([('127.0.0.1', 0)], (KEY,),
                                    max_clock_skew=300, log_interval=3600)
    lst.start()
    return lst


def run_phase(name, target, args):
    lst = new_listener()
    out = multiprocessing.Queue()
    proc = multiprocessing.Process(target=target,
                                   args=(lst.addresses[0],) + args + (out,))
    proc.start()
    if name == 'burst':
        out.get(timeout=120)  # packets signed; start measuring now
    cpu0, t0 = cpu_seconds(), time.monotonic()
    sent = out.get(timeout=300)
    # Let the listener drain what is still queued in the socket; the
    # phase ends when the last packet was handled, not when we noticed.
    last, t1, cpu1 = -1, time.monotonic(), cpu_seconds()
    while time.monotonic() - t1 < 0.5:
        seen = lst.accepted + lst.rejects.total
        if seen != last:
            last, t1, cpu1 = seen, time.monotonic(), cpu_seconds()
        time.sleep(0.01)
    proc.join(30)
    lst.stop()
    wall = t1 - t0
    return {
        'phase': name,
        'sent': sent,
        'accepted': lst.accepted,
        'rejected': lst.rejects.total,
        'rejected_by_reason': dict(lst.rejects.counts),
        'lost': sent - lst.accepted - lst.rejects.total,
        'seconds': round(wall, 2),
        'accepted_per_s': round(lst.accepted / wall, 1),
        'cpu_percent_of_one_core': round(100 * (cpu1 - cpu0) / wall, 1),
        'cpu_us_per_packet': round(1e6 * (cpu1 - cpu0)
                                   / max(1, lst.accepted), 1),
        'hosts_recorded': len(lst.records()),
    }, lst


def time_detect(hosts: int) -> dict:
    from oslo_config import cfg

    from instanceha import conf as ha_conf
    from instanceha.engine import model
    from instanceha.plugins.detectors import heartbeat

    lst = new_listener()
    boots = protocol.new_boot_id()
    for i in range(hosts):
        lst.handle(protocol.encode(host_name(i), boots, 1, time.time(), KEY),
                   '127.0.0.1')
    conf = cfg.ConfigOpts()
    ha_conf.register_opts(conf)
    conf([], project='instanceha', default_config_files=[])
    det = heartbeat.HeartbeatDetector(conf, listener=lst)
    now = datetime.datetime.now(datetime.timezone.utc)
    snap = model.Snapshot(taken_at=now, services=tuple(
        model.Service(str(i), host_name(i), model.UP, model.ENABLED)
        for i in range(hosts)))
    t0 = time.perf_counter()
    ev = det.detect(snap, now)
    took = time.perf_counter() - t0
    lst.stop()
    return {'hosts': len(ev), 'detect_ms': round(1000 * took, 1),
            'alive': sum(1 for e in ev.values() if e.verdict == 'alive')}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=5000)
    parser.add_argument('--interval', type=float, default=5.0)
    parser.add_argument('--duration', type=float, default=10.0)
    parser.add_argument('--json', help='also write the results here')
    args = parser.parse_args(argv)
    if not 1 <= args.duration <= 60:
        parser.error('--duration must be 1..60 seconds')
    if not 1 <= args.hosts <= 60000:
        parser.error('--hosts must be 1..60000')
    steady, _ = run_phase('steady', steady_sender,
                          (args.hosts, args.interval, args.duration))
    blast, _ = run_phase('burst', blast_sender, (args.hosts, args.duration))
    detect = time_detect(args.hosts)
    result = {
        'benchmark': 'heartbeat_listener',
        'hosts': args.hosts,
        'interval_s': args.interval,
        'target_per_s': round(args.hosts / args.interval, 1),
        'cpus': os.cpu_count(),
        'python': sys.version.split()[0],
        'phases': [steady, blast],
        'detect': detect,
    }
    print('heartbeat listener: %d hosts, one beat each every %gs '
          '(target %g packets/s), loopback, %d CPUs'
          % (args.hosts, args.interval, result['target_per_s'],
             result['cpus']))
    print('%-7s %8s %9s %8s %6s %12s %10s %9s' % (
        'phase', 'sent', 'accepted', 'rejected', 'lost', 'accepted/s',
        'CPU %core', 'us/packet'))
    for ph in (steady, blast):
        print('%-7s %8d %9d %8d %6d %12.1f %10.1f %9.1f' % (
            ph['phase'], ph['sent'], ph['accepted'], ph['rejected'],
            ph['lost'], ph['accepted_per_s'], ph['cpu_percent_of_one_core'],
            ph['cpu_us_per_packet']))
    print('detect() over %d hosts: %.1f ms (%d alive)'
          % (detect['hosts'], detect['detect_ms'], detect['alive']))
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.json:
        with open(args.json, 'w') as f:
            f.write(text + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
