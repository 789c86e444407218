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

"""The randomized scenarios' seventh stream: the hosts' own side.

Mixed into benchmarks/scenario_fuzz.py's Case (see there), drawn from
``self.hr`` after every stream before it (so that a seed builds the story
it built before this stream existed whenever none of its kinds is
drawn). When drawn, every host's agent runs the host side
(:mod:`instanceha.sim.hostside`: the real link monitor and isolation
response), the service tells them an isolation response (``none``,
``poweroff`` or ``shutdown``), some hosts arm a watchdog (when the fifth
stream armed none) and one or two hosts meet:

* isolation: the whole network cut (the gateway too), its BMC sometimes
  unreachable with it (then only a watchdog proves it off);
* partition: its link to the control plane cut while its network and
  gateway work, sometimes its gateway lost as well (then it is
  isolated);
* ackloss: the service's answers lost one way (its heartbeats still
  arrive);
* agentkill: its agent killed (its watchdog stays armed), sometimes
  started again alone.

Each sometimes ends later. The simulator's invariants judge the run:
nothing runs twice, nothing is evacuated from a host neither fenced nor
reset, a watchdog level counts only a host that really reset, an
isolation response touches only protected guests of an isolated host.
"""

import random

import fuzz_kinds as kinds

HOSTSIDE_MIX = ('isolation', 'partition', 'ackloss', 'agentkill')
#: The agents' isolation timeout.
ISOLATION_TIMEOUT = 30
RESPONSES = ('none', 'poweroff', 'shutdown')


class HostSideStream:
    """Topology, options and timeline of the seventh stream (a mixin)."""

    #: host -> its agent's isolation timeout (empty: no host side).
    isolation: dict = {}

    def _hostside_events(self) -> None:
        hr = self.hr = random.Random(self.seed * 86028121 + 67)
        self.hostside = tuple(k for k in HOSTSIDE_MIX
                              if k in self.mix and hr.random() < 0.15)
        self.isolation = {}
        if not self.hostside:
            return
        # (It draws from the fourth stream's random, which no stream uses
        # after this one.)
        self._heartbeat()
        opts = self.options
        opts['heartbeat.isolation_response'] = hr.choice(RESPONSES)
        opts['heartbeat.isolation_shutdown_wait'] = str(hr.choice([5, 30]))
        self.isolation = {h: ISOLATION_TIMEOUT for h in self.hosts}
        if not self.watchdogs and hr.random() < 0.6:
            opts['heartbeat.watchdog_min_deadline'] = str(
                kinds.WATCHDOG_MIN)
            self.watchdogs = {h: kinds.WATCHDOG_DEADLINE
                              for h in self.hosts if hr.random() < 0.6}
        end = kinds.END - 300
        for what in self.hostside:
            for _ in range(hr.randint(1, 2)):
                self._hostside_event(what, hr.choice(self.hosts),
                                     hr.uniform(20, end))

    def _hostside_event(self, what: str, host: str, t: float) -> None:
        hr = self.hr
        back = t + hr.uniform(20, 300) if hr.random() < 0.6 else None
        if what == 'isolation':
            if hr.random() < 0.5:
                self._at(t - 5, 'bmc', host, 'unreachable')
            self._at(t, 'cut-network', host)
            if back is not None:
                self._at(back, 'restore-network', host)
        elif what == 'partition':
            self._at(t, 'partition', host)
            gateway = hr.random() < 0.3
            if gateway:
                self._at(t + hr.uniform(0, 60), 'addresses', host, 'down')
            if back is not None:
                self._at(back, 'unpartition', host)
                if gateway:
                    self._at(back, 'addresses', host, 'up')
        elif what == 'ackloss':
            self._at(t, 'agent', host, 'answers-lost')
            if back is not None:
                self._at(back, 'agent', host, 'answers-ok')
        else:
            self._at(t, 'agent', host, 'kill')
            if back is not None:
                self._at(t + hr.uniform(5, 120), 'agent', host, 'start')
