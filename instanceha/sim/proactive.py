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

"""Proactive evacuation in a simulated copy of the service.

The production check (:class:`instanceha.daemon.proactive.ProactiveCheck`)
runs in the service on a thread of its own every ``[proactive]
interval`` seconds (0: off). Here each round is a job of a simulated
executor of its own (so that it takes simulated time and never a worker
of the engine's), with the reads and live migrations of a round one
after the other. The devices' conditions come from the ``health``
timeline command (:meth:`instanceha.sim.world.World.device_health`).
"""

from instanceha.daemon import periodic
from instanceha.daemon import proactive
from instanceha.ops import maintenance
from instanceha.sim import executor as sim_executor


class SimProactive:
    """One copy's proactive rounds, on simulated time."""

    def __init__(self, conf, env, drivers,
                 executor: sim_executor.SimExecutor, now: float,
                 engine=None):
        self.check = proactive.ProactiveCheck(
            conf, env, drivers, leading=env.coordinator.is_leader,
            held=proactive.gates_holding(engine),
            skew=lambda: getattr(getattr(engine, 'pause', None), 'skew',
                                 None),
            run_all=maintenance.serial_map)
        self.executor = executor
        self.interval = float(conf.proactive.interval)
        #: When the next round starts (world time), as the service's
        #: thread would start it.
        self.next_round = now + min(periodic.Periodic.first, self.interval)
        self._round = None

    def next_due(self) -> float:
        return self.next_round

    def step(self, now: float) -> None:
        """Start a round if one is due and the last one has ended."""
        if now < self.next_round:
            return
        self.next_round = now + self.interval
        if self._round is None or self._round.done():
            self._round = self.executor.submit(self._one)

    def _one(self) -> None:
        try:
            self.check.check()
        except Exception:  # noqa: as the service's thread, next round
            proactive.LOG.exception('proactive: the round failed')


def for_copy(conf, env, drivers, executor: sim_executor.SimExecutor,
             now: float, engine=None) -> SimProactive | None:
    """The copy's proactive rounds, or None when they are off.

    ``engine``'s latest plan tells when the recovery's gates hold failed
    hosts (as the service's check is told).
    """
    if not conf.proactive.interval:
        return None
    return SimProactive(conf, env, drivers, executor, now, engine)
