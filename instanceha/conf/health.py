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

"""The /healthz and /metrics HTTP endpoint."""

from oslo_config import cfg

GROUP = 'health'

OPTS = [
    cfg.BoolOpt('enabled', default=True,
                help='Serve /healthz (readiness, JSON) and /metrics '
                     '(Prometheus text) over HTTP. On by default, bound to '
                     'the loopback address only.'),
    cfg.HostAddressOpt('listen', default='127.0.0.1',
                       help='Address the health endpoint binds to. The '
                            'default keeps it on loopback; set the address '
                            'of a management network (or 0.0.0.0) to let a '
                            'Prometheus server or a load balancer reach '
                            'it. It serves no secrets and accepts no '
                            'changes.'),
    cfg.PortOpt('port', default=9797,
                help='TCP port of the health endpoint. 0 picks a free '
                     'port and logs it. Two copies on one machine need '
                     'different ports; a copy that finds the port taken '
                     'logs an error and runs on without the endpoint.'),
    cfg.StrOpt('tls_cert_file',
               help='PEM certificate (chain) to serve the health endpoint '
                    'over HTTPS. Unset: plain HTTP. Needs tls_key_file.'),
    cfg.StrOpt('tls_key_file',
               help='PEM private key of tls_cert_file (keep it readable '
                    'by the service only).'),
    cfg.StrOpt('tls_client_ca_file',
               help='PEM CA certificate(s): with HTTPS, accept only '
                    'clients presenting a certificate signed by one of '
                    'them (e.g. the Prometheus server\'s). Unset: any '
                    'client.'),
    cfg.IntOpt('stuck_after', default=0, min=0, max=86400,
               help='Seconds without a finished cycle after which '
                    '/healthz reports the loop as stuck. 0 means three '
                    'poll intervals, at least 60 seconds.'),
]
