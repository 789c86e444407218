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

"""Run the real engine against a scenario, in simulated time.

Each copy of the service is the production engine with the production
drivers (detectors, filters, gates, fencing topology, reservation and
evacuation strategies) loaded from the scenario's configuration file;
only the ports are simulated: cloud, clock, executor, coordinator, event
sink, kdump watch, the listeners the detectors hear hosts through, and
the fencing devices (a device factory handed to the production fencing
topology builds ``driver: sim`` devices on the world, every device on
the simulated clock). No module is replaced and no global names the
world. Time jumps from one thing that happens to the next (a timeline
command, a world event, a job finishing, a poll), so an hour of outage
runs in milliseconds and every run is identical.

What each timeline command does is in :mod:`instanceha.sim.timeline`.
"""

from collections.abc import Callable
import dataclasses
import importlib
import os
import time as _time

from oslo_config import cfg

from instanceha import conf as ha_conf
from instanceha.daemon import hostside as daemon_hostside
from instanceha.daemon import reloading
from instanceha.daemon import shutdown_handler as sim_shutdown
from instanceha.engine import guard
from instanceha.engine import pause as pause_mod
from instanceha.engine import ports
from instanceha.engine import watchdogs as watchdogs_mod
from instanceha import exceptions
from instanceha.ops import maintenance
from instanceha.plugins import loader
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import coordinator as sim_coord
from instanceha.sim import events as sim_events
from instanceha.sim import executor as sim_executor
from instanceha.sim import fencing as sim_fencing
from instanceha.sim import listeners as sim_listeners
from instanceha.sim import proactive as sim_proactive
from instanceha.sim import scenario as sim_scenario
from instanceha.sim import timeline as sim_timeline
from instanceha.sim import world as sim_world


def engine_class() -> type:
    """The production engine class (wherever the engine package keeps it)."""
    errors = []
    for name in ('instanceha.engine.recovery', 'instanceha.engine.engine'):
        try:
            mod = importlib.import_module(name)
        except ImportError as exc:
            errors.append('%s: %s' % (name, exc))
            continue
        if hasattr(mod, 'Engine'):
            return mod.Engine
    raise exceptions.InstanceHAError(
        'the engine is not available: %s' % '; '.join(errors))


class GateSpy:
    """Wraps a gate to learn which hosts it blocked this cycle.

    The invariant "no action while a gate blocks" is checked against
    what the gates actually said, not against what the engine logged.
    """

    def __init__(self, gate, copy: 'Copy'):
        self._gate = gate
        self._copy = copy

    def check(self, ctx, *args, **kwargs):
        verdict = self._gate.check(ctx, *args, **kwargs)
        candidates = frozenset(getattr(ctx, 'candidates', ()) or ())
        if verdict.block_all:
            self._copy.blocked.update(candidates)
        self._copy.blocked.update(h for h in verdict.blocked_hosts
                                  if not candidates or h in candidates)
        return verdict

    def __getattr__(self, name):
        return getattr(self._gate, name)


class _CycleCloud:
    """The cloud as one copy sees it: each snapshot starts a new cycle."""

    def __init__(self, cloud: sim_cloud.SimCloud,
                 on_cycle: Callable[[], None], calls: list[int]):
        self._cloud = cloud
        self._on_cycle = on_cycle
        #: Nova calls of each snapshot (benchmarks).
        self.snapshot_calls = calls

    def snapshot(self, **kwargs):
        self._on_cycle()
        before = self._cloud.api_calls
        try:
            return self._cloud.snapshot(**kwargs)
        finally:
            self.snapshot_calls.append(self._cloud.api_calls - before)

    def __getattr__(self, name):
        return getattr(self._cloud, name)


@dataclasses.dataclass
class Copy:
    """One copy of the service."""

    name: str
    executor: sim_executor.SimExecutor
    engine: object = None
    conf: cfg.ConfigOpts | None = None
    next_tick: float = 0.0
    interval: float = 45.0
    #: Hosts the gates blocked in this copy's latest cycle.
    blocked: set = dataclasses.field(default_factory=set)
    #: host -> decision in this copy's latest plan, as logged.
    decisions: dict = dataclasses.field(default_factory=dict)
    cycled: bool = False
    #: SIGHUP's reloader of this copy (the ``reload`` timeline command).
    reloader: object = None
    #: The shutdown policy's handler (with the heartbeat detector).
    shutdown: object = None
    #: Its proactive rounds (instanceha.sim.proactive), when on.
    proactive: object = None
    #: What the copy answers the agents (instanceha.daemon.hostside), in
    #: a world whose agents have a host side.
    hostside: object = None

    def new_cycle(self) -> None:
        self.blocked.clear()
        self.cycled = True

    @property
    def running(self) -> bool:
        return self.engine is not None


class SimPauseStore(ports.PauseSource):
    """The pause as the coordination backend keeps it, shared by copies."""

    def __init__(self):
        self.pause: pause_mod.Pause | None = None

    def current(self) -> pause_mod.Pause | None:
        return self.pause


class Simulation(sim_timeline.Timeline):
    """One run of one scenario."""

    def __init__(self, sc: sim_scenario.Scenario,
                 engine_factory: Callable | None = None,
                 fencer_factory: Callable | None = None):
        self.scenario = sc
        self.clock = sim_clock.SimClock()
        self.log = sim_events.EventLog(self.clock)
        self.log.aliases[sc.path + os.sep] = ''
        self.world = sim_scenario.build_world(sc, self.clock, self.log)
        self.cloud = sim_cloud.SimCloud(self.world)
        settings = sc.settings
        self.end = float(settings.get('end', 900))
        self.election = sim_coord.Election(
            self.clock, float(settings.get('lease', 15)))
        self.overrides: list[tuple[str | None, str, str]] = []
        self._engine_factory = engine_factory
        self._fencer_factory = fencer_factory or self.make_fencer
        names = settings.get('copies') or ['ha']
        self.copies = {n: Copy(n, self._executor(n)) for n in names}
        self.autostart = settings.get('start', list(names))
        self.multi = len(names) > 1
        self.world.is_leader = lambda actor: (
            self.election.leader() == actor)
        self._leader: str | None = None
        #: Nova calls made by each snapshot.
        self.snapshot_calls: list[int] = []
        #: Wall and CPU seconds, Nova calls of each polling tick.
        self.tick_stats: list[tuple[float, float, int]] = []
        #: Whether :attr:`tick_stats` is kept (reading the process's CPU
        #: time twice a tick costs a run that does not look at it much).
        self.measure_ticks = True
        self.readonly: set[str] = set()
        #: Runs the operator's commands (maintenance) in simulated time,
        #: acting as nobody's copy of the service.
        self.operator = sim_executor.SimExecutor(
            self.clock, on_start=lambda: setattr(self.world, 'actor', None))
        #: The pause every copy reads (the coordination backend's).
        self.pause_store = SimPauseStore()
        #: Runs the hosts' agents' isolation responses in simulated time.
        self.agents = sim_executor.SimExecutor(
            self.clock, workers=1000,
            on_start=lambda: setattr(self.world, 'actor', None))
        sides = self._sides()
        if sides is not None:
            sides.spawn = self.agents.submit
        if settings.get('wire'):
            self._wire()

    def _wire(self) -> None:
        """Heartbeats through the real protocol (instanceha.sim.wire)."""
        from instanceha.heartbeat import keys
        from instanceha.sim import wire
        if self.world.watchdogs is None:
            raise sim_world.ScenarioError(
                '%s: simulation wire: true needs hosts with a simulated '
                'agent (watchdog: or isolation:)' % self.scenario.name)
        group = self.make_conf().heartbeat
        try:
            master = keys.load_key(group.key_file)
        except (OSError, TypeError, ValueError) as exc:
            raise sim_world.ScenarioError('%s: wire: [heartbeat] key_file: '
                                          '%s' % (self.scenario.name, exc))
        self.world.wire = wire.Wire(self.world, master, group.key_mode)

    def _sides(self):
        """The world's agents' host sides (instanceha.sim.hostside)."""
        dogs = self.world.watchdogs
        return None if dogs is None else dogs.sides

    # --- copies of the service -----------------------------------------

    def _executor(self, name: str) -> sim_executor.SimExecutor:
        def on_start():
            self.world.actor = name
        return sim_executor.SimExecutor(self.clock, on_start=on_start)

    def make_conf(self) -> cfg.ConfigOpts:
        sc = self.scenario
        conf = cfg.ConfigOpts()
        ha_conf.register_opts(conf)
        try:
            conf(['--config-file', sc.config_file], project='instanceha',
                 default_config_files=[])
        except (cfg.Error, ValueError) as exc:
            raise exceptions.ConfigurationError(
                '%s: %s' % (sc.config_file, exc)) from None
        for group, name in sim_scenario.RELATIVE_PATHS:
            try:
                value = conf[group][name]
            except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
                continue
            if isinstance(value, list):
                fixed = [v if os.path.isabs(v) or '://' in v
                         else os.path.join(sc.path, v) for v in value]
                if fixed != value:
                    conf.set_override(name, fixed, group)
            elif value and not os.path.isabs(value):
                conf.set_override(name, os.path.join(sc.path, value), group)
        for group, name, value in self.overrides:
            conf.set_override(name, value, group)
        ha_conf.validate(conf)
        return conf

    def start(self, name: str) -> None:
        copy = self.copies[name]
        if copy.running:
            return
        conf = self.make_conf()
        drivers = loader.load_configured(conf)
        listeners = sim_listeners.SimListeners(self.world, name)
        for det in drivers.detectors:
            det.listeners = listeners
        for drv in drivers.all():
            # As the service does: detectors ask for their listeners.
            drv.start()
        kdump = self._kdump_watch(drivers, conf)
        copy.blocked = self.world.blocked.setdefault(name, set())
        copy.decisions = {}
        drivers.gates = [GateSpy(g, copy) for g in drivers.gates]
        copy.executor = self._executor(name)
        copy.executor.workers = conf.workers
        clock = self._service_clock()
        heartbeat = sim_shutdown.find_detector(drivers)
        env = guard.assemble(
            cloud=_CycleCloud(self.cloud, copy.new_cycle,
                              self.snapshot_calls),
            clock=clock,
            fencer=self._fencer_factory(conf, clock, watchdogs=heartbeat),
            coordinator=sim_coord.SimCoordinator(self.election, name),
            events=sim_events.RecordingSink(self.log, name),
            executor=copy.executor, kdump=kdump, listeners=listeners,
            pause=self.pause_store,
            announcements=heartbeat)
        self.world.actor = name
        factory = self._engine_factory or engine_class()
        try:
            copy.engine = factory(conf, drivers, env,
                                  planner=self._planner(copy, drivers, conf))
        except TypeError:
            copy.engine = factory(conf, drivers, env)
        copy.conf = conf
        copy.reloader = reloading.Reloader(
            conf, parts=[env.fencer, *drivers.all()], events=env.events)
        copy.shutdown = copy.hostside = None
        if heartbeat is not None and self._sides() is not None:
            # As the service wires it: what the copy answers the agents.
            copy.hostside = daemon_hostside.HostSide(
                conf, copy.engine, heartbeat, cloud=self.cloud)
            self.world.recovery_filters = [
                f for f in drivers.filters if not f.out_of_scope]
        if env.announcements is not None and hasattr(copy.engine, 'env'):
            copy.shutdown = sim_shutdown.ShutdownHandler(
                conf, copy.engine, env.announcements,
                run_all=maintenance.serial_map)
        copy.proactive = sim_proactive.for_copy(
            conf, env, drivers, self._executor(name), self.clock.world_t,
            copy.engine)
        copy.interval = float(self.scenario.settings.get(
            'tick', conf.tick_interval))
        copy.next_tick = self.clock.world_t
        if conf.disabled:
            self.readonly.add(name)
        else:
            self.readonly.discard(name)
        self.election.join(name)

    def make_fencer(self, conf: cfg.ConfigOpts, clock: ports.Clock,
                    watchdogs: watchdogs_mod.WatchdogWatch | None = None
                    ) -> ports.Fencer:
        """The production fencing topology, with the world's devices.

        Every device and the topology run on ``clock``, the copy's own;
        its watchdog levels read ``watchdogs`` (the copy's heartbeat
        detector, whose listener hears the world's agents).
        """
        from instanceha.plugins.fencing import topology
        return topology.Topology.from_conf(
            conf, clock=clock, devices=sim_fencing.SimDeviceFactory(
                self.world, clock, watchdogs))

    def _service_clock(self) -> ports.Clock:
        """The clock of a copy of the service (the world's, skewed)."""
        return sim_clock.ServiceClock(self.clock,
                                      lambda: self.world.clock_skew)

    def _kdump_watch(self, drivers, conf) -> ports.KdumpWatch | None:
        """The engine's KdumpWatch, as the service picks it.

        Like the service, the kdump detector is the watch when
        ``[kdump] check_kdump`` is on; without that detector the world
        answers directly.
        """
        from instanceha.plugins.detectors import kdump
        try:
            check = conf.kdump.check_kdump
        except cfg.NoSuchOptError:
            check = False
        if not check:
            return None
        return kdump.find_watch(drivers.detectors) or \
            sim_listeners.SimKdumpWatch(self.world)

    def stop(self, name: str, crashed: bool = False) -> None:
        copy = self.copies[name]
        if not copy.running:
            return
        if copy.proactive is not None:
            # (Its round stops with the copy, as the service's thread.)
            copy.proactive.executor.abandon()
            copy.proactive = None
        if crashed:
            copy.executor.abandon()
        else:
            self.world.actor = name
            copy.engine.shutdown(copy.conf.shutdown_timeout)
        copy.engine = copy.hostside = None
        self.election.leave(name, crashed=crashed)

    def _tick(self, copy: Copy) -> None:
        self.world.actor = copy.name
        copy.cycled = False
        if not self.measure_ticks:
            self._tick_once(copy)
            return
        calls = self.cloud.api_calls
        wall, cpu = _time.perf_counter(), _time.process_time()
        self._tick_once(copy)
        if copy.cycled:
            self.tick_stats.append((_time.perf_counter() - wall,
                                    _time.process_time() - cpu,
                                    self.cloud.api_calls - calls))

    @staticmethod
    def _tick_once(copy: Copy) -> None:
        copy.engine.tick()
        if copy.shutdown is not None:
            copy.shutdown.step()
        if copy.hostside is not None:
            copy.hostside.step()

    def _planner(self, copy: Copy, drivers, conf) -> Callable:
        """The engine's default planner, telling the log what it decided.

        The engine logs its plan at debug level only; the story needs the
        decisions that lead to no action (ignored, blocked, isolated,
        disputed) as much as those that do. A host is mentioned when its
        decision changes (healthy hosts only when they stop or start being
        healthy).
        """
        from instanceha.engine import decide

        def plan(snapshot, now, recovering):
            result = decide.make_plan(snapshot, drivers, conf, now,
                                      recovering=recovering,
                                      submit=copy.executor.submit)
            seen = {}
            for d in result.decisions:
                decision = getattr(d.decision, 'value', d.decision)
                seen[d.host] = decision
                if decision == copy.decisions.get(d.host, 'healthy'):
                    continue
                details = {}
                if decision != 'healthy':
                    details['reasons'] = '; '.join(d.reasons)
                self.log.record('plan', decision, d.host, **details)
            copy.decisions = seen
            return result
        return plan

    # --- the loop ----------------------------------------------------------

    def _next_time(self, cmds: list) -> float | None:
        times = [self.world.next_event(), self.election.next_change(),
                 self.operator.next_due(), self.agents.next_due()]
        if cmds:
            times.append(cmds[0].t)
        for copy in self.copies.values():
            times.append(copy.executor.next_due())
            if copy.running:
                times.append(copy.next_tick)
            if copy.proactive is not None:
                times += [copy.proactive.next_due(),
                          copy.proactive.executor.next_due()]
        times = [t for t in times if t is not None]
        return min(times) if times else None

    def _note_leader(self) -> None:
        leader = self.election.leader()
        if self.multi and leader != self._leader:
            self.log.record('coord', 'leader', None, copy=leader or 'none')
        self._leader = leader

    def _check_readonly(self, fn):
        def check(actor):
            if actor in self.readonly:
                self.world.violate('action by %s while [DEFAULT] disabled '
                                   '= true' % actor)
            return fn(actor)
        return check

    def _sleep(self, seconds: float) -> None:
        """Let the world move while someone sleeps outside a job.

        A stopping engine waits for its running jobs that way; they can
        only finish if simulated time moves on.
        """
        self.clock.advance_to(self.clock.world_t + seconds)
        self.world.run_due()
        for executor in self._executors():
            executor.complete_due()

    def _executors(self) -> list[sim_executor.SimExecutor]:
        return [self.operator, *(c.executor for c in self.copies.values()),
                *(c.proactive.executor for c in self.copies.values()
                  if c.proactive is not None), self.agents]

    def run(self, stop_when: Callable[[], bool] | None = None) -> 'Result':
        """Run to the end of the scenario (or until ``stop_when()``)."""
        self.clock.on_sleep = self._sleep
        self._initial = {s.id: (s.host, s.status)
                         for s in self.world.servers.values()}
        self.world.is_leader = self._check_readonly(self.world.is_leader)
        self.log.record('sim', 'start', None,
                        hosts=len(self.world.hosts),
                        instances=len(self.world.servers))
        for name in self.autostart:
            self.start(name)
        cmds = list(self.scenario.timeline)
        while True:
            t = self._next_time(cmds)
            if t is None or t > self.end:
                break
            # A copy stopping mid-job waits in simulated time (see
            # _sleep): what fell due meanwhile runs now, late.
            t = max(t, self.clock.world_t)
            self.clock.advance_to(t)
            self.world.run_due()
            while cmds and cmds[0].t <= t:
                cmd = cmds.pop(0)
                try:
                    self.run_command(cmd)
                except sim_world.ScenarioError as exc:
                    raise sim_world.ScenarioError(
                        '%s: timeline line %d: %s' % (
                            self.scenario.name, cmd.line, exc)) from None
                if self.end < t:
                    break
            self._note_leader()
            self.operator.complete_due()
            self.agents.complete_due()
            for copy in self.copies.values():
                self.world.actor = copy.name
                copy.executor.complete_due()
                if copy.proactive is not None:
                    copy.proactive.executor.complete_due()
            for copy in self.copies.values():
                if copy.running and copy.next_tick <= t:
                    copy.next_tick = t + copy.interval
                    self._tick(copy)
                if copy.proactive is not None:
                    self.world.actor = copy.name
                    copy.proactive.step(t)
            if stop_when is not None and stop_when():
                self.end = t
                break
        self.clock.advance_to(max(self.end, self.clock.world_t))
        self._final()
        for executor in self._executors():
            # Unwind jobs still sleeping, so that no thread is left.
            executor.abandon()
        return Result(self)

    def _final(self) -> None:
        w = self.world
        states = {}
        for copy in self.copies.values():
            if copy.running and hasattr(copy.engine, 'host_states'):
                states.update({h: getattr(s, 'value', s) for h, s in
                               copy.engine.host_states().items()})
        for h in sorted(w.hosts.values(), key=lambda h: h.name):
            svc = w.service_model(h)
            details = dict(status=svc.status, state=svc.state,
                           forced_down=svc.forced_down,
                           power='on' if h.powered else 'off')
            if svc.disabled_reason:
                details['reason'] = svc.disabled_reason
            if h.name in states:
                details['engine'] = states[h.name]
            self.log.record('final', 'host', h.name, **details)
        for srv in sorted(w.servers.values(), key=lambda s: s.name):
            details = dict(server=srv.name, status=srv.status,
                           task_state=srv.task_state or '-',
                           locked=srv.locked)
            before = self._initial.get(srv.id)
            if before and before != (srv.host, srv.status):
                details['was'] = '%s@%s' % (before[1], before[0])
            self.log.record('final', 'instance', srv.host, **details)
        self.log.record('final', 'invariants', None,
                        violations=len(w.violations))


@dataclasses.dataclass
class Result:
    sim: Simulation

    @property
    def lines(self) -> list[str]:
        return self.sim.log.lines()

    @property
    def violations(self) -> list[str]:
        return self.sim.world.violations


def run_scenario(path: str, **kwargs) -> Result:
    return Simulation(sim_scenario.load(path), **kwargs).run()
