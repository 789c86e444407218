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

"""Prometheus metrics of the service: what the engine did, counted.

* :class:`Metrics` — the metrics, in a registry of their own. Labels take
  values from small closed sets only (results, host states, plan
  decisions, gate names), never host or instance names, so the number of
  series stays bounded however large the cloud.
* :class:`MetricsEventSink` — counts the engine's events (a reader of the
  service's event fan-out).
* :class:`PauseCollector` and :func:`listener_metrics` — values read at
  scrape time: the operator's pause, the UDP listeners' packet counts.

:mod:`instanceha.daemon.health` serves them on ``/metrics`` with the values only
the running loop knows (leadership, readiness).
"""

from collections.abc import Callable, Iterable
import logging
import threading
import time
import typing

import prometheus_client as prom
from prometheus_client import core as prom_core
from prometheus_client import exposition

from instanceha.engine import events as ev
from instanceha.engine import placement
from instanceha.engine import ports
from instanceha.engine import states
from instanceha import exceptions

if typing.TYPE_CHECKING:
    from instanceha.daemon import health
    from instanceha.engine import capacity

LOG = logging.getLogger(__name__)

#: Durations of fencing and evacuation go from seconds to many minutes.
_SLOW_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600)
_CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
#: At most this many distinct gate names become label values.
_MAX_GATES = 32
#: Evacuations whose end we never see (fire-and-forget) are forgotten
#: beyond this many, so the start-time table cannot grow without bound.
_MAX_TRACKED = 10000


class Metrics:
    """Every metric of the service, in a registry of its own."""

    def __init__(self, registry: prom.CollectorRegistry | None = None):
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.cycles = prom.Counter(
            'instanceha_cycles', 'Decision cycles (Nova polls) by result.',
            ['result'], registry=r)
        self.cycle_duration = prom.Histogram(
            'instanceha_cycle_duration_seconds',
            'Duration of the engine tick that ran a decision cycle.',
            buckets=_CYCLE_BUCKETS, registry=r)
        self.hosts = prom.Gauge(
            'instanceha_hosts',
            'Hosts in a recovery workflow, by state (leader only).',
            ['state'], registry=r)
        self.plan_hosts = prom.Gauge(
            'instanceha_plan_hosts',
            'Hosts by decision in the last plan.', ['decision'], registry=r)
        self.fences = prom.Histogram(
            'instanceha_fence_duration_seconds',
            'Fencing attempts of a host and how long they took, by result '
            '(success, failure).', ['result'], buckets=_SLOW_BUCKETS,
            registry=r)
        self.evacuations = prom.Counter(
            'instanceha_evacuations',
            'Instance evacuation events by result (requested, done, '
            'failed, refused, gave_up, unanswered).', ['result'], registry=r)
        self.evacuation_duration = prom.Histogram(
            'instanceha_evacuation_duration_seconds',
            'From an evacuation request to its end, by result (done, '
            'failed).', ['result'], buckets=_SLOW_BUCKETS, registry=r)
        self.gate_blocks = prom.Counter(
            'instanceha_gate_blocks',
            'Hosts (or whole plans) a gate blocked, per cycle, by gate.',
            ['gate'], registry=r)
        self.step_errors = prom.Counter(
            'instanceha_step_errors',
            'Unexpected errors in a workflow step, by host state.',
            ['state'], registry=r)
        self.leadership_changes = prom.Counter(
            'instanceha_leadership_changes',
            'Times this copy became leader (gained) or stopped being it '
            '(lost).', ['change'], registry=r)
        self.process_failures = prom.Counter(
            'instanceha_process_failures',
            'Compute services of living hosts disabled because their '
            'nova-compute was down (disabled), and enabled again when it '
            'came back (enabled).', ['change'], registry=r)
        self.instance_failures = prom.Counter(
            'instanceha_instance_failures',
            'Crashed instances by what was done (restart, relocate, error) '
            'and their recoveries (recovered: ran stable_time).',
            ['result'], registry=r)
        self.capacity_tolerance = prom.Gauge(
            'instanceha_capacity_tolerance',
            'Failover capacity (leader, [capacity] check_interval): how '
            'many hosts of the failure domain may be lost at once with '
            'every evacuable instance finding room (the k of N+k; a lower '
            'bound where not every set was tried).', ['domain'], registry=r)
        self.capacity_unabsorbed = prom.Gauge(
            'instanceha_capacity_unabsorbed_hosts',
            'Hosts whose loss alone would leave instances without room '
            '(leader, last capacity check).', registry=r)
        self.capacity_short = prom.Gauge(
            'instanceha_capacity_short',
            'Whether a failure domain tolerates fewer lost hosts than '
            '[capacity] minimum_tolerance (1) or not (0).', registry=r)
        self.capacity_known = prom.Gauge(
            'instanceha_capacity_known',
            'Whether the last capacity check could read the cloud (1).',
            registry=r)
        self._gates: set[str] = set()
        r.register(AbstentionCollector())
        for state in states.HostState:
            self.hosts.labels(state.value).set(0)
        for result in ('ok', 'error'):
            self.cycles.labels(result)

    def gate_label(self, gate: str) -> str:
        gate = gate.strip() or 'unknown'
        if gate not in self._gates and len(self._gates) >= _MAX_GATES:
            return 'other'
        self._gates.add(gate)
        return gate

    def set_capacity(self, report: 'capacity.Report | None',
                     short: str | None) -> None:
        """The last capacity check's answer (None: it could not read)."""
        self.capacity_known.set(0 if report is None else 1)
        if report is None:
            return
        self.capacity_tolerance.clear()
        for d in report.domains:
            self.capacity_tolerance.labels(d.domain.name).set(d.tolerance)
        self.capacity_unabsorbed.set(len({
            loss.failed for d in report.domains for loss in d.unabsorbed}))
        self.capacity_short.set(1 if short else 0)

    def render(self) -> bytes:
        return exposition.generate_latest(self.registry)


class MetricsEventSink(ports.EventSink):
    """Counts the engine's events: one reader of the service's fan-out."""

    def __init__(self, metrics: Metrics, monitor: 'health.Monitor | None' = None,
                 clock: Callable[[], float] = time.monotonic):
        self.metrics = metrics
        self.monitor = monitor
        self._clock = clock
        self._lock = threading.Lock()
        self._fencing_since: dict[str, float] = {}
        self._evacuating_since: dict[str, float] = {}

    def emit(self, event: str, host: str | None = None, **details) -> None:
        try:
            self._count(event, host, details)
        except Exception:  # noqa: metrics must never break the engine
            LOG.exception('metrics: could not count event %s', event)

    def _count(self, event: str, host: str | None, details: dict) -> None:
        m = self.metrics
        now = self._clock()
        with self._lock:
            if event == ev.HOST_STATE:
                new = details.get('new')
                if new == states.HostState.FENCING.value:
                    self._fencing_since[host] = now
                elif new in (states.HostState.FENCED.value,
                             states.HostState.FENCE_FAILED.value):
                    started = self._fencing_since.pop(host, None)
                    result = ('success' if new == states.HostState.FENCED
                              .value else 'failure')
                    m.fences.labels(result).observe(
                        0.0 if started is None else now - started)
            elif event == ev.EVACUATE_REQUESTED:
                m.evacuations.labels('requested').inc()
                server = str(details.get('server'))
                if len(self._evacuating_since) >= _MAX_TRACKED:
                    self._evacuating_since.pop(
                        next(iter(self._evacuating_since)))
                self._evacuating_since[server] = now
            elif event in (ev.EVACUATE_DONE, ev.EVACUATE_FAILED):
                result = 'done' if event == ev.EVACUATE_DONE else 'failed'
                m.evacuations.labels(result).inc()
                started = self._evacuating_since.pop(
                    str(details.get('server')), None)
                if started is not None:
                    m.evacuation_duration.labels(result).observe(
                        now - started)
            elif event == ev.EVACUATE_REFUSED:
                m.evacuations.labels('refused').inc()
                self._evacuating_since.pop(str(details.get('server')), None)
            elif event == ev.EVACUATE_GAVE_UP:
                m.evacuations.labels('gave_up').inc()
            elif event == ev.EVACUATE_UNANSWERED:
                m.evacuations.labels('unanswered').inc()
            elif event == ev.STEP_ERROR:
                state = details.get('state')
                valid = {s.value for s in states.HostState}
                m.step_errors.labels(state if state in valid else
                                     'other').inc()
            elif event in (ev.PROCESS_FAILURE, ev.PROCESS_RECOVERED):
                m.process_failures.labels(
                    'disabled' if event == ev.PROCESS_FAILURE
                    else 'enabled').inc()
            elif event == ev.INSTANCE_CRASHED:
                nxt = str(details.get('next'))
                m.instance_failures.labels(
                    nxt if nxt in ('restart', 'relocate', 'error')
                    else 'other').inc()
            elif event == ev.INSTANCE_RECOVERED:
                m.instance_failures.labels('recovered').inc()
            elif event == ev.LEADER:
                m.leadership_changes.labels('gained').inc()
            elif event == ev.NOT_LEADER:
                m.leadership_changes.labels('lost').inc()
        if event == ev.SNAPSHOT_FAILED and self.monitor is not None:
            self.monitor.snapshot_failed(str(details.get('reason')))


class PauseCollector:
    """The operator's pause, read from the backend at scrape time.

    Every copy reports it (not only the leader), so an alert needs no
    ``max()``: ``instanceha_paused`` (1 while in force), and the start
    and end of the stored pause as Unix times (no end: no sample).
    """

    def __init__(self, source: ports.PauseSource,
                 now: Callable[[], float] = time.time,
                 skew: Callable[[], float | None] = lambda: None):
        """Read ``source`` at scrape time.

        :param skew: seconds this machine's clock is ahead of Nova's, as
            the engine last measured (a pause kept on Nova's clock ends by
            Nova's clock).
        """
        self.source = source
        self._now = now
        self._skew = skew

    def collect(self) -> Iterable[prom_core.Metric]:
        import datetime

        try:
            pause = self.source.current()
        except exceptions.InstanceHAError as exc:
            LOG.warning('metrics: cannot read the pause: %s', exc)
            return
        now = datetime.datetime.fromtimestamp(self._now(),
                                              datetime.timezone.utc)
        active = pause is not None and not pause.expired(now, self._skew())
        yield prom_core.GaugeMetricFamily(
            'instanceha_paused', 'Whether an operator paused instance HA '
            '(instanceha-manage pause): nothing new is fenced or evacuated.',
            value=1 if active else 0)
        if pause is None:
            return
        yield prom_core.GaugeMetricFamily(
            'instanceha_pause_start_timestamp_seconds',
            'When the stored pause began (Unix time).',
            value=pause.since.timestamp())
        if pause.until is not None:
            yield prom_core.GaugeMetricFamily(
                'instanceha_pause_end_timestamp_seconds',
                'When the stored pause ends by itself (Unix time).',
                value=pause.until.timestamp())


class AbstentionCollector:
    """Times an evacuation strategy chose none of the candidate hosts.

    Nova's scheduler then chose; read at scrape time from
    :func:`instanceha.engine.placement.abstentions` (labels: the
    configured strategies' names).
    """

    def collect(self) -> Iterable[prom_core.Metric]:
        family = prom_core.CounterMetricFamily(
            'instanceha_placement_abstentions',
            'Instances an evacuation strategy placed nowhere though hosts '
            'were candidates (it lacked data or declined); Nova\'s '
            'scheduler chose.', labels=['strategy'])
        for name, count in sorted(placement.abstentions().items()):
            family.add_metric([name], count)
        yield family


def listener_metrics(listeners: list) -> Iterable[prom_core.Metric]:
    """Packets the heartbeat and kdump listeners accepted and rejected.

    Labels are the detector's name and a rejection reason from the
    listener's fixed list, so cardinality stays bounded.
    """
    if not listeners:
        return
    packets = prom_core.CounterMetricFamily(
        'instanceha_listener_packets',
        'Packets received by a detector\'s UDP listener, by result and '
        'reason of rejection.', labels=['listener', 'result', 'reason'])
    hosts = prom_core.GaugeMetricFamily(
        'instanceha_listener_hosts',
        'Hosts a detector\'s UDP listener has heard from.',
        labels=['listener'])
    announced = prom_core.CounterMetricFamily(
        'instanceha_listener_announcements',
        'Clean shutdowns announced by compute hosts\' heartbeat agents, '
        'by kind (reboot, poweroff).', labels=['listener', 'kind'])
    answers = prom_core.CounterMetricFamily(
        'instanceha_listener_answers',
        'Answers the leading copy sent to heartbeat agents.',
        labels=['listener'])
    links = prom_core.CounterMetricFamily(
        'instanceha_host_link_changes',
        'Changes of an agent\'s link to the service it reported, by new '
        'state (connected, partitioned, isolated, unknown).',
        labels=['listener', 'state'])
    for drv in listeners:
        stats = drv.stats()
        if not stats:
            continue
        if 'answers' in stats:
            answers.add_metric([drv.name], stats['answers'])
        for state, count in sorted(stats.get('link_changes', {}).items()):
            links.add_metric([drv.name, state], count)
        packets.add_metric([drv.name, 'accepted', ''],
                           stats.get('accepted', 0))
        for reason, count in sorted(stats.get('rejected', {}).items()):
            packets.add_metric([drv.name, 'rejected', reason], count)
        hosts.add_metric([drv.name], stats.get('hosts', 0))
        for kind, count in sorted(stats.get('announcements', {}).items()):
            announced.add_metric([drv.name, kind], count)
    yield packets
    yield hosts
    yield announced
    yield answers
    yield links
