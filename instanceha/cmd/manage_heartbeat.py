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

"""instanceha-manage heartbeat: per-host heartbeat keys.

``heartbeat derive-key HOST --out FILE`` writes the key the heartbeat
agent on HOST signs with: derived from the master key (``[heartbeat]
key_file``) with HKDF-SHA256 over the host name, as the listener derives
it. The file is created readable by its owner only (0600); the key never
appears on the command line or on the terminal. Copy it to the host and
give it to ``instanceha-heartbeat-agent --key-file``.
"""

import os
import sys

from oslo_config import cfg

from instanceha.heartbeat import keys


def write_key_file(path: str, key: bytes, force: bool = False) -> None:
    """Write ``key`` and a newline to ``path``, mode 0600.

    :raises OSError: when the file exists (and not ``force``) or cannot
        be written.
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
        os.write(fd, key + b'\n')
    finally:
        os.close(fd)


def _derive(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    group = conf.heartbeat
    option = '[heartbeat] previous_key_file' if args.hb_previous else (
        '[heartbeat] key_file')
    path = group.previous_key_file if args.hb_previous else group.key_file
    if not path:
        print('error: option %s is not set' % option, file=sys.stderr)
        return 2
    host = args.hb_host.strip()
    if not host or any(c.isspace() or not c.isprintable() for c in host):
        print('error: host name %r must be printable, without white space'
              % args.hb_host, file=sys.stderr)
        return 2
    try:
        master = keys.load_key(path, option)
    except OSError as exc:
        print('error: option %s: file %s cannot be read: %s'
              % (option, path, exc.strerror or exc), file=sys.stderr)
        return 2
    except ValueError as exc:
        print('error: %s' % exc, file=sys.stderr)
        return 2
    try:
        write_key_file(args.hb_out, keys.derive_host_key(master, host),
                       force=args.hb_force)
    except FileExistsError:
        print('error: %s exists; use --force to replace it' % args.hb_out,
              file=sys.stderr)
        return 1
    except OSError as exc:
        print('error: cannot write %s: %s' % (args.hb_out,
                                              exc.strerror or exc),
              file=sys.stderr)
        return 1
    print('heartbeat key of host %s (from %s) written to %s (mode 0600); '
          'give it to that host\'s agent: instanceha-heartbeat-agent '
          '--host %s --key-file FILE' % (host, option, args.hb_out, host))
    return 0


def add_parsers(subparsers) -> None:
    hb = subparsers.add_parser('heartbeat', help='heartbeat agent keys')
    sub = hb.add_subparsers(dest='action', required=True)
    derive = sub.add_parser(
        'derive-key', help='write the key the heartbeat agent of HOST signs '
        'with (derived from [heartbeat] key_file), mode 0600')
    derive.add_argument('hb_host', metavar='HOST',
                        help='compute host name exactly as the agent sends '
                             'it (its --host, by default Nova\'s host name)')
    derive.add_argument('--out', dest='hb_out', required=True,
                        metavar='FILE', help='key file to create')
    derive.add_argument('--previous', dest='hb_previous',
                        action='store_true',
                        help='derive from [heartbeat] previous_key_file '
                             '(an agent not yet moved to the new master)')
    derive.add_argument('--force', dest='hb_force', action='store_true',
                        help='replace FILE if it exists')
    derive.set_defaults(func=_derive)
