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

"""The installed version, as pbr computed it when the package was built.

Every console script answers ``--version`` with this string, so an
operator can tell which release a host runs.
"""

from pbr import version as pbr_version

version_info = pbr_version.VersionInfo('instanceha')


def version_string() -> str:
    """E.g. ``1.2.0`` for a release, ``1.2.1.dev4`` between releases."""
    return version_info.release_string()


def add_argument(parser) -> None:
    """``--version`` for an argparse command (oslo.config adds its own)."""
    parser.add_argument('--version', action='version',
                        version=version_string())
