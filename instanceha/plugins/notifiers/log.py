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

"""The event log lines (the default notifier).

One line per engine event, warnings for bad news, exactly as the service
has always logged them. It runs inline: a log line is never dropped and
keeps its place among the service's other lines.
"""

from instanceha.engine import events
from instanceha.plugins.notifiers import base


class LogNotifier(base.NotifierDriver):
    description = ('One log line per engine event (logger '
                   'instanceha.events), warnings for bad news.')
    inline = True

    def __init__(self, conf):
        super().__init__(conf)
        self._sink = events.LogEventSink()

    def notify(self, notification: base.Notification) -> None:
        self._sink.emit(notification.event, notification.host,
                        **notification.details)
