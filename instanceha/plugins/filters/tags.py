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

"""Evacuable-tag matching shared by the tagged-* filters.

The rules are documented in :mod:`instanceha.conf.tagging`.
"""

from collections.abc import Mapping

from oslo_utils import strutils

from instanceha.conf import filters as filters_conf
from instanceha.engine import model
from instanceha.plugins.filters import base

#: The any_of group of the image and flavor filters.
INSTANCE_TAG_GROUP = 'evacuable-tag'


def is_true(value) -> bool:
    return value is not None and strutils.bool_from_string(
        str(value).strip(), strict=False)


def in_mapping(mapping: Mapping[str, str], tag: str) -> bool:
    return is_true(mapping.get(tag))


def image_tagged(image: model.Image, tag: str) -> bool:
    return tag in image.tags or in_mapping(image.properties, tag)


def flavor_tagged(flavor: model.Flavor, tag: str) -> bool:
    return in_mapping(flavor.extra_specs, tag)


def aggregate_tagged(agg: model.Aggregate, tag: str) -> bool:
    return in_mapping(agg.metadata, tag)


class TagFilter(base.Filter):
    """Base of the tag filters: the tag, and the "nothing tagged" rule."""

    def __init__(self, conf):
        super().__init__(conf)
        #: (snapshot, anything tagged?) for the last snapshot seen; the
        #: snapshot itself, not its id(), which a later one may reuse.
        self._cache: tuple[model.Snapshot, bool] | None = None

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[tagging] evacuable_tag': 'the tag to look for',
                '[tagging] all_when_none_tagged': 'nothing tagged means '
                                                  'everything is evacuable'}

    @property
    def tag(self) -> str:
        return self.conf.tagging.evacuable_tag

    def _anything_tagged(self, snapshot: model.Snapshot) -> bool:
        raise NotImplementedError

    def everything_goes(self, snapshot: model.Snapshot) -> bool:
        """True when all_when_none_tagged applies to this snapshot."""
        if not self.conf.tagging.all_when_none_tagged:
            return False
        if self._cache is None or self._cache[0] is not snapshot:
            self._cache = (snapshot, self._anything_tagged(snapshot))
        return not self._cache[1]


class InstanceTagFilter(TagFilter):
    """Image or flavor tagging: "nothing tagged" looks at both sources."""

    any_of = INSTANCE_TAG_GROUP

    @property
    def needs_all_servers(self) -> bool:  # type: ignore[override]
        """"Nothing tagged" looks at the flavors of every server."""
        return bool(self.conf.tagging.all_when_none_tagged and
                    'tagged-flavors' in filters_conf.names(self.conf))

    def _anything_tagged(self, snapshot: model.Snapshot) -> bool:
        enabled = filters_conf.names(self.conf)
        if 'tagged-images' in enabled and any(
                image_tagged(i, self.tag) for i in snapshot.images.values()):
            return True
        return 'tagged-flavors' in enabled and any(
            flavor_tagged(s.flavor, self.tag) for s in snapshot.servers)
