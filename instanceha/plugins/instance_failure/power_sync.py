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

"""A guest stopped by nova-compute's power-state sync, asked by no one."""

from instanceha.engine import model
from instanceha.plugins.instance_failure import base


class PowerSyncDetector(base.InstanceDetector):
    """SHUTOFF, and the newest instance action is a stop without a user.

    When a guest dies under a running nova-compute (qemu killed, a guest
    kernel that powered off, the OOM killer), the hypervisor reports it
    stopped and nova-compute's power-state sync calls the stop API
    itself, in an admin context without a user: Nova records an instance
    action ``stop`` whose ``user_id`` is null. A user's stop (or an
    admin's, instanceha's) carries that user's id and is never undone.
    """

    description = ('SHUTOFF instances whose last action is a stop no user '
                   'asked for (nova-compute\'s power-state sync)')

    def suspect(self, server: model.Server) -> bool:
        return server.status == 'SHUTOFF' and not server.task_state

    def crashed(self, server: model.Server,
                actions: list[model.InstanceAction]
                ) -> model.InstanceAction | None:
        if not actions:
            return None
        newest = actions[0]
        if newest.action == 'stop' and not newest.user_id:
            return newest
        return None
