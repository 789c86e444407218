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

"""The service parameters (Red Hat InstanceHA's POLL, DELTA, THRESHOLD, ...)."""

from oslo_config import cfg

from instanceha import exceptions

GROUP = 'DEFAULT'

OPTS = [
    cfg.IntOpt('poll', default=45, min=1, max=3600,
               help='Seconds between two full reads of Nova (compute '
                    'services, servers, aggregates) while any host is not '
                    'healthy: being recovered, held back by a gate, '
                    'disabled or down (POLL in Red Hat InstanceHA). Each full read '
                    'judges every such host again. A host that fails is '
                    'read in full at once, whatever the poll phase: the '
                    'compute services alone are read as soon as a host\'s '
                    'heartbeat could show it failed (see [detection] '
                    'nova_service_down_time), and at least once a poll. '
                    'While every host is healthy only that small read is '
                    'made.'),
    cfg.IntOpt('delta', default=30, min=1, max=86400,
               help='A compute service whose heartbeat (updated_at) is older '
                    'than this many seconds is failed even if Nova still '
                    'reports it up (DELTA in Red Hat InstanceHA).'),
    cfg.IntOpt('threshold', mutable=True, default=50, min=0, max=100,
               help='If more than this percentage of the eligible compute '
                    'hosts is failed, log it and evacuate nothing: a mass '
                    'failure means the network or the control plane is '
                    'broken, not the hosts (THRESHOLD in Red Hat InstanceHA).'),
    cfg.IntOpt('workers', default=4, min=1, max=256,
               help='How many hosts are fenced and recovered at the same '
                    'time, and the size of the thread pool that runs their '
                    'steps (WORKERS in Red Hat InstanceHA). Instance evacuations '
                    'are bounded separately by [evacuation] max_in_flight, '
                    'whose default is this value.'),
    cfg.BoolOpt('disabled', mutable=True, default=False,
                help='Detect and log failed hosts but take no action at all '
                     '(DISABLED in Red Hat InstanceHA). Every poll, each failed '
                     'host that would be recovered is logged as a '
                     '"recovery_held" warning. A host whose recovery is '
                     'already under way (a service started or restarted '
                     'with disabled = true finds its instanceha marker in '
                     'Nova) is held where it stopped: nothing more is done '
                     'to it (it stays disabled and forced down), it is '
                     'reported every poll, and its recovery resumes from '
                     'the marker once disabled is false again. Read when '
                     'the service starts: change it, then restart.'),
    cfg.BoolOpt('leave_disabled', mutable=True, default=False,
                help='Keep a host disabled and forced down after its '
                     'instances were evacuated instead of powering it on '
                     'and re-enabling it (LEAVE_DISABLED in Red Hat InstanceHA).'),
    cfg.BoolOpt('force_enable', mutable=True, default=False,
                help='Re-enable a recovered host even if some of its '
                     'evacuations did not succeed. Never applies to a host '
                     'marked FAILED by smart evacuation, which always needs '
                     'an operator (FORCE_ENABLE in Red Hat InstanceHA).'),
    cfg.BoolOpt('smart_evacuation', default=False,
                help='SMART_EVACUATION in Red Hat InstanceHA: shorthand for '
                     '[evacuation] strategy = smart. Setting it together '
                     'with a different [evacuation] strategy is an error.'),
    cfg.FloatOpt('tick_interval', default=1.0, min=0.05, max=60,
                 help='Seconds between two steps of the recovery engine. '
                      'Each step checks running work (fencing, '
                      'evacuations, power-on) and starts the next one; '
                      'Nova is polled for failures only every "poll" '
                      'seconds.'),
    cfg.IntOpt('fence_retry_interval', default=30, min=1, max=3600,
               help='Seconds before a failed fencing attempt is retried. '
                    'The wait doubles after each failure, up to '
                    'fence_retry_max_interval. A host that cannot be '
                    'fenced is never evacuated.'),
    cfg.IntOpt('fence_retry_max_interval', default=600, min=1, max=86400,
               help='Longest wait between two fencing attempts.'),
    cfg.IntOpt('power_on_retries', default=3, min=0, max=100,
               help='How often powering a recovered host back on is '
                    'retried (with the fencing back-off) before the host is '
                    'marked FAILED for an operator.'),
    cfg.IntOpt('up_timeout', default=900, min=60, max=86400,
               help='Seconds a recovered host may take to come back up '
                    '(state waiting_up: powered on, forced_down cleared, '
                    'waiting for Nova to report it up). After that it is '
                    'reported every poll with an "up_overdue" warning '
                    'saying what to check. It is not power-cycled again '
                    '(a slow boot would be killed), keeps counting as '
                    'unhealthy for the threshold and failure-domain gates, '
                    'and is still enabled as soon as it comes up.'),
    cfg.IntOpt('shutdown_timeout', default=30, min=0, max=3600,
               help='Seconds a stopping service (SIGTERM) waits for running '
                    'steps to reach a safe point. Nothing is marked FAILED '
                    'on shutdown; the next start resumes from the markers '
                    'in Nova.'),
]


def validate(conf: cfg.ConfigOpts) -> None:
    strategy = conf.evacuation.strategy
    if conf.smart_evacuation and strategy not in ('smart', None):
        raise exceptions.ConfigurationError(
            'option [DEFAULT] smart_evacuation = true contradicts '
            '[evacuation] strategy = %s; set only one of them' % strategy)
    if conf.fence_retry_max_interval < conf.fence_retry_interval:
        raise exceptions.ConfigurationError(
            'option [DEFAULT] fence_retry_max_interval (%d) is smaller than '
            '[DEFAULT] fence_retry_interval (%d)'
            % (conf.fence_retry_max_interval, conf.fence_retry_interval))
