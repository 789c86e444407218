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

"""How spare capacity is found for a failed host's instances."""

from oslo_config import cfg

GROUP = 'reservation'

OPTS = [
    cfg.StrOpt('strategy', default='none',
               help='Reservation strategy (an entry point in the '
                    'instanceha.reservation namespace).'),
    cfg.ListOpt('reserved_hosts', default=[],
                help='reserved-hosts strategy: compute hosts kept disabled '
                     'as spare capacity. A disabled host whose '
                     'disabled_reason starts with reserved_reason is a '
                     'spare as well.'),
    cfg.StrOpt('reserved_reason', default='instanceha:reserved',
               help='reserved-hosts strategy: disabled_reason prefix that '
                    'marks a spare host, and the reason written when a '
                    'spare is returned to the pool.'),
    cfg.BoolOpt('evacuate_to_spare', default=True,
                help='reserved-hosts strategy: rebuild the failed host\'s '
                     'instances on the spare enabled for it (otherwise the '
                     'spare only adds capacity and Nova\'s scheduler '
                     'places them).'),
    cfg.BoolOpt('same_domain_only', default=False,
                help='reserved-hosts strategy: only use a spare in the '
                     'failed host\'s failure domain (a shared aggregate or '
                     'the same availability zone); otherwise any spare is '
                     'used when the domain has none.'),
]
