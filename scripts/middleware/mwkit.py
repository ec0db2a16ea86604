"""Shared pieces of the middleware test scripts (scripts/middleware/*):
rxu devices in a private runtime dir, bounded child processes, and the
one-line-per-case report with a pass count.

Devices live on loopback only: "one" is a single device on 127.0.8.1, "two"
is a device per side on 127.0.8.1 and 127.0.8.2 (every packet crosses UDP
between two daemons).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target", "release")
ADDRS = ["127.0.8.1", "127.0.8.2"]


def _terminate(signum, _frame):
    # SIGTERM (timeout, CI cancel) unwinds through the scripts' finally
    # blocks, so devices go down and no daemon is left behind.
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _terminate)


def build():
    """Builds the daemon, the tool and the provider libraries (quietly)."""
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "rxud", "-p", "rxu-cli", "--bins"],
        cwd=ROOT,
        check=True,
    )
    subprocess.run(
        [os.path.join(ROOT, "scripts", "build-provider")],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def copy_provider(to):
    """The provider under every ABI name, and the ucma emulator, into
    `to` (scripts/copy-provider)."""
    subprocess.run([os.path.join(ROOT, "scripts", "copy-provider"), BIN, to], check=True,
                   timeout=60)


class Devices:
    """`count` rxu devices named `<prefix>1..N` in a private runtime dir,
    and the environment verbs programs need to see them (as `rxu env`
    prints it: provider, sysfs tree, the preloaded device emulator)."""

    def __init__(self, prefix, count, addrs=None):
        self.rt = tempfile.mkdtemp(prefix="rxu-mw-")
        copy_provider(self.rt)
        self.names = [f"{prefix}{i + 1}" for i in range(count)]
        self.addrs = (addrs or ADDRS)[:count]
        self.env = dict(os.environ, RXU_RUNTIME_DIR=self.rt)
        for name, addr in zip(self.names, self.addrs):
            self.rxu("up", "--addr", addr, "--name", name)
        out = self.rxu("env")
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("export "):
                line = line[len("export "):]
            if "=" in line:
                k, v = line.split("=", 1)
                self.env[k] = v.strip("'\"")
        self.env["LD_PRELOAD"] = os.path.join(self.rt, "librxu-ucma.so")

    def rxu(self, *args):
        r = subprocess.run(
            [os.path.join(BIN, "rxu"), *args],
            env=dict(os.environ, RXU_RUNTIME_DIR=self.rt),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"rxu {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def stats(self, name):
        return self.rxu("stats", "--name", name)

    def down(self):
        for name in self.names:
            try:
                self.rxu("down", "--name", name, "--force")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"# down {name}: {e}", file=sys.stderr)
        shutil.rmtree(self.rt, ignore_errors=True)


def crate_source(name, version, cache):
    """Crate `name` `version` from crates.io, copied to `<cache>/<name>-<version>`
    as a package of its own (its Cargo.lock, if it ships one, kept). cargo
    itself downloads it: a throwaway project under `<cache>/probe` depends on
    `name = "=version"` and `cargo metadata` says where the source is."""
    probe = os.path.join(cache, "probe")
    os.makedirs(os.path.join(probe, "src"), exist_ok=True)
    with open(os.path.join(probe, "Cargo.toml"), "w") as f:
        f.write(
            f'[package]\nname = "{name}-probe"\nversion = "0.0.0"\nedition = "2021"\n'
            f'[dependencies]\n{name} = "={version}"\n[workspace]\n'
        )
    with open(os.path.join(probe, "src", "main.rs"), "w") as f:
        f.write("fn main() {}\n")
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--manifest-path",
         os.path.join(probe, "Cargo.toml")],
        capture_output=True, text=True, timeout=600, check=True,
    )
    pkgs = json.loads(meta.stdout)["packages"]
    src = next(
        os.path.dirname(p["manifest_path"])
        for p in pkgs
        if p["name"] == name and p["version"] == version
    )
    dst = os.path.join(cache, f"{name}-{version}")
    if not os.path.isdir(dst):
        shutil.copytree(src, dst)
        # A package of its own, not a member of rxu's workspace above it.
        with open(os.path.join(dst, "Cargo.toml"), "a") as f:
            f.write("\n[workspace]\n")
    return dst


class LoNs:
    """A network namespace of its own with lo up (127.0.0.1 and ::1) and
    `rxu up --netdev lo` as `dev` in it, in a private runtime dir: for
    suites that connect to 127.0.0.1 or to GID index 1 (::1)."""

    def __init__(self, tag, dev="rxu0"):
        self.ns = f"rxu-{tag}-{os.getpid()}"
        self.dev = dev
        self.rt = tempfile.mkdtemp(prefix=f"rxu-{tag}-")
        self.env = None

    def up(self):
        subprocess.run(["ip", "netns", "add", self.ns], check=True, timeout=30)
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True, timeout=30)
        copy_provider(self.rt)
        r = subprocess.run(
            self.argv(os.path.join(BIN, "rxu"), "up", "--netdev", "lo", "--name", self.dev),
            env=dict(os.environ, RXU_RUNTIME_DIR=self.rt),
            capture_output=True, text=True, timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"rxu up: {r.stderr.strip()}")
        self.env = dict(os.environ, RXU_RUNTIME_DIR=self.rt)
        for line in r.stdout.splitlines():
            if line.startswith("export ") and "=" in line:
                k, v = line[len("export "):].split("=", 1)
                self.env[k] = v.strip("'\"")
        self.env["RDMAV_DRIVERS"] = os.path.join(self.rt, "librxu")
        self.env["LD_PRELOAD"] = os.path.join(self.rt, "librxu-ucma.so")

    def argv(self, *cmd):
        return ["ip", "netns", "exec", self.ns, *cmd]

    def down(self):
        subprocess.run(
            self.argv(os.path.join(BIN, "rxu"), "down", "--name", self.dev, "--force"),
            env=dict(os.environ, RXU_RUNTIME_DIR=self.rt),
            capture_output=True, timeout=60,
        )
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)
        shutil.rmtree(self.rt, ignore_errors=True)


def tcp_listening(port):
    """Whether some socket listens on TCP `port` (IPv4 or IPv6), read from
    /proc so that checking does not consume the server's one accept."""
    want = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[1].endswith(want) and cols[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def wait_for(pred, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


class Proc:
    """A child in its own process group, output to a file, killed (with its
    children) when it outlives its limit."""

    def __init__(self, argv, env, log):
        self.argv = argv
        self.log = log
        self.f = open(log, "w")
        self.p = subprocess.Popen(
            argv, env=env, stdout=self.f, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait(self, limit):
        try:
            rc = self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = "timeout"
        self.f.close()
        return rc

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()


class Report:
    """One line per case, a pass count at the end, exit status 1 on any
    failure."""

    def __init__(self, family):
        self.family = family
        self.passed = 0
        self.failed = []
        self.t0 = time.monotonic()

    def case(self, name, ok, secs, detail=""):
        word = "PASS" if ok else "FAIL"
        extra = f"  {detail}" if detail else ""
        print(f"{word} {name} ({secs:.1f} s){extra}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)

    def finish(self):
        total = self.passed + len(self.failed)
        secs = time.monotonic() - self.t0
        print(f"{self.family}: {self.passed}/{total} passed in {secs:.0f} s", flush=True)
        for name in self.failed:
            print(f"{self.family}: FAILED {name}", flush=True)
        return 0 if not self.failed and total > 0 else 1


def tail(text, n=12):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-n:])
