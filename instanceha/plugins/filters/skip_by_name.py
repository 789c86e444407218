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

"""Never touch instances or hosts whose names match operator globs."""

import fnmatch

from instanceha.engine import model
from instanceha.plugins.filters import base


def _match(name: str | None, globs: list[str]) -> str | None:
    for glob in globs:
        if name is not None and fnmatch.fnmatchcase(name, glob):
            return glob
    return None


class SkipByNameFilter(base.Filter):
    """Drop instances and hosts matching [filters] skip_*_names globs."""

    description = ('skip instances/hosts matching [filters] '
                   'skip_instance_names / skip_host_names')

    @classmethod
    def get_properties(cls) -> dict[str, str]:
        return {'[filters] skip_instance_names': 'instance name globs',
                '[filters] skip_host_names': 'host name globs'}

    def host_reason(self, host: str,
                    snapshot: model.Snapshot) -> str | None:
        glob = _match(host, self.conf.filters.skip_host_names)
        return ('host name matches [filters] skip_host_names %r' % glob
                if glob else None)

    def instance_reason(self, server: model.Server,
                        snapshot: model.Snapshot) -> str | None:
        glob = _match(server.name, self.conf.filters.skip_instance_names)
        return ('name matches [filters] skip_instance_names %r' % glob
                if glob else None)
