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

"""The service loop: build the production environment, tick the engine.

``run()`` wires the engine's ports to the real world (Nova through
:mod:`instanceha.cloud.nova`, fencing through the fencing topology,
leadership through :mod:`instanceha.coordination`, the wall clock, a
thread pool of ``workers``, log lines as events), then calls
``Engine.tick()`` every ``tick_interval`` seconds until SIGTERM or
SIGINT. Stopping is clean: no new work is started, running jobs get
``shutdown_timeout`` seconds, nothing is marked FAILED, and the next start
resumes from the markers in Nova.
"""

from collections.abc import Callable
import dataclasses
import logging
import signal
import threading

from instanceha import clock as clock_mod
from instanceha.engine import events as events_mod
from instanceha.engine import executor as executor_mod
from instanceha.engine import ports
from instanceha.engine import recovery
from instanceha import exceptions

LOG = logging.getLogger(__name__)


def make_cloud(conf) -> ports.CloudPort:
    """Nova, through the one module that imports novaclient."""
    from instanceha.cloud import nova
    cls = getattr(nova, 'NovaCloud')
    if hasattr(cls, 'from_conf'):
        return cls.from_conf(conf)
    return cls(conf)


def make_fencer(conf, clock: ports.Clock | None = None) -> ports.Fencer:
    from instanceha.plugins.fencing import topology
    return topology.Topology.from_conf(conf, clock=clock)


def make_listeners() -> ports.ListenerFactory:
    """UDP sockets, for the detectors that listen to the hosts."""
    from instanceha.heartbeat import listener
    return listener.UdpListeners()


def make_coordinator(conf) -> ports.Coordinator:
    from instanceha import coordination
    return coordination.ToozCoordinator.from_conf(conf)


def make_kdump(conf, drivers) -> ports.KdumpWatch | None:
    try:
        if not conf.kdump.check_kdump:
            return None
    except Exception:  # noqa: the [kdump] group is optional
        return None
    from instanceha.plugins.detectors import kdump
    watch = kdump.find_watch(drivers.detectors)
    if watch is None:
        raise exceptions.ConfigurationError(
            'option [kdump] check_kdump = true needs "kdump" in '
            '[detection] detectors')
    return watch


@dataclasses.dataclass
class Service:
    """What run() built; tests and the health endpoint may look at it."""

    engine: recovery.Engine
    env: ports.Environment
    executor: executor_mod.ThreadPoolExecutor
    stop: threading.Event


#: Called with the Service once it is built (health/metrics plug in here).
STARTUP_HOOKS: list[Callable[[Service], Callable[[], None] | None]] = []


def build(conf, drivers, *, cloud=None, fencer=None, coordinator=None,
          event_sink=None, clock=None) -> Service:
    """Build the production environment and engine (parts replaceable)."""
    executor = executor_mod.ThreadPoolExecutor(conf.workers)
    clock = clock or clock_mod.SystemClock()
    env = ports.Environment(
        cloud=cloud or make_cloud(conf),
        clock=clock,
        fencer=fencer or make_fencer(conf, clock),
        coordinator=coordinator or make_coordinator(conf),
        events=event_sink or events_mod.LogEventSink(),
        executor=executor,
        kdump=make_kdump(conf, drivers),
        listeners=make_listeners())
    for det in drivers.detectors:
        det.listeners = env.listeners
    engine = recovery.Engine(conf, drivers, env)
    return Service(engine=engine, env=env, executor=executor,
                   stop=threading.Event())


def _start(obj) -> None:
    start = getattr(obj, 'start', None)
    if callable(start):
        start()


def _stopper(obj) -> Callable[[], None]:
    stop = getattr(obj, 'stop', None)
    return stop if callable(stop) else (lambda: None)


def loop(service: Service, conf) -> None:
    """Tick until ``service.stop`` is set; then shut the engine down."""
    engine = service.engine
    interval = conf.tick_interval
    while not service.stop.is_set():
        try:
            engine.tick()
        except exceptions.InstanceHAError as exc:
            LOG.error('engine tick failed: %s', exc)
        except Exception:
            LOG.exception('engine tick failed unexpectedly')
        service.stop.wait(interval)
    LOG.info('stopping: letting running steps finish (at most %d s)',
             conf.shutdown_timeout)
    engine.shutdown(conf.shutdown_timeout)


def run(conf, drivers, **parts) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit code."""
    service = build(conf, drivers, **parts)
    stoppers: list[tuple[Callable[[], None], str]] = []

    def on_signal(signum, _frame):
        LOG.info('received signal %d: stopping', signum)
        service.stop.set()

    old = {sig: signal.signal(sig, on_signal)
           for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for drv in drivers.all():
            _start(drv)
            stoppers.append((_stopper(drv), 'driver %s' % drv.name))
        _start(service.env.coordinator)
        stoppers.append((_stopper(service.env.coordinator), 'coordination'))
        for hook in STARTUP_HOOKS:
            stop = hook(service)
            if stop is not None:
                stoppers.append((stop, 'hook %r' % hook))
        LOG.info('instanceha-service running: poll every %d s, %d worker(s)',
                 conf.poll, conf.workers)
        loop(service, conf)
    finally:
        for stop, what in reversed(stoppers):
            try:
                stop()
            except Exception as exc:  # noqa: best effort on the way out
                LOG.warning('stopping %s: %s', what, exc)
        service.executor.shutdown(wait=False)
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return 0
