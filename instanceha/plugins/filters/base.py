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

"""Filters keep or drop a host or an instance as eligible."""

from instanceha.engine import model
from instanceha.plugins import base


class Filter(base.Driver):
    """Drops hosts or instances that must not be evacuated.

    Each method returns None to keep the host or instance, or a short
    reason saying why it is dropped.
    """

    #: Set when the filter needs image metadata in the snapshot.
    needs_images: bool = False
    #: Set when the filter judges one host by the servers of every host
    #: (the engine then lists every server, not only the failed hosts').
    needs_all_servers: bool = False
    #: Filters sharing an ``any_of`` group combine with OR: an instance
    #: is dropped only when every filter of the group drops it (an
    #: instance is evacuable when its image *or* its flavor is tagged).
    #: Ungrouped filters combine with AND.
    any_of: str | None = None
    #: Set when a host this filter drops is out of scope altogether: not
    #: monitored, shown ignored even while healthy, and not counted by
    #: the threshold gate (an operator-disabled host).
    out_of_scope: bool = False

    def host_reason(self, host: str,
                    snapshot: model.Snapshot) -> str | None:
        return None

    def instance_reason(self, server: model.Server,
                        snapshot: model.Snapshot) -> str | None:
        return None
