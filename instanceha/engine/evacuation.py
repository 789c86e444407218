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

"""What an evacuation writes into Nova: its lock reason, read back.

An instance is locked while it is evacuated (always with ``[evacuation]
lock_instances``, else only when its status must be restored after its
rebuild); the lock's reason says the lock is ours and keeps that status,
so that a copy restarted in the middle of a rebuild unlocks only its own
locks and restores what it must. The evacuation itself is
:mod:`instanceha.engine.evacuation_job`.
"""

import re

from instanceha.engine import model
from instanceha.engine import ports


LOCK_REASON = 'instanceha: evacuating from %s'
_LOCK_RE = re.compile(r'^instanceha: evacuating from (?P<host>\S+)'
                      r'(?: \(was (?P<was>[A-Z_]+)\))?$')


def lock_reason(host: str, was: str | None) -> str:
    """Our lock reason, read back after a restart.

    It says the lock is ours (we never unlock a lock we did not take) and
    what the instance's status was before (restored after its rebuild).
    """
    text = LOCK_REASON % host
    return '%s (was %s)' % (text, was) if was else text


def our_lock(server: model.Server, host: str) -> tuple[bool, str | None]:
    """(locked by us for ``host``, status before) from Nova's lock reason.

    A lock whose reason is not ours is someone else's (its owner's), and
    is left exactly as it is.
    """
    source, was = lock_of_ours(server)
    if source != host:
        return False, None
    return True, was


def lock_of_ours(server: model.Server) -> tuple[str | None, str | None]:
    """(the host it was evacuated from, status before) of a lock of ours.

    (None, None) when ``server`` is not locked by us (not locked, or
    locked with a reason that is not ours, or with none).
    """
    if not server.locked:
        return None, None
    m = _LOCK_RE.match(server.locked_reason or '')
    if not m:
        return None, None
    return m.group('host'), m.group('was')


#: Statuses an evacuated instance is given back after its rebuild.
RESTORED = frozenset({'ERROR', 'SHUTOFF'})


def restore_status(cloud: ports.CloudPort, server: model.Server,
                   want: str | None) -> str | None:
    """SHUTOFF stays SHUTOFF, ERROR goes back to ERROR after a rebuild.

    ``server`` as Nova reports it after its rebuild; ``want`` its status
    before. Nova (microversion 2.94) stops a rebuilt SHUTOFF server
    itself; a retried one was ERROR when evacuated and comes back ACTIVE.
    Returns the status restored, None when nothing was to be done.
    """
    if want == 'ERROR' and server.status != 'ERROR':
        cloud.reset_server_state(server.id, 'error')
    elif want == 'SHUTOFF' and server.status == 'ACTIVE':
        cloud.stop_server(server.id)
    else:
        return None
    return want
