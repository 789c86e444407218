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

"""A clean shutdown is not a failure: the shutdown policy's decisions.

A compute host's heartbeat agent announces a clean reboot or power-off
(see :mod:`instanceha.heartbeat.protocol`) from its systemd stop path.
What follows depends on the host's *shutdown policy*: ``[shutdown]
policy``, or the host aggregate metadata ``[shutdown] aggregate_key``:

============  ===========================================================
policy        what instanceha does with an announced host
============  ===========================================================
freeze        nothing is fenced or evacuated while the host is expected
              back within ``[shutdown] return_timeout``; after that it is
              a failure like any other
failover      the host is proven off by *reading* its fencing devices (no
              power-cycle) and its instances are evacuated at once; it is
              not powered on again afterwards
migrate       its instances are live-migrated away while the agent's stop
              path waits; the host is enabled again when it returns
conditional   reboot -> freeze, power-off -> failover (the default)
============  ===========================================================

This module holds what every path needs and nothing that talks to the
world: the announcement record, the policy lookup and
:class:`AnnouncedFencer`, the fencing port's rule for announced hosts.
The side effects of freeze, failover and migrate (disabling, recording,
draining, enabling) are the workflow kind
:mod:`instanceha.engine.clean_shutdown` of the engine's runtime.
"""

import dataclasses
import logging
import typing

from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

REBOOT = 'reboot'
POWEROFF = 'poweroff'
KINDS = (REBOOT, POWEROFF)

CONDITIONAL = 'conditional'
FREEZE = 'freeze'
FAILOVER = 'failover'
MIGRATE = 'migrate'
POLICIES = (CONDITIONAL, FREEZE, FAILOVER, MIGRATE)


@dataclasses.dataclass(frozen=True)
class Announcement:
    """A host said it is going down on purpose."""

    host: str
    #: REBOOT or POWEROFF.
    kind: str
    #: The agent run that announced it: a heartbeat from another boot id
    #: afterwards proves the host came back.
    boot_id: bytes
    #: When the first and the latest announcement packet arrived, on the
    #: listener's monotonic clock (the agent repeats it while it waits).
    first: float
    last: float


class AnnouncementSource(typing.Protocol):
    """Who heard the announcements (the heartbeat detector)."""

    #: Seconds a host that announced a power-off may still be reported on
    #: by its devices before it is fenced (``[shutdown] poweroff_grace``).
    poweroff_grace: float

    def announcement(self, host: str) -> Announcement | None:
        """The host's pending announcement, None when there is none."""

    def returned(self, host: str) -> bool:
        """A heartbeat from a later agent run than the announcement's."""

    def now(self) -> float:
        """The monotonic clock of ``Announcement.first``/``last``."""


def effective(policy: str, kind: str) -> str:
    """``conditional`` resolved for ``kind``; other policies as they are."""
    if policy == CONDITIONAL:
        return FREEZE if kind == REBOOT else FAILOVER
    return policy


def policy_of(conf, snapshot: model.Snapshot | None,
              host: str) -> tuple[str, str]:
    """(policy, where it comes from) for ``host``.

    An aggregate's metadata ``[shutdown] aggregate_key`` overrides
    ``[shutdown] policy`` (see :func:`aggregate_choice`).
    """
    group = conf.shutdown
    return aggregate_choice(snapshot, host, group.aggregate_key, POLICIES,
                            group.policy, ('a shutdown policy',
                                           'shutdown policies',
                                           '[shutdown] policy'))


def aggregate_choice(snapshot: model.Snapshot | None, host: str, key: str,
                     choices: tuple[str, ...], default: str,
                     names: tuple[str, str, str]) -> tuple[str, str]:
    """(value, where it comes from): a host's aggregates over an option.

    The metadata ``key`` of the host's aggregates overrides ``default``.
    A value that is not one of ``choices`` is ignored with a warning
    naming the aggregate; aggregates that disagree leave ``default`` in
    force (with a warning), since no order between them says which one
    an operator meant. ``names``: what a value is called (singular with
    its article, plural) and the option giving ``default``.
    """
    what, whats, option = names
    found: dict[str, str] = {}
    aggs = snapshot.aggregates_of(host) if snapshot is not None else ()
    for agg in sorted(aggs, key=lambda a: a.name):
        value = agg.metadata.get(key)
        if value is None:
            continue
        value = value.strip().lower()
        if value not in choices:
            LOG.warning('aggregate %s: metadata %s=%r is not %s (%s); '
                        'ignored for host %s', agg.name, key,
                        agg.metadata[key], what, ', '.join(choices), host)
            continue
        found[agg.name] = value
    if len(set(found.values())) == 1:
        name = sorted(found)[0]
        return found[name], 'aggregate %s' % name
    if found:
        LOG.warning('host %s: its aggregates set different %s (%s); using '
                    '%s = %s', host, whats,
                    ', '.join('%s=%s' % kv for kv in sorted(found.items())),
                    option, default)
    return default, option


class AnnouncedFencer(ports.Fencer):
    """The fencing port's rule for a host that announced its shutdown.

    * fence: its devices are *read* first. Off proves it off without a
      power operation (a clean power-off must not be power-cycled).
      Reported on while its power-off announcement is younger than
      ``[shutdown] poweroff_grace``: it is still shutting down, so
      fencing fails for now (retried with the usual back-off). Otherwise
      (on after the grace, after a reboot announcement, unreadable): it is
      a failed host and is fenced as usual.
    * unfence: a host whose power-off was announced stays off after its
      evacuation (someone switched it off on purpose); the engine then
      waits for it to come up on its own.

    Hosts without an announcement pass straight through.
    """

    def __init__(self, inner: ports.Fencer, source: AnnouncementSource):
        self._inner = inner
        self._source = source

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @property
    def supports_reload(self) -> bool:  # type: ignore[override]
        return self._inner.supports_reload

    def learn_hosts(self, hosts) -> None:
        self._inner.learn_hosts(hosts)

    def _announcement(self, host: str) -> tuple[Announcement | None, float]:
        source = self._source
        ann = source.announcement(host)
        if ann is None or source.returned(host):
            return None, 0.0
        return ann, source.now() - ann.last

    def configured(self, host: str) -> bool:
        return self._inner.configured(host)

    def power_state(self, host: str) -> ports.PowerReading:
        return self._inner.power_state(host)

    def fence(self, host: str) -> ports.FenceResult:
        ann, age = self._announcement(host)
        if ann is None:
            return self._inner.fence(host)
        reading = self._inner.power_state(host)
        if reading.off:
            LOG.info('host %s announced a %s and its fencing devices report '
                     'it off (%s): proven off without a power operation',
                     host, ann.kind, reading.detail)
            return ports.FenceResult(host=host, level=reading.level,
                                     devices=(), announced=True,
                                     shutdown=ann.kind)
        grace = self._source.poweroff_grace
        if ann.kind == POWEROFF and reading.on and age < grace:
            raise exceptions.FencingError(
                'host %s announced a power-off %d s ago and its fencing '
                'devices still report it on (%s): waiting up to %d s '
                '([shutdown] poweroff_grace) for it to finish before '
                'fencing it' % (host, age, reading.detail, grace))
        LOG.warning('host %s announced a %s but its fencing devices do not '
                    'report it off (%s): fencing it like any failed host',
                    host, ann.kind, reading.detail)
        # Fenced for real, but what it announced still holds (a host
        # switched off on purpose stays off after its evacuation).
        return dataclasses.replace(self._inner.fence(host),
                                   shutdown=ann.kind)

    def unfence(self, host: str) -> ports.FenceResult:
        ann, _age = self._announcement(host)
        if ann is not None and ann.kind == POWEROFF:
            LOG.info('host %s was powered off on purpose (announced): not '
                     'powering it on; it is enabled when it comes back',
                     host)
            return ports.FenceResult(host=host, level=0, devices=(),
                                     announced=True, shutdown=ann.kind)
        return self._inner.unfence(host)
