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

import sys

from oslo_config import cfg

from instanceha.plugins import loader

PROG = 'instanceha-manage'


def _list_drivers(conf: cfg.ConfigOpts) -> int:
    for namespace in loader.NAMESPACES:
        print(namespace)
        for name, description in loader.describe(namespace):
            print('  %-22s %s' % (name, description))
    return 0


def _validate_config(conf: cfg.ConfigOpts) -> int:
    # The checks the service runs before its first cycle (preflight),
    # all of them, so that one run names every problem.
    from instanceha.daemon import preflight
    from instanceha.plugins.fencing import config
    from instanceha.plugins.notifiers import dispatcher

    strict = conf.command.validate_strict
    findings = preflight.run(conf)
    failed = False
    for finding in findings:
        error = finding.level == preflight.ERROR or strict
        failed = failed or error
        print('%s: %s: %s' % (PROG, 'error' if error else 'warning',
                              finding.message), file=sys.stderr)
    if failed:
        return 2
    loaded = loader.load_configured(conf)
    notifiers = dispatcher.from_conf(conf).drivers
    fencing = config.load(conf)
    print('configuration OK%s: drivers %s; notifiers %s; fencing file %s '
          'with %d host(s)'
          % (' (%d warning(s))' % len(findings) if findings else '',
             ', '.join(drv.name for drv in loaded.all()),
             ', '.join(n.name for n in notifiers) or 'none', fencing.path,
             len(fencing.hosts)))
    return 0


def add_parsers(subparsers) -> None:
    drivers = subparsers.add_parser('drivers', help='installed drivers')
    sub = drivers.add_subparsers(dest='action', required=True)
    sub.add_parser('list', help='list every installed driver'
                   ).set_defaults(func=_list_drivers)
    config = subparsers.add_parser('config', help='configuration checks')
    sub = config.add_subparsers(dest='action', required=True)
    validate = sub.add_parser(
        'validate', help='run the checks of the service\'s start-up: '
        'options, [nova] credentials (not used), coordination backend, '
        'drivers, fencing file, unknown options; exit 2 on an error')
    validate.add_argument('--strict', action='store_true',
                          dest='validate_strict',
                          help='treat warnings (unknown options, secrets '
                               'kept unsafely) as errors')
    validate.set_defaults(func=_validate_config)
