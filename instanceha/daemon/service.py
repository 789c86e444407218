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

"""The production service: the engine's ports wired to the real world.

This is the composition root. :func:`build` gives the engine Nova
(:mod:`instanceha.adapters.nova`), the fencing topology, the coordination
backend (:mod:`instanceha.adapters.coordination`), the wall clock, a thread pool
of ``workers`` and an event fan-out whose first reader is the log.
:func:`run` adds health and metrics explicitly (a metrics reader on the
fan-out, the health monitor as an observer of every tick), starts the
drivers and the coordinator, and runs :func:`instanceha.engine.runner.loop`
until SIGTERM or SIGINT.

The engine itself knows none of this: ``instanceha.engine`` imports
nothing from here, from ``cloud``, ``coordination`` or ``health``.
"""

from collections.abc import Callable
import dataclasses
import logging
import signal
import threading

from instanceha.adapters import clock as clock_mod
from instanceha.daemon import reloading
from instanceha.engine import events as events_mod
from instanceha.engine import executor as executor_mod
from instanceha.engine import guard
from instanceha.engine import ports
from instanceha.engine import recovery
from instanceha.engine import runner
from instanceha.engine import watchdogs as watchdogs_mod
from instanceha import exceptions

LOG = logging.getLogger(__name__)


def make_cloud(conf) -> ports.CloudPort:
    """Nova, through the one module that imports novaclient."""
    from instanceha.adapters import nova
    return nova.NovaCloud(conf)


def make_fencer(conf, clock: ports.Clock | None = None,
                watchdogs: watchdogs_mod.WatchdogWatch | None = None
                ) -> ports.Fencer:
    """The fencing topology; ``watchdogs`` for its watchdog levels."""
    from instanceha.plugins.fencing import devices
    from instanceha.plugins.fencing import topology
    return topology.Topology.from_conf(
        conf, clock=clock, devices=devices.DeviceFactory(clock, watchdogs))


def make_notifications(conf):
    """The notifier dispatcher: a thread and queue per remote driver."""
    from instanceha.plugins.notifiers import dispatcher
    return dispatcher.from_conf(conf)


def make_listeners() -> ports.ListenerFactory:
    """UDP sockets, for the detectors that listen to the hosts."""
    from instanceha.heartbeat import listener
    return listener.UdpListeners()


def make_coordinator(conf) -> ports.Coordinator:
    from instanceha.adapters import coordination
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


def make_pause(conf) -> ports.PauseSource | None:
    """The operator's pause, kept in the coordination backend."""
    from instanceha.adapters import pause_store
    try:
        return pause_store.from_conf(conf)
    except exceptions.ConfigurationError:
        # Start-up's preflight warned already, as config validate does.
        return None


@dataclasses.dataclass
class Service:
    """What :func:`build` made; tests and the health endpoint look at it."""

    engine: recovery.Engine
    env: ports.Environment
    executor: executor_mod.ThreadPoolExecutor
    stop: threading.Event
    #: The engine's event sink: add readers here (metrics, notifiers).
    events: events_mod.FanOutEventSink = dataclasses.field(
        default_factory=events_mod.FanOutEventSink)
    #: Told about every tick of the loop (the health monitor).
    observers: list[runner.TickObserver] = dataclasses.field(
        default_factory=list)
    #: The health monitor, once :func:`instanceha.daemon.health.attach` ran.
    health: object | None = None
    #: The notifier dispatcher (``[notifications] drivers``) when build()
    #: chose the engine's first reader itself.
    notifications: object | None = None
    #: The shutdown policy's handler (with the heartbeat detector).
    shutdown: object | None = None
    #: What the leading copy answers the agents (with the detector).
    hostside: object | None = None


def build(conf, drivers, *, cloud=None, fencer=None, coordinator=None,
          event_sink=None, clock=None, pause=None) -> Service:
    """Build the production environment and engine (parts replaceable).

    :param event_sink: the first reader of the engine's events (default:
        the notifiers of ``[notifications] drivers``, by default the log);
        more are added with ``service.events.add()``.
    """
    notifications = None if event_sink else make_notifications(conf)
    executor = executor_mod.ThreadPoolExecutor(conf.workers)
    clock = clock or clock_mod.SystemClock()
    fan_out = events_mod.FanOutEventSink(event_sink or notifications)
    from instanceha.daemon import shutdown_handler as shutdown
    heartbeat = shutdown.find_detector(drivers)
    env = guard.assemble(
        cloud=cloud or make_cloud(conf),
        clock=clock,
        fencer=fencer or make_fencer(conf, clock, heartbeat),
        coordinator=coordinator or make_coordinator(conf),
        events=fan_out,
        executor=executor,
        kdump=make_kdump(conf, drivers),
        listeners=make_listeners(),
        pause=pause or make_pause(conf),
        announcements=heartbeat)
    for det in drivers.detectors:
        det.listeners = env.listeners
    engine = recovery.Engine(conf, drivers, env)
    built = Service(engine=engine, env=env, executor=executor,
                    stop=threading.Event(), events=fan_out,
                    notifications=notifications)
    if heartbeat is not None:
        # Announced shutdowns: freeze, drain and enable after each tick.
        built.shutdown = shutdown.ShutdownHandler(conf, engine, heartbeat)
        built.observers.append(built.shutdown)
        # Answers to the agents: isolation policy, pause (the host's side).
        from instanceha.daemon import hostside
        built.hostside = hostside.HostSide(conf, engine, heartbeat)
        built.observers.append(built.hostside)
    return built


def _start(obj) -> None:
    start = getattr(obj, 'start', None)
    if callable(start):
        start()


def _stopper(obj) -> Callable[[], None]:
    stop = getattr(obj, 'stop', None)
    return stop if callable(stop) else (lambda: None)


def loop(service: Service, conf) -> None:
    """Tick the engine until ``service.stop`` is set, observed."""
    runner.loop(service.engine, service.stop, interval=conf.tick_interval,
                shutdown_timeout=conf.shutdown_timeout,
                observers=service.observers,
                wake=service.executor.finished)


def run(conf, drivers, *, with_health: bool = True, **parts) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit code.

    :param with_health: serve /healthz and /metrics (per ``[health]``).
    """
    service = build(conf, drivers, **parts)
    stoppers: list[tuple[Callable[[], None], str]] = []

    def on_signal(signum, _frame):
        LOG.info('received signal %d: stopping', signum)
        service.stop.set()
        service.executor.finished.set()  # the loop waits on it: stop now

    # What SIGHUP re-reads besides the options: the fencing file, the
    # heartbeat keys.
    reloader = reloading.Reloader(
        conf, parts=[service.env.fencer, *drivers.all()],
        events=service.events)
    service.observers.append(reloader)

    def on_hangup(_signum, _frame):
        reloader.request()

    old = {sig: signal.signal(sig, on_signal)
           for sig in (signal.SIGTERM, signal.SIGINT)}
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    try:
        for drv in drivers.all():
            _start(drv)
            stoppers.append((_stopper(drv), 'driver %s' % drv.name))
        _start(service.env.coordinator)
        stoppers.append((_stopper(service.env.coordinator), 'coordination'))
        if service.notifications is not None:
            service.notifications.start()
            stoppers.append((service.notifications.stop, 'notifications'))
        if with_health:
            from instanceha.daemon import health
            stoppers.append((health.attach(service), 'health'))
            if service.notifications is not None:
                service.health.metrics.registry.register(
                    service.notifications)
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
