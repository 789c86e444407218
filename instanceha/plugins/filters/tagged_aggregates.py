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

"""Only hosts in an aggregate carrying the evacuable tag."""

from instanceha.engine import model
from instanceha.plugins.filters import tags


class TaggedAggregatesFilter(tags.TagFilter):
    """Keep a host that belongs to at least one tagged aggregate."""

    description = 'only hosts in an aggregate tagged evacuable'

    def _anything_tagged(self, snapshot: model.Snapshot) -> bool:
        return any(tags.aggregate_tagged(a, self.tag)
                   for a in snapshot.aggregates)

    def host_reason(self, host: str,
                    snapshot: model.Snapshot) -> str | None:
        if self.everything_goes(snapshot) or any(
                tags.aggregate_tagged(a, self.tag)
                for a in snapshot.aggregates_of(host)):
            return None
        return 'in no aggregate tagged %r' % self.tag
