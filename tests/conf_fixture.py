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

"""The one configuration fixture of the tests.

A fresh ``ConfigOpts`` with every instanceha option registered and an
empty command line parsed (no file read), wrapped in oslo.config's own
``Config`` fixture so that a test's overrides are set the supported way
and undone with the test. Overrides are given as keyword arguments in
either form the tests use:

- ``poll=1`` or ``DEFAULT={'poll': 1}``: an option of ``[DEFAULT]``;
- ``fencing={'poll_interval': 0.05}``: options of a group;
- ``**{'evacuation.retry_interval': 0}``: one option of a group.

Inside a test: ``conf = self.useFixture(ConfFixture(...)).conf``.
Helpers that build a configuration outside a test's fixtures (rigs,
module-level factories) call :func:`make_conf` with the same arguments.
"""

from typing import Any

import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture

from instanceha import conf as ha_conf


def _overrides(overrides: dict[str, Any]):
    """(group or None, option, value) for each override."""
    for key, value in overrides.items():
        if isinstance(value, dict):
            group = None if key == 'DEFAULT' else key
            for name, item in value.items():
                yield group, name, item
        elif '.' in key:
            group, name = key.split('.', 1)
            yield group, name, value
        else:
            yield None, key, value


class ConfFixture(fixtures.Fixture):
    """instanceha's options on a fresh ConfigOpts; see the module."""

    def __init__(self, **overrides: Any):
        super().__init__()
        self.overrides = overrides
        self.conf = cfg.ConfigOpts()

    def _setUp(self) -> None:
        ha_conf.register_opts(self.conf)
        self.conf([], project='instanceha', default_config_files=[])
        self.config = self.useFixture(config_fixture.Config(self.conf))
        self.set(**self.overrides)

    def set(self, **overrides: Any) -> None:
        """Override more options (same forms as the constructor)."""
        for group, name, value in _overrides(overrides):
            self.config.config(group=group, **{name: value})


def make_conf(**overrides: Any) -> cfg.ConfigOpts:
    """A configuration for code that has no test to attach a fixture to.

    The ConfigOpts is private to the caller, so nothing needs undoing.
    """
    fixture = ConfFixture(**overrides)
    fixture.setUp()
    return fixture.conf
