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

"""The event sink that offers every engine event to the notifiers.

The engine emits events from its tick thread and from its jobs; a
receiver that is slow or gone must never hold either. So each
non-inline driver gets a bounded queue and a thread of its own:
:meth:`Dispatcher.emit` only translates the event and puts it in each
queue without waiting. A full queue drops the notification, counts it
(``instanceha_notifications_total{result="dropped"}``) and says so in the
log, at most once a minute per driver. One driver's trouble never delays
another's.
"""

from collections.abc import Iterable
import logging
import queue
import socket
import threading
import time

from prometheus_client import core as prom_core

from instanceha.engine import ports
from instanceha import exceptions
from instanceha.plugins.notifiers import base
from instanceha.plugins.notifiers import catalogue

LOG = logging.getLogger(__name__)

#: The notifier every service runs (the event log lines).
ALWAYS = 'log'
#: Seconds between two log lines about the same driver's trouble.
LOG_INTERVAL = 60.0
RESULTS = ('sent', 'failed', 'dropped')
_STOP = object()


class _Lane:
    """One driver, its queue, its thread and its counters."""

    def __init__(self, driver: base.NotifierDriver, size: int):
        self.driver = driver
        self.queue: queue.Queue = queue.Queue(maxsize=size)
        self.counts = dict.fromkeys(RESULTS, 0)
        self._lock = threading.Lock()
        self._said: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}
        self.thread: threading.Thread | None = None
        self.busy = False

    def count(self, result: str) -> None:
        with self._lock:
            self.counts[result] += 1

    def warn(self, kind: str, message: str) -> None:
        """Log at most once per LOG_INTERVAL per kind, with what was held."""
        now = time.monotonic()
        with self._lock:
            last = self._said.get(kind)
            if last is not None and now - last < LOG_INTERVAL:
                self._unsaid[kind] = self._unsaid.get(kind, 0) + 1
                return
            self._said[kind] = now
            held = self._unsaid.pop(kind, 0)
        more = (' (and %d more like it since the last message)' % held
                if held else '')
        LOG.warning('notifier %s: %s%s', self.driver.name, message, more)

    def offer(self, note: base.Notification) -> None:
        if self.driver.inline:
            self.deliver(note)
            return
        try:
            self.queue.put_nowait(note)
        except queue.Full:
            self.count('dropped')
            self.warn('dropped', 'queue full (%d waiting): dropped %s; '
                      'recovery goes on without it'
                      % (self.queue.maxsize, note.event_type))

    def deliver(self, note: base.Notification) -> None:
        try:
            self.driver.notify(note)
        except Exception as exc:  # noqa: a notifier never stops recovery
            self.count('failed')
            if not isinstance(exc, exceptions.InstanceHAError):
                LOG.error('notifier %s: unexpected error', self.driver.name,
                          exc_info=exc)
            self.warn('failed', 'could not deliver %s: %s'
                      % (note.event_type, exc))
        else:
            self.count('sent')

    def run(self) -> None:
        while True:
            note = self.queue.get()
            if note is _STOP:
                return
            self.busy = True
            try:
                self.deliver(note)
            finally:
                self.busy = False


class Dispatcher(ports.EventSink):
    """Translates engine events and hands them to every driver."""

    def __init__(self, drivers: Iterable[base.NotifierDriver], *,
                 queue_size: int = 1000, publisher_id: str | None = None):
        self.lanes = [_Lane(d, queue_size) for d in drivers]
        self.publisher_id = publisher_id or 'instanceha:%s' % (
            socket.gethostname())
        self._started = False

    @property
    def drivers(self) -> list[base.NotifierDriver]:
        return [lane.driver for lane in self.lanes]

    def start(self) -> None:
        """Start each driver and its thread (after validate)."""
        if self._started:
            return
        self._started = True
        for lane in self.lanes:
            lane.driver.start()
            if not lane.driver.inline:
                lane.thread = threading.Thread(
                    target=lane.run, daemon=True,
                    name='notifier-%s' % lane.driver.name)
                lane.thread.start()

    def emit(self, event: str, host: str | None = None, **details) -> None:
        try:
            note = catalogue.translate(event, host, details,
                                       publisher_id=self.publisher_id)
        except Exception:  # noqa: telling the story must not stop it
            LOG.exception('cannot translate event %s', event)
            return
        for lane in self.lanes:
            lane.offer(note)

    def flush(self, timeout: float) -> bool:
        """Wait until every queue is empty and idle; False on time-out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(lane.queue.empty() and not lane.busy
                   for lane in self.lanes):
                return True
            time.sleep(0.02)
        return False

    def stop(self, timeout: float = 5.0) -> None:
        """Deliver what is queued for up to ``timeout`` s, then stop.

        Safe to call twice. What is still queued after that is lost (and
        counted as dropped): the service's shutdown must not wait for a
        dead receiver.
        """
        if not self._started:
            return
        self._started = False
        deadline = time.monotonic() + timeout
        for lane in self.lanes:
            if lane.thread is not None:
                try:
                    lane.queue.put(_STOP, timeout=max(
                        0.0, deadline - time.monotonic()))
                except queue.Full:
                    pass
        for lane in self.lanes:
            if lane.thread is not None:
                lane.thread.join(max(0.0, deadline - time.monotonic()))
            lane.driver.stopping.set()
            left = 0
            while True:
                try:
                    if lane.queue.get_nowait() is not _STOP:
                        left += 1
                except queue.Empty:
                    break
            for _ in range(left):
                lane.count('dropped')
            if left:
                LOG.warning('notifier %s: %d notification(s) not delivered '
                            'before stopping', lane.driver.name, left)
            try:
                lane.driver.stop()
            except Exception as exc:  # noqa: best effort on the way out
                LOG.warning('notifier %s: stopping: %s', lane.driver.name,
                            exc)

    def counts(self) -> dict[str, dict[str, int]]:
        """{driver: {sent, failed, dropped}} so far."""
        return {lane.driver.name: dict(lane.counts) for lane in self.lanes}

    def collect(self) -> Iterable[prom_core.Metric]:
        """Prometheus collector: register the dispatcher in a registry."""
        family = prom_core.CounterMetricFamily(
            'instanceha_notifications',
            'Notifications by driver and result (sent, failed: the '
            'receiver refused or could not be reached after retries, '
            'dropped: the queue was full or the service stopped).',
            labels=['driver', 'result'])
        for lane in self.lanes:
            for result in RESULTS:
                family.add_metric([lane.driver.name, result],
                                  lane.counts[result])
        yield family
        queued = prom_core.GaugeMetricFamily(
            'instanceha_notifications_queued',
            'Notifications waiting in each driver\'s queue.',
            labels=['driver'])
        for lane in self.lanes:
            queued.add_metric([lane.driver.name], lane.queue.qsize())
        yield queued


def from_conf(conf) -> Dispatcher:
    """The dispatcher for ``[notifications] drivers``, loaded and validated.

    :raises ConfigurationError: naming the option, for a bad driver name
        or setting.
    """
    from instanceha.plugins import loader

    group = conf.notifications
    names = list(group.drivers)
    if ALWAYS not in names:
        # The event log lines are the service's own story: a notifier
        # list that leaves them out must not silence them.
        names.insert(0, ALWAYS)
    drivers = loader.load('instanceha.notifiers', names,
                          '[notifications] drivers', conf)
    return Dispatcher(drivers, queue_size=group.queue_size)
