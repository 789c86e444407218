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

"""Which instances the instance-failure path looks at: the stopped ones.

Every poll lists the stopped servers of the cloud: all of them at times,
in between only those Nova changed since the previous listing, so that a
quiet cloud of many instances costs a small answer a poll. The servers
the path acts on that are not stopped are followed too (one by one only
when no listing had them).
"""

from collections.abc import Mapping
import dataclasses
import datetime
import logging
import types

from instanceha.engine import model
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: Nova statuses of the servers watched (a crash leaves a guest SHUTOFF;
#: a relocation waits in VERIFY_RESIZE).
WATCHED = frozenset({'SHUTOFF', 'VERIFY_RESIZE'})
#: Seconds a listing of the changes reaches back before the start of the
#: read it follows: a change Nova stamped just before that read but made
#: visible after it, Nova's machines' clocks against the one whose time
#: it answers with, and the error of the skew measured (about a second).
OVERLAP = 10.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one read needs, taken in the tick thread before it runs."""

    known: Mapping[str, model.Server] | None
    #: Since when the changes are listed (our clock); None: in full.
    since: datetime.datetime | None
    #: When this read started, on Nova's clock (None: not known).
    started: datetime.datetime | None
    partial: int
    others: Mapping[str, model.Server]
    tracked: frozenset


@dataclasses.dataclass(frozen=True)
class Listing:
    """What one read found (a job's value, applied in the tick thread).

    ``servers``: the stopped servers and those acted on that are not;
    None when the listing failed. ``gone``: servers acted on that Nova
    no longer has.
    """

    plan: Plan
    servers: tuple[model.Server, ...] | None
    known: Mapping[str, model.Server] | None = None
    others: Mapping[str, model.Server] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    gone: frozenset = frozenset()


class StoppedServers:
    """The stopped servers as of the last read, and how to read again.

    ``tracked``: the servers the instance-failure path acts on, shared
    with it. Its state changes in the tick thread only: :meth:`plan`
    takes what a read needs, :func:`fetch` reads (a job), :meth:`apply`
    keeps what it found.
    """

    def __init__(self, env: ports.Environment, tracked: set[str]):
        self.env = env
        self.tracked = tracked
        #: The watched servers by id as of the last read; None: unknown,
        #: the next read lists them all.
        self.known: dict[str, model.Server] | None = None
        #: When the last read started, on Nova's clock (None: unknown).
        self.read_at: datetime.datetime | None = None
        #: Reads that listed only the changes since the last full one.
        self.partial_reads = 0
        #: The servers of ``tracked`` not stopped, as the last read found
        #: them (unchanged while a listing of the changes omits them).
        self.others: dict[str, model.Server] = {}

    def forget(self) -> None:
        """List every watched server again at the next read."""
        self.known = None

    def plan(self, snapshot: model.Snapshot, now: datetime.datetime,
             every: int) -> Plan:
        """What the next read lists (see :func:`fetch`).

        At start-up, after a read that failed and every
        ``full_read_every`` reads, every SHUTOFF and VERIFY_RESIZE server
        is listed; in between only the servers Nova changed since the
        previous read started (less :data:`OVERLAP`).
        """
        partial = self.partial_reads + 1
        full = (self.known is None or self.read_at is None or
                partial >= every)
        since = None if full else self.read_at + datetime.timedelta(
            # Back on our clock, with the skew measured now.
            seconds=(snapshot.clock_skew or 0.0) - OVERLAP)
        return Plan(
            known=None if full else types.MappingProxyType(
                dict(self.known)),
            since=since,
            # Taken before the listing: whatever changes while it runs
            # is listed again by the next one. Nova's time unknown (no
            # skew measured yet): a full read next.
            started=(snapshot.nova_now(now)
                     if snapshot.clock_skew is not None else None),
            partial=0 if full else partial,
            others=types.MappingProxyType(dict(self.others)),
            tracked=frozenset(self.tracked))

    def apply(self, listing: Listing) -> tuple[model.Server, ...] | None:
        """Keep what a read found (tick thread); the servers it found."""
        if listing.servers is None:
            self.known = None
            return None
        self.known = dict(listing.known)
        self.read_at = listing.plan.started
        self.partial_reads = listing.plan.partial
        self.others = dict(listing.others)
        self.tracked.difference_update(listing.gone)
        return listing.servers

    def read(self, snapshot: model.Snapshot, now: datetime.datetime,
             every: int) -> tuple[model.Server, ...] | None:
        """Plan, fetch and apply at once (the caller's thread)."""
        return self.apply(fetch(self.env.cloud, self.plan(snapshot, now,
                                                          every)))


def fetch(cloud: ports.CloudPort, plan: Plan) -> Listing:
    """The stopped servers, and those we act on that are not (a job).

    A listing of the changes updates what the last read found: a server
    listed in another status, or deleted, leaves it. Nova lists a server
    whose metadata alone changed too (our records: see the functional
    test of ``stopped_servers``).
    """
    try:
        if plan.known is None:
            fresh = {s.id: s for s in cloud.stopped_servers()}
            known = dict(fresh)
        else:
            fresh = {s.id: s for s in cloud.stopped_servers(plan.since)}
            known = dict(plan.known)
            for srv in fresh.values():
                if srv.status in WATCHED:
                    known[srv.id] = srv
                else:  # started, migrated, deleted (DELETED)...
                    known.pop(srv.id, None)
    except exceptions.InstanceHAError as exc:
        LOG.warning('cannot list the stopped servers: %s', exc)
        return Listing(plan, None)
    others, gone = _tracked_elsewhere(cloud, plan, set(known), fresh)
    found = dict(known)
    found.update(others)
    return Listing(plan, tuple(found[k] for k in sorted(found)),
                   known=types.MappingProxyType(known),
                   others=types.MappingProxyType(others),
                   gone=frozenset(gone))


def _tracked_elsewhere(cloud: ports.CloudPort, plan: Plan, stopped: set,
                       fresh: dict) -> tuple[dict, set]:
    """The servers we act on that are not stopped, and those gone.

    As the listing of the changes has them, else as last read when it
    has listed every change since (none), else read one by one.
    """
    found, gone = {}, set()
    partial = plan.partial
    for server_id in sorted(plan.tracked - stopped):
        srv = fresh.get(server_id) if partial else None
        if srv is None and partial:
            srv = plan.others.get(server_id)
        if srv is None:
            try:
                srv = cloud.get_server(server_id)
            except exceptions.InstanceHAError as exc:
                if getattr(exc, 'status', None) == 404:
                    gone.add(server_id)
                else:
                    LOG.warning('instance %s: cannot read it: %s',
                                server_id, exc)
                continue
        if srv.status == 'DELETED':
            gone.add(server_id)
            continue
        found[server_id] = srv
    return found, gone
