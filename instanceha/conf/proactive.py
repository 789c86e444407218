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

"""Proactive evacuation: hosts emptied before their hardware fails."""

from oslo_config import cfg

GROUP = 'proactive'

OPTS = [
    cfg.IntOpt('interval', default=0, min=0, max=86400,
               help='Seconds between two readings of the hosts\' hardware '
                    'health through their fencing devices (Redfish), by '
                    'the leading copy. 0 turns proactive evacuation off.'),
    cfg.ListOpt('rules', default=['power_supply:Critical=evacuate',
                                  'memory:Critical=evacuate',
                                  'thermal:Critical=evacuate',
                                  '*:Warning=warn', '*:Critical=warn'],
                help='What each hardware condition leads to, as '
                     'KIND:HEALTH=ACTION items; KIND is system, memory, '
                     'power_supply or thermal, HEALTH Warning or Critical, '
                     '* for any; ACTION ignore, warn (an event only) or '
                     'evacuate (the host is put into maintenance and its '
                     'instances live-migrated; never fenced). The most '
                     'specific item wins; a condition no item names is '
                     'warned about.'),
    cfg.IntOpt('confirm', default=2, min=1, max=100,
               help='Readings in a row a condition to evacuate for must be '
                    'seen in before the host is emptied (a flapping sensor '
                    'never is).'),
    cfg.IntOpt('cooldown', default=3600, min=0,
               help='Seconds after a host was emptied for a condition '
                    'before it may be emptied for one again.'),
    cfg.IntOpt('max_starts', default=1, min=1,
               help='Most hosts emptied for hardware conditions within '
                    'window seconds, across the cloud.'),
    cfg.IntOpt('window', default=3600, min=60,
               help='Seconds over which max_starts is counted.'),
    cfg.IntOpt('threshold', default=50, min=0, max=100,
               help='When more than this percentage of the hosts read ask '
                    'to be emptied at once (and more than one), none is: '
                    'a sensor or firmware fault across the fleet is more '
                    'likely than that many failing machines.'),
]


def validate(conf: cfg.ConfigOpts) -> None:
    """A rule that is not KIND:HEALTH=ACTION is named at start-up."""
    from instanceha.engine import proactive
    from instanceha import exceptions

    try:
        proactive.parse_rules(conf.proactive.rules)
    except ValueError as exc:
        raise exceptions.ConfigurationError(
            'option [proactive] rules: %s' % exc) from None
