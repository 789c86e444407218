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

"""Simulated leader election between copies of the service.

The election behaves like a tooz group with leases: the longest-standing
live member leads; when the leader crashes, the others only notice once
its lease runs out, so for ``lease`` seconds nobody leads. A clean stop
hands leadership over at once.
"""

import contextlib

from instanceha.engine import ports
from instanceha.sim import clock as sim_clock


class Election:
    """Membership shared by every copy of the service in one run."""

    def __init__(self, clock: sim_clock.SimClock, lease: float = 10.0):
        self.clock = clock
        self.lease = lease
        #: Live members in join order.
        self.members: list[str] = []
        #: Crashed members whose lease has not run out: name -> expiry.
        self.zombies: dict[str, float] = {}
        self.backend_up = True
        self._locks: dict[str, str] = {}

    def join(self, name: str) -> None:
        self.zombies.pop(name, None)
        if name not in self.members:
            self.members.append(name)

    def leave(self, name: str, crashed: bool = False) -> None:
        if name in self.members:
            if crashed and self.leader() == name:
                self.zombies[name] = self.clock.world_t + self.lease
            self.members.remove(name)
        for host in [h for h, o in self._locks.items() if o == name]:
            del self._locks[host]

    def _expire(self) -> None:
        now = self.clock.world_t
        for name, expiry in list(self.zombies.items()):
            if expiry <= now:
                del self.zombies[name]

    def next_change(self) -> float | None:
        # Expired even while the backend is down: else the change "due
        # now" would be offered for ever and simulated time would stop.
        self._expire()
        return min(self.zombies.values()) if self.zombies else None

    def leader(self) -> str | None:
        if not self.backend_up:
            return None
        self._expire()
        if self.zombies:
            # A crashed leader's lease still runs: nobody may lead yet.
            return None
        return self.members[0] if self.members else None

    def lock(self, host: str, owner: str) -> None:
        holder = self._locks.get(host)
        if holder and holder != owner:
            raise RuntimeError('host lock %s held by %s, wanted by %s'
                               % (host, holder, owner))
        self._locks[host] = owner

    def unlock(self, host: str, owner: str) -> None:
        if self._locks.get(host) == owner:
            del self._locks[host]


class SimCoordinator(ports.Coordinator):
    """One copy's view of the election."""

    def __init__(self, election: Election, name: str):
        self.election = election
        self.name = name

    def is_leader(self) -> bool:
        return self.election.leader() == self.name

    @contextlib.contextmanager
    def host_lock(self, host: str):
        self.election.lock(host, self.name)
        try:
            yield
        finally:
            self.election.unlock(host, self.name)
