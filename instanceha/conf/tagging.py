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

"""Evacuable tags on images, flavors and aggregates.

Matching rules (the same for every source):

* flavor: an extra spec whose key is exactly ``evacuable_tag``
  (case-sensitive, as Nova stores keys) with a true value;
* image: a Glance tag exactly equal to ``evacuable_tag`` (case-sensitive),
  or an image property with that key and a true value;
* aggregate: a metadata key exactly ``evacuable_tag`` with a true value.

A true value is one of ``true, yes, on, 1, t, y`` in any case, surrounding
blanks ignored (oslo's bool_from_string); anything else, including an
empty value, is false.
"""

from oslo_config import cfg

GROUP = 'tagging'

OPTS = [
    cfg.StrOpt('evacuable_tag', default='evacuable',
               regex=r'^\S{1,255}$',
               help='The tag, extra-spec key, image property or aggregate '
                    'metadata key that marks something evacuable (EVACUABLE_TAG '
                    'in Red Hat InstanceHA). Case-sensitive.'),
    cfg.BoolOpt('tagged_images', default=False,
                help='Only evacuate instances whose image (or, with '
                     'tagged_flavors, flavor) carries the evacuable tag. '
                     'Shorthand for adding tagged-images to [filters] '
                     'enabled (TAGGED_IMAGES in Red Hat InstanceHA).'),
    cfg.BoolOpt('tagged_flavors', default=False,
                help='Only evacuate instances whose flavor (or, with '
                     'tagged_images, image) carries the evacuable tag. '
                     'Shorthand for adding tagged-flavors to [filters] '
                     'enabled (TAGGED_FLAVORS in Red Hat InstanceHA).'),
    cfg.BoolOpt('tagged_aggregates', default=False,
                help='Only recover hosts in an aggregate whose metadata '
                     'carries the evacuable tag. Shorthand for adding '
                     'tagged-aggregates to [filters] enabled (TAGGED_AGGREGATES '
                     'in Red Hat InstanceHA).'),
    cfg.BoolOpt('all_when_none_tagged', default=False,
                help='Red Hat InstanceHA compatibility: when nothing at '
                     'all carries the tag (no image or flavor of any '
                     'server for the image/flavor filters; no aggregate for '
                     'the aggregate filter), treat everything as '
                     'evacuable. Off by default: the scope of evacuation '
                     'must not silently widen to every instance when the '
                     'last tagged image or flavor goes away.'),
    cfg.StrOpt('image_source', default='auto',
               choices=[
                   ('auto', 'glance when the service catalog has an image '
                            'endpoint, else nova'),
                   ('glance', 'the Image service v2 API: tags and '
                              'properties'),
                   ('nova', "Nova's deprecated image proxy (compute API "
                            'microversion 2.35): properties only, no tags'),
               ],
               help='Where the tagged-images filter reads image tags and '
                    'properties. Images are read only when that filter is '
                    'enabled, in one paginated listing per cycle.'),
]
