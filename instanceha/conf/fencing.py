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

"""Where the per-host fencing configuration lives, and its time limits.

The devices themselves are described per host in the YAML file named by
``config_file`` (see etc/instanceha/fencing.yaml.sample); these options
are the defaults a device or a host's chain falls back to.
"""

from oslo_config import cfg

from instanceha import exceptions

GROUP = 'fencing'

OPTS = [
    cfg.StrOpt('config_file', mutable=True,
               default='/etc/instanceha/fencing.yaml',
               help='YAML file with the fencing devices (and fencing '
                    'levels) of every compute host, keyed by host name. A '
                    'host without an entry is never evacuated. Re-read on '
                    'SIGHUP: a file with a bad entry is refused and the '
                    'one loaded before stays in force.'),
    cfg.IntOpt('device_timeout', default=60, min=1, max=3600,
               help='Seconds one fencing device may take to confirm a '
                    'power change (the device must report the new state '
                    'within this time). A device may override it with its '
                    '"timeout" parameter.'),
    cfg.IntOpt('device_retries', default=1, min=0, max=10,
               help='Extra attempts on one device after a failure that may '
                    'be transient (unreachable, timed out, not confirmed); '
                    'a rejected password is never retried. A device may '
                    'override it with its "retries" parameter.'),
    cfg.IntOpt('chain_timeout', default=300, min=1, max=86400,
               help='Seconds the whole fencing chain of one host (every '
                    'level, every device, every retry) may take before the '
                    'host is declared not fenced.'),
    cfg.FloatOpt('poll_interval', default=1.0, min=0.05, max=60,
                 help='Seconds between two power state queries while '
                      'waiting for a device to confirm a power change.'),
    cfg.BoolOpt('allow_noop', default=False,
                help='Accept hosts fenced by the noop driver, which proves '
                     'nothing about a host\'s power state. Only for labs: '
                     'evacuating a host that may still run its instances '
                     'can corrupt their data. Without it, a noop entry '
                     'stops start-up.'),
    cfg.StrOpt('ipmitool_path', default='ipmitool',
               help='The ipmitool executable used by the ipmi driver (a '
                    'name looked up in PATH, or an absolute path).'),
    cfg.StrOpt('agents_dir', default='/usr/sbin',
               help='Directory holding the ClusterLabs fence agents '
                    '(fence_ipmilan, fence_redfish, ...) that the '
                    'fence-agent driver runs.'),
]


def validate(conf: cfg.ConfigOpts) -> None:
    group = conf.fencing
    if group.chain_timeout < group.device_timeout:
        raise exceptions.ConfigurationError(
            'option [fencing] chain_timeout (%d) must not be shorter than '
            '[fencing] device_timeout (%d): not even one device could '
            'finish' % (group.chain_timeout, group.device_timeout))
