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

"""The randomized scenarios' seventh stream: operators, health, liars.

Mixed into benchmarks/scenario_fuzz.py's Case (see there), drawn from
``self.orr`` after the six streams before it (so that a seed builds the
story it built before this stream existed whenever none of its kinds is
drawn): an operator who takes a failed host after its evacuation and
puts it back into service later (our ``forced_down`` then cleared by the
``unforce`` workflow), hardware conditions the BMCs report to the
proactive checks (hosts emptied before they fail, capacity read for
each), and BMCs that lie "on" for a host that is off (nothing may be
evacuated on their word).
"""

import random

import fuzz_kinds as kinds

#: unforce: an operator takes a failed host during or after its
#: recovery (disables it with a reason of their own, or enables it) and
#: later enables it, sometimes powering it on first; health: [proactive]
#: checks on, and BMCs report hardware conditions (critical or warning,
#: on one host or several at once, flapping, on a host that fails
#: later); lies: a BMC or PDU answers "on" whatever the truth, around a
#: failure of its host.
OPS_MIX = ('unforce', 'health', 'lies')
#: Conditions a BMC may report (``health`` timeline command).
CONDITIONS = ('power_supply:Critical:PSU1', 'memory:Critical:DIMM2',
              'thermal:Critical:CPU1', 'power_supply:Warning:PSU2',
              'system:Critical', 'thermal:Warning:Inlet')


class OpsStream:
    """Options and timeline of the seventh stream (a Case mixin)."""

    def _ops_events(self) -> None:
        orr = self.orr = random.Random(self.seed * 86028121 + 67)
        self.ops = tuple(k for k in OPS_MIX
                         if k in self.mix and orr.random() < 0.2)
        if 'unforce' in self.ops:
            self._unforce(*self._failed(orr))
        if 'health' in self.ops:
            self._health(orr)
        if 'lies' in self.ops:
            t0, host = self._failed(orr)
            device = (self.pdus[host] if host in self.pdus
                      and orr.random() < 0.4 else host)
            t = max(1, t0 + orr.uniform(-60, 90))
            self._at(t, 'bmc', device, 'lies-on')
            if orr.random() < 0.4:
                self._at(t + orr.uniform(30, 300), 'bmc', device, 'ok')

    def _failed(self, orr: random.Random) -> tuple[float, str]:
        """A failure of the story (half the time the first), or a new one."""
        fails = self._failures()
        if fails:
            return fails[0] if orr.random() < 0.5 else orr.choice(fails)
        t, host = orr.uniform(20, 300), orr.choice(self.hosts)
        self._at(t, 'power-off', host)
        return round(t), host

    def _unforce(self, t0: float, host: str) -> None:
        """An operator takes ``host`` mid-recovery, then hands it back.

        Detection takes 30-45 s, fencing and evacuation about a minute,
        the boot after our power-on 90 s: from 40 s to 240 s after the
        failure, the operator acts in every state from fencing to
        waiting_up.
        """
        orr = self.orr
        t = min(t0 + orr.uniform(40, 240), kinds.END - 200)
        if orr.random() < 0.7:
            self._at(t, 'disable', host, 'operator', 'holds', 'it',
                     str(orr.randint(1, 99)))
            t += orr.uniform(20, 250)
        if orr.random() < 0.5:
            self._at(t - orr.uniform(0, 60), 'power-on', host)
        self._at(t, 'enable', host)

    def _health(self, orr: random.Random) -> None:
        """Proactive checks on; conditions on one or several BMCs."""
        opts = self.options
        opts['proactive.interval'] = str(orr.choice([30, 60]))
        opts['proactive.confirm'] = str(orr.choice([1, 2, 3]))
        opts['proactive.max_starts'] = str(orr.choice([1, 2]))
        if orr.random() < 0.3:
            opts['proactive.threshold'] = str(orr.choice([0, 34, 100]))
        t = orr.uniform(20, kinds.END - 300)
        fails = self._failures()
        many = orr.random() < 0.2
        for _ in range(orr.randint(2, 4) if many else 1):
            if fails and orr.random() < 0.3:
                # A host that reports trouble and then fails.
                host = orr.choice(fails)[1]
            else:
                host = orr.choice(self.hosts)
            self._at(t, 'health', host, *orr.sample(
                CONDITIONS, orr.randint(1, 2)))
            if orr.random() < 0.4:
                self._at(t + orr.uniform(10, 200), 'health', host, 'ok')
