"""rxu on the host side of the tap: the device (rxu up/down/stats) and the
packet capture of the tap."""

import json
import os
import re
import shutil

from . import netns
from .proc import Job, run, wait_until

NAME = "rxu0"


class Device:
    def __init__(self, bindir, runtime):
        self.bindir = bindir
        self.rxu = os.path.join(bindir, "rxu")
        self.runtime = runtime
        self.env = None

    def _base_env(self):
        env = dict(os.environ)
        env["RXU_RUNTIME_DIR"] = self.runtime
        return env

    def up(self):
        os.makedirs(self.runtime, exist_ok=True)
        r = run(netns.argv(self.rxu, "up", "--netdev", netns.TAP, "--name", NAME),
                env=self._base_env())
        env = self._base_env()
        for line in r.stdout.splitlines():
            m = re.match(r"export (\w+)=(.*)$", line)
            if m:
                env[m.group(1)] = m.group(2).strip("'\"")
        if "SYSFS_PATH" not in env:
            raise RuntimeError(f"rxu up printed no environment: {r.stdout}")
        self.env = env

    def command(self, argv):
        """(argv, env) running rxu program `argv` in the namespace with the
        environment of `rxu up`. Its LD_PRELOAD (librxu-ucma.so, the
        in-process rdma_cm device) goes to the program alone, not to the ip
        and nice in front of it."""
        env = dict(self.env)
        preload = env.pop("LD_PRELOAD", None)
        if preload:
            argv = ["env", f"LD_PRELOAD={preload}", *argv]
        return netns.argv("nice", "-n", "10", *argv), env

    def cm_listening(self, ps, port):
        """Whether `rxu status` lists an rdma_cm id listening on `port` of
        port space `ps` (`cm 3 TCP listen 0.0.0.0:7174`)."""
        pat = re.compile(rf"\bcm \d+ {ps} listen\w* \S*:{port}\b", re.IGNORECASE)
        return bool(pat.search(self.status()))

    def keep_log(self, dest):
        """Copies the daemon's log (`rxu up` writes <runtime>/<name>.log)."""
        try:
            shutil.copyfile(os.path.join(self.runtime, f"{NAME}.log"), dest)
        except OSError:
            pass

    def down(self):
        run(netns.argv(self.rxu, "down", "--name", NAME, "--force"),
            env=self._base_env(), check=False)
        self.env = None

    def status(self):
        return run(netns.argv(self.rxu, "status"), env=self._base_env(), check=False).stdout

    def active_mtu(self):
        m = re.search(r"active_mtu (\d+)", self.status())
        return m.group(1) if m else "?"

    def stats(self):
        r = run(netns.argv(self.rxu, "stats", "--name", NAME, "--json"), env=self._base_env())
        return json.loads(r.stdout)["counters"]

    def decode(self, pcap):
        """(exit status, output) of `rxu decode`."""
        r = run([self.rxu, "decode", pcap], limit=300, check=False)
        return r.returncode, r.stdout + r.stderr


class Capture:
    """tcpdump of the RoCE traffic on the tap (both directions)."""

    def __init__(self, path):
        self.path = path
        # A 64 MiB buffer: rxu's bursts must not overrun the capture.
        self.job = Job(netns.argv("tcpdump", "-i", netns.TAP, "-s", "0", "-B", "65536", "-U",
                                  "-Z", "root",
                                  "-w", path, "udp", "port", "4791"),
                       path[:-len(".pcap")] + ".tcpdump")
        # tcpdump says "listening on" once the capture runs.
        wait_until(lambda: "listening on" in self.job.output()[1] or not self.job.running(), 10)
        if not self.job.running():
            raise RuntimeError(f"tcpdump did not start: {self.job.output()[1]}")

    def stop(self):
        self.job.stop()
        return self.job.output()[1]
