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

"""instanceha-manage drivers / config: what is installed, what is set."""

from oslo_config import cfg

from instanceha.plugins import loader


def _list_drivers(conf: cfg.ConfigOpts) -> int:
    for namespace in loader.NAMESPACES:
        print(namespace)
        for name, description in loader.describe(namespace):
            print('  %-22s %s' % (name, description))
    return 0


def _validate_config(conf: cfg.ConfigOpts) -> int:
    # Options were validated at start-up; loading the drivers runs each
    # driver's own validate(), and loading the fencing file validates every
    # host's devices, exactly as the service does before its first cycle.
    from instanceha.plugins.fencing import topology

    loaded = loader.load_configured(conf)
    fencing = topology.Topology.from_conf(conf)
    print('configuration OK: drivers %s; fencing file %s with %d host(s)'
          % (', '.join(drv.name for drv in loaded.all()), fencing.file.path,
             len(fencing.file.hosts)))
    return 0


def add_parsers(subparsers) -> None:
    drivers = subparsers.add_parser('drivers', help='installed drivers')
    sub = drivers.add_subparsers(dest='action', required=True)
    sub.add_parser('list', help='list every installed driver'
                   ).set_defaults(func=_list_drivers)
    config = subparsers.add_parser('config', help='configuration checks')
    sub = config.add_subparsers(dest='action', required=True)
    sub.add_parser('validate', help='check options and load every '
                   'configured driver').set_defaults(func=_validate_config)
