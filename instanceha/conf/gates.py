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

"""Which gates may block the plan as a whole or for single hosts."""

from oslo_config import cfg

GROUP = 'gates'

OPTS = [
    cfg.ListOpt('enabled',
                default=['disabled', 'threshold', 'failure-domain',
                         'per-cycle'],
                help='Ordered list of gates (entry points in the '
                     'instanceha.gates namespace). Every gate must allow a '
                     'failed host before it is fenced and evacuated; the '
                     'plan names the first gate that refused.'),
    cfg.StrOpt('max_unhealthy_key', mutable=True, default='max_unhealthy',
               regex=r'^[a-zA-Z0-9-_:. ]{1,255}$',
               help='failure-domain gate: the aggregate metadata key that '
                    'sets how many hosts of that aggregate may be unhealthy '
                    '(failed or still in recovery) at once, as a count '
                    '("2") or a percentage of its monitored hosts ("40%"). '
                    'When more are unhealthy, none of its hosts is '
                    'recovered (as maxUnhealthy of an OpenShift '
                    'MachineHealthCheck). Aggregates without the '
                    'key have no limit; a malformed value blocks the '
                    "aggregate's hosts and says why."),
    cfg.IntOpt('max_hosts_per_cycle', mutable=True, default=0, min=0, max=100000,
               help='per-cycle gate: start recovering at most this many '
                    'hosts in one cycle (in host name order); the others '
                    'wait for the next cycle. 0 means no cap.'),
]
