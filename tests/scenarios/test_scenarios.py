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

"""One test per scenario directory: the real engine, a golden event log.

Each case under ``cases/`` (and each built-in scenario shipped with the
package, such as the README's demo) runs the production engine and
drivers against the simulated cloud; the test fails when an invariant
breaks or when the event log differs from the case's ``log.expect``
(the diff is in the failure message, the new log in ``log.new``).

A case whose story shows an engine bug has no ``log.expect`` (a wrong
story is never blessed) but a ``KNOWN-BUG`` file saying what is wrong; it
is skipped with that text until the engine is fixed and its log reviewed.
Broken invariants fail a case whatever else it says.
"""

import os

import testtools

from instanceha.cmd import simulate
from instanceha.sim import golden

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases')


def _dirs(base: str) -> list[str]:
    return sorted(n for n in os.listdir(base)
                  if os.path.isdir(os.path.join(base, n)))


class TestScenarios(testtools.TestCase):
    """Generated below: test_<case> for every case directory."""


def _make_test(path: str):
    def test(self):
        outcome = golden.check(path)
        if outcome.violations:
            self.fail(outcome.message)
        bug = os.path.join(path, 'KNOWN-BUG')
        if (not outcome.ok and os.path.exists(bug)
                and not os.path.exists(os.path.join(path, 'log.expect'))):
            with open(bug) as f:
                self.skipTest('known engine bug: %s' % f.read().strip())
        if not outcome.ok:
            self.fail(outcome.message)
    test.__doc__ = 'scenario %s' % path
    return test


for _base, _prefix in ((CASES, 'test_'),
                       (simulate.BUILTIN, 'test_builtin_')):
    for _name in _dirs(_base):
        setattr(TestScenarios, _prefix + _name.replace('-', '_'),
                _make_test(os.path.join(_base, _name)))
