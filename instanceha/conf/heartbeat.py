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

"""The host heartbeat listener and detector."""

from oslo_config import cfg

from instanceha import exceptions

GROUP = 'heartbeat'

OPTS = [
    cfg.StrOpt('key_file', mutable=True,
               default='/etc/instanceha/heartbeat.key',
               help='File holding the heartbeat master key: one line, at '
                    'least 16 bytes, e.g. from "openssl rand -hex 32". '
                    'Re-read when it changes and on SIGHUP. With key_mode = per-host each '
                    'agent signs (HMAC-SHA256) with its own key derived from '
                    'it ("instanceha-manage heartbeat derive-key HOST"); '
                    'with shared, every agent holds this key itself.'),
    cfg.StrOpt('previous_key_file', mutable=True,
               help='During a key rotation, the file holding the previous '
                    'master key: heartbeats signed with it (or, per host, '
                    'with a key derived from it) are still accepted until '
                    'every agent has its new key. Unset it when the '
                    'rotation is done. Both files can change on SIGHUP.'),
    cfg.StrOpt('key_mode', mutable=True, default='per-host',
               choices=[('per-host', 'each agent holds only its own key, '
                                     'derived from the master key with '
                                     'HKDF-SHA256 over its host name'),
                        ('shared', 'every agent holds the master key (a '
                                   'compromised compute can sign for any '
                                   'host); the former scheme'),
                        ('both', 'accept per-host and shared keys: for '
                                 'the migration from shared keys')],
               help='Which keys sign heartbeats. A heartbeat proves its '
                    'host alive, which vetoes fencing: with one shared key '
                    'a single compromised compute could keep any dead host '
                    'looking alive.'),
    cfg.ListOpt('listen_addresses', default=['0.0.0.0', '::'],
                help='Addresses the heartbeat listener binds, IPv4 and/or '
                     'IPv6 (e.g. 0.0.0.0, ::, 192.0.2.10, fd00::10).'),
    cfg.PortOpt('port', default=7411,
                help='UDP port the heartbeat listener binds.'),
    cfg.IntOpt('timeout', default=15, min=1, max=3600,
               help='A host whose last valid heartbeat is older than this '
                    'many seconds is failed; one with a younger heartbeat '
                    'is alive even if Nova reports it down (isolated from '
                    'the control plane). A freshly started listener reports '
                    'hosts it has not heard from yet as unknown until this '
                    'long after it started. Keep it at least 3 agent '
                    'intervals.'),
    cfg.IntOpt('max_clock_skew', default=15, min=1, max=3600,
               help='Heartbeats whose time stamp is further than this many '
                    'seconds from this machine\'s clock are rejected (stale '
                    'or future). It also bounds how long a captured packet '
                    'could be replayed to a freshly started listener.'),
    cfg.IntOpt('mass_loss_share', default=50, min=1, max=100,
               help='When more than this percentage of the hosts that were '
                    'heartbeating stop within one cycle, blame the '
                    'collector\'s network, not the hosts: report them '
                    'unknown instead of failed for mass_loss_hold_cycles '
                    'cycles.'),
    cfg.IntOpt('mass_loss_min_hosts', default=3, min=1, max=100000,
               help='A loss of fewer hosts than this in one cycle is never '
                    'a mass loss, whatever the share (small clouds).'),
    cfg.IntOpt('mass_loss_hold_cycles', default=3, min=0, max=1000,
               help='How many detection cycles a mass heartbeat loss is '
                    'held (hosts reported unknown) before those hosts are '
                    'reported failed; 0 disables the protection.'),
    cfg.StrOpt('isolation_response', default='none', mutable=True,
               choices=[('none', 'leave the instances running'),
                        ('poweroff', 'power them off at once'),
                        ('shutdown', 'shut them down cleanly, power off '
                                     'what is still running after '
                                     'isolation_shutdown_wait')],
               help='What a host\'s agent does to its protected instances '
                    'when it finds itself isolated: no answer from the '
                    'service for its isolation timeout and none of its '
                    'isolation addresses answers. Sent to the agents in '
                    'the service\'s answers (an isolated agent cannot ask). '
                    'A host aggregate overrides it with the metadata '
                    'isolation_response_key. Instances excluded from '
                    'recovery by the filters get no response. Choose it '
                    'from the storage path: see doc/host-side.md.'),
    cfg.StrOpt('isolation_response_key',
               default='instanceha_isolation_response', mutable=True,
               regex=r'^[a-zA-Z0-9-_:. ]{1,255}$',
               help='Host aggregate metadata key whose value (none, '
                    'poweroff or shutdown) sets the isolation response of '
                    'the aggregate\'s hosts.'),
    cfg.IntOpt('isolation_shutdown_wait', default=120, min=0, max=3600,
               mutable=True,
               help='isolation_response = shutdown: seconds a guest gets '
                    'to shut down before it is powered off.'),
    cfg.IntOpt('policy_max_age', default=300, min=10, max=86400,
               mutable=True,
               help='The leading copy lists the instances of a host whose '
                    'agent takes answers and has a watchdog or an '
                    'isolation response other than none (to tell it which '
                    'instances it protects) at least this often, a few '
                    'hosts per tick, whether or not a failure made it read '
                    'them; a host it never read is read at once. One Nova '
                    'call a host and read: 1,000 such hosts cost about 200 '
                    'calls a minute at 300 s.'),
    cfg.IntOpt('watchdog_min_deadline', default=0, min=0, max=86400,
               mutable=True,
               help='The shortest watchdog deadline an agent may announce '
                    'and be counted on (0: no host is counted fenced by '
                    'its watchdog). It must exceed a leader election '
                    '([coordination] lease_time + heartbeat_interval) and '
                    'network_failover_time: otherwise a leader change or '
                    'a network failover resets armed hosts. config '
                    'validate warns when it does not.'),
    cfg.IntOpt('watchdog_margin', default=15, min=0, max=3600,
               mutable=True,
               help='Seconds added to a host\'s watchdog deadline before '
                    'it may be counted as reset (clock rates, scheduling, '
                    'the device\'s own precision).'),
    cfg.IntOpt('network_failover_time', default=0, min=0, max=86400,
               mutable=True,
               help='The longest the management network may be down '
                    'during a planned failover (e.g. a switch or bond '
                    'maintenance); 0: not known. Watchdog deadlines '
                    'shorter than it reset hosts during such a failover; '
                    'config validate warns.'),
    cfg.IntOpt('log_interval', default=60, min=1, max=86400,
               help='Rejected heartbeats are counted by reason and logged '
                    'at most once per reason per this many seconds.'),
]


def validate(conf: cfg.ConfigOpts) -> None:
    group = conf.heartbeat
    if group.key_file and group.previous_key_file == group.key_file:
        raise exceptions.ConfigurationError(
            'option [heartbeat] previous_key_file names the same file as '
            'key_file (%s)' % group.key_file)


def watchdog_warnings(conf: cfg.ConfigOpts) -> list[str]:
    """What ``config validate`` says about the watchdog deadline.

    The deadline is the agents' (announced in their heartbeats); the
    service counts on it only from ``watchdog_min_deadline`` on, so that
    is the number checked.
    """
    group = conf.heartbeat
    deadline = group.watchdog_min_deadline
    if not deadline:
        return []
    out = []
    coord = conf.coordination
    election = coord.lease_time + coord.heartbeat_interval
    if deadline <= election:
        out.append(
            'option [heartbeat] watchdog_min_deadline (%d s) does not exceed '
            'a leader election ([coordination] lease_time + '
            'heartbeat_interval = %.0f s): armed hosts reset whenever the '
            'leader dies and another takes over' % (deadline, election))
    if group.network_failover_time and deadline <= (
            group.network_failover_time):
        out.append(
            'option [heartbeat] watchdog_min_deadline (%d s) is not longer '
            'than network_failover_time (%d s): armed hosts reset during '
            'a network failover' % (deadline, group.network_failover_time))
    return out
