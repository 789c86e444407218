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

"""Orchestrated evacuation: higher restart priority first.

Each instance's priority is an integer in its server metadata (key
``[evacuation] priority_key``, default 0). Instances of the highest
pending priority are evacuated in parallel; the next priority starts only
once every higher one is rebuilt (or given up), so e.g. a database comes
back before the applications using it. Tracking and retries are those of
the smart strategy.
"""

from instanceha.engine import model
from instanceha.plugins.evacuation import base
from instanceha.plugins.evacuation import smart


class OrchestratedEvacuation(smart.SmartEvacuation):
    description = ('Evacuate by restart priority (server metadata, higher '
                   'first, equal in parallel), tracked like smart.')

    def priority(self, server: model.Server) -> int:
        raw = (server.metadata or {}).get(self.conf.evacuation.priority_key)
        if raw is None:
            return 0
        try:
            return int(str(raw).strip())
        except ValueError:
            # A bad value must not stop an evacuation: treat it as default.
            return 0

    def ready(self, tasks: list[base.InstanceTask]
              ) -> list[base.InstanceTask]:
        open_ = [t for t in tasks if t.state in (base.TaskState.PENDING,
                                                 base.TaskState.IN_FLIGHT)]
        if not open_:
            return []
        top = max(t.priority for t in open_)
        return [t for t in open_
                if t.priority == top and t.state is base.TaskState.PENDING]
