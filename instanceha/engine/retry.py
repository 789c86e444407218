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

"""One back-off formula for every retry the service makes.

Fencing retries, a failed job's step, an unproven power reading, a
refused or failed evacuation and a runtime workflow's failed job all wait
by it, so that one reading of the logs (``retry_in=``) fits them all.
"""

#: The exponent's bound: a large count of failures cannot overflow.
MAX_DOUBLINGS = 32


def backoff(first: float, failures: int, cap: float) -> float:
    """Seconds to wait after ``failures`` failed tries in a row.

    ``first`` after the first failure, doubled after each further one,
    never more than ``cap``. Deterministic, without jitter: every copy
    and every simulator run waits the same.
    """
    return min(first * 2 ** min(max(failures - 1, 0), MAX_DOUBLINGS), cap)
