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

"""Smart evacuation: watch every rebuild to its end and retry.

A failed rebuild is retried up to ``[evacuation] retries`` times (on the
same destination at most ``same_target_retries`` times, then
elsewhere). When one is given up the host is left disabled, forced down and
marked FAILED: an operator must act.
"""

from instanceha.plugins.evacuation import base


class SmartEvacuation(base.EvacuationStrategy):
    description = ('Track each evacuation through Nova migration records, '
                   'retry failed ones, mark the host FAILED if one fails '
                   'for good.')

    tracks = True
