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

Each instance's priority is an integer under ``[evacuation]
priority_key`` (default 0), read from ``[evacuation] priority_sources``:
by default only the flavor's extra specs, which only operators set.
Server metadata is writable by the instance's owner, so a tenant could
put an instance that never rebuilds first and have every other tenant's
instance on that host given up after it; it is read only when listed.
(Image properties are writable by the image's owner, and aggregate
metadata is the same for every instance of a host, so neither is a
source.) Instances of the highest pending priority are evacuated in
parallel; the next priority starts only once every higher one is rebuilt
(or given up), so e.g. a database comes back before the applications
using it. Tracking and retries are those of the smart strategy.
"""

from instanceha.engine import model
from instanceha.plugins.evacuation import base
from instanceha.plugins.evacuation import smart


class OrchestratedEvacuation(smart.SmartEvacuation):
    description = ('Evacuate by restart priority (flavor extra specs, '
                   'higher first, equal in parallel), tracked like smart.')

    def priority(self, server: model.Server) -> int:
        group = self.conf.evacuation
        for source in group.priority_sources:
            where = (server.metadata if source == 'server'
                     else server.flavor.extra_specs) or {}
            raw = where.get(group.priority_key)
            if raw is None:
                continue
            try:
                return int(str(raw).strip())
            except ValueError:
                # A bad value must not stop an evacuation: the default.
                return 0
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
