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

"""The recovery unit tests' rig: the engine on the simulator's cloud.

There is one model of Nova in the tests, the simulator's
(:class:`instanceha.sim.world.World` behind its ``SimCloud``). The rig
runs it on a settable simulated clock with quick timings (a rebuild takes
about a tick, a dead host's service is down at once) and adds the
handles the unit tests need: which calls were made, rebuilds and
evacuate calls that fail on command, hosts that die and come back. The
real thing is exercised by tests/functional/test_recovery*.
"""

import collections.abc
import contextlib
import dataclasses
import datetime
import itertools


from instanceha.engine import events
from instanceha.engine import executor
from instanceha.engine import guard
from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import states
from instanceha import exceptions
from instanceha.plugins import loader
from instanceha.sim import clock as sim_clock
from instanceha.sim import cloud as sim_cloud
from instanceha.sim import events as sim_events
from instanceha.sim import listeners as sim_listeners
from instanceha.sim import world as sim_world
from tests import conf_fixture

T0 = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc)

#: The unit tests' world: a rebuild takes a tick, a host boots at once,
#: a crash-dumping host sends a fence_kdump message every second,
#: heartbeats are (nearly) continuous and a silent service is down at
#: once (unless a test sets ``cloud.down_time``).
TIMING = dict(report_interval=0.001, service_down_time=0.002, boot_time=0.0,
              schedule_time=0.0, rebuild_time=1.0, kdump_interval=1.0)


class FakeClock(sim_clock.SimClock):
    """The simulator's clock, which a test may set (``clock.t += 1``).

    Moving it lets the world catch up (rebuilds finish, hosts boot).
    """

    def __init__(self):
        super().__init__(T0)
        self.on_advance = None

    @property
    def t(self) -> float:
        return self._t

    @t.setter
    def t(self, value: float) -> None:
        self.advance_to(value)
        if self.on_advance is not None:
            self.on_advance()

    world_t = t

    def sleep(self, seconds):
        self.t = self._t + max(seconds, 0)


class _View(collections.abc.Mapping):
    """A mapping computed by ``get`` over ``keys()`` (``put``, ``drop``)."""

    def __init__(self, keys, get, put=None, drop=None):
        self._keys, self._get = keys, get
        self._put, self._drop = put, drop

    def __getitem__(self, key):
        if key not in self._keys():
            raise KeyError(key)
        return self._get(key)

    def __setitem__(self, key, value):
        self._put(key, value)

    def __delitem__(self, key):
        self._drop(key)

    def __iter__(self):
        return iter(sorted(self._keys()))

    def __len__(self):
        return len(self._keys())


class FakeCloud(sim_cloud.SimCloud):
    """The simulator's Nova with hosts host1..hostN and test handles.

    ``services`` and ``servers`` show what Nova would say now; assigning
    a ``model.Service`` to ``services[host]`` sets that service's status,
    reason and forced_down as an operator (or another tool) would.
    """

    def __init__(self, clock: FakeClock, hosts=3):
        self.clock = clock
        world = sim_world.World(clock, sim_events.EventLog(clock),
                                sim_world.Timing(**TIMING))
        world.verbose_nova = False
        world.flavors['m1'] = sim_world.Flavor('m1')
        super().__init__(world)
        clock.on_advance = world.run_due
        for i in range(1, hosts + 1):
            self.add_host('host%d' % i)
        self.calls: list[tuple] = []
        #: server id -> evacuate calls Nova refuses (409) from now on.
        self.refuse: dict[str, int] = {}
        #: All records with one time stamp, listed oldest first: what
        #: Nova's second-precision created_at can look like.
        self.same_second = False
        self._ids = itertools.count(1)

    # -- seeding -------------------------------------------------------------
    def add_host(self, host, *, status=model.ENABLED, disabled_reason=None,
                 up=True, zone='nova'):
        self.world.add_host(sim_world.Host(
            name=host, id='svc-%s' % host, zone=zone, status=status,
            disabled_reason=disabled_reason))
        if not up:
            self.kill(host)

    def boot(self, host, n=1, status='ACTIVE', prefix=None, metadata=None):
        out = []
        for _ in range(n):
            i = next(self._ids)
            sid = '%s-%03d' % (prefix or 'vm', i)
            self.world.add_server(sim_world.Server(
                id=sid, name=sid, host=host, status=status, flavor='m1',
                image_id='img', metadata=dict(metadata or {})))
            out.append(sid)
        return out

    def kill(self, host):
        """The host died after its last heartbeat, a second ago.

        Powered, but nothing runs: no heartbeats, its guests are gone.
        """
        h = self.world.host(host)
        self.world.crash(host)
        h.last_hb = min(h.last_hb, self.clock.t - 1)

    def power_off(self, host):
        self.world.set_power(host, False)
        self.world.confirm_fenced(host)

    def revive(self, host):
        """The host (re)starts at once and reports up.

        Its compute cleans up evacuated guests on the way (their records
        become ``completed``).
        """
        self.world.set_power(host, False)
        self.world.set_power(host, True)
        self.world.run_due()

    @property
    def down_time(self) -> float:
        """Like Nova's service_down_time.

        A dead host still shows 'up' (with its last heartbeat) this long.
        """
        return self.world.timing.service_down_time

    @down_time.setter
    def down_time(self, seconds: float) -> None:
        self.world.timing.service_down_time = seconds + TIMING[
            'service_down_time']

    def fail_rebuild(self, server_id, times=1, dest=None):
        """The next ``times`` rebuilds of ``server_id`` fail (None: all)."""
        self.world.rebuild_failures.append(
            sim_world.RebuildFailure(server_id, dest, times))

    def scheduler_finds_nothing(self):
        self.world._pick = lambda srv, mig: None

    @property
    def services(self):
        w = self.world
        return _View(lambda: w.hosts.keys() - w.deleted_services,
                     lambda h: w.service_model(w.hosts[h]), self._set_service,
                     w.deleted_services.add)

    def _set_service(self, host, svc: model.Service):
        h = self.world.hosts[host]
        h.status, h.disabled_reason = svc.status, svc.disabled_reason
        h.forced_down, h.zone = svc.forced_down, svc.zone

    @property
    def servers(self):
        w = self.world
        return _View(lambda: w.servers.keys(),
                     lambda s: w.server_model(w.servers[s]))

    @property
    def migs(self) -> list[model.Migration]:
        return self._migrations()

    @property
    def aggregates(self):
        return list(self.world.aggregates.values())

    @aggregates.setter
    def aggregates(self, aggregates):
        self.world.aggregates = {a.name: a for a in aggregates}

    # -- CloudPort, recorded -------------------------------------------------
    def update_service(self, service, *, status=None, disabled_reason=None,
                       forced_down=None):
        self.calls.append(('update_service', service.host, status,
                           disabled_reason, forced_down))
        return super().update_service(
            service, status=status, disabled_reason=disabled_reason,
            forced_down=forced_down)

    def evacuate(self, server_id, *, host=None):
        self.calls.append(('evacuate', server_id, host))
        if self.refuse.get(server_id):
            self.refuse[server_id] -= 1
            raise exceptions.CloudError('refused', status=409)
        super().evacuate(server_id, host=host)

    def migrations(self, **kwargs):
        out = super().migrations(**kwargs)
        if self.same_second:
            out = [dataclasses.replace(m, created_at=T0) for m in out[::-1]]
        return out

    def set_server_lock(self, server_id, locked, reason=None):
        self.calls.append(('lock' if locked else 'unlock', server_id))
        super().set_server_lock(server_id, locked, reason)

    def stop_server(self, server_id):
        self.calls.append(('stop', server_id))
        super().stop_server(server_id)

    def reset_server_state(self, server_id, state):
        self.calls.append(('reset', server_id, state))
        super().reset_server_state(server_id, state)

    def _planned(self, *args, **kwargs):
        raise AssertionError('the recovery engine made a planned move '
                             '(maintenance only)')

    live_migrate = cold_migrate = confirm_resize = action_errors = \
        set_server_metadata = delete_server_metadata = _planned

    # -- helpers ---------------------------------------------------------------
    def evacuations(self, server_id):
        return [c for c in self.calls
                if c[0] == 'evacuate' and c[1] == server_id]


def _replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


class FakeFencer(ports.Fencer):
    """Fences the simulated hosts (failures on command)."""

    def __init__(self, cloud, configured=None):
        self.cloud = cloud
        self.configured_hosts = configured
        self.fail: dict[str, int] = {}
        self.fail_on: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []

    def configured(self, host):
        return self.configured_hosts is None or host in self.configured_hosts

    def power_state(self, host):
        off = not self.cloud.world.host(host).powered
        if off:
            self.cloud.world.confirm_fenced(host)
        return ports.PowerReading(host=host, off=off, on=not off,
                                  detail='ipmi %s' % ('off' if off else 'on'))

    def fence(self, host):
        self.calls.append(('off', host))
        if self.fail.get(host):
            self.fail[host] -= 1
            raise exceptions.FencingError('bmc of %s: timeout' % host)
        self.cloud.power_off(host)
        return ports.FenceResult(host=host, level=1, devices=('ipmi',))

    def unfence(self, host):
        self.calls.append(('on', host))
        if self.fail_on.get(host):
            self.fail_on[host] -= 1
            raise exceptions.FencingError('bmc of %s: no answer' % host)
        self.cloud.revive(host)
        return ports.FenceResult(host=host, level=1, devices=('ipmi',))


class FakeCoordinator(ports.Coordinator):
    def __init__(self):
        self.leader = True
        self.locked: list[str] = []

    def is_leader(self):
        return self.leader

    @contextlib.contextmanager
    def host_lock(self, host):
        self.locked.append(host)
        yield


def make_conf(**overrides):
    """The shared test configuration with the rigs' own defaults."""
    # Retries of a rebuild at once unless a test is about the back-off
    # (TestRetryBackoff): the fakes fail on command, not by load.
    base = {'poll': 1, 'delta': 5, 'fence_retry_interval': 10,
            'fence_retry_max_interval': 40, 'evacuation.retry_interval': 0}
    base.update(overrides)
    return conf_fixture.make_conf(**base)


class Rig:
    """An engine on the fakes, with the real configured drivers."""

    def __init__(self, hosts=3, configured=None, kdump=False, **overrides):
        from instanceha.engine import recovery
        self.clock = FakeClock()
        self.cloud = FakeCloud(self.clock, hosts)
        self.fencer = FakeFencer(self.cloud, configured)
        self.coordinator = FakeCoordinator()
        self.events = events.RecordingEventSink()
        self.kdump = (sim_listeners.SimKdumpWatch(self.cloud.world) if kdump
                      else None)
        self.conf = make_conf(**overrides)
        self.drivers = loader.load_configured(self.conf)
        self.env = guard.assemble(
            cloud=self.cloud, clock=self.clock, fencer=self.fencer,
            coordinator=self.coordinator, events=self.events,
            executor=executor.InlineExecutor(), kdump=self.kdump)
        self.engine = recovery.Engine(self.conf, self.drivers, self.env)

    def run(self, seconds, step=1.0):
        end = self.clock.t + seconds
        while self.clock.t < end:
            self.engine.tick()
            self.clock.t += step
            # The simulator judges every step (evacuated only when proven
            # off, never twice, only by the leader...).
            if self.cloud.world.violations:
                raise AssertionError('the engine broke a safety rule: %s'
                                     % '; '.join(self.cloud.world.violations))

    def power_on_without_boot(self) -> list:
        """Make unfencing power hosts on while their compute stays down.

        Stands for a slow or failed boot; returns the list of the
        simulated times at which it happened.
        """
        booted = []
        unfence = self.fencer.unfence

        def unfence_without_boot(host):
            result = unfence(host)
            self.cloud.kill(host)
            booted.append(self.clock.t)
            return result

        self.fencer.unfence = unfence_without_boot
        return booted

    def run_until(self, condition, seconds):
        """Run second by second until ``condition()``, at most ``seconds``.

        Returns whether the condition was met.
        """
        for _ in range(seconds):
            self.run(1)
            if condition():
                return True
        return False

    def restart(self):
        """A new engine (and drivers) on the same cloud: a new process."""
        from instanceha.engine import recovery
        self.drivers = loader.load_configured(self.conf)
        self.engine = recovery.Engine(self.conf, self.drivers, self.env)

    def transitions(self, host):
        return [(d['old'], d['new'])
                for d in self.events.named(events.HOST_STATE, host)]


def waiting_up_rig(run: float = 20, **overrides) -> Rig:
    """A rig whose host1 failed, was recovered and waits to come up.

    Powered on by its fencing level but never booted: the engine left it
    in waiting_up (``run`` seconds after the failure).
    """
    rig = Rig(**overrides)
    rig.cloud.boot('host1', 1)
    rig.run(2)
    rig.cloud.kill('host1')
    rig.power_on_without_boot()
    rig.run(run)
    if rig.engine.host_states() != {'host1': states.HostState.WAITING_UP}:
        raise AssertionError('host1 not waiting_up: %r'
                             % rig.engine.host_states())
    return rig


def failed_host_rig() -> Rig:
    """A rig whose host1 ended FAILED: its one rebuild failed (smart)."""
    rig = Rig(**{'evacuation.strategy': 'smart', 'evacuation.retries': 0})
    vm, = rig.cloud.boot('host1', 1)
    rig.cloud.fail_rebuild(vm, 1)
    rig.run(2)
    rig.cloud.kill('host1')
    rig.run(20)
    return rig
