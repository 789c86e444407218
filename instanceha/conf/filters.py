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

"""Which filters decide that a host or an instance is eligible."""

from oslo_config import cfg

GROUP = 'filters'

#: Filters the [tagging] booleans switch on, by option name.
_TAGGING_SHORTHANDS = (('tagged_images', 'tagged-images'),
                       ('tagged_flavors', 'tagged-flavors'),
                       ('tagged_aggregates', 'tagged-aggregates'))

OPTS = [
    cfg.ListOpt('enabled', default=['enabled', 'has-instances',
                                    'skip-by-name'],
                help='Ordered list of filters (entry points in the '
                     'instanceha.filters namespace). A failed host, and '
                     'each of its instances, must pass every one of them '
                     'to be evacuated; tagged-images and tagged-flavors '
                     'together keep an instance when either keeps it. '
                     'The [tagging] tagged_* options add the tag filters '
                     'to this list.'),
    cfg.ListOpt('skip_instance_names', default=[],
                help='skip-by-name filter: instances whose name matches one '
                     'of these shell globs (fnmatch, case-sensitive, e.g. '
                     '``test-*``) are never evacuated.'),
    cfg.ListOpt('skip_host_names', default=[],
                help='skip-by-name filter: compute hosts whose name matches '
                     'one of these shell globs (fnmatch, case-sensitive) are '
                     'never recovered.'),
]


def names(conf: cfg.ConfigOpts) -> list[str]:
    """The filters in force: [filters] enabled plus the tagging shorthands."""
    result = list(conf.filters.enabled)
    for option, name in _TAGGING_SHORTHANDS:
        if conf.tagging[option] and name not in result:
            result.append(name)
    return result
