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

"""Waiting for hosts that write a crash dump (CHECK_KDUMP in Red Hat InstanceHA)."""

from oslo_config import cfg

from instanceha import exceptions

GROUP = 'kdump'

OPTS = [
    cfg.BoolOpt('check_kdump', default=False,
                help='Listen for fence_kdump messages and give a failed '
                     'host kdump_timeout seconds to announce a crash dump. '
                     'A host that is dumping is treated as fenced (it is not '
                     'power-cycled, which would lose the dump) and its '
                     'recovery waits until it stops sending. Needs "kdump" '
                     'in [detection] detectors (CHECK_KDUMP in Red Hat InstanceHA).'),
    cfg.IntOpt('kdump_timeout', default=30, min=1, max=3600,
               help='Seconds a failed host is given to send its first '
                    'fence_kdump message before it is fenced the usual way '
                    '(KDUMP_TIMEOUT in Red Hat InstanceHA).'),
    cfg.IntOpt('message_interval', default=10, min=1, max=3600,
               help='Seconds between two fence_kdump messages of a dumping '
                    'host (fence_kdump_send\'s -i, 10 by default). A dump '
                    'counts as a fence only while it is live: its last '
                    'message at most this old when the host would be '
                    'fenced. An evacuation call is made only right after a '
                    'fresh message (under half a second old): the '
                    'evacuation waits up to this long for the next one, '
                    'and without it the dump has ended (it may have been '
                    'followed by a reboot) and the host is fenced through '
                    'its devices. Set it a little above -i if messages '
                    'arrive late.'),
    cfg.IntOpt('message_timeout', default=30, min=1, max=3600,
               help='A host whose last fence_kdump message is older than '
                    'this many seconds has stopped dumping (fence_kdump_send '
                    'repeats every 10 s by default).'),
    cfg.ListOpt('listen_addresses', default=['0.0.0.0', '::'],
                help='Addresses the fence_kdump listener binds, IPv4 and/or '
                     'IPv6.'),
    cfg.PortOpt('port', default=7410,
                help='UDP port the fence_kdump listener binds (the port '
                     'fence_kdump_send uses by default).'),
    cfg.ListOpt('address_map', default=[],
                help='ADDRESS=HOST pairs naming the compute host that sends '
                     'fence_kdump messages from ADDRESS (the kdump kernel\'s '
                     'source address), e.g. 192.0.2.11=compute-1,'
                     'fd00::12=compute-2. The message carries no name.'),
    cfg.BoolOpt('reverse_dns', default=True,
                help='For a sender not in address_map, look up its reverse '
                     'DNS name and accept it when that name (or its first '
                     'label) is a compute host.'),
]


def address_map(conf: cfg.ConfigOpts) -> dict[str, str]:
    """[kdump] address_map as {normalized address: host}.

    :raises ConfigurationError: naming the entry that is wrong.
    """
    from instanceha.heartbeat import udp

    result: dict[str, str] = {}
    for entry in conf.kdump.address_map:
        address, sep, host = entry.partition('=')
        address, host = address.strip(), host.strip()
        try:
            if not sep or not host:
                raise ValueError('expected ADDRESS=HOST')
            address = udp.normalize_address(address)
        except ValueError as exc:
            raise exceptions.ConfigurationError(
                'option [kdump] address_map: entry %r: %s' % (entry, exc)
            ) from None
        if address in result and result[address] != host:
            raise exceptions.ConfigurationError(
                'option [kdump] address_map: address %s is mapped to both '
                '%s and %s' % (address, result[address], host))
        result[address] = host
    return result


def validate(conf: cfg.ConfigOpts) -> None:
    address_map(conf)
    if conf.kdump.check_kdump and 'kdump' not in conf.detection.detectors:
        raise exceptions.ConfigurationError(
            'option [kdump] check_kdump = true needs the kdump detector: add '
            '"kdump" to [detection] detectors (now %s)'
            % ', '.join(conf.detection.detectors))
