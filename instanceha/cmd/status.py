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

"""instanceha-status upgrade check: is this installation ready to run?

Like ``nova-status upgrade check``: run after installing or upgrading,
before (re)starting the service. Unlike ``config validate`` it reaches
the outside: Nova, the coordination backend. Each check says Success,
Warning or Failure; the exit code is the worst of them (0, 1, 2), 255
when a check itself broke. Nothing is changed anywhere, and the command
never takes part in the leader election.
"""

import sys
import traceback

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

from instanceha.cmd import common
from instanceha import conf as ha_conf
from instanceha.daemon import preflight
from instanceha import exceptions

PROG = 'instanceha-status'

Code = upgradecheck.Code
Result = upgradecheck.Result


def _failure(exc: BaseException) -> Result:
    return Result(Code.FAILURE, str(exc))


class Checks(upgradecheck.UpgradeCommands):
    """The checks, in order; later ones skip what an earlier one broke."""

    def __init__(self, conf: cfg.ConfigOpts):
        super().__init__()
        self.conf = conf
        self._cloud = None
        self._cloud_error: str | None = None

    def _configuration(self) -> Result:
        findings = preflight.run(self.conf)
        errors = [f.message for f in findings if f.level == preflight.ERROR]
        warnings = [f.message for f in findings
                    if f.level == preflight.WARNING]
        if errors:
            return Result(Code.FAILURE, ' | '.join(errors + warnings))
        if warnings:
            return Result(Code.WARNING, ' | '.join(warnings))
        return Result(Code.SUCCESS)

    def cloud(self):
        """The Nova port, once; None (and the reason) if it cannot load."""
        if self._cloud is None and self._cloud_error is None:
            from instanceha.adapters import nova
            try:
                self._cloud = nova.NovaCloud(self.conf)
            except exceptions.ConfigurationError as exc:
                self._cloud_error = str(exc)
        return self._cloud

    def _nova(self) -> Result:
        from instanceha.adapters import nova

        cloud = self.cloud()
        if cloud is None:
            return Result(Code.FAILURE, self._cloud_error)
        try:
            low, high = cloud.microversions()
            if not nova.offers(low, high, nova.MICROVERSION):
                return Result(Code.FAILURE, (
                    'Nova offers compute API microversions %s to %s; '
                    'instanceha needs %s' % (low, high, nova.MICROVERSION)))
            # os-services is admin-only: success proves the role too.
            services = cloud.list_services()
        except exceptions.CloudError as exc:
            return _failure(exc)
        return Result(Code.SUCCESS, (
            'Nova offers microversions %s to %s (instanceha uses %s); %d '
            'nova-compute service(s) listed with the admin role'
            % (low, high, nova.MICROVERSION, len(services))))

    def _coordination(self) -> Result:
        from instanceha.adapters import coordination

        try:
            coordinator = coordination.ToozCoordinator.from_conf(self.conf)
            coordinator.probe()
        except exceptions.InstanceHAError as exc:
            return _failure(exc)
        return Result(Code.SUCCESS, 'backend %s reachable' % (
            coordination.redact_url(self.conf.coordination.backend_url)))

    def _fencing(self) -> Result:
        from instanceha.engine import decide
        from instanceha.plugins.fencing import config
        from instanceha.plugins import loader

        try:
            fencing = config.load(self.conf, strict=True)
        except exceptions.ConfigurationError as exc:
            return _failure(exc)
        cloud = self.cloud()
        if cloud is None:
            return Result(Code.WARNING, (
                'fencing file %s valid (%d host(s)); coverage not checked: '
                '%s' % (fencing.path, len(fencing.hosts), self._cloud_error)))
        try:
            drivers = loader.load_deciders(self.conf)
            snapshot = cloud.snapshot(**decide.snapshot_needs(drivers))
        except exceptions.InstanceHAError as exc:
            return Result(Code.WARNING, (
                'fencing file %s valid; coverage not checked: %s'
                % (fencing.path, exc)))
        computes = sorted({s.host for s in snapshot.services})
        uncovered = []
        for host in computes:
            # The plan's own rule for an evacuable instance.
            eligible, _dropped = decide._eligible_servers(  # noqa
                drivers.filters, host, snapshot)
            if eligible and config.match_host(
                    host, list(fencing.hosts), fencing.path) is None:
                uncovered.append('%s (%d instance(s))'
                                 % (host, len(eligible)))
        if uncovered:
            return Result(Code.FAILURE, (
                'compute host(s) running evacuable instances without a '
                'fencing entry in %s: %s; such a host is never evacuated'
                % (fencing.path, ', '.join(uncovered))))
        return Result(Code.SUCCESS, (
            'fencing file %s valid; every compute host running evacuable '
            'instances has an entry (%d compute host(s), %d entr(ies))'
            % (fencing.path, len(computes), len(fencing.hosts))))

    def _heartbeat_key(self) -> Result:
        from instanceha.heartbeat import keys

        if 'heartbeat' not in self.conf.detection.detectors:
            return Result(Code.SUCCESS, 'heartbeat detector off')
        group = self.conf.heartbeat
        try:
            keys.KeyRing(group.key_file, group.previous_key_file)
        except (ValueError, OSError, exceptions.InstanceHAError) as exc:
            return _failure(exc)
        return Result(Code.SUCCESS, 'key file %s readable' % group.key_file)

    _upgrade_checks = (
        ('Configuration', _configuration),
        ('Nova API', _nova),
        ('Coordination backend', _coordination),
        ('Fencing', _fencing),
        ('Heartbeat key', _heartbeat_key),
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    json_output = common.wants_json(argv)
    conf = cfg.ConfigOpts()
    checks = Checks(conf)
    upgradecheck.register_cli_options(conf, checks)
    try:
        ha_conf.parse_args(argv, conf)
    except (cfg.Error, ValueError) as exc:
        return common.fail(PROG, str(exc), code=255, json_output=json_output)
    common.setup_logging(conf)
    # upgradecheck reads --json from its module-level CONF.
    upgradecheck.CONF = conf
    # oslo.upgradecheck's run() prints a check that broke as a traceback
    # on stdout; run the checks here so that stdout stays JSON.
    try:
        return conf.command.action_fn()
    except Exception as exc:
        traceback.print_exc()
        return common.fail(PROG, 'a check broke: unexpected %s (traceback '
                           'above)' % type(exc).__name__, code=255,
                           json_output=json_output)


if __name__ == '__main__':
    sys.exit(main())
