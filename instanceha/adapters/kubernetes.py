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

"""How a Kubernetes API client finds the API server and its credentials.

One place for what the BareMetalHost fencing driver and the kubernetes
notifier both need in a pod: the API server's address from the
environment Kubernetes sets, the service account's token (re-read for
every request, since Kubernetes rotates it) and the cluster's CA.
"""

import os

#: Where Kubernetes mounts a pod's service account.
SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'
SA_TOKEN = os.path.join(SA_DIR, 'token')
SA_CA = os.path.join(SA_DIR, 'ca.crt')


def in_cluster() -> bool:
    """Whether this process runs in a pod (KUBERNETES_SERVICE_HOST set)."""
    return bool(os.environ.get('KUBERNETES_SERVICE_HOST'))


def in_cluster_api() -> str:
    """The in-cluster API server URL (an IPv6 address in brackets)."""
    host = os.environ['KUBERNETES_SERVICE_HOST']
    if ':' in host and not host.startswith('['):
        host = '[%s]' % host
    return 'https://%s:%s' % (host,
                              os.environ.get('KUBERNETES_SERVICE_PORT', '443'))


def in_cluster_ca() -> str | None:
    """The cluster CA bundle of the service account, if mounted."""
    return SA_CA if os.path.exists(SA_CA) else None


def read_token(path: str) -> str:
    """A bearer token file's content, read now.

    :raises OSError: the file cannot be read (callers name the file,
        never its content).
    """
    with open(path) as f:
        return f.read().strip()
