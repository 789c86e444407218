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

"""Who hears about recoveries: notifier drivers and their settings.

The ``messaging`` driver reads ``[oslo_messaging_notifications]`` (and
the transport's own groups) as every OpenStack service does; those
options belong to oslo.messaging and are registered by it.
"""

from oslo_config import cfg

GROUP = 'notifications'

OPTS = [
    cfg.ListOpt('drivers', default=['log'],
                help='Notifier drivers (entry points in the '
                     'instanceha.notifiers namespace) that every engine '
                     'event is offered to, e.g. "log, messaging, webhook". '
                     '"log" writes the event log lines and always runs, '
                     'listed or not. Each other driver has its own '
                     'queue and thread: a slow or unreachable receiver '
                     'never delays a recovery.'),
    cfg.IntOpt('queue_size', default=1000, min=1, max=1000000,
               help='Notifications each driver may hold while its receiver '
                    'is slow or away; beyond that they are dropped, '
                    'counted (instanceha_notifications_total{result='
                    '"dropped"}) and logged.'),
    cfg.ListOpt('webhook_urls', default=[],
                help='webhook driver: URLs each notification is POSTed to '
                     'as JSON (https:// recommended).'),
    cfg.StrOpt('webhook_secret_file',
               help='webhook driver: file holding the shared secret (one '
                    'line, at least 16 bytes) that signs each request: '
                    'header X-InstanceHA-Signature = hex HMAC-SHA256 of '
                    '"<X-InstanceHA-Timestamp>.<body>".'),
    cfg.FloatOpt('webhook_timeout', default=5.0, min=0.1, max=300.0,
                 help='webhook driver: seconds to wait for a receiver to '
                      'answer one request.'),
    cfg.IntOpt('webhook_retries', default=3, min=0, max=20,
               help='webhook driver: further tries of a request that '
                    'failed (connection error, time-out, HTTP 5xx or '
                    '429); a 4xx answer is not retried.'),
    cfg.FloatOpt('webhook_retry_interval', default=1.0, min=0.0,
                 max=300.0,
                 help='webhook driver: seconds before the first retry, '
                      'doubled for each further one.'),
    cfg.BoolOpt('webhook_verify', default=True,
                help='webhook driver: verify the receiver\'s TLS '
                     'certificate. Turn off only for a test receiver.'),
    cfg.StrOpt('webhook_ca_file',
               help='webhook driver: CA bundle to verify receivers with '
                    '(default: the system\'s).'),
    cfg.StrOpt('kubernetes_api_url',
               help='kubernetes driver: API server URL; default: the '
                    'in-cluster API (KUBERNETES_SERVICE_HOST).'),
    cfg.StrOpt('kubernetes_token_file',
               help='kubernetes driver: file holding the bearer token '
                    '(re-read for every request); default: the pod\'s '
                    'service account token.'),
    cfg.StrOpt('kubernetes_ca_file',
               help='kubernetes driver: CA bundle to verify the API '
                    'server; default: the service account\'s CA in a '
                    'cluster, else the system\'s.'),
    cfg.BoolOpt('kubernetes_verify', default=True,
                help='kubernetes driver: verify the API server\'s TLS '
                     'certificate.'),
    cfg.StrOpt('kubernetes_namespace',
               help='kubernetes driver: namespace of the object the '
                    'Events are about (and where they are created).'),
    cfg.StrOpt('kubernetes_object_kind', default='ConfigMap',
               help='kubernetes driver: kind of that object, e.g. '
                    'InstanceHa, Deployment, ConfigMap.'),
    cfg.StrOpt('kubernetes_object_api_version', default='v1',
               help='kubernetes driver: apiVersion of that object, e.g. '
                    'v1, apps/v1, instanceha.openstack.org/v1beta1.'),
    cfg.StrOpt('kubernetes_object_name',
               help='kubernetes driver: name of that object.'),
    cfg.StrOpt('kubernetes_object_uid',
               help='kubernetes driver: uid of that object (optional; '
                    'lets kubectl describe find the Events).'),
]
