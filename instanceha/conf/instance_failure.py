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

"""Crashed instances on healthy hosts (doc/instance-failure.md)."""

from oslo_config import cfg

GROUP = 'instance_failure'

OPTS = [
    cfg.BoolOpt('enabled', mutable=True, default=True,
                help='Restart, relocate and finally put in an error state '
                     'eligible instances (the same filters as evacuation) '
                     'that stopped without anyone asking. false: crashed '
                     'instances are left as they are.'),
    cfg.StrOpt('detector', default='power-sync',
               help='How a crashed instance is recognised (an entry point '
                    'in the instanceha.instance_detectors namespace).'),
    cfg.StrOpt('strategy', default='restart-relocate',
               help='What is done about it (an entry point in the '
                    'instanceha.instance_recovery namespace).'),
    cfg.IntOpt('max_restart', mutable=True, default=1, min=0, max=100,
               help='restart-relocate: how often a crashed instance is '
                    'started again on its host before it is relocated.'),
    cfg.IntOpt('max_relocate', mutable=True, default=1, min=0, max=100,
               help='restart-relocate: how often it is then moved to '
                    'another host (cold migration, the scheduler chooses) '
                    'and started there. After that it is put in the error '
                    'state, which only an operator clears '
                    '("instanceha-manage instances clear SERVER").'),
    cfg.IntOpt('stable_time', mutable=True, default=600, min=1,
               max=86400,
               help='Seconds an instance started by instanceha must run '
                    'for its start to count as successful: both counters '
                    'are reset then (the relocation counter only then). A '
                    'crash sooner counts against the limits.'),
    cfg.IntOpt('start_timeout', mutable=True, default=300, min=10,
               max=86400,
               help='Seconds a start or relocation may take before it '
                    'counts as failed.'),
    cfg.IntOpt('max_per_cycle', mutable=True, default=5, min=1, max=100000,
               help='Start recovering at most this many crashed instances '
                    'in one cycle; the others wait for the next cycle.'),
    cfg.IntOpt('storm_size', mutable=True, default=10, min=0, max=100000,
               help='When more than this many crashed instances wait for '
                    'recovery at once, nothing new is restarted and a '
                    'warning says so: a storm has a common cause (storage, '
                    'network) that restarts do not fix. 0 means no limit.'),
    cfg.IntOpt('action_reads_per_cycle', mutable=True, default=20, min=1,
               max=100000,
               help='Read the instance actions of at most this many newly '
                    'stopped instances in one cycle (one Nova call each).'),
    cfg.IntOpt('full_read_every', mutable=True, default=20, min=1,
               max=10000,
               help='Each cycle asks Nova only for the servers it changed '
                    'since the previous cycle (usually one small call); '
                    'every this many cycles every stopped server is listed '
                    'instead (one call per [nova] page_size of them), so '
                    'that a change Nova did not report is found at the '
                    'latest then: with the default poll of 45 seconds, '
                    'every 15 minutes. 1: list every stopped server each '
                    'cycle.'),
]
