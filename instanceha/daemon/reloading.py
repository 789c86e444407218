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

"""SIGHUP: reload the configuration without a restart, between two ticks.

The OpenStack way: the configuration files are re-read and the options
declared ``mutable`` change (oslo.config's ``mutate_config_files``). Before
anything changes, the new files are parsed and validated on their own, as
at start-up: a bad value refuses the whole reload, naming the option, and
the running configuration stays in force. A changed option that cannot
change live is named ("restart to apply it").

Then every part that holds something read from a file re-reads it: the
fencing topology its fencing file, the heartbeat detector its keys (each
a ``reload()`` returning what changed, or raising ConfigurationError to
refuse the new version and keep the old one).

The reload runs in the loop's thread before a tick, never inside a step:
workflows carry on and read the new values at their next step, and a
fence in progress finishes with the fencing file it started with.
"""

from collections.abc import Callable, Iterable
import logging
import threading

from oslo_config import cfg

from instanceha import conf as ha_conf
from instanceha.engine import events as ev
from instanceha.engine import ports
from instanceha import exceptions

LOG = logging.getLogger(__name__)

#: (options changed live, options changed that need a restart).
Mutation = tuple[list[str], list[str]]


def option_name(group: str | None, opt: str) -> str:
    """How messages name an option: ``[group] name``."""
    return '[%s] %s' % (group or 'DEFAULT', opt)


def check_files(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """The configuration files as they are now, parsed and validated.

    :raises ConfigurationError: naming the file or the option.
    """
    from oslo_log import log

    args = []
    for path in conf.config_file or []:
        args += ['--config-file', path]
    dirs = conf.config_dir or []
    for path in [dirs] if isinstance(dirs, str) else dirs:
        args += ['--config-dir', path]
    scratch = cfg.ConfigOpts()
    ha_conf.register_opts(scratch)
    log.register_options(scratch)
    try:
        scratch(args, project='instanceha', default_config_files=[],
                default_config_dirs=[])
    except (cfg.Error, ValueError) as exc:
        raise exceptions.ConfigurationError(str(exc)) from None
    ha_conf.validate(scratch)
    return scratch


def _value(conf: cfg.ConfigOpts, group: str, opt: cfg.Opt):
    node = conf if group == 'DEFAULT' else conf[group]
    return getattr(node, opt.dest)


def restart_needed(conf: cfg.ConfigOpts, new: cfg.ConfigOpts) -> list[str]:
    """Options that cannot change live whose value differs in ``new``."""
    out = []
    for group, opts in ha_conf.list_opts():
        for opt in opts:
            if opt.mutable:
                continue
            try:
                if _value(conf, group, opt) != _value(new, group, opt):
                    out.append(option_name(group, opt.name))
            except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
                continue
    return out


def mutate_files(conf: cfg.ConfigOpts) -> Mutation:
    """Re-read the files: check them, then change the mutable options."""
    new = check_files(conf)
    restart = restart_needed(conf, new)
    fresh = conf.mutate_config_files()
    return sorted(option_name(g, o) for g, o in fresh), restart


class Reloader:
    """Reloads on request, in the loop's thread before a tick.

    :param parts: drivers and the fencer; those that declare
        ``supports_reload`` are reloaded, the others are skipped. Their
        ``RELOADS`` names what they re-read, and ``OPTIONS`` the options
        (``[group] name``) that say where it is: when a part refuses,
        those are not reported as changed live.
    :param events: where ``config_reloaded`` and ``reload_refused`` go
        (the notifiers and, in the simulator, the event log).
    """

    def __init__(self, conf: cfg.ConfigOpts, parts: Iterable = (),
                 events: ports.EventSink | None = None):
        self.conf = conf
        self.parts = [p for p in parts if p.supports_reload]
        self.events = events
        self._requested = threading.Event()

    def request(self) -> None:
        """Called from the signal handler: only sets a flag."""
        self._requested.set()

    def tick_started(self) -> None:
        if not self._requested.is_set():
            return
        self._requested.clear()
        LOG.info('SIGHUP: reloading the configuration files')
        self.reload()

    def tick_finished(self, engine, error=None) -> None:
        pass

    def _emit(self, event: str, **details) -> None:
        if self.events is not None:
            self.events.emit(event, None, **details)

    def reload(self, mutate: Callable[[], Mutation] | None = None) -> None:
        """Apply the configuration files (or ``mutate``), then the parts.

        :param mutate: changes the options and returns (changed live,
            needing a restart); default: re-read the configuration files.
        """
        try:
            changed, restart = (mutate or (
                lambda: mutate_files(self.conf)))()
        except exceptions.ConfigurationError as exc:
            LOG.error('reload refused: %s; the running configuration stays '
                      'in force', exc)
            self._emit(ev.RELOAD_REFUSED, what='configuration files',
                       reason=str(exc))
            return
        for name in restart:
            LOG.warning('option %s changed but cannot change while the '
                        'service runs: restart it to apply the new value',
                        name)
        reloaded, not_applied = [], []
        for part in self.parts:
            what = part.RELOADS
            try:
                said = part.reload()
            except exceptions.ConfigurationError as exc:
                LOG.error('new %s refused: %s; the %s loaded before stays '
                          'in force', what, exc, what)
                self._emit(ev.RELOAD_REFUSED, what=what, reason=str(exc))
                # The option naming what was refused did not change live:
                # the part still runs with what it loaded before.
                mine = set(part.OPTIONS)
                not_applied += [n for n in changed if n in mine]
                changed = [n for n in changed if n not in mine]
                continue
            if said:
                LOG.info('%s', said)
                reloaded.append(what)
        LOG.info('reload done: %d option(s) changed live%s%s%s',
                 len(changed), '; restart needed for %s' % ', '.join(restart)
                 if restart else '', '; not applied (refused above): %s'
                 % ', '.join(not_applied) if not_applied else '',
                 '; re-read: %s' % ', '.join(reloaded) if reloaded else '')
        self._emit(ev.RELOADED, changed=changed, restart_needed=restart,
                   reloaded=reloaded)
