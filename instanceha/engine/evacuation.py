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

"""What an evacuated instance is given back: the status it had.

An instance is locked while it is evacuated (always with ``[evacuation]
lock_instances``, else only when its status must be restored after its
rebuild); the lock's reason (:class:`instanceha.engine.reasons.Lock`)
says the lock is ours and keeps that status, so that a copy restarted in
the middle of a rebuild unlocks only its own locks and restores what it
must, here. The evacuation itself is
:mod:`instanceha.engine.evacuation_job`.
"""

from instanceha.engine import model
from instanceha.engine import ports


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
