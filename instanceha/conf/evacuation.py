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

"""How a fenced host's instances are moved away."""

from oslo_config import cfg

GROUP = 'evacuation'

OPTS = [
    cfg.StrOpt('strategy',
               help='Evacuation strategy (an entry point in the '
                    'instanceha.evacuation namespace). Unset means "smart" '
                    'when [DEFAULT] smart_evacuation is true, else '
                    '"fire-and-forget".'),
]


def strategy_name(conf: cfg.ConfigOpts) -> str:
    """The evacuation strategy in force, honouring the seed's shorthand."""
    if conf.evacuation.strategy:
        return conf.evacuation.strategy
    return 'smart' if conf.smart_evacuation else 'fire-and-forget'
