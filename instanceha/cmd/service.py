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

"""instanceha-service: the Instance HA daemon."""

import sys

from oslo_config import cfg

from instanceha.cmd import common
from instanceha.daemon import preflight
from instanceha.plugins import loader

PROG = 'instanceha-service'


def main(argv: list[str] | None = None) -> int:
    conf = cfg.CONF

    def body() -> int:
        common.setup(PROG, argv, conf)
        # The checks config validate runs: what it accepts, we start with.
        preflight.check_startup(conf)
        drivers = loader.load_configured(conf)
        from instanceha.daemon import service
        return service.run(conf, drivers)

    return common.run(PROG, body)


if __name__ == '__main__':
    sys.exit(main())
