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

"""Hosts without instances have nothing to evacuate."""

from instanceha.engine import model
from instanceha.plugins.filters import base


class HasInstancesFilter(base.Filter):
    """Skip a failed host that runs no instance at all.

    Without this filter such a host is still fenced and brought back,
    which some operators want (to restore capacity) and others do not.
    """

    description = 'skip failed hosts that run no instance'

    def host_reason(self, host: str,
                    snapshot: model.Snapshot) -> str | None:
        return None if snapshot.servers_on(host) else 'no instances'
