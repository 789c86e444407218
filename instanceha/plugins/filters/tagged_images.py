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

"""Only instances whose image carries the evacuable tag."""

from instanceha.engine import model
from instanceha.plugins.filters import tags


class TaggedImagesFilter(tags.InstanceTagFilter):
    """Keep an instance whose image carries the evacuable tag.

    With tagged-flavors enabled too, an instance is kept when either its
    image or its flavor is tagged (OR).
    """

    description = 'only instances whose image carries the evacuable tag'
    needs_images = True

    def instance_reason(self, server: model.Server,
                        snapshot: model.Snapshot) -> str | None:
        if self.everything_goes(snapshot):
            return None
        if not server.image_id:
            return 'no image (booted from volume) to carry tag %r' % self.tag
        image = snapshot.images.get(server.image_id)
        if image is None:
            return 'image %s not found' % server.image_id
        if tags.image_tagged(image, self.tag):
            return None
        return 'image %s not tagged %r' % (image.name or image.id, self.tag)
