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

"""One authority over each instance: who owns it now, and who yields.

At most one workflow owns an instance at any moment. A workflow that
acts on a whole host (a host recovery evacuating it, a drain migrating
its instances away) owns every instance on that host; one that acts on
a single instance (a restart or a relocation of a crashed instance, the
lock sweep's unlock) owns that instance while its job runs, and, for an
instance-failure step under way in Nova, until Nova says it settled.

When a workflow needs an instance that another one owns, :data:`RULES`
says what it does:

* ``WAIT``: it asks again later (the owner's step ends on its own);
* ``TAKE_OVER``: it becomes the owner, explicitly (the holder's claim
  is dropped and it is told so: :meth:`Owners.taken_over`);
* ``GIVE_WAY``: it drops what it meant to do to that instance.

The registry lives in the tick thread: the runtime consults it before
it submits a job that acts on instances (:attr:`runtime.Job.acts_on`),
and the engine tells it each tick which hosts its host workflows hold.
It is the same table as in doc/architecture.md.
"""

from collections.abc import Iterable
import dataclasses
import enum


class Owner(enum.Enum):
    """The kinds of workflow that act on instances."""

    #: A failed host's recovery: fencing, then evacuation (whole host).
    HOST_RECOVERY = 'host_recovery'
    #: A maintenance or clean-shutdown migrate drain (whole host).
    DRAIN = 'drain'
    #: A crashed instance's restart, relocation or give-up.
    INSTANCE_FAILURE = 'instance_failure'
    #: The unlock (and status restore) of an instance an earlier copy
    #: left locked.
    LOCK_SWEEP = 'lock_sweep'


class Rule(enum.Enum):
    """What a workflow does about an instance another one owns."""

    WAIT = 'wait'
    TAKE_OVER = 'take over'
    GIVE_WAY = 'give way'


_H, _D, _I, _L = (Owner.HOST_RECOVERY, Owner.DRAIN,
                  Owner.INSTANCE_FAILURE, Owner.LOCK_SWEEP)
_W, _T, _G = Rule.WAIT, Rule.TAKE_OVER, Rule.GIVE_WAY

#: ``RULES[holder, wanting]``: what ``wanting`` does while ``holder``
#: owns the instance. A failed host's recovery takes over from everyone
#: (its instances are lost where they are); nobody takes an instance
#: from it. Two workflows of one kind never share one: the second
#: waits.
RULES: dict[tuple[Owner, Owner], Rule] = {
    (_H, _H): _W, (_H, _D): _G, (_H, _I): _G, (_H, _L): _G,
    (_D, _H): _T, (_D, _D): _W, (_D, _I): _G, (_D, _L): _W,
    (_I, _H): _T, (_I, _D): _W, (_I, _I): _W, (_I, _L): _W,
    (_L, _H): _T, (_L, _D): _W, (_L, _I): _W, (_L, _L): _W,
}

#: Which host claim answers first when two hold one host.
_HOST_ORDER = (Owner.HOST_RECOVERY, Owner.DRAIN)


@dataclasses.dataclass(frozen=True)
class Claim:
    """Who owns an instance: the kind, and which of its workflows."""

    owner: Owner
    key: str
    #: The host the owner believes the instance is on.
    host: str | None = None


class Owners:
    """The owner of each instance now; tick thread only."""

    def __init__(self):
        #: Whole hosts held, by owner: host -> key.
        self._hosts: dict[Owner, dict[str, str]] = {}
        #: Single instances held: instance id -> claim.
        self._instances: dict[str, Claim] = {}
        #: Claims another workflow took over (their holders are told).
        self._taken: set[tuple[Owner, str]] = set()

    def hold_hosts(self, owner: Owner, hosts: Iterable[str]) -> None:
        """``owner`` holds exactly ``hosts`` from now on (whole hosts).

        The workflow's key is its host. An instance claim on one of
        those hosts is taken over where :data:`RULES` says so.
        """
        held = {h: h for h in hosts}
        self._hosts[owner] = held
        for instance, claim in list(self._instances.items()):
            if claim.host in held and RULES[
                    (claim.owner, owner)] is Rule.TAKE_OVER:
                self._drop(instance, claim)

    def holder(self, instance: str, host: str | None) -> Claim | None:
        """Who owns ``instance`` (on ``host``), None when nobody does."""
        claim = self._instances.get(instance)
        if claim is not None:
            return claim
        for owner in _HOST_ORDER:
            key = self._hosts.get(owner, {}).get(host)
            if key is not None:
                return Claim(owner, key, host)
        return None

    def claim(self, owner: Owner, key: str, instance: str,
              host: str | None) -> tuple[Rule, Claim] | None:
        """Own ``instance`` for ``owner``'s workflow ``key``.

        None when it is that workflow's now (free, already its own, or
        taken over); else the rule that refused it and the holder.
        """
        held = self.holder(instance, host)
        if held is not None and (held.owner, held.key) != (owner, key):
            rule = RULES[(held.owner, owner)]
            if rule is not Rule.TAKE_OVER:
                return rule, held
            if held.owner in _HOST_ORDER:
                # A whole host cannot be taken one instance at a time.
                return Rule.WAIT, held
            self._drop(instance, held)
        self._instances[instance] = Claim(owner, key, host)
        return None

    def claim_all(self, owner: Owner, key: str,
                  acts_on: Iterable[tuple[str, str | None]]
                  ) -> tuple[str, Rule, Claim] | None:
        """Own every ``(instance, host)`` of ``acts_on``, or none of them.

        None when all are the workflow's now; else the first instance
        refused, the rule and its holder (the workflow's claims are
        dropped: it holds nothing while it waits or gives way).
        """
        for instance, host in acts_on:
            refused = self.claim(owner, key, instance, host)
            if refused is not None:
                self.release(owner, key)
                return (instance,) + refused
        return None

    def release(self, owner: Owner, key: str,
                keep: Iterable[str] = ()) -> None:
        """Drop the instance claims of ``owner``'s workflow ``key``.

        ``keep``: instances it goes on owning (a step still under way).
        """
        keep = set(keep)
        for instance, claim in list(self._instances.items()):
            if (claim.owner, claim.key) == (owner, key) and \
                    instance not in keep:
                del self._instances[instance]
        self._taken.discard((owner, key))

    def hold_instances(self, owner: Owner,
                       instances: dict[str, str]) -> None:
        """``owner`` holds ``instances`` (id -> host) by its Nova record.

        Each is keyed by the instance's id and owned where nobody else
        owns it; the owner's other claims of that sort go.
        """
        for instance, claim in list(self._instances.items()):
            if claim.owner is owner and claim.key == instance and \
                    instance not in instances:
                del self._instances[instance]
        for instance, host in sorted(instances.items()):
            self.claim(owner, instance, instance, host)

    def taken_over(self, owner: Owner, key: str) -> bool:
        """Whether another workflow took an instance from this one."""
        return (owner, key) in self._taken

    def _drop(self, instance: str, claim: Claim) -> None:
        del self._instances[instance]
        self._taken.add((claim.owner, claim.key))
