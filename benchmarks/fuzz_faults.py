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

"""The randomized scenarios' sixth stream: the simulator's other faults.

Mixed into benchmarks/scenario_fuzz.py's Case (see there), drawn from
``self.fr`` after the five streams before it (so that a seed builds the
story it built before this stream existed whenever none of its kinds is
drawn): Nova API faults that let a few calls through first, a host's
compute service record deleted from Nova, rebuilds that fail on one
target only, and a reload naming a fencing file that is not valid.
"""

import os
import random

import fuzz_kinds as kinds

#: apifault: the next calls of one kind fail after some succeed (``nova
#: fail CALL N ERROR after M``); service-record: a host's compute service
#: record is deleted (``nova delete-service``); rebuild-target: an
#: instance's rebuilds fail on one host only (``rebuild-fail SERVER on
#: HOST``); bad-reload: an operator reloads with a fencing file that
#: does not parse (refused; the old one stays), then puts it back.
FAULTS_MIX = ('apifault', 'service-record', 'rebuild-target', 'bad-reload')
#: The broken fencing file a bad reload names (written next to the case).
BAD_FENCING = 'fencing-broken.yaml'


class FaultsStream:
    """Timeline of the sixth stream (a Case mixin)."""

    def _fault_events(self, world_calls: tuple[str, ...],
                      errors: tuple[str, ...]) -> None:
        fr = self.fr = random.Random(self.seed * 49979687 + 59)
        self.faults = tuple(k for k in FAULTS_MIX
                            if k in self.mix and fr.random() < 0.2)
        end = kinds.END - 150
        if 'apifault' in self.faults:
            for _ in range(fr.randint(1, 2)):
                self._at(fr.uniform(20, end), 'nova', 'fail',
                         fr.choice(world_calls), str(fr.randint(1, 3)),
                         fr.choice(errors), 'after', str(fr.randint(1, 6)))
        if 'service-record' in self.faults:
            self._at(fr.uniform(20, end), 'nova', 'delete-service',
                     fr.choice(self.hosts))
        servers = sorted(self.topology()['instances'])
        if 'rebuild-target' in self.faults and servers:
            for _ in range(fr.randint(1, 2)):
                self._at(fr.uniform(0, end), 'rebuild-fail',
                         fr.choice(servers), 'on', fr.choice(self.hosts),
                         'times', str(fr.randint(1, 5)))
        if 'bad-reload' in self.faults:
            # Refused; the operator puts the good file back at once (a
            # copy started with the broken one would rightly refuse to
            # start).
            t = fr.uniform(20, end)
            self._at(t, 'reload', 'fencing.config_file', BAD_FENCING)
            self._at(t, 'reload', 'fencing.config_file', 'fencing.yaml')

    def _write_faults(self, directory: str) -> None:
        """The broken fencing file a bad reload names."""
        with open(os.path.join(directory, BAD_FENCING), 'w') as f:
            f.write('hosts: [this is: not: valid\n')
