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

"""Compare a run's event log with the case's golden ``log.expect``.

Like Proxmox ha-manager's regression tests: the whole log must match
line by line. A mismatch prints a unified diff and leaves the new log
next to the expected one as ``log.new``; a case without ``log.expect``
gets ``log.new`` written and fails until someone has read it and renamed
it (``instanceha-simulate --bless CASE`` does the renaming). A run that
broke an invariant always fails, whatever its log says.
"""

import dataclasses
import difflib
import os

from instanceha.sim import runner
from instanceha.sim import scenario as sim_scenario

NEW = 'log.new'


@dataclasses.dataclass
class Outcome:
    name: str
    ok: bool
    message: str
    lines: list[str]
    violations: list[str]


def check(path: str, write: bool = True) -> Outcome:
    sc = sim_scenario.load(path)
    result = runner.Simulation(sc).run()
    lines = result.lines
    new_path = os.path.join(sc.path, NEW)
    problems = []
    if result.violations:
        problems.append('invariants broken:\n  ' +
                        '\n  '.join(result.violations))
    try:
        with open(sc.expect_file) as f:
            expected = f.read().splitlines()
    except FileNotFoundError:
        expected = None
        problems.append('%s has no log.expect; wrote %s: read it, and if it '
                        'tells the right story rename it to log.expect'
                        % (sc.name, new_path))
    if expected is not None and expected != lines:
        diff = difflib.unified_diff(expected, lines, 'log.expect', NEW,
                                    lineterm='')
        problems.append('%s: the event log differs from log.expect:\n%s'
                        % (sc.name, '\n'.join(diff)))
    if problems and write:
        with open(new_path, 'w') as f:
            f.write('\n'.join(lines) + '\n')
    elif not problems and os.path.exists(new_path):
        os.unlink(new_path)
    return Outcome(sc.name, not problems, '\n'.join(problems), lines,
                   result.violations)


def bless(path: str) -> tuple[bool, str]:
    """Accept the case's current log as its ``log.expect``.

    Refused when the run broke an invariant: a wrong story is a bug to
    fix, never a log to bless.
    """
    out = check(path)
    if out.violations:
        return False, out.message
    if out.ok:
        return True, '%s: log.expect is already up to date' % out.name
    sc = sim_scenario.load(path)
    os.replace(os.path.join(sc.path, NEW), sc.expect_file)
    return True, '%s: log.new is now log.expect' % out.name
