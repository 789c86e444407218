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

import datetime
import logging

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


class StoppedServers:
    """The stopped servers as of the last read, and how to read again.

    ``tracked``: the servers the instance-failure path acts on, shared
    with it (both live in the tick thread).
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

    def read(self, snapshot: model.Snapshot, now: datetime.datetime,
             every: int) -> tuple[model.Server, ...] | None:
        """The stopped servers, and those we act on that are not.

        At start-up, after a read that failed and every
        ``full_read_every`` reads, every SHUTOFF and VERIFY_RESIZE server
        is listed; in between only the servers Nova changed since the
        previous read started (less :data:`OVERLAP`) update what the
        last read found: a server listed in another status, or deleted,
        leaves it. Nova lists a server whose metadata alone changed too
        (our records: see the functional test of ``stopped_servers``).
        """
        cloud = self.env.cloud
        # Taken before the listing: whatever changes while it runs is
        # listed again by the next one.
        started = snapshot.nova_now(now)
        known = self.known
        partial = self.partial_reads + 1
        try:
            if known is None or self.read_at is None or partial >= every:
                fresh = {s.id: s for s in cloud.stopped_servers()}
                known, partial = dict(fresh), 0
            else:
                # Back on our clock, with the skew measured now.
                since = self.read_at + datetime.timedelta(
                    seconds=(snapshot.clock_skew or 0.0) - OVERLAP)
                fresh = {s.id: s for s in cloud.stopped_servers(since)}
                known = dict(known)
                for srv in fresh.values():
                    if srv.status in WATCHED:
                        known[srv.id] = srv
                    else:  # started, migrated, deleted (DELETED)...
                        known.pop(srv.id, None)
        except exceptions.InstanceHAError as exc:
            LOG.warning('cannot list the stopped servers: %s', exc)
            self.known = None
            return None
        self.known = known
        # Nova's time unknown (no skew measured yet): a full read next.
        self.read_at = started if snapshot.clock_skew is not None else None
        self.partial_reads = partial
        found = dict(known)
        found.update(self._tracked_elsewhere(set(known), fresh, partial))
        return tuple(found[k] for k in sorted(found))

    def _tracked_elsewhere(self, stopped: set, fresh: dict,
                           partial: int) -> dict[str, model.Server]:
        """The servers we act on that are not stopped.

        As the listing of the changes has them, else as last read when it
        has listed every change since (none), else read one by one.
        """
        found = {}
        last, self.others = self.others, {}
        for server_id in sorted(self.tracked - stopped):
            srv = fresh.get(server_id) if partial else None
            if srv is None and partial:
                srv = last.get(server_id)
            if srv is None:
                try:
                    srv = self.env.cloud.get_server(server_id)
                except exceptions.InstanceHAError as exc:
                    if getattr(exc, 'status', None) == 404:
                        self.tracked.discard(server_id)
                    else:
                        LOG.warning('instance %s: cannot read it: %s',
                                    server_id, exc)
                    continue
            if srv.status == 'DELETED':
                self.tracked.discard(server_id)
                continue
            found[server_id] = self.others[server_id] = srv
        return found
