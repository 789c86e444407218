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

"""Start-up shared by the console scripts: parse, log, validate."""

from collections.abc import Callable
import json
import sys

from oslo_config import cfg
from oslo_log import log

from instanceha import conf as ha_conf
from instanceha import exceptions


def table(header: tuple, rows: list[tuple], right: tuple = ()) -> str:
    """Every ``list``/``history`` table: columns padded to their widest.

    None prints as ``-``; columns whose index is in ``right`` are
    right-aligned (counts); the last column is never padded, so no line
    ends in spaces.
    """
    cells = [tuple('-' if v is None else str(v) for v in r)
             for r in [header] + list(rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return '\n'.join('  '.join(
        [v.rjust(w) if i in right else v.ljust(w)
         for i, (v, w) in enumerate(zip(r[:-1], widths))] + [r[-1]]
    ).rstrip() for r in cells)


def print_json(value) -> None:
    """Every command's JSON output: indented, keys sorted, on stdout."""
    print(json.dumps(value, indent=2, sort_keys=True))


def json_flag(parser, what: str) -> None:
    """The ``--json`` option of a command that prints ``what`` as JSON."""
    parser.add_argument('--json', action='store_true',
                        help='print %s' % what)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (counts, seconds)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON on stdout.

    Read from the raw arguments so that a failure before (or while) they
    are parsed still answers in JSON.
    """
    args = list(argv)
    return '--json' in args or '--format=json' in args or any(
        a == '--format' and b == 'json' for a, b in zip(args, args[1:]))


def fail(prog: str, message: str, code: int = 2,
         json_output: bool = False) -> int:
    """Report a failure: one line on stderr (and JSON if asked for).

    A command asked for JSON also prints ``{"error": ..., "exit_code":
    ...}`` on stdout, so that its output always parses.
    """
    print('%s: error: %s' % (prog, message), file=sys.stderr)
    if json_output:
        print(json.dumps({'error': message, 'exit_code': code}))
    return code


def setup_logging(conf: cfg.ConfigOpts) -> None:
    """Set up oslo.log; log lines go to stderr, never to stdout.

    Without a log file or the journal, oslo.log writes to stdout, where
    they would mix with a command's output (and break its JSON). An
    operator's log file or journal is kept as configured.
    """
    if not (conf.log_file or conf.log_dir or conf.use_journal
            or conf.log_config_append):
        conf.set_override('use_stderr', True)
    log.setup(conf, 'instanceha')


def setup(prog: str, argv: list[str] | None, conf: cfg.ConfigOpts,
          **kwargs) -> None:
    """Parse the command line and config files, set up logging, validate.

    :raises ConfigurationError: for any bad option, naming it.
    """
    try:
        ha_conf.parse_args(sys.argv[1:] if argv is None else argv, conf,
                           **kwargs)
    except (cfg.Error, ValueError) as exc:
        raise exceptions.ConfigurationError(str(exc)) from None
    setup_logging(conf)
    ha_conf.validate(conf)


def run(prog: str, body: Callable[[], int],
        json_output: bool = False) -> int:
    """Run a command's body, turning our errors into one clear line.

    With ``json_output`` every failure also prints a JSON object on
    stdout, including a command line argparse refuses and an unexpected
    exception (which then propagates, for its traceback on stderr).
    """
    try:
        return body()
    except exceptions.ConfigurationError as exc:
        return fail(prog, str(exc), json_output=json_output)
    except exceptions.InstanceHAError as exc:
        return fail(prog, str(exc), code=1, json_output=json_output)
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:
        # argparse has printed its usage error on stderr already.
        if json_output and exc.code not in (0, None):
            print(json.dumps({'error': 'invalid command line',
                              'exit_code': exc.code}))
        raise
    except Exception as exc:
        if json_output:
            # Only the type: the traceback on stderr has the details.
            print(json.dumps({'error': 'unexpected %s' % type(exc).__name__,
                              'exit_code': 1}))
        raise
