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

"""A compute host's life in instanceha: the one table of states.

::

    healthy -> suspect -> fencing -> fenced -> evacuating -> evacuated
       ^                    |  ^                   |            |
       |                    v  |                   v            v
       |               fence_failed             failed     powering_on
       |                                      (operator)        |
       +------------------ enabling <--- waiting_up <-----------+

    healthy -> draining -> frozen -> healthy     (an announced shutdown,
       |                     ^                    instanceha.engine.clean_shutdown)
       +---------------------+

Every log line, event and Nova marker names these states. The marker
written to the compute service's ``disabled_reason`` makes the state
durable in Nova itself, so a restarted service (or a new leader) resumes
where the previous one stopped, and ``openstack compute service list
--long`` tells operators the story. Not every state writes one: from
the end of a plain evacuation to the hand-back (evacuated, powering_on,
waiting_up after our power-on, enabling) Nova keeps the ``evacuating``
(or ``evacuated``) marker, forced down; the enable removes it. A copy
resuming from it powers the host on again (no change) and waits.

What the engine does in each state is the step of
:data:`instanceha.engine.steps.STEPS`, the table beside this one.
"""

import enum


class HostState(str, enum.Enum):
    HEALTHY = 'healthy'
    #: Detected failed; gates and filters are being applied.
    SUSPECT = 'suspect'
    FENCING = 'fencing'
    #: Fencing failed; retried with back-off, never evacuated.
    FENCE_FAILED = 'fence_failed'
    #: Proven powered off (or crash-dumping); forced down and disabled.
    FENCED = 'fenced'
    EVACUATING = 'evacuating'
    EVACUATED = 'evacuated'
    POWERING_ON = 'powering_on'
    WAITING_UP = 'waiting_up'
    ENABLING = 'enabling'
    #: Evacuation gave up; only an operator clears it.
    FAILED = 'failed'
    #: Evacuated and deliberately kept disabled (leave_disabled).
    LEFT_DISABLED = 'left_disabled'
    #: nova-compute is down on a host that is alive (a process failure):
    #: disabled by us so that Nova schedules nothing there; never fenced
    #: or evacuated, enabled again when nova-compute reports up. Not a
    #: recovery workflow (see instanceha.engine.process_failure).
    SERVICE_DOWN = 'service_down'
    #: Announced a clean reboot or power-off (freeze policy): disabled
    #: with a reason of its own, never fenced while expected back.
    FROZEN = 'frozen'
    #: Announced a clean shutdown under the migrate policy: its instances
    #: are being live-migrated away while its agent's stop path waits.
    DRAINING = 'draining'

    def __str__(self) -> str:
        return self.value


S = HostState

#: Allowed transitions. Anything else is a bug and is refused loudly.
#: Every state may go to healthy: the operator's word wins, and a host an
#: operator disables with a reason of their own leaves our hands from
#: wherever its workflow stood (also hosts clear --enable).
TRANSITIONS: dict[HostState, frozenset[HostState]] = {
    S.HEALTHY: frozenset({S.SUSPECT, S.SERVICE_DOWN, S.FROZEN,
                          S.DRAINING}),
    S.SUSPECT: frozenset({S.HEALTHY, S.FENCING}),
    S.FENCING: frozenset({S.FENCED, S.FENCE_FAILED, S.HEALTHY}),
    S.FENCE_FAILED: frozenset({S.FENCING, S.HEALTHY}),
    S.FENCED: frozenset({S.EVACUATING, S.HEALTHY}),
    # Seen powered on again: its evacuations stop, it is fenced again.
    S.EVACUATING: frozenset({S.EVACUATED, S.FAILED, S.HEALTHY, S.FENCING}),
    S.EVACUATED: frozenset({S.POWERING_ON, S.WAITING_UP, S.LEFT_DISABLED,
                            S.HEALTHY}),
    S.POWERING_ON: frozenset({S.WAITING_UP, S.FAILED, S.HEALTHY}),
    S.WAITING_UP: frozenset({S.ENABLING, S.HEALTHY}),
    S.ENABLING: frozenset({S.HEALTHY}),
    # Operator hand-back (instanceha-manage hosts clear): waiting_up, or
    # healthy at once with --enable.
    S.FAILED: frozenset({S.HEALTHY, S.WAITING_UP}),
    S.LEFT_DISABLED: frozenset({S.HEALTHY, S.WAITING_UP}),
    # Its nova-compute reports up again; or the host fails as a whole
    # (its own heartbeat stops too) and is recovered like any other.
    S.SERVICE_DOWN: frozenset({S.HEALTHY, S.SUSPECT}),
    # Back, or not back in time: enabled again, judged like any host
    # (a failure from then on).
    S.FROZEN: frozenset({S.HEALTHY}),
    S.DRAINING: frozenset({S.FROZEN, S.HEALTHY}),
}


class TransitionError(RuntimeError):
    """A state change the table does not allow (a programming error)."""


def check_transition(host: str, old: HostState, new: HostState) -> None:
    if new not in TRANSITIONS[old]:
        raise TransitionError('host %s: %s -> %s is not an allowed '
                              'transition' % (host, old, new))
