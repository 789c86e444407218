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

"""What a clean reboot or power-off announced by a host leads to."""

from oslo_config import cfg

GROUP = 'shutdown'

OPTS = [
    cfg.StrOpt('policy', default='conditional', mutable=True,
               choices=[('conditional', 'a reboot is frozen, a power-off '
                                        'fails over'),
                        ('freeze', 'nothing is fenced or evacuated while '
                                   'the host is expected back within '
                                   'return_timeout; then it is a failure '
                                   'like any other'),
                        ('failover', 'the host is proven off by reading '
                                     'its fencing devices (never power-'
                                     'cycled) and its instances are '
                                     'evacuated at once'),
                        ('migrate', 'its instances are live-migrated away '
                                    'while the host waits in its shutdown; '
                                    'it is enabled again when it returns')],
               help='What instanceha does when a compute host\'s heartbeat '
                    'agent announces a clean reboot or power-off (sent from '
                    'the agent\'s systemd stop path). Needs the heartbeat '
                    'detector. A host aggregate overrides it for its hosts '
                    'with the metadata aggregate_key.'),
    cfg.StrOpt('aggregate_key', default='instanceha_shutdown_policy',
               mutable=True, regex=r'^[a-zA-Z0-9-_:. ]{1,255}$',
               help='Host aggregate metadata key whose value (conditional, '
                    'freeze, failover or migrate) sets the shutdown policy '
                    'of the aggregate\'s hosts. A host in aggregates that '
                    'disagree keeps [shutdown] policy.'),
    cfg.IntOpt('return_timeout', default=900, min=30, max=86400,
               mutable=True,
               help='Seconds a host frozen by its announced reboot (or '
                    'drained by migrate) may stay silent. A host not back '
                    'by then (a heartbeat from its next boot and Nova '
                    'reporting its compute service up) is handled as a '
                    'failed host: fenced and evacuated.'),
    cfg.IntOpt('poweroff_grace', default=120, min=0, max=3600, mutable=True,
               help='Seconds a host that announced a power-off may still be '
                    'reported on by its fencing devices (it is still '
                    'shutting down). After that it is fenced like any '
                    'failed host.'),
    cfg.IntOpt('drain_timeout', default=600, min=10, max=86400,
               mutable=True,
               help='migrate: seconds the live migrations of one announced '
                    'host are followed. The agent waits at most its own '
                    '--drain-timeout; whatever is still on the host then '
                    'stays there, stopped by the shutdown.'),
]
