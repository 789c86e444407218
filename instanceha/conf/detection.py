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

"""Which detectors say a host has failed, and how their verdicts combine."""

from oslo_config import cfg

GROUP = 'detection'

OPTS = [
    cfg.ListOpt('detectors', default=['nova'],
                help='Ordered list of failure detectors (entry points in '
                     'the instanceha.detectors namespace). See '
                     '"instanceha-manage drivers list".'),
    cfg.StrOpt('combine', default='veto',
               choices=[
                   ('veto', 'Failed when at least one detector says failed '
                            'and none says alive. A disagreement is never '
                            'recovered, only reported: "isolated" when Nova '
                            'says failed and another detector alive (a '
                            'partition), "disputed" when Nova still '
                            'sees the host alive and another detector says '
                            'failed (judged again next poll). Detectors '
                            'without an opinion (unknown) do not vote.'),
                   ('all', 'Failed only when every enabled detector says '
                           'failed: "dead" needs every witness. A detector '
                           'with no opinion on the host (unknown or '
                           'silent) leaves it unknown; a disagreement is '
                           'isolated or disputed as with veto.'),
                   ('any', 'Failed as soon as one detector says failed, '
                           'even against another saying alive. Fastest, '
                           'least safe; for detectors that only ever '
                           'confirm a failure, e.g. kdump.'),
               ],
               help='How the verdicts of several detectors combine into '
                    'one per host. With a single detector all three are '
                    'the same.'),
    cfg.FloatOpt('services_interval', default=0.0, min=0.0, max=3600,
                 help='Seconds between two reads of the nova-compute '
                      'services alone while a read is owed (after a write '
                      'of ours, before a power-on, when the services show '
                      'something new) and, with nova_service_down_time = '
                      '0, all the time: one small call to Nova (about 240 '
                      'bytes per compute host). Servers and aggregates are '
                      'read only when a host needs deciding: at once when '
                      'the services show something new, then every '
                      '[DEFAULT] poll while anything is not healthy; never '
                      'while every host is healthy. 0 (default): every '
                      '0.5 s, less often on large clouds so that at most '
                      '2,000 service records are read a second (every '
                      '2.5 s at 5,000 hosts).'),
    cfg.FloatOpt('nova_service_down_time', default=60.0, min=0.0,
                 max=86400,
                 help='Nova\'s own service_down_time (nova.conf; 60 by '
                      'default there and here: Nova calls a compute host '
                      'down once its last heartbeat is that many seconds '
                      'old). The compute services are read when a host\'s '
                      'heartbeat could become older than this or than '
                      '[DEFAULT] delta, and at least once a [DEFAULT] '
                      'poll; every services_interval while a read is owed '
                      '(after a write of ours, before a power-on); every '
                      '2 s while a host is being recovered (from its '
                      'fencing to its hand-back: enabled within 3 s of its '
                      'nova-compute reporting) or waits for its '
                      'nova-compute (a process failure, an announced '
                      'shutdown). A failure is noticed as soon as with a '
                      'read every services_interval, with about 3 reads a '
                      'minute instead of 120 (Nova\'s defaults, delta '
                      '30). Costs: a host forced down or disabled by '
                      'someone else is seen at the next such read (up to '
                      'a poll later), and a failure costs a read every 2 s '
                      'while its host boots. Set it to the value in '
                      'nova.conf when that is not 60. Set too long (and '
                      'shorter than delta), a failure is noticed late '
                      'until Nova is seen calling a host down sooner: a '
                      'warning then says so, and the reads follow what '
                      'Nova reports. 0: read the compute services every '
                      'services_interval all the time instead (120 calls '
                      'a minute at the default interval: at 1,000 hosts '
                      '29 MB a minute), for when something outside this '
                      'service forces compute services down and expects a '
                      'recovery within a second, whatever the poll.'),
    cfg.FloatOpt('aggregates_max_age', default=300.0, min=0.0,
                 max=86400,
                 help='Seconds a listing of the host aggregates is reused. '
                      'Aggregates are read with the full reads (made when '
                      'a host needs deciding), and then only when the last '
                      'listing is older than this; 0 reads them at every '
                      'full read. A host added to or removed '
                      'from an aggregate is seen by a decision at most this '
                      'late.'),
    cfg.IntOpt('max_clock_skew', default=10, min=1, max=86400,
               help='Nova\'s time stamps (a service\'s updated_at, the '
                    'changes-since of migration records) are judged against '
                    'Nova\'s own clock, read from the Date header of its '
                    'answers, so a difference between this machine\'s clock '
                    'and Nova\'s does not make hosts look failed. A '
                    'difference larger than this many seconds is still '
                    'reported (a warning in the log, a reason on /healthz, '
                    'the instanceha_nova_clock_skew_seconds metric): fix '
                    'NTP.'),
]
