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
                            'partition, R15), "disputed" when Nova still '
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
