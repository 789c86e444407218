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

"""How a fenced host's instances are moved away."""

from oslo_config import cfg

from instanceha.engine import retry
from instanceha import exceptions

GROUP = 'evacuation'

OPTS = [
    cfg.StrOpt('strategy',
               help='Evacuation strategy (an entry point in the '
                    'instanceha.evacuation namespace). Unset means "smart" '
                    'when [DEFAULT] smart_evacuation is true, else '
                    '"fire-and-forget".'),
    cfg.IntOpt('retries', mutable=True, default=5, min=0, max=100,
               help='How often a failed rebuild of one instance is retried '
                    'by the smart and orchestrated strategies before it is '
                    'given up and its host marked FAILED.'),
    cfg.IntOpt('same_target_retries', mutable=True, default=1, min=0, max=100,
               help='Retries of a failed rebuild on the same destination '
                    'host before other hosts are tried.'),
    cfg.IntOpt('retry_interval', mutable=True, default=5, min=0, max=3600,
               help='Seconds before a failed or refused rebuild of one '
                    'instance is tried again by the smart and orchestrated '
                    'strategies. The wait doubles after each failure of '
                    'that instance, up to retry_max_interval, so that a '
                    'busy or full cloud (task_state conflict, "No valid '
                    'host") gets time to change. 0 retries at once.'),
    cfg.IntOpt('retry_max_interval', mutable=True, default=60, min=0, max=86400,
               help='Longest wait between two evacuation attempts of one '
                    'instance (see retry_interval).'),
    cfg.IntOpt('max_in_flight', default=0, min=0, max=10000,
               help='Most instance evacuations running at once, over all '
                    'hosts being recovered (smart and orchestrated; '
                    'fire-and-forget does not wait for rebuilds, for it '
                    'this bounds the evacuate calls running at once, the '
                    'next starting as soon as one returns). 0 '
                    '(default) means [DEFAULT] workers, as in Red Hat '
                    'InstanceHA (WORKERS: how many instances are evacuated at '
                    'the same time).'),
    cfg.IntOpt('timeout', default=900, min=0, max=86400,
               help='Seconds one rebuild may run before it is given up '
                    '(0: wait forever). A given-up instance marks its host '
                    'FAILED with the smart and orchestrated strategies.'),
    cfg.StrOpt('on_instance_failure', default='stop_host',
               choices=[('stop_host', 'once one instance of a host is '
                         'given up, start no further evacuation of that '
                         'host (rebuilds already running finish); the host '
                         'is marked FAILED'),
                        ('continue', 'evacuate the host\'s other instances '
                         'anyway, then mark the host FAILED')],
               help='What the smart and orchestrated strategies do with a '
                    'failed host\'s remaining instances once one of its '
                    'instances is given up. Either way the host ends '
                    'FAILED, disabled and forced down, for an operator; '
                    '"continue" gets more instances running elsewhere '
                    'first. Fire-and-forget always goes on.'),
    cfg.BoolOpt('lock_instances', default=False,
                help='Lock each instance against tenant actions while it is '
                     'evacuated, and unlock it afterwards (also on failure). '
                     'An instance that was already locked is left as it '
                     'is. Off by default: it costs two Nova calls per '
                     'instance, and while an instance is being rebuilt '
                     'Nova itself refuses a tenant\'s actions on it '
                     '(reboot, stop, resize, migrate, rebuild: it has a '
                     'task state); only delete goes through, which the '
                     'evacuation counts as done. An instance '
                     'that was ERROR or SHUTOFF is locked in either case: '
                     'the lock\'s reason keeps the status to restore after '
                     'its rebuild, also across a restart of the service.'),
    cfg.StrOpt('priority_key', default='instanceha:priority',
               help='Key holding an integer restart priority for the '
                    'orchestrated strategy (higher first; missing or '
                    'malformed: 0), looked up in priority_sources.'),
    cfg.ListOpt('priority_sources', default=['flavor'],
                item_type=cfg.types.String(choices=[
                    ('flavor', 'the flavor\'s extra specs (set by '
                               'operators)'),
                    ('server', 'the server\'s metadata: WRITABLE BY THE '
                               'TENANT who owns the instance')]),
                help='Where the orchestrated strategy reads each '
                     'instance\'s priority_key, first match wins. The '
                     'default trusts operator-controlled flavor extra '
                     'specs only. Adding "server" lets tenants steer the '
                     'order: one tenant could put an instance that never '
                     'rebuilds first and have the instances of others on '
                     'the same host given up; use it only where every '
                     'tenant is trusted.'),
    cfg.ListOpt('spread_domains', default=['aggregate', 'zone'],
                item_type=cfg.types.String(choices=[
                    ('aggregate', 'hosts sharing a host aggregate with the '
                                  'failed host'),
                    ('zone', 'hosts in the failed host\'s availability '
                             'zone')]),
                help='Spread strategy: which hosts count as the failed '
                     'host\'s failure domain, closest first. Its instances '
                     'go to the least loaded host with room in the first '
                     'of these, then the next, then anywhere. Empty: the '
                     'least loaded host anywhere.'),
]


def validate(conf: cfg.ConfigOpts) -> None:
    group = conf.evacuation
    if group.retry_max_interval < group.retry_interval:
        raise exceptions.ConfigurationError(
            'option [evacuation] retry_max_interval (%d) is smaller than '
            '[evacuation] retry_interval (%d)'
            % (group.retry_max_interval, group.retry_interval))


def retry_delay(conf: cfg.ConfigOpts, failures: int) -> int:
    """Seconds to wait before the next attempt after ``failures`` failures.

    Exponential and deterministic (no jitter): every copy and every
    simulator run waits the same, and the retry count stays bounded by
    ``retries`` whatever the wait.
    """
    group = conf.evacuation
    if failures <= 0 or group.retry_interval <= 0:
        return 0
    return int(retry.backoff(group.retry_interval, failures,
                             group.retry_max_interval))


def max_in_flight(conf: cfg.ConfigOpts) -> int:
    """The cap on running evacuations, as Red Hat InstanceHA's WORKERS was."""
    return conf.evacuation.max_in_flight or conf.workers


def strategy_name(conf: cfg.ConfigOpts) -> str:
    """The evacuation strategy in force, honouring smart_evacuation."""
    if conf.evacuation.strategy:
        return conf.evacuation.strategy
    return 'smart' if conf.smart_evacuation else 'fire-and-forget'
