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

"""Start-up shared by the console scripts: parse, log, validate."""

from collections.abc import Callable
import sys

from oslo_config import cfg
from oslo_log import log

from instanceha import conf as ha_conf
from instanceha import exceptions


def fail(prog: str, message: str, code: int = 2) -> int:
    print('%s: error: %s' % (prog, message), file=sys.stderr)
    return code


def setup(prog: str, argv: list[str] | None, conf: cfg.ConfigOpts,
          **kwargs) -> None:
    """Parse the command line and config files, set up logging, validate.

    :raises ConfigurationError: for any bad option, naming it.
    """
    try:
        ha_conf.parse_args(sys.argv[1:] if argv is None else argv, conf,
                           **kwargs)
    except (cfg.Error, ValueError) as exc:
        raise exceptions.ConfigurationError(str(exc)) from None
    log.setup(conf, 'instanceha')
    ha_conf.validate(conf)


def run(prog: str, body: Callable[[], int]) -> int:
    """Run a command's body, turning our errors into one clear line."""
    try:
        return body()
    except exceptions.ConfigurationError as exc:
        return fail(prog, str(exc))
    except exceptions.InstanceHAError as exc:
        return fail(prog, str(exc), code=1)
    except KeyboardInterrupt:
        return 130
