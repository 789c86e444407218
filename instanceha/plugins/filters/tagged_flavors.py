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

"""Only instances whose flavor carries the evacuable tag."""

from instanceha.engine import model
from instanceha.plugins.filters import tags


class TaggedFlavorsFilter(tags.InstanceTagFilter):
    """Keep an instance whose flavor has the evacuable extra spec.

    With tagged-images enabled too, an instance is kept when either its
    flavor or its image is tagged (OR).
    """

    description = 'only instances whose flavor carries the evacuable tag'

    def instance_reason(self, server: model.Server,
                        snapshot: model.Snapshot) -> str | None:
        if (self.everything_goes(snapshot)
                or tags.flavor_tagged(server.flavor, self.tag)):
            return None
        return 'flavor %s not tagged %r' % (server.flavor.name, self.tag)
