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

"""A job's own calls: at once in production, in order elsewhere."""

import contextvars
import threading

import testtools

from instanceha.engine import executor
from instanceha.engine import ports

_VAR: contextvars.ContextVar = contextvars.ContextVar('test_var',
                                                      default=None)


class TestRunCalls(testtools.TestCase):

    def test_production_runs_them_at_once_in_the_jobs_context(self):
        pool = executor.ThreadPoolExecutor(4)
        self.addCleanup(pool.shutdown)
        # Every call waits for all the others: they can only all return
        # if they run at the same time.
        barrier = threading.Barrier(3, timeout=10)
        seen = []

        def call():
            seen.append(_VAR.get())
            barrier.wait()

        def boom():
            barrier.wait()
            raise ValueError('refused')

        def job():
            _VAR.set('proof of this step')
            return pool.run_calls([call, boom, call])

        errors = pool.submit(job).result(timeout=20)
        self.assertEqual([None, 'ValueError', None],
                         [type(e).__name__ if e else None for e in errors])
        self.assertEqual(['proof of this step'] * 2, seen)

    def test_elsewhere_in_order_stopping_at_the_first_error(self):
        ran = []

        def call(n, fail=False):
            def run():
                ran.append(n)
                if fail:
                    raise ValueError(n)
            return run

        errors = executor.InlineExecutor().run_calls(
            [call(1), call(2, fail=True), call(3)])
        self.assertEqual([1, 2], ran)
        self.assertEqual([None, 'ValueError', None],
                         [type(e).__name__ if e else None for e in errors])
        self.assertIsInstance(executor.InlineExecutor(), ports.Executor)
