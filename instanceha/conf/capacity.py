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

"""Failover capacity: what is read from Placement, and how often."""

from oslo_config import cfg

GROUP = 'capacity'

OPTS = [
    cfg.URIOpt('placement_endpoint', schemes=['http', 'https'],
               help='URL of the Placement API. Unset: found in the '
                    'service catalog (service type placement) with the '
                    '[nova] region_name and valid_interfaces. The [nova] '
                    'credentials are used; the user needs the admin role '
                    'in Placement to read resource providers.'),
    cfg.IntOpt('refresh_interval', default=300, min=30, max=86400,
               help='Seconds a reading of the hosts\' usage in Placement '
                    'is reused before it is read again. Each reading costs '
                    'one Placement call per compute host.'),
    cfg.IntOpt('inventory_interval', default=1800, min=60, max=86400,
               help='Seconds the hosts\' inventories (size, allocation '
                    'ratio, reserved) and the host-to-provider links read '
                    'from Nova are reused before they are read again. '
                    'They change when hardware or ratios change.'),
    cfg.IntOpt('check_interval', default=0, min=0, max=86400,
               help='Seconds between two failover capacity checks by the '
                    'leading copy (metrics, readiness, events). 0 turns the '
                    'periodic check off; instanceha-manage capacity still '
                    'answers, and evacuation strategies still see the '
                    'hosts\' room.'),
    cfg.IntOpt('minimum_tolerance', default=0, min=0, max=1000,
               help='How many hosts of every failure domain (the cloud, '
                    'each availability zone, each host aggregate) the '
                    'cloud must be able to lose at once with all their '
                    'instances finding room elsewhere: 1 is N+1. Below it '
                    'the service reports itself degraded on /readyz and '
                    'emits a capacity_short event; recoveries are never '
                    'held back by it. 0: no minimum.'),
]
