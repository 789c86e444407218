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

"""Find and load drivers by their entry-point names (stevedore)."""

from collections.abc import Iterable
import dataclasses
from importlib import metadata

from stevedore import named

from instanceha import exceptions

#: The plugin namespaces, one per kind of driver.
NAMESPACES = (
    'instanceha.filters',
    'instanceha.detectors',
    'instanceha.gates',
    'instanceha.fencing',
    'instanceha.reservation',
    'instanceha.evacuation',
    'instanceha.notifiers',
    'instanceha.instance_detectors',
    'instanceha.instance_recovery',
)


def _entry_points(namespace: str) -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=namespace),
                  key=lambda ep: ep.name)


def available(namespace: str) -> list[str]:
    """Names of every driver registered under ``namespace``."""
    return [ep.name for ep in _entry_points(namespace)]


def driver_class(namespace: str, name: str, option: str) -> type:
    """Return the class registered as ``name`` in ``namespace``.

    :param option: the option that named the driver, e.g.
        ``[gates] enabled``; every error message names it.
    :raises DriverLoadError: for an unknown name (listing the available
        drivers) or a driver module that fails to import.
    """
    def missing(names):
        raise exceptions.DriverLoadError(
            'option %s: unknown driver %r in namespace %s; available: %s'
            % (option, name, namespace,
               ', '.join(available(namespace)) or '(none installed)'))

    def failed(manager, entrypoint, exc):
        raise exceptions.DriverLoadError(
            'option %s: driver %r (%s) failed to import: %s: %s'
            % (option, name, entrypoint.value, type(exc).__name__, exc))

    mgr = named.NamedExtensionManager(
        namespace, names=[name], invoke_on_load=False,
        on_load_failure_callback=failed,
        on_missing_entrypoints_callback=missing)
    cls = mgr[name].plugin
    cls.name = name
    return cls


def load(namespace: str, names: Iterable[str], option: str,
         *args, **kwargs) -> list:
    """Instantiate and validate the named drivers, in the given order.

    Extra arguments are passed to each driver's constructor. A name given
    twice is an error: it would run the same check twice and hide a typo.
    """
    names = list(names)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise exceptions.ConfigurationError(
            'option %s lists %s more than once' % (option, ', '.join(dupes)))
    drivers = []
    for name in names:
        drv = driver_class(namespace, name, option)(*args, **kwargs)
        drv.name = name
        drv.validate()
        drivers.append(drv)
    return drivers


def describe(namespace: str) -> list[tuple[str, str]]:
    """(name, one-line description) of every driver in namespace.

    A driver that fails to import is listed with the import error instead
    of hiding it.
    """
    rows = []
    for ep in _entry_points(namespace):
        try:
            rows.append((ep.name, ep.load().description or ''))
        except Exception as exc:
            rows.append((ep.name, 'BROKEN: %s: %s' % (type(exc).__name__,
                                                      exc)))
    return rows


@dataclasses.dataclass
class Drivers:
    """The drivers a configuration selects, loaded and validated."""

    detectors: list
    filters: list
    gates: list
    reservation: object
    evacuation: object
    #: Crashed instances ([instance_failure]); None when not loaded.
    instance_detector: object = None
    instance_recovery: object = None

    def all(self) -> list:
        return [*self.detectors, *self.filters, *self.gates,
                self.reservation, self.evacuation] + [
            d for d in (self.instance_detector, self.instance_recovery)
            if d is not None]


def load_deciders(conf) -> Drivers:
    """Detectors, filters and gates only: what a dry run needs.

    :raises ConfigurationError: for the first bad name or setting, naming
        the option.
    """
    from instanceha.conf import filters

    return Drivers(
        detectors=load('instanceha.detectors', conf.detection.detectors,
                       '[detection] detectors', conf),
        filters=load('instanceha.filters', filters.names(conf),
                     '[filters] enabled', conf),
        gates=load('instanceha.gates', conf.gates.enabled,
                   '[gates] enabled', conf),
        reservation=None, evacuation=None)


def load_configured(conf) -> Drivers:
    """Load every driver the configuration names (fencing is per host).

    :raises ConfigurationError: for the first bad name or setting, naming
        the option.
    """
    from instanceha.conf import evacuation

    drivers = load_deciders(conf)
    drivers.reservation = load('instanceha.reservation',
                               [conf.reservation.strategy],
                               '[reservation] strategy', conf)[0]
    drivers.evacuation = load('instanceha.evacuation',
                              [evacuation.strategy_name(conf)],
                              '[evacuation] strategy', conf)[0]
    drivers.instance_detector = load(
        'instanceha.instance_detectors', [conf.instance_failure.detector],
        '[instance_failure] detector', conf)[0]
    drivers.instance_recovery = load(
        'instanceha.instance_recovery', [conf.instance_failure.strategy],
        '[instance_failure] strategy', conf)[0]
    return drivers
