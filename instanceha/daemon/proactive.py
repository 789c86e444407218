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

"""Proactive evacuation, run by the leading copy on a thread of its own.

Every ``[proactive] interval`` seconds: the enabled, up hosts' hardware
health is read through their fencing devices that can tell (Redfish:
:meth:`instanceha.plugins.fencing.base.FencingDriver.health`), the
decisions are :class:`instanceha.engine.proactive.Proactive`'s, and a
host to empty is put into maintenance by the operator's own path
(:class:`instanceha.ops.maintenance.Maintenance`: disabled with a
maintenance reason naming the conditions, its instances live-migrated).
Nothing is fenced. The cloud port is the guarded one: every write is
made only while this copy leads, at the moment of the write. An
operator ends it with ``instanceha-manage maintenance end``.
"""

from collections.abc import Callable
import logging

from instanceha.daemon import periodic
from instanceha.engine import capacity
from instanceha.engine import events as ev
from instanceha.engine import model
from instanceha.engine import plan as plan_mod
from instanceha.engine import proactive
from instanceha.ops import capacity as ops_capacity
from instanceha.ops import maintenance

LOG = logging.getLogger(__name__)

#: What the maintenance reason starts its note with.
NOTE = 'proactive:'


def limits(conf) -> proactive.Limits:
    opts = conf.proactive
    return proactive.Limits(
        confirm=opts.confirm, cooldown=opts.cooldown,
        max_starts=opts.max_starts, window=opts.window,
        threshold=opts.threshold)


def gates_holding(engine) -> Callable[[], str]:
    """Why the engine's latest plan has gates holding failed hosts."""
    def held() -> str:
        plan = getattr(engine, 'plan', None)
        if plan is None:
            return ''
        if plan.blocked_by:
            return '; '.join(plan.blocked_by)
        return '; '.join(sorted({
            'gate %s' % d.gate for d in plan.decisions
            if d.decision is plan_mod.Decision.BLOCKED and d.gate}))
    return held


class ProactiveCheck(periodic.Periodic):
    """One round at a time: read, decide, empty, tell."""

    name = 'proactive'

    def __init__(self, conf, env, drivers, leading: Callable[[], bool], *,
                 held: Callable[[], str] = lambda: '',
                 skew: Callable[[], float | None] = lambda: None,
                 run_all: Callable = maintenance.threaded_map):
        """The check of one copy of the service.

        :param held: why the recovery's gates hold failed hosts now
            ('' when they do not; see :func:`gates_holding`).
        :param skew: seconds our clock is ahead of Nova's, as the engine
            last measured (a pause kept on Nova's clock ends by it).
        :param run_all: how the BMCs are read and the moves made
            (threads; the simulator: one after the other).
        """
        self.conf = conf
        self.env = env
        self.drivers = drivers
        self.leading = leading
        self.held = held
        self.skew = skew
        self.run_all = run_all
        self.decider = proactive.Proactive(
            proactive.parse_rules(conf.proactive.rules), limits(conf))
        self._said: dict[str, tuple] = {}
        super().__init__()

    def _device(self, host: str):
        """The host's first fencing device that reads health, or None."""
        for level in self.env.fencer.levels(host) or ():
            for drv in level:
                if drv.supports_health:
                    return drv
        return None

    def _read(self, host: str):
        drv = self._device(host)
        if drv is None:
            return host, None
        try:
            return host, drv.health()
        except Exception as exc:  # noqa: one BMC must not stop the round
            LOG.warning('proactive: cannot read the health of %s: %s',
                        host, exc)
            return host, None

    def _paused(self) -> bool:
        pause = self.env.pause.current() if self.env.pause else None
        return pause is not None and not pause.expired(
            self.env.clock.now(), self.skew())

    def _room(self, snapshot: model.Snapshot) -> Callable[[str], str | None]:
        facts = []

        def absorbed(host: str) -> str | None:
            if not facts:
                facts.append(ops_capacity.gather(
                    self.env.cloud, self.drivers.filters,
                    self.drivers.reservation))
            loss = capacity.host_loss(facts[0], [host])
            if loss.absorbed:
                return None
            return 'no room elsewhere for %d of its %d instance(s)' % (
                len(loss.packing.unplaced), loss.instances)
        return absorbed

    def check(self) -> list[proactive.Verdict]:
        """One round now (nothing when this copy does not lead)."""
        if not self.leading():
            return []
        snapshot = self.env.cloud.read_services()
        hosts = [s.host for s in snapshot.services
                 if proactive.candidate(s)]
        readings = dict(self.run_all(
            self._read, hosts, max(1, self.conf.workers)))
        verdicts = self.decider.decide(
            readings, snapshot, self.env.clock.monotonic(),
            paused=self._paused(), held=self.held(),
            absorbed=self._room(snapshot))
        for verdict in verdicts:
            self._act(verdict)
        return verdicts

    def _act(self, v: proactive.Verdict) -> None:
        said = (v.action, v.conditions, v.why.split(':')[0])
        if v.action == proactive.EVACUATE:
            note = '%s %s' % (NOTE, ', '.join(v.conditions))
            self.env.events.emit(ev.PROACTIVE_EVACUATION, v.host,
                                 conditions=v.conditions)
            try:
                maintenance.Maintenance(self.env.cloud, out=LOG.info,
                                        clock=self.env.clock,
                                        run_all=self.run_all).start(
                    v.host, self.env.clock.now(), note=note)
            except Exception as exc:  # noqa: said, tried again next round
                LOG.error('proactive: could not empty %s: %s', v.host, exc)
        elif self._said.get(v.host) != said:
            self.env.events.emit(
                ev.HARDWARE_CONDITION if v.action == proactive.WARN
                else ev.PROACTIVE_HELD, v.host, conditions=v.conditions,
                **({'reason': v.why} if v.why else {}))
        self._said[v.host] = said

    def interval(self) -> float:
        return self.conf.proactive.interval
