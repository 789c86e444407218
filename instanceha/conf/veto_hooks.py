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

"""Lifecycle hooks that may veto fencing and evacuation."""

from oslo_config import cfg

from instanceha import exceptions

GROUP = 'veto_hooks'

#: The gate that asks the hooks (entry point in instanceha.gates).
GATE = 'veto-hook'

OPTS = [
    cfg.ListOpt('hooks', default=[],
                help='veto-hook gate: who is asked before failed hosts are '
                     'fenced and evacuated (quorum protection, like an etcd '
                     'preDrain lifecycle hook). Each entry is either the '
                     'absolute path of an executable or an http(s):// URL. '
                     'An executable is run without a shell, with a minimal '
                     'environment (PATH, LANG) and the proposal as JSON on '
                     'stdin; exit 0 allows, exit 1 vetoes (stdout, else '
                     'stderr: a reason line, or JSON {"veto": ["host3"], '
                     '"reason": "..."} to veto only some hosts), anything '
                     'else is a hook error. A URL receives the proposal as '
                     'a JSON POST; 2xx allows, 409 or 403 vetoes (body as '
                     'above), anything else (including redirects) is a hook '
                     'error; user:password@ in the URL is sent as basic '
                     'authentication. Hooks are asked in parallel on every '
                     'poll while hosts wait for recovery, as a job on the '
                     'service\'s workers: the hosts proposed wait for the '
                     'answer, other hosts\' recoveries go on meanwhile '
                     '(instanceha-manage plan asks them only with '
                     '--ask-hooks). A hook must answer a question, not act. '
                     'Names in "veto" that are not proposed are ignored. '
                     'Needs "%s" in [gates] enabled.'
                     % GATE),
    cfg.FloatOpt('timeout', default=10.0, min=0.1, max=120.0,
                 help='Seconds each hook has to answer; a hook still '
                      'running is killed (its whole process group) and '
                      'counts as a hook error. Must be less than [DEFAULT] '
                      'poll.'),
    cfg.StrOpt('on_error', default='veto',
               choices=[('veto', 'a failed, hung or confused hook blocks '
                                 'the plan (fail safe)'),
                        ('allow', 'a failed hook is logged as a warning and '
                                  'ignored')],
               help='What a hook error (crash, timeout, unexpected exit '
                    'status or HTTP status, unreadable answer) means.'),
    cfg.StrOpt('ca_file',
               help='CA bundle to verify https:// hooks with (default: the '
                    "system's trusted CAs)."),
]


def validate(conf: cfg.ConfigOpts) -> None:
    """Hooks that nobody asks, or that outlive a poll, are a mistake."""
    group = conf[GROUP]
    if not group.hooks:
        return
    if GATE not in conf.gates.enabled:
        raise exceptions.ConfigurationError(
            'option [%s] hooks is set but the "%s" gate is not in [gates] '
            'enabled, so no hook would ever be asked' % (GROUP, GATE))
    if group.timeout >= conf.poll:
        raise exceptions.ConfigurationError(
            'option [%s] timeout (%gs) must be less than [DEFAULT] poll '
            '(%ds)' % (GROUP, group.timeout, conf.poll))
