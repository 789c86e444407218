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

"""Health (/healthz) and Prometheus metrics (/metrics) over HTTP.

Two pieces, usable alone; the metrics themselves (and the sink that
counts the engine's events) are in :mod:`instanceha.daemon.metrics`:

* :class:`Monitor` — what the service loop tells health: each engine tick
  (:meth:`Monitor.tick_started`, :meth:`Monitor.tick_finished`, as an
  observer of :func:`instanceha.engine.runner.loop`), plus failed Nova
  reads (from the metrics' event sink), plus the coordinator's status. It
  decides readiness, and adds to ``/metrics`` what only the running loop
  knows (leadership, readiness, hosts in recovery).
* :class:`HealthServer` — a small threaded HTTP server serving both.

:func:`attach` wires them into a service built by
:func:`instanceha.daemon.service.build`.

Readiness (``/healthz`` answers 200 or 503 with a JSON body saying why):

* not ready while shutting down (SIGTERM received),
* not ready while the coordination backend is unreachable,
* not ready when the loop is stuck: a tick running, or no tick finished,
  for longer than ``[health] stuck_after``,
* the leader is ready only after its first good cycle (Nova read), and not
  while its last cycle failed or its last good one is too old,
* a follower does not read Nova; it is ready while the backend answers
  and its loop runs, so it can take over.
"""

from collections.abc import Callable, Iterable
import errno
import http.server
import json
import logging
import socket
import ssl
import threading
import time

from prometheus_client import core as prom_core
from prometheus_client import exposition

from instanceha.daemon import metrics as metrics_mod
from instanceha.engine import ports
from instanceha.engine import states
from instanceha import exceptions

LOG = logging.getLogger(__name__)


class Monitor:
    """Readiness from the loop's ticks, the engine and the coordinator.

    :param stuck_after: seconds without a finished tick (or with one
        running), or for a leader without a good cycle, after which the
        service is not ready.
    """

    def __init__(self, metrics: metrics_mod.Metrics, *, stuck_after: float,
                 coordinator: ports.Coordinator | None = None,
                 stopping: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.metrics = metrics
        self.stuck_after = stuck_after
        self.coordinator = coordinator
        self._stopping = stopping or (lambda: False)
        self._shutting_down = False
        self._clock = clock
        self._lock = threading.Lock()
        self._tick_started: float | None = None
        self._tick_running = False
        self._last_tick_end: float | None = None
        self._last_tick_error: str | None = None
        self._last_good_cycle: float | None = None
        self._cycle_error: str | None = None
        self._snapshot_error: str | None = None
        self._cycles_seen = 0
        self._quiet_seen = 0
        self._plan = None
        self._hosts: dict[str, int] = {}
        #: Hosts in a workflow and their state (leader), for the gauge.
        self.host_states: dict[str, str] = {}
        self._created = clock()
        #: Drivers with listener counters (``stats()``), set by watch().
        self.listeners: list = []
        #: Seconds our clock is ahead of Nova's (last snapshot), and the
        #: difference reported as a readiness reason ([detection]
        #: max_clock_skew; None: not reported).
        self.clock_skew: float | None = None
        self.max_clock_skew: float | None = None
        #: What falls short of [capacity] minimum_tolerance (None: nothing):
        #: readiness says "degraded" and stays ready (a recovery is never
        #: held back by capacity).
        self.capacity_short: str | None = None
        metrics.registry.register(_LiveCollector(self))

    # -- what the loop reports ---------------------------------------------

    def tick_started(self) -> None:
        with self._lock:
            self._tick_started = self._clock()
            self._tick_running = True
            self._snapshot_error = None

    def snapshot_failed(self, reason: str) -> None:
        """The engine could not read Nova this cycle (from its event)."""
        with self._lock:
            self._snapshot_error = reason

    def tick_finished(self, engine, error: str | None = None) -> None:
        """After each tick; ``engine`` is read for cycles, plan and hosts.

        :param error: why the tick raised, if it did.
        """
        now = self._clock()
        cycles = getattr(engine, 'cycles', 0)
        with self._lock:
            started = self._tick_started if self._tick_started else now
            self._tick_running = False
            self._last_tick_end = now
            self._last_tick_error = error
            if cycles != self._cycles_seen:
                self._cycles_seen = cycles
                failure = self._snapshot_error or error
                self.metrics.cycles.labels(
                    'error' if failure else 'ok').inc()
                self.metrics.cycle_duration.observe(now - started)
                if failure:
                    self._cycle_error = failure
                else:
                    self._cycle_error = None
                    self._last_good_cycle = now
            # While every host is healthy the engine reads the compute
            # services alone, and a poll passes without a full cycle:
            # that read is the good cycle of a quiet poll.
            quiet = getattr(engine, 'quiet_polls', 0)
            if quiet != self._quiet_seen:
                self._quiet_seen = quiet
                self._cycle_error = None
                self._last_good_cycle = now
        snapshot = getattr(engine, 'snapshot', None)
        if snapshot is not None:
            self.clock_skew = getattr(snapshot, 'clock_skew', None)
        plan = getattr(engine, 'plan', None)
        if plan is not None and plan is not self._plan:
            self._plan = plan
            self._count_plan(plan)
        host_states = getattr(engine, 'host_states', None)
        if callable(host_states):
            now_states = {h: getattr(st, 'value', str(st))
                          for h, st in host_states().items()}
            # The gauges change only with the states (every tick would
            # set one per state, twice a second while all is healthy).
            if now_states != self.host_states:
                counts: dict[str, int] = {}
                for key in now_states.values():
                    counts[key] = counts.get(key, 0) + 1
                for state in states.HostState:
                    self.metrics.hosts.labels(state.value).set(
                        counts.get(state.value, 0))
                self._hosts = counts
                self.host_states = now_states

    def _count_plan(self, plan) -> None:
        """Decisions per kind, and which gates blocked whom.

        Read from the plan's structured fields (each blocked host's
        ``gate``, the plan's ``blocking_gates``), never from its text.
        """
        from instanceha.engine import plan as plan_mod

        counts = {d.value: 0 for d in plan_mod.Decision}
        gates_seen = set()
        for decision in plan.decisions:
            counts[decision.decision.value] = counts.get(
                decision.decision.value, 0) + 1
            gate = getattr(decision, 'gate', None)
            if decision.decision is plan_mod.Decision.BLOCKED and gate:
                gates_seen.add(gate)
                self.metrics.gate_blocks.labels(
                    self.metrics.gate_label(gate)).inc()
        # A gate that blocked the whole plan with no host to name.
        for gate in getattr(plan, 'blocking_gates', ()):
            if gate not in gates_seen:
                gates_seen.add(gate)
                self.metrics.gate_blocks.labels(
                    self.metrics.gate_label(gate)).inc()
        for decision, n in counts.items():
            self.metrics.plan_hosts.labels(decision).set(n)

    def begin_shutdown(self) -> None:
        self._shutting_down = True

    def watch_listeners(self, detectors) -> None:
        """Expose the packet counters of detectors that have them."""
        self.listeners = [d for d in detectors if d.supports_stats]

    # -- what health says --------------------------------------------------

    def _coordination(self):
        status = getattr(self.coordinator, 'status', None)
        return status() if callable(status) else None

    def leader(self) -> bool:
        if self.coordinator is None:
            return True
        return bool(self.coordinator.is_leader())

    def shutting_down(self) -> bool:
        return self._shutting_down or bool(self._stopping())

    def liveness(self) -> tuple[bool, dict]:
        """(alive, details): the process answers and its loop turns.

        Nova, the coordination backend and shutting down are not asked:
        restarting a copy would not bring them back (that is readiness).
        """
        now = self._clock()
        with self._lock:
            running = self._tick_running
            started = self._tick_started
            last_end = self._last_tick_end
        reasons = []
        if running and started is not None and (
                now - started > self.stuck_after):
            reasons.append('loop stuck: a tick has been running for %d s'
                           % (now - started))
        elif last_end is None and now - self._created > self.stuck_after:
            reasons.append('loop never ticked in %d s' % (
                now - self._created))
        elif last_end is not None and now - last_end > self.stuck_after:
            reasons.append('loop stuck: no tick for %d s' % (now - last_end))
        return not reasons, {'status': 'alive' if not reasons else 'stuck',
                             'reasons': reasons}

    def readiness(self) -> tuple[bool, dict]:
        """(ready, JSON-able details with the reasons when not ready)."""
        now = self._clock()
        reasons: list[str] = []
        coord = self._coordination()
        leader = self.leader()
        if self.shutting_down():
            reasons.append('shutting down')
        if coord is not None and not coord.connected:
            reasons.append('coordination %s' % (
                coord.error or 'backend not connected yet'))
        with self._lock:
            running = self._tick_running
            tick_started = self._tick_started
            last_end = self._last_tick_end
            last_good = self._last_good_cycle
            cycle_error = self._cycle_error
            tick_error = self._last_tick_error
            cycles = self._cycles_seen
        if running and tick_started is not None and (
                now - tick_started > self.stuck_after):
            reasons.append('loop stuck: a tick has been running for %d s'
                           % (now - tick_started))
        elif last_end is None:
            reasons.append('loop not started yet')
        elif now - last_end > self.stuck_after:
            reasons.append('loop stuck: no tick for %d s' % (now - last_end))
        skew, bound = self.clock_skew, self.max_clock_skew
        if skew is not None and bound is not None and abs(skew) > bound:
            reasons.append("clock: this machine's clock is %.0fs %s Nova's "
                           "(more than [detection] max_clock_skew = %gs)" % (
                               abs(skew), 'ahead of' if skew > 0
                               else 'behind', bound))
        if leader:
            if cycle_error:
                reasons.append('last cycle failed: %s' % cycle_error)
            elif last_good is None:
                reasons.append('no good cycle yet')
            elif now - last_good > self.stuck_after:
                reasons.append('no good cycle for %d s' % (now - last_good))
        status = 'ready' if not reasons else 'not ready'
        short = self.capacity_short
        if short and not reasons:
            status = 'degraded'
        body = {
            'status': status,
            'degraded': ['failover capacity %s' % short] if short else [],
            'reasons': reasons,
            'role': 'leader' if leader else 'follower',
            'cycles': cycles,
            'last_good_cycle_age': (None if last_good is None
                                    else round(now - last_good, 1)),
            'last_tick_error': tick_error,
            'hosts': dict(sorted(self._hosts.items())),
        }
        if coord is not None:
            body['coordination'] = {
                'member_id': coord.member_id, 'backend': coord.backend,
                'connected': coord.connected, 'leader': coord.leader,
                'members': coord.members, 'error': coord.error,
                'last_loss': coord.last_loss}
        return not reasons, body


def _version() -> str:
    try:
        import importlib.metadata
        return importlib.metadata.version('instanceha')
    except Exception:  # noqa: not installed (a source tree)
        return 'unknown'


class _LiveCollector:
    """Values read at scrape time: leadership, backend, readiness."""

    def __init__(self, monitor: Monitor):
        self.monitor = monitor

    def collect(self) -> Iterable[prom_core.Metric]:
        mon = self.monitor
        yield prom_core.GaugeMetricFamily(
            'instanceha_leader', 'Whether this copy is the leader (1) '
            'and may act.', value=1 if mon.leader() else 0)
        ready, _ = mon.readiness()
        yield prom_core.GaugeMetricFamily(
            'instanceha_ready', 'Whether /healthz reports ready.',
            value=1 if ready else 0)
        yield prom_core.GaugeMetricFamily(
            'instanceha_shutting_down', 'Whether the service is stopping.',
            value=1 if mon.shutting_down() else 0)
        yield prom_core.GaugeMetricFamily(
            'instanceha_live', 'Whether /livez reports the loop alive.',
            value=1 if mon.liveness()[0] else 0)
        info = prom_core.GaugeMetricFamily(
            'instanceha_build_info', 'The running instanceha (always 1).',
            labels=['version'])
        info.add_metric([_version()], 1)
        yield info
        # The one metric with host names: only hosts in a workflow, so it
        # is bounded by the failures under way and empty when all is well.
        hosts = prom_core.GaugeMetricFamily(
            'instanceha_host_recovery_state',
            'Hosts in a recovery workflow (leader only), by state; 1 per '
            'host, gone once the host is healthy again.',
            labels=['host', 'state'])
        for host, state in sorted(mon.host_states.items()):
            hosts.add_metric([host, state], 1)
        yield hosts
        coord = mon._coordination()
        if coord is not None:
            yield prom_core.GaugeMetricFamily(
                'instanceha_coordination_backend_up',
                'Whether the coordination backend answered the last '
                'heartbeat.', value=1 if coord.connected else 0)
            if coord.members is not None:
                yield prom_core.GaugeMetricFamily(
                    'instanceha_coordination_members',
                    'Copies of the service in the coordination group.',
                    value=coord.members)
        if mon.clock_skew is not None:
            yield prom_core.GaugeMetricFamily(
                'instanceha_nova_clock_skew_seconds',
                'Seconds this machine\'s clock is ahead of Nova\'s '
                '(negative: behind), from Nova\'s Date header.',
                value=mon.clock_skew)
        yield from metrics_mod.listener_metrics(mon.listeners)


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = 'instanceha-health'
    monitor: Monitor
    metrics: metrics_mod.Metrics

    def do_GET(self):  # noqa: N802 - http.server's naming
        try:
            self._get()
        except Exception:  # noqa: answer, log, keep serving
            LOG.exception('health: %s failed', self.path)
            self._send(500, 'text/plain', b'internal error, see the log\n')

    def _get(self) -> None:
        path = self.path.split('?', 1)[0]
        if path in ('/readyz', '/healthz'):
            ready, body = self.monitor.readiness()
            self._send(200 if ready else 503, 'application/json',
                       json.dumps(body, sort_keys=True).encode() + b'\n')
        elif path == '/livez':
            alive, body = self.monitor.liveness()
            self._send(200 if alive else 503, 'application/json',
                       json.dumps(body, sort_keys=True).encode() + b'\n')
        elif path == '/metrics':
            self._send(200, exposition.CONTENT_TYPE_LATEST,
                       self.metrics.render())
        else:
            self._send(404, 'text/plain', b'not found: try /livez, /readyz '
                       b'or /metrics\n')

    def _send(self, code: int, ctype: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        LOG.debug('health: %s %s', self.address_string(), fmt % args)


class PortInUse(exceptions.ConfigurationError):
    """The health port is taken (often: another copy on this machine)."""


class HealthServer:
    """Serves /healthz and /metrics from a daemon thread."""

    def __init__(self, monitor: Monitor, metrics: metrics_mod.Metrics, *,
                 listen: str = '127.0.0.1', port: int = 9797,
                 tls: 'ssl.SSLContext | None' = None):
        handler = type('Handler', (_Handler,), {'monitor': monitor,
                                                'metrics': metrics})
        server_cls = http.server.ThreadingHTTPServer
        if ':' in listen:
            server_cls = type('Server6', (server_cls,),
                              {'address_family': socket.AF_INET6})
        try:
            self._server = server_cls((listen, port), handler)
        except OSError as exc:
            cls = (PortInUse if exc.errno == errno.EADDRINUSE
                   else exceptions.ConfigurationError)
            raise cls(
                'options [health] listen = %s, port = %d: cannot serve '
                'health there: %s' % (listen, port, exc.strerror or exc)
            ) from None
        if tls is not None:
            # The handshake happens in the request's thread, so a slow
            # client cannot hold up the others.
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True,
                do_handshake_on_connect=False)
        self.scheme = 'https' if tls is not None else 'http'
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name='health-http', daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()
        LOG.info('health: serving /livez, /readyz (/healthz) and /metrics '
                 'over %s on %s port %d', self.scheme,
                 self._server.server_address[0], self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def tls_context(conf) -> 'ssl.SSLContext | None':
    """HTTPS (and client certificates) for the endpoint, from [health]."""
    group = conf.health
    cert, key, client_ca = (group.tls_cert_file, group.tls_key_file,
                            group.tls_client_ca_file)
    if not cert and not key and not client_ca:
        return None
    if not cert or not key:
        raise exceptions.ConfigurationError(
            'options [health] tls_cert_file and tls_key_file: HTTPS needs '
            'both (only %s is set)' % ('tls_cert_file' if cert else
                                       'tls_key_file' if key else
                                       'tls_client_ca_file'))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise exceptions.ConfigurationError(
            'options [health] tls_cert_file = %s, tls_key_file = %s: '
            'cannot use them: %s' % (cert, key, exc)) from None
    if client_ca:
        try:
            ctx.load_verify_locations(client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise exceptions.ConfigurationError(
                'option [health] tls_client_ca_file = %s: cannot use it: %s'
                % (client_ca, exc)) from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def stuck_after(conf) -> float:
    value = conf.health.stuck_after
    return float(value) if value else float(max(60, 3 * conf.poll))


def attach(service) -> Callable[[], None]:
    """Wire health and metrics into a built service, explicitly.

    The metrics become one more reader of the service's event fan-out,
    the monitor one more observer of its tick loop; the HTTP server
    starts if ``[health] enabled``. Returns the function that stops it.
    """
    conf = service.engine.conf
    metrics = metrics_mod.Metrics()
    monitor = Monitor(metrics, stuck_after=stuck_after(conf),
                      coordinator=service.env.coordinator,
                      stopping=service.stop.is_set)
    monitor.max_clock_skew = conf.detection.max_clock_skew
    monitor.watch_listeners(service.engine.drivers.detectors)
    service.events.add(metrics_mod.MetricsEventSink(metrics, monitor))
    service.observers.append(monitor)
    service.health = monitor
    if service.env.pause is not None:
        metrics.registry.register(metrics_mod.PauseCollector(
            service.env.pause, skew=lambda: service.engine.pause.skew))
    checks = _capacity_check(service, metrics, monitor)

    def stop_checks() -> None:
        monitor.begin_shutdown()
        checks()

    if not conf.health.enabled:
        LOG.info('health: the HTTP endpoint is off ([health] enabled = '
                 'false)')
        return stop_checks
    try:
        server = HealthServer(monitor, metrics, listen=conf.health.listen,
                              port=conf.health.port,
                              tls=tls_context(conf))
    except PortInUse as exc:
        # Losing the endpoint must not cost the cloud its instance HA:
        # a second copy started with the same file on one machine still
        # elects, follows and takes over.
        LOG.error('health: %s; this copy runs on without /healthz and '
                  '/metrics (give each copy on a machine its own [health] '
                  'port)', exc)
        return stop_checks
    server.start()

    def stop() -> None:
        stop_checks()
        server.stop()

    return stop


def _capacity_check(service, metrics: metrics_mod.Metrics,
                    monitor: Monitor) -> Callable[[], None]:
    """Start the leader's periodic checks that are configured.

    The failover capacity (``[capacity] check_interval``) and proactive
    evacuation (``[proactive] interval``). Returns the function that
    stops them.
    """
    from instanceha.daemon import capacity

    from instanceha.daemon import proactive

    conf = service.engine.conf
    checks = []
    if conf.capacity.check_interval:
        def publish(report, short) -> None:
            metrics.set_capacity(report, short)
            monitor.capacity_short = short

        checks.append(capacity.CapacityCheck(
            conf, service.env.cloud, service.engine.drivers, service.events,
            publish, leading=monitor.leader))
    if conf.proactive.interval:
        checks.append(proactive.ProactiveCheck(
            conf, service.env, service.engine.drivers,
            leading=monitor.leader,
            held=proactive.gates_holding(service.engine),
            skew=lambda: service.engine.pause.skew))
    for check in checks:
        check.start()

    def stop() -> None:
        for check in checks:
            check.stop()
    return stop
