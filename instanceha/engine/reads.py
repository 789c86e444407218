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

"""What a full read of the cloud lists: only what the plan will look at.

The planner looks at the servers of the hosts it decides about (a failed
host, a host in recovery, a claimed spare) and at the aggregates of those
hosts; the servers of a healthy host are never looked at. Listing every
server of a cloud of 100,000 instances (100 pages) to decide about one
host is what this module avoids:

* servers are listed per host (``servers?host=X``, bounded pages) for the
  hosts Nova reports not plainly healthy in that same read (down, stale,
  forced down, disabled: our markers too), the hosts another witness may
  say failed (:meth:`Detector.suspects`), the claimed spares and the
  engine's own workflows. A filter that judges one host by every server
  (``needs_all_servers``) or a witness that cannot say whom it may fail
  gets the whole listing, as before;
* aggregates are read at most every ``[detection] aggregates_max_age``
  seconds (operators change them rarely; a failure finds them at most
  that old), and only in a full read, which a healthy cloud does not
  make;
* a host judged failed whose servers were not listed (a witness changed
  its mind between the listing and the plan) is left undecided by the
  planner until the next read lists them: never recovered with no
  instances.

With every host healthy a full read is one small call (the services),
the aggregates being cached; none at all when the services were read in
the same tick (the engine's frequent services read), so a host in
recovery costs Nova nothing per poll once its servers were listed.
"""

from collections.abc import Iterable
import dataclasses
import datetime

from instanceha.engine import model
from instanceha.engine import ports
from instanceha.engine import watch

#: Seconds an aggregate listing is reused when the option is not set.
DEFAULT_AGGREGATES_MAX_AGE = 300.0


def _opt(conf, group: str, name: str, default):
    try:
        return getattr(getattr(conf, group), name)
    except (AttributeError, KeyError):  # a conf without the option
        return default


class FocusedReads:
    """Full reads that list only the hosts being decided."""

    def __init__(self, conf, drivers, clock: ports.Clock):
        self.conf = conf
        self.drivers = drivers
        self.clock = clock
        self._aggregates: tuple[model.Aggregate, ...] | None = None
        self._aggregates_at: float | None = None
        #: Hosts listed by the latest read (None: every server).
        self.last_focus: frozenset[str] | None = None

    def _max_age(self) -> float:
        return float(_opt(self.conf, 'detection', 'aggregates_max_age',
                          DEFAULT_AGGREGATES_MAX_AGE))

    def lists_everything(self) -> bool:
        """Whether a filter or a witness needs every server listed.

        A witness that cannot name its suspects (no
        ``supports_suspects``) may fail any host.
        """
        if any(f.needs_all_servers for f in self.drivers.filters):
            return True
        # A placement policy weighing every host's load (its instances).
        strategy = self.drivers.evacuation
        if strategy is not None and strategy.needs_all_servers:
            return True
        return not all(d.supports_suspects for d in self.drivers.detectors)

    def focus(self, services: tuple[model.Service, ...],
              now: datetime.datetime, clock_skew: float | None,
              extra: Iterable[str] = (),
              skip: Iterable[str] = ()) -> frozenset[str] | None:
        """The hosts whose servers to list; None: every server."""
        if self.lists_everything():
            return None
        snap = model.Snapshot(taken_at=now, services=services,
                              clock_skew=clock_skew)
        hosts = set(watch.attention(snap, now, self.conf.delta))
        for det in self.drivers.detectors:
            hosts |= det.suspects(services, now) or frozenset()
        hosts -= set(skip)
        hosts |= self.drivers.reservation.claimed()
        hosts |= set(extra)
        known = {s.host for s in services}
        return frozenset(h for h in hosts if h in known)

    def snapshot(self, cloud: ports.CloudPort, extra: Iterable[str] = (),
                 clock_skew: float | None = None,
                 skip: Iterable[str] = (),
                 services: model.Snapshot | None = None,
                 **kwargs) -> model.Snapshot:
        """A full read of ``cloud`` (``kwargs``: images, migrations).

        :param extra: hosts whose servers are listed whatever Nova says
            of them (the engine's workflows).
        :param skip: hosts whose servers nobody needs, unhealthy as they
            are (workflows past their evacuation).
        :param clock_skew: the latest known skew (Nova's time stamps in
            the services are judged by Nova's clock).
        :param services: the compute services read just now (this tick):
            not listed again, so a read that lists no server and no
            aggregate costs Nova nothing.
        """
        extra, skip = frozenset(extra), frozenset(skip)
        mono = self.clock.monotonic()
        fresh = (self._aggregates is not None and
                 mono - self._aggregates_at < self._max_age())
        chosen: list[frozenset[str] | None] = []

        def select(services):
            # Judged by the services read in this same call, so a host
            # that fails between two reads is listed as soon as it shows.
            hosts = self.focus(services, self.clock.now(), clock_skew,
                               extra, skip) or frozenset()
            chosen.append(hosts)
            return hosts

        hosts = None if self.lists_everything() else select
        if services is not None:
            kwargs['services'] = services
        snap = cloud.snapshot(hosts=hosts, aggregates=not fresh, **kwargs)
        self.last_focus = chosen[0] if chosen else None
        if not fresh:
            self._aggregates = snap.aggregates
            self._aggregates_at = mono
        elif self._aggregates is not None:
            snap = dataclasses.replace(snap, aggregates=self._aggregates)
        return snap
