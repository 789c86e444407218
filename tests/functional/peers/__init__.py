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

"""Real peers on 127.0.0.1 for functional tests, as fixtures.

See README.md in this directory. Importing this package does not import
nova or keystone: the heavy parts run in helper subprocesses.
"""

from tests.functional.peers.base import PeerError  # noqa: F401
from tests.functional.peers.fault_proxy import FaultProxy  # noqa: F401
from tests.functional.peers.ipmi_peer import IpmiBmcPeer  # noqa: F401
from tests.functional.peers.keystone_peer import KeystonePeer  # noqa: F401
from tests.functional.peers.libvirt_peer import LibvirtPeer  # noqa: F401
from tests.functional.peers.nova_peer import NovaPeer  # noqa: F401
from tests.functional.peers.rabbitmq_peer import RabbitPeer  # noqa: F401
from tests.functional.peers.redfish_peer import RedfishPeer  # noqa: F401
from tests.functional.peers.tooz_backends import EtcdPeer  # noqa: F401
from tests.functional.peers.tooz_backends import RedisPeer  # noqa: F401
from tests.functional.peers.watchdog_peer import WatchdogPeer  # noqa: F401
