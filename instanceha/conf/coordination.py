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

"""Leader election between copies of the service."""

from oslo_config import cfg

from instanceha import exceptions

GROUP = 'coordination'

DEFAULT_BACKEND_URL = 'file:///var/lib/instanceha/coordination'

OPTS = [
    cfg.StrOpt('backend_url', default=DEFAULT_BACKEND_URL,
               help='tooz coordination backend. The default file:// '
                    'backend elects a leader among copies on ONE machine '
                    'only. To run copies on several machines use a '
                    'distributed backend, e.g. redis://HOST:6379 or '
                    'etcd3+http://HOST:2379. Only the elected leader '
                    'fences and evacuates; the others stand by and take '
                    'over when it goes. Credentials in the URL are never '
                    'logged.'),
    cfg.IntOpt('lease_time', default=15, min=3, max=600,
               help='Seconds the leadership lease lasts in the backend '
                    'without being refreshed. When the leader dies '
                    'without a clean stop (kill -9, power loss), a '
                    'follower takes over at most lease_time + '
                    'heartbeat_interval seconds later. Not used by the '
                    'file:// backend, whose lock ends with the process.'),
    cfg.FloatOpt('heartbeat_interval', default=3.0, min=0.2, max=200,
                 help='Seconds between two refreshes of the lease (and '
                      'between two attempts of a follower to become '
                      'leader). A leader stops acting heartbeat_interval '
                      'seconds before its lease could expire, so two '
                      'copies never act at the same time. Must be at '
                      'most a third of lease_time.'),
    cfg.StrOpt('member_id', default=None, sample_default='<hostname>-<pid>',
               help='Name of this copy among the others, shown in logs '
                    'and health. Defaults to the host name and process '
                    'id. Two running copies must not share it.'),
    cfg.StrOpt('group', default='instanceha', regex=r'^[A-Za-z0-9_.-]+$',
               help='Name of the coordination group (and prefix of the '
                    'lock names). Copies that share it elect one leader; '
                    'use different names for services that manage '
                    'different clouds through one backend.'),
]


def validate(conf: cfg.ConfigOpts) -> None:
    group = conf.coordination
    if group.heartbeat_interval * 3 > group.lease_time:
        raise exceptions.ConfigurationError(
            'option [coordination] heartbeat_interval = %s must be at most '
            'a third of [coordination] lease_time = %s, or a single late '
            'refresh would lose leadership'
            % (group.heartbeat_interval, group.lease_time))
    url = group.backend_url or ''
    if '://' not in url:
        raise exceptions.ConfigurationError(
            'option [coordination] backend_url must be a URL such as '
            'file:///var/lib/instanceha/coordination or redis://HOST:6379')
