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

"""A dead nova-compute on a living host (doc/process-failure.md)."""

from oslo_config import cfg

GROUP = 'process_failure'

OPTS = [
    cfg.BoolOpt('enabled', mutable=True, default=True,
                help='Disable the compute service of a host whose '
                     'nova-compute Nova reports down while the host\'s own '
                     'heartbeat says it is alive ("isolated"), with '
                     'instanceha\'s marker, so that Nova schedules nothing '
                     'there; enable it again when nova-compute reports up. '
                     'Never fences, never evacuates. Needs a witness of '
                     'the host\'s own (the heartbeat detector). false: '
                     'such hosts are only reported.'),
    cfg.IntOpt('max_per_cycle', mutable=True, default=5, min=1, max=100000,
               help='Disable at most this many compute services in one '
                    'cycle (in host name order); the others wait for the '
                    'next cycle.'),
    cfg.IntOpt('threshold', mutable=True, default=30, min=0, max=100,
               help='When more than this percentage of the monitored hosts '
                    'is isolated at once, it is a partition of the '
                    'control plane, not many dead nova-compute processes: '
                    'no compute service is disabled (those already '
                    'disabled stay so until they report up) and a warning '
                    'says so. 0 means no limit.'),
]
