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

"""core/v1 Events on a configured Kubernetes object.

Where instanceha runs under an operator, ``kubectl describe`` of its
object (``[notifications] kubernetes_object_*``) then shows each step:
reason ``HostFenceStart``, ``InstanceEvacuateEnd``, ...; type ``Warning``
for WARN and ERROR notifications, else ``Normal``; the message is the
event's log line; annotations carry the event type and recovery id.

The API server and credentials: ``kubernetes_api_url`` and
``kubernetes_token_file`` (read for every request: tokens rotate), else
the pod's service account. Plain HTTPS with ``requests``, as the bmh
fencing driver does; the account needs ``create`` on ``events``.
"""

import json
import os
import urllib.parse

import requests

from instanceha.adapters import kubernetes as kube
from instanceha.engine import events
from instanceha import exceptions
from instanceha.plugins.notifiers import base

ANNOTATION = 'instanceha.openstack.org/'
#: The API server refuses longer Event messages.
MAX_MESSAGE = 1024


def reason(event_type: str) -> str:
    """instanceha.host.fence.start -> HostFenceStart (an Event reason)."""
    words = event_type.split('.')[1:]
    return ''.join(w.title().replace('_', '') for w in words)


class KubernetesNotifier(base.HttpNotifierDriver):
    description = ('core/v1 Events on the object named by [notifications] '
                   'kubernetes_object_*.')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[notifications] kubernetes_%s' % k: v for k, v in (
            ('api_url', 'API server (default: in-cluster)'),
            ('token_file', 'bearer token (default: service account)'),
            ('ca_file', 'CA bundle'), ('verify', 'verify TLS'),
            ('namespace', 'namespace of the object'),
            ('object_kind', 'its kind'),
            ('object_api_version', 'its apiVersion'),
            ('object_name', 'its name'), ('object_uid', 'its uid'))}

    def __init__(self, conf):
        super().__init__(conf)
        self.group = conf.notifications
        self._api = ''
        self._token_file = ''
        self._verify: bool | str = True

    def _fail(self, message: str):
        raise exceptions.ConfigurationError('kubernetes notifier: ' + message)

    def validate(self) -> None:
        g = self.group
        for opt in ('namespace', 'object_name', 'object_kind',
                    'object_api_version'):
            if not getattr(g, 'kubernetes_' + opt):
                self._fail('option [notifications] kubernetes_%s is not set'
                           % opt)
        in_cluster = kube.in_cluster()
        if g.kubernetes_api_url:
            parts = urllib.parse.urlsplit(g.kubernetes_api_url)
            if parts.scheme not in ('http', 'https') or not parts.hostname:
                self._fail('option [notifications] kubernetes_api_url: %r '
                           'needs http:// or https:// and a host'
                           % g.kubernetes_api_url)
            self._api = g.kubernetes_api_url.rstrip('/')
        elif in_cluster:
            self._api = kube.in_cluster_api()
        else:
            self._fail('no API server: set [notifications] '
                       'kubernetes_api_url or run in a cluster')
        self._token_file = g.kubernetes_token_file or (
            kube.SA_TOKEN if in_cluster else '')
        if self._token_file and not os.access(self._token_file, os.R_OK):
            self._fail('option [notifications] kubernetes_token_file: '
                       'cannot read %s' % self._token_file)
        self._verify = g.kubernetes_verify
        if self._verify:
            ca = g.kubernetes_ca_file or (
                kube.in_cluster_ca() if in_cluster else None)
            if ca and os.path.exists(ca):
                self._verify = ca

    def event_body(self, note: base.Notification) -> dict:
        """The core/v1 Event for one notification."""
        g = self.group
        involved = {'apiVersion': g.kubernetes_object_api_version,
                    'kind': g.kubernetes_object_kind,
                    'name': g.kubernetes_object_name,
                    'namespace': g.kubernetes_namespace}
        if g.kubernetes_object_uid:
            involved['uid'] = g.kubernetes_object_uid
        annotations = {ANNOTATION + 'event-type': note.event_type}
        if note.recovery_id:
            annotations[ANNOTATION + 'recovery-id'] = note.recovery_id
        if note.host:
            annotations[ANNOTATION + 'host'] = note.host
        stamp = note.timestamp[:19] + 'Z'
        component = note.publisher_id.split(':', 1)[0]
        message = events.format_event(note.event, note.host, **note.details)
        return {
            'apiVersion': 'v1', 'kind': 'Event',
            'metadata': {'generateName': 'instanceha-',
                         'namespace': g.kubernetes_namespace,
                         'annotations': annotations},
            'involvedObject': involved,
            'reason': reason(note.event_type),
            'message': message[:MAX_MESSAGE],
            'type': 'Normal' if note.priority == base.INFO else 'Warning',
            'firstTimestamp': stamp, 'lastTimestamp': stamp, 'count': 1,
            'source': {'component': component,
                       'host': note.publisher_id.split(':', 1)[-1]},
            'reportingComponent': component,
            'reportingInstance': note.publisher_id.split(':', 1)[-1],
        }

    def notify(self, notification: base.Notification) -> None:
        url = '%s/api/v1/namespaces/%s/events' % (
            self._api, self.group.kubernetes_namespace)
        headers = {'Content-Type': 'application/json',
                   'Accept': 'application/json'}
        if self._token_file:
            try:
                headers['Authorization'] = 'Bearer ' + kube.read_token(
                    self._token_file)
            except OSError as exc:
                raise exceptions.NotifierError(
                    'cannot read token file %s: %s'
                    % (self._token_file, exc.strerror)) from None
        try:
            resp = self.session.post(url, data=json.dumps(
                self.event_body(notification)), headers=headers,
                timeout=10, verify=self._verify)
        except requests.exceptions.SSLError:
            raise exceptions.NotifierError(
                'TLS verification of the Kubernetes API %s failed (check '
                '[notifications] kubernetes_ca_file)' % self._api) from None
        except requests.exceptions.RequestException as exc:
            raise exceptions.NotifierError(
                'cannot reach the Kubernetes API %s: %s'
                % (self._api, type(exc).__name__)) from None
        if resp.status_code in (401, 403):
            raise exceptions.NotifierError(
                'the Kubernetes API refused to create an Event (HTTP %d): '
                'grant create on events in namespace %s'
                % (resp.status_code, self.group.kubernetes_namespace))
        if resp.status_code >= 300:
            raise exceptions.NotifierError(
                'the Kubernetes API answered HTTP %d: %s'
                % (resp.status_code, resp.text[:200]))
