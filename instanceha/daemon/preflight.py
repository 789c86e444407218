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

"""The configuration checks start-up and ``config validate`` share.

The service refuses to start on any error found here, and
``instanceha-manage config validate`` runs the very same checks, so the
command cannot say "configuration OK" for a configuration the service
then refuses. A check added here applies to both. None of them reaches
the network: ``instanceha-status upgrade check`` does that.
"""

from collections.abc import Callable
import dataclasses
import logging

from oslo_config import cfg

from instanceha import exceptions

LOG = logging.getLogger(__name__)

ERROR, WARNING = 'error', 'warning'


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem: ``level`` ERROR (refused) or WARNING (accepted)."""

    level: str
    message: str

    def __str__(self) -> str:
        return '%s: %s' % (self.level, self.message)


def _values(conf: cfg.ConfigOpts) -> list[Finding]:
    """Every option's type, range and consistency (conf's validate())."""
    from instanceha import conf as ha_conf

    ha_conf.validate(conf)
    return []


def _nova(conf: cfg.ConfigOpts) -> list[Finding]:
    """[nova]: the auth plugin and its options load (no request made)."""
    from instanceha.adapters import nova

    nova.NovaCloud(conf)
    return []


def _coordination(conf: cfg.ConfigOpts) -> list[Finding]:
    """The backend URL's scheme is known and its client library installed."""
    from instanceha.adapters import coordination

    coordination.ToozCoordinator.from_conf(conf)
    return []


def _pause(conf: cfg.ConfigOpts) -> list[Finding]:
    """The coordination backend can keep an operator's pause."""
    from instanceha.adapters import pause_store

    try:
        pause_store.from_conf(conf)
    except ImportError:
        return []  # the coordination check names the missing library
    except exceptions.ConfigurationError as exc:
        return [Finding(WARNING, '%s; this service cannot be paused'
                        % exc)]
    return []


def _drivers(conf: cfg.ConfigOpts) -> list[Finding]:
    """Every configured driver name resolves and accepts its options."""
    from instanceha.plugins import loader
    from instanceha.plugins.notifiers import dispatcher

    loader.load_configured(conf)
    # Also registers oslo.messaging's options when the messaging notifier
    # is configured (before unknown options are looked for).
    dispatcher.from_conf(conf)
    return []


def _fencing(conf: cfg.ConfigOpts) -> list[Finding]:
    """The fencing file: every entry valid, secrets kept in safe files."""
    from instanceha.plugins.fencing import topology

    fencing = topology.Topology.from_conf(conf)
    try:
        return [Finding(WARNING, text)
                for text in fencing.file.warnings]
    finally:
        fencing.stop()


def _secrets(conf: cfg.ConfigOpts) -> list[Finding]:
    """Secrets in files others can read: config files and secret files."""
    from instanceha.conf import _secrets as secret_check

    return [Finding(WARNING, text) for text in secret_check.find(conf)]


def _watchdog(conf: cfg.ConfigOpts) -> list[Finding]:
    from instanceha.conf import heartbeat

    return [Finding(WARNING, text)
            for text in heartbeat.watchdog_warnings(conf)]


def _unknown_options(conf: cfg.ConfigOpts) -> list[Finding]:
    from instanceha.conf import _unknown as unknown

    return [Finding(WARNING, text) for text in unknown.find(conf)]


#: (what is checked, check). Each returns warnings and raises
#: ConfigurationError for an error, naming the option or file.
CHECKS: tuple[tuple[str, Callable[[cfg.ConfigOpts], list[Finding]]], ...] = (
    ('option values', _values),
    ('Nova credentials', _nova),
    ('coordination backend', _coordination),
    ('pause', _pause),
    ('drivers', _drivers),
    ('fencing file', _fencing),
    ('secrets', _secrets),
    ('watchdog deadline', _watchdog),
    # Last: loading the auth plugin and the drivers registers options.
    ('unknown options', _unknown_options),
)


def run(conf: cfg.ConfigOpts) -> list[Finding]:
    """Every finding of every check (a failing check does not stop them)."""
    findings: list[Finding] = []
    for _what, check in CHECKS:
        try:
            findings.extend(check(conf))
        except exceptions.ConfigurationError as exc:
            findings.append(Finding(ERROR, str(exc)))
    return findings


def check_startup(conf: cfg.ConfigOpts) -> None:
    """Start-up: log the warnings, refuse any error.

    :raises ConfigurationError: naming every error, as ``config validate``
        reports them.
    """
    findings = run(conf)
    for finding in findings:
        if finding.level == WARNING:
            LOG.warning('configuration: %s', finding.message)
    errors = [f.message for f in findings if f.level == ERROR]
    if errors:
        # Every error, one per line: one restart fixes them all.
        raise exceptions.ConfigurationError('\n  '.join(errors))
