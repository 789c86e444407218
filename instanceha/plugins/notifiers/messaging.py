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

"""OpenStack versioned notifications through oslo.messaging.

Configured as every OpenStack service is: ``[oslo_messaging_notifications]
transport_url`` (default: ``[DEFAULT] transport_url``), ``topics``
(default ``notifications``) and ``driver`` (default here:
``messagingv2``, the only one that sends to the bus). Each notification
goes out with its event type and priority (INFO, WARN, ERROR) and its
versioned payload; the publisher id is ``instanceha:<hostname>``.
"""

from instanceha import exceptions
from instanceha.plugins.notifiers import base


#: Connection retries per notification when the option says forever.
DEFAULT_RETRY = 3


class MessagingNotifier(base.NotifierDriver):
    description = ('OpenStack versioned notifications through '
                   'oslo.messaging ([oslo_messaging_notifications]).')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[oslo_messaging_notifications] transport_url':
                'the message bus (default: [DEFAULT] transport_url)',
                '[oslo_messaging_notifications] topics':
                'topics to publish on (default: notifications)',
                '[oslo_messaging_notifications] driver':
                'default here: messagingv2',
                '[oslo_messaging_notifications] retry':
                'connection retries per notification (-1, the default: '
                '3 here; forever would hold the queue)'}

    def __init__(self, conf):
        super().__init__(conf)
        self._transport = None
        self._notifiers: dict = {}

    def validate(self) -> None:
        # Imported here: oslo.messaging pulls in eventlet and oslo.service,
        # which a service without this driver (or a driver listing) need
        # not load.
        try:
            import oslo_messaging
        except ImportError:
            raise exceptions.ConfigurationError(
                'option [notifications] drivers: the messaging notifier '
                'needs oslo.messaging, which is not installed; install the '
                'extra: pip install "instanceha[messaging]"') from None
        self._om = oslo_messaging
        try:
            self._transport = oslo_messaging.get_notification_transport(
                self.conf)
        except (oslo_messaging.InvalidTransportURL,
                oslo_messaging.DriverLoadFailure) as exc:
            raise exceptions.ConfigurationError(
                'option [oslo_messaging_notifications] transport_url (or '
                '[DEFAULT] transport_url): %s' % _without_password(exc)
            ) from None

    def _notifier(self, publisher_id: str):
        notifier = self._notifiers.get(publisher_id)
        if notifier is None:
            group = self.conf.oslo_messaging_notifications
            driver = None if group.driver else 'messagingv2'
            # oslo.messaging's default retry (-1) is forever: it would hold
            # this notifier's queue for as long as the bus is away.
            retry = group.retry if group.retry >= 0 else DEFAULT_RETRY
            notifier = self._om.Notifier(
                self._transport, publisher_id=publisher_id, driver=driver,
                retry=retry)
            self._notifiers[publisher_id] = notifier
        return notifier

    def notify(self, notification: base.Notification) -> None:
        notifier = self._notifier(notification.publisher_id)
        send = {base.INFO: notifier.info, base.WARN: notifier.warn,
                base.ERROR: notifier.error}[notification.priority]
        try:
            send({}, notification.event_type, notification.payload)
        except self._om.MessageDeliveryFailure as exc:
            raise exceptions.NotifierError(
                'message bus did not take %s: %s'
                % (notification.event_type, _without_password(exc))
            ) from None

    def stop(self) -> None:
        if self._transport is not None:
            self._transport.cleanup()
            self._transport = None
            self._notifiers = {}


def _without_password(exc: Exception) -> str:
    """oslo.messaging errors may quote the transport URL: mask it."""
    import re
    return re.sub(r'(://[^:/@\s]*:)[^@\s]*@', r'\1***@', str(exc))
