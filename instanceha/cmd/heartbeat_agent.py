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

"""instanceha-heartbeat-agent: signed UDP heartbeats from a compute host.

Deliberately small: the standard library only (no oslo, no OpenStack
clients), so it runs on any compute host and starts in milliseconds.
"""

import argparse
import logging
import signal
import socket
import sys

from instanceha.heartbeat import agent as agent_mod
from instanceha.heartbeat import hostagent
from instanceha.heartbeat import isolation
from instanceha.heartbeat import keys
from instanceha.heartbeat import response
from instanceha.heartbeat import watchdog
from instanceha import version

PROG = 'instanceha-heartbeat-agent'


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='Send HMAC-signed UDP heartbeats to the instanceha '
                    'service so it can tell a dead compute host from one '
                    'cut off from the control plane.')
    parser.add_argument(
        '--host', default=socket.gethostname(),
        help='Name sent in each heartbeat; must equal the nova-compute '
             'service host name (default: this machine\'s host name, which '
             'is also nova\'s default).')
    parser.add_argument(
        '--collector', action='append', required=True, metavar='ADDR[:PORT]',
        help='Where the instanceha service listens ([heartbeat] '
             'listen_addresses/port); repeat for every service copy. IPv6 '
             'as [ADDR]:PORT. Default port %d.' % agent_mod.DEFAULT_PORT)
    parser.add_argument(
        '--key-file', required=True,
        help='File holding this host\'s key: written by "instanceha-manage '
             'heartbeat derive-key HOST --out FILE" (or, with [heartbeat] '
             'key_mode = shared, the service\'s key_file itself). Re-read '
             'when it changes.')
    parser.add_argument(
        '--interval', type=float, default=5.0,
        help='Seconds between heartbeats (default 5); keep it well below '
             'the service\'s [heartbeat] timeout.')
    parser.add_argument(
        '--count', type=int, default=0,
        help='Stop after this many heartbeats (default 0: run forever).')
    parser.add_argument(
        '--announce', default='auto',
        choices=['auto', 'reboot', 'poweroff', 'never'],
        help='What to announce when stopped (SIGTERM): auto (default) '
             'announces a reboot or a power-off when systemd\'s job list '
             'shows the machine going down (--shutdown-jobs-command), '
             'nothing on a plain stop or restart of the agent; never '
             'announces nothing; reboot/poweroff always announce that.')
    parser.add_argument(
        '--shutdown-jobs-command', default=agent_mod.JOBS_COMMAND,
        metavar='COMMAND',
        help='Prints systemd\'s queued jobs, the unit in the second '
             'column: a start job of reboot.target/kexec.target means a '
             'reboot, of poweroff.target/halt.target a power-off (default: '
             '"%(default)s").')
    parser.add_argument(
        '--answer-timeout', type=float, default=10.0,
        help='Seconds a shutdown announcement is repeated (every second) '
             'until instanceha answers (default 10); then the shutdown '
             'goes on.')
    parser.add_argument(
        '--drain-timeout', type=float, default=300.0,
        help='Under the migrate shutdown policy: at most this many seconds '
             'the shutdown waits while instanceha live-migrates the '
             'host\'s instances away (default 300). Keep the unit\'s '
             'TimeoutStopSec above it.')
    group = parser.add_argument_group(
        'isolation detection', 'The leading instanceha copy answers every '
        'heartbeat. With no answer for --isolation-timeout seconds the '
        'agent asks its isolation addresses: one answers = partitioned '
        '(nothing is done), none answers = isolated (the isolation '
        'response applies). See doc/host-side.md.')
    group.add_argument(
        '--isolation-timeout', type=float, default=30.0,
        help='Seconds without an answer from the service before the '
             'isolation addresses are asked (default 30). Keep it above '
             'a leader election of the service.')
    group.add_argument(
        '--isolation-address', action='append', default=None,
        metavar='ADDR', help='An address that answers while this host\'s '
        'network works: HOST (one ping) or tcp:HOST:PORT (a connection '
        'completes); repeat for more (any one answering is enough). '
        'Default: the default gateway from /proc/net/route.')
    group.add_argument(
        '--probe-interval', type=float, default=5.0,
        help='Seconds between two rounds of asking the isolation addresses '
             'while the service is silent (default 5).')
    group.add_argument(
        '--libvirt-uri', default=None, metavar='URI',
        help='libvirt connection the isolation response acts on through '
             'virsh (default: virsh\'s own default, qemu:///system on a '
             'compute host).')
    group.add_argument(
        '--virsh', default='virsh', metavar='COMMAND',
        help='The virsh command (default: %(default)s).')
    group = parser.add_argument_group(
        'watchdog self-fencing', 'Opt-in: with --watchdog-device the agent '
        'arms the watchdog while this host runs instances instanceha '
        'protects and feeds it only while it hears the service: cut off '
        'for --watchdog-deadline seconds, the host resets. Released while '
        'instance HA is paused. See doc/host-side.md.')
    group.add_argument(
        '--watchdog-device', default=None, metavar='PATH',
        help='The watchdog device, e.g. /dev/watchdog (hardware or the '
             'softdog module). Unset (default): no watchdog.')
    group.add_argument(
        '--watchdog-timeout', type=float, default=30.0,
        help='The device\'s timeout: seconds from the last feed to the '
             'reset (default 30).')
    group.add_argument(
        '--watchdog-deadline', type=float, default=120.0,
        help='Seconds after the heartbeat whose answer it last heard by '
             'which this host has reset (default 120): it is fed for '
             'deadline - timeout seconds after that heartbeat. Must exceed '
             'a leader election of the service and a network failover.')
    group.add_argument(
        '--watchdog-grace', type=float, default=watchdog.DEFAULT_GRACE,
        help='Seconds without protected instances before the watchdog is '
             'released (default %(default)s).')
    parser.add_argument('--debug', action='store_true',
                        help='Log every heartbeat sent.')
    version.add_argument(parser)
    return parser


def build_side(args: argparse.Namespace) -> hostagent.HostSide:
    """The host's side from the arguments.

    :raises ValueError: naming the argument that is wrong.
    """
    texts = args.isolation_address
    if not texts:
        gateway = isolation.default_gateway()
        texts = [gateway] if gateway else []
        if gateway is None:
            logging.getLogger(__name__).warning(
                'no default gateway and no --isolation-address: a silent '
                'service will be taken for isolation')
    addresses = [isolation.Address.parse(t) for t in texts]
    prober = isolation.Prober(addresses, args.probe_interval)
    monitor = isolation.LinkMonitor(args.isolation_timeout, prober)
    hypervisor = response.Virsh(args.libvirt_uri, args.virsh)
    dog = None
    if args.watchdog_device:
        if args.watchdog_deadline < args.watchdog_timeout + 2 * args.interval:
            raise ValueError('--watchdog-deadline %s: must exceed '
                             '--watchdog-timeout by two --interval at least'
                             % args.watchdog_deadline)
        dog = watchdog.Watchdog(
            watchdog.Device(args.watchdog_device, args.watchdog_timeout),
            args.watchdog_deadline, args.watchdog_grace)
    return hostagent.HostSide(monitor, hypervisor, dog)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format='%(asctime)s %(levelname)s %(name)s %(message)s')
    if not 0.01 <= args.interval <= 3600:
        parser.error('--interval %s: must be between 0.01 and 3600 seconds'
                     % args.interval)
    if args.count < 0:
        parser.error('--count must not be negative')
    for name in ('answer_timeout', 'drain_timeout'):
        if not 0 <= getattr(args, name) <= 86400:
            parser.error('--%s %s: must be between 0 and 86400 seconds'
                         % (name.replace('_', '-'), getattr(args, name)))
    try:
        collectors = [agent_mod.parse_endpoint(c, agent_mod.DEFAULT_PORT)
                      for c in args.collector]
    except ValueError as exc:
        parser.error('--collector: %s' % exc)
    for name in ('isolation_timeout', 'probe_interval', 'watchdog_timeout',
                 'watchdog_deadline', 'watchdog_grace'):
        if not 0.01 <= getattr(args, name) <= 86400:
            parser.error('--%s %s: must be between 0.01 and 86400 seconds'
                         % (name.replace('_', '-'), getattr(args, name)))
    try:
        keyring = keys.KeyRing(args.key_file, option='--key-file')
        side = build_side(args)
        agent = agent_mod.Agent(args.host, keyring, collectors,
                                args.interval, side=side)
    except ValueError as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 2

    stopped = []

    def terminate(signum, frame):
        stopped.append(signum)
        agent.stop()

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    try:
        agent.run(count=args.count)
        # The watchdog first: released only once the service knows.
        agent.release(args.answer_timeout)
        if stopped and args.announce != 'never':
            kind = (agent_mod.shutdown_kind(args.shutdown_jobs_command)
                    if args.announce == 'auto' else args.announce)
            if kind:
                agent.announce(kind, answer_timeout=args.answer_timeout,
                               drain_timeout=args.drain_timeout)
    finally:
        side.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
