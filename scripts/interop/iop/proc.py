"""Host processes bounded in time, with their output kept in files."""

import os
import signal
import subprocess
import sys
import time

T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def run(argv, limit=60, env=None, check=True, input=None):
    """Runs argv to completion; returns CompletedProcess (text)."""
    try:
        r = subprocess.run(argv, env=env, input=input, capture_output=True,
                           text=True, timeout=limit)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(argv)}: no answer in {limit} s") from e
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: "
                           f"{r.stderr.strip() or r.stdout.strip()}")
    return r


class Job:
    """A background host process in its own session; stdout and stderr go
    to `base`.out / `base`.err."""

    def __init__(self, argv, base, env=None):
        self.argv = argv
        self.base = base
        self.out_path = base + ".out"
        self.err_path = base + ".err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                      stdout=out, stderr=err,
                                      start_new_session=True)
        self.rc = None
        self.timed_out = False

    @property
    def pid(self):
        return self.p.pid

    def running(self):
        return self.p.poll() is None

    def wait(self, limit):
        """Exit status, or None after killing it when `limit` s pass."""
        try:
            self.rc = self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()
        return self.rc

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, limit=10):
        """SIGINT (tcpdump finishes its file), then SIGKILL."""
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self.kill()
        self.rc = self.p.returncode

    def output(self):
        return _read(self.out_path), _read(self.err_path)


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def listening_in(pid, port):
    """Whether TCP `port` is in LISTEN in the network namespace of `pid`."""
    want = f":{port:04X} "
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if len(cols) > 3 and (cols[1] + " ").endswith(want) and cols[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def wait_until(pred, limit, step=0.05):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()
