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

"""Shared plumbing for the real-peer fixtures.

Every peer runs as a child process that a test can kill, pause or restart,
logs to a file in the fixture's own temporary directory (so two stestr
workers never share anything), and is waited for with a bounded timeout
that fails with the tail of its log.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import fixtures
from testtools import content

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPBACK = '127.0.0.1'

#: Environment variables of a test runner that must not leak into a helper
#: built on oslotest/nova's test base classes (a test timeout there would
#: kill a long-lived peer, output capture would hide its tracebacks).
_RUNNER_ENV = ('OS_TEST_TIMEOUT', 'OS_STDOUT_CAPTURE', 'OS_STDERR_CAPTURE',
               'OS_LOG_CAPTURE', 'OS_DEBUG')

#: Scale every start-up timeout, e.g. on a slow or busy CI machine.
TIMEOUT_SCALE = float(os.environ.get('INSTANCEHA_PEER_TIMEOUT_SCALE', '1'))


class PeerError(Exception):
    """A peer did not start, did not answer, or misbehaved."""


def free_port(kind=socket.SOCK_STREAM):
    """Return a loopback port that is free right now.

    Another process may take it before the caller binds it; callers that
    cannot bind port 0 themselves retry with a new port (see
    :meth:`PeerProcess.start_until`).
    """
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port, host=LOOPBACK, timeout=0.5):
    """True when a TCP connect to host:port succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class _Exited(Exception):
    """Internal: the child died while being waited for."""

    def __str__(self):
        return 'child exited'


def wait_until(predicate, timeout, interval=0.1, what='condition'):
    """Poll predicate() until it returns a truthy value, bounded in time.

    Exceptions from the predicate count as "not yet", except PeerError
    (and the internal "child exited" signal): those mean a definite
    failure and propagate at once. Returns the value; raises PeerError
    naming `what` (and the last exception) on timeout.
    """
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (_Exited, PeerError):
            raise
        except Exception as exc:  # noqa: BLE001 - retried until timeout
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = ' (last error: %r)' % (last_exc,) if last_exc else ''
            raise PeerError('timed out after %.1fs waiting for %s%s'
                            % (timeout, what, detail))
        time.sleep(interval)


def self_signed_cert(directory, name='peer'):
    """Write a self-signed loopback certificate and key; return the paths.

    For peers whose real clients only speak HTTPS (e.g. fence_redfish);
    clients must not verify it (``--ssl-insecure``, ``verify=False``).
    """
    import datetime
    import ipaddress

    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import serialization
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
                critical=False)
            .sign(key, hashes.SHA256()))
    cert_path = os.path.join(directory, '%s-cert.pem' % name)
    key_path = os.path.join(directory, '%s-key.pem' % name)
    with open(cert_path, 'wb') as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'wb') as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def helper_script(name):
    """Absolute path of a helper-process script shipped in this package."""
    return os.path.join(HERE, name)


def helper_env(tmpdir, extra=None):
    """Environment for a Python helper: no runner settings, private TMPDIR."""
    env = {k: v for k, v in os.environ.items() if k not in _RUNNER_ENV}
    env['TMPDIR'] = tmpdir
    env['PYTHONUNBUFFERED'] = '1'
    # Never route loopback traffic through a proxy.
    env['no_proxy'] = env['NO_PROXY'] = '127.0.0.1,localhost'
    env.update(extra or {})
    return env


def read_json_file(path):
    """Contents of a JSON file, or None while it is absent or incomplete."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json_file(path, data):
    """Write JSON atomically so a poller never sees half a file."""
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _die_with_parent(parent_pid):
    """preexec_fn: SIGKILL the child when the test process dies.

    Python helpers also watch their parent, but binaries (redis, etcd)
    don't; without this a killed test runner would leak them.
    """
    def preexec():
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - best effort (non-Linux)
            return
        if os.getppid() != parent_pid:  # parent already gone
            os._exit(1)
    return preexec


class PeerProcess(fixtures.Fixture):
    """One child process with its output captured in a log file.

    The child runs in its own session so that stop() also reaches any
    grandchildren it forks, and so a Ctrl-C of the test runner is not
    delivered to it twice. The fixture cleanup always stops it.
    """

    def __init__(self, name, argv, log_dir, env=None, cwd=None):
        super().__init__()
        self.name = name
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.log_path = os.path.join(log_dir, '%s.log' % name)
        self.proc = None
        self._final_tail = None

    def _setUp(self):
        self.addCleanup(self.stop)
        self.addDetail('%s-log' % self.name, content.Content(
            content.UTF8_TEXT,
            lambda: [self.log_tail(200).encode('utf-8', 'replace')]))
        self.start()

    # -- life cycle -------------------------------------------------------

    def start(self):
        """Start (or restart) the child process."""
        if self.running:
            return
        with open(self.log_path, 'ab') as log:
            log.write(('--- %s starting: %s\n' % (
                time.strftime('%H:%M:%S'), self.argv[0])).encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()))

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def _signal_group(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after `timeout` seconds; idempotent."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal_group(signal.SIGCONT)  # a paused child can't exit
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(10)
        # Reap anything the child left behind in its session.
        self._signal_group(signal.SIGKILL)
        self._final_tail = self.log_tail(200)

    def kill(self):
        """SIGKILL the child at once, like a crashed peer."""
        if self.running:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self):
        """SIGSTOP: the peer keeps its sockets but answers nothing."""
        if self.running:
            self._signal_group(signal.SIGSTOP)

    def resume(self):
        """SIGCONT after pause()."""
        if self.running:
            self._signal_group(signal.SIGCONT)

    # -- diagnostics ------------------------------------------------------

    def log_tail(self, lines=40):
        """Last lines of the child's output (kept after the files go)."""
        try:
            with open(self.log_path, 'rb') as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                data = f.read().decode('utf-8', 'replace')
        except OSError:
            return self._final_tail or ''
        return '\n'.join(data.splitlines()[-lines:])

    def wait_ready(self, predicate, timeout, what=None):
        """Wait until predicate() is truthy while the child stays alive.

        Fails fast if the child exits, and always with its log tail.
        """
        what = what or '%s to become ready' % self.name
        timeout *= TIMEOUT_SCALE

        def check():
            if not self.running:
                raise _Exited()
            return predicate()

        try:
            return wait_until(check, timeout, what=what)
        except _Exited:
            raise PeerError('%s exited with rc=%s before it was ready; '
                            'log tail:\n%s' % (self.name, self.proc.returncode,
                                               self.log_tail()))
        except PeerError as exc:
            raise PeerError('%s; log tail of %s:\n%s'
                            % (exc, self.name, self.log_tail()))


class Peer(fixtures.Fixture):
    """Base of every peer fixture: a private temp dir and process helpers."""

    #: Seconds a peer may take to become ready (scaled by
    #: INSTANCEHA_PEER_TIMEOUT_SCALE).
    start_timeout = 30

    def _setUp(self):
        self.tmpdir = self.useFixture(fixtures.TempDir()).path

    def spawn(self, name, argv, env=None, cwd=None):
        """Start a PeerProcess under this fixture (stopped in cleanup)."""
        return self.useFixture(PeerProcess(name, argv, self.tmpdir, env=env,
                                           cwd=cwd))

    def python_helper(self, name, script, args, extra_env=None):
        """Run one of this package's helper scripts with this interpreter."""
        argv = [sys.executable, helper_script(script)] + list(args)
        return self.spawn(name, argv, env=helper_env(self.tmpdir, extra_env))

    def spawn_on_free_ports(self, name, make_argv, ready, nports=1,
                            attempts=3, env=None):
        """Start a binary that must be told its port(s), retrying races.

        make_argv(ports) builds the command line for a list of free ports;
        ready(ports) is the readiness probe. If the child dies before it is
        ready (typically "address already in use": another worker took
        the port), try again with new ports, up to `attempts` times.
        Returns (PeerProcess, ports).
        """
        for attempt in range(1, attempts + 1):
            ports = [free_port() for _ in range(nports)]
            proc = self.spawn(name, make_argv(ports), env=env)
            try:
                proc.wait_ready(lambda: ready(ports), self.start_timeout)
                return proc, ports
            except PeerError:
                if proc.running or attempt == attempts:
                    raise
                proc.stop()
