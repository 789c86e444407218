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

"""A stand-in for /dev/watchdog, run as a helper process.

Why a stand-in: the test machines have no watchdog device and cannot load
the softdog module (no kernel modules in a container), and a real one
would reset the machine running the tests. This helper keeps the part of
the Linux watchdog protocol the agent relies on, on a FIFO:

* a writer opening it arms it; every byte written feeds it;
* ``V`` as the last byte before the writer closes disarms it (magic
  close); a close without it leaves it armed, counting down, until a
  writer opens it again (an agent restarted in time) or the timeout;
* no feed for ``--timeout`` seconds while armed: the "host resets": the
  processes whose pids are listed in ``--host-pids`` are killed (the
  host's agent, its nova-compute...) and the event is recorded.

Events go to ``--events`` as JSON lines: armed, disarmed, closed (no
magic), reset.

Usage: watchdog_device.py --fifo PATH --timeout S --events FILE
                          --host-pids FILE
"""

import argparse
import json
import os
import select
import signal
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--fifo', required=True)
    parser.add_argument('--timeout', type=float, required=True)
    parser.add_argument('--events', required=True)
    parser.add_argument('--host-pids', required=True)
    args = parser.parse_args()
    if not os.path.exists(args.fifo):
        os.mkfifo(args.fifo)

    def event(name, **more):
        with open(args.events, 'a') as f:
            f.write(json.dumps(dict(event=name, at=time.time(), **more))
                    + '\n')

    def reset():
        killed = []
        try:
            with open(args.host_pids) as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        event('reset', killed=killed)

    fd = os.open(args.fifo, os.O_RDONLY | os.O_NONBLOCK)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    armed = False
    last_feed = 0.0
    last_byte = b''
    while True:
        ready = poller.poll(50)
        if ready:
            data = os.read(fd, 4096)
            if data:
                if not armed:
                    event('armed')
                armed = True
                last_feed = time.monotonic()
                last_byte = data[-1:]
            else:
                # The writer closed: a fresh reader waits for the next.
                if armed and last_byte == b'V':
                    armed = False
                    event('disarmed')
                elif armed:
                    event('closed')
                last_byte = b''
                poller.unregister(fd)
                os.close(fd)
                fd = os.open(args.fifo, os.O_RDONLY | os.O_NONBLOCK)
                poller.register(fd, select.POLLIN)
        if armed and time.monotonic() - last_feed > args.timeout:
            armed = False
            reset()


if __name__ == '__main__':
    main()
