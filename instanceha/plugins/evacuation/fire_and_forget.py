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

"""Fire-and-forget: an evacuate call Nova accepted counts as success.

The host moves on (power on, re-enable) as soon as every call was
accepted. The rebuilds are still watched in the background so that the
instances are unlocked and their power state restored when they finish.
"""

from instanceha.plugins.evacuation import base


class FireAndForget(base.EvacuationStrategy):
    description = ('Evacuate every eligible instance; an accepted API call '
                   'counts as success (the default).')

    tracks = False
    #: Reports every refusal and goes on.
    stop_on_failure = False

    @property
    def retries(self) -> int:
        # A refused call is reported, not retried: this strategy does not
        # wait for anything.
        return 0
