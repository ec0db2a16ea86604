"""The kernel-rxe peer: a qemu guest booted straight into the Debian kernel,
talking to the host through a 9p share (commands in, output out) and a
virtio NIC on the namespace's tap."""

import os
import shutil
import time

from . import netns
from .proc import Job, log, wait_until

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class GuestJob:
    """One command running in the guest."""

    def __init__(self, guest, ident, what):
        self.guest = guest
        self.id = ident
        self.what = what
        self.rc = None
        self.timed_out = False

    def _out(self, ext):
        return os.path.join(self.guest.share, "out", f"{self.id}.{ext}")

    def listening(self):
        return os.path.exists(self._out("listening"))

    def done(self):
        return os.path.exists(self._out("rc"))

    def wait(self, limit):
        """Exit status, or None when `limit` s pass (the command's own
        `timeout` in the guest ends it soon after)."""
        if not wait_until(self.done, limit, step=0.1):
            self.timed_out = True
            self.kill()
            return None
        with open(self._out("rc")) as f:
            text = f.read().strip()
        self.rc = int(text) if text.isdigit() else 255
        return self.rc

    def kill(self):
        """SIGTERM to the guest command's `timeout`, which passes it on."""
        pid = self._out("pid")
        if os.path.exists(pid) and not self.done():
            self.guest.start(f"kill $(cat /share/out/{self.id}.pid) 2>/dev/null", "kill")

    def output(self):
        res = []
        for ext in ("out", "err"):
            try:
                with open(self._out(ext), errors="replace") as f:
                    res.append(f.read())
            except OSError:
                res.append("")
        return tuple(res)

    def keep(self, base):
        """Copies the output next to the host's logs."""
        out, err = self.output()
        with open(base + ".out", "w") as f:
            f.write(out)
        with open(base + ".err", "w") as f:
            f.write(err)


class Guest:
    def __init__(self, image_dir, work, accel, mtu, progs=()):
        """`progs`: host-built programs (linked against the Debian 12
        libraries the guest has too) that the guest runs from the share."""
        self.host_progs = list(progs)
        self.progs = {}
        self.image = image_dir
        self.work = work
        self.accel = accel
        self.share = os.path.join(work, "share")
        self.mtu = mtu
        self.next_id = 0
        self.qemu = None
        self.gid_index = None

    def boot(self, limit):
        shutil.rmtree(self.share, ignore_errors=True)
        os.makedirs(os.path.join(self.share, "cmd"))
        os.makedirs(os.path.join(self.share, "out"))
        shutil.copy(os.path.join(HERE, "guest-init"), os.path.join(self.share, "guest-init"))
        if self.host_progs:
            os.makedirs(os.path.join(self.share, "bin"))
        for path in self.host_progs:
            name = os.path.basename(path)
            shutil.copy(path, os.path.join(self.share, "bin", name))
            self.progs[name] = f"/share/bin/{name}"
        with open(os.path.join(self.share, "mtu"), "w") as f:
            f.write(f"{self.mtu}\n")
        if self.accel == "kvm":
            accel = ["-accel", "kvm", "-cpu", "host"]
        else:
            accel = ["-accel", "tcg,thread=multi", "-cpu", "max"]
        argv = netns.argv(
            "qemu-system-x86_64", "-nodefaults", "-display", "none", *accel,
            "-m", "1024", "-smp", "2", "-no-reboot",
            "-serial", "file:" + os.path.join(self.work, "console.log"),
            "-kernel", os.path.join(self.image, "vmlinuz"),
            "-initrd", os.path.join(self.image, "initrd.img"),
            "-append", "console=ttyS0 root=/dev/vda rw init=/sbin/rxu-init "
                       "panic=-1 quiet net.ifnames=0",
            "-drive", "file=" + os.path.join(self.image, "root.img")
                      + ",format=raw,if=virtio,snapshot=on",
            "-virtfs", f"local,path={self.share},mount_tag=rxu,security_model=none,id=fs0",
            "-netdev", f"tap,id=n0,ifname={netns.TAP},script=no,downscript=no",
            "-device", "virtio-net-pci,netdev=n0,romfile=")
        self.qemu = Job(argv, os.path.join(self.work, "qemu"))
        ready = os.path.join(self.share, "ready")
        ok = wait_until(lambda: os.path.exists(ready) or not self.qemu.running(), limit, 0.2)
        if not ok or not os.path.exists(ready):
            raise RuntimeError(f"the guest did not come up in {limit} s "
                               f"(see {self.work}/console.log, qemu.err)")
        with open(ready) as f:
            if f.read().strip() != "ready":
                raise RuntimeError("the guest could not create rxe0 (see guest.log)")
        with open(os.path.join(self.share, "gid_index")) as f:
            self.gid_index = int(f.read().strip())

    def start(self, script, what, limit=None, listen_port=None, listen_cm=None):
        """Starts `script` (sh) in the guest. With `limit`, it runs under
        timeout(1); with `listen_port`, the guest reports when that TCP port
        listens (out/<id>.listening); with `listen_cm` (port space, port),
        when an rdma_cm id listens there (`rdma resource show cm_id`)."""
        self.next_id += 1
        ident = f"{self.next_id:04d}"
        out = f"/share/out/{ident}"
        if limit is not None:
            # The script itself goes in a file of its own (any quoting, many
            # lines); the wrapper bounds it in time.
            with open(os.path.join(self.share, "cmd", f"{ident}.body"), "w") as f:
                f.write(script + "\n")
            body = (f"timeout -k 5 {int(limit)} sh /share/cmd/{ident}.body &\n"
                    f"p=$!\necho $p >{out}.pid\n")
            if listen_port is not None:
                body += (f"while kill -0 $p 2>/dev/null; do\n"
                         f"  if grep -q ':{listen_port:04X} [0-9A-F]*:0000 0A ' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then\n"
                         f"    : >{out}.listening; break\n  fi\n  sleep 0.05\ndone\n")
            elif listen_cm is not None:
                ps, port = listen_cm
                body += (f"while kill -0 $p 2>/dev/null; do\n"
                         f"  if rdma resource show cm_id 2>/dev/null | "
                         f"grep -Eq 'state LISTEN ps {ps} .*src-addr [^ ]*:{port}( |$)'; then\n"
                         f"    : >{out}.listening; break\n  fi\n  sleep 0.1\ndone\n")
            body += "wait $p\n"
        else:
            body = script + "\n"
        tmp = os.path.join(self.share, "cmd", f"{ident}.tmp")
        with open(tmp, "w") as f:
            f.write(body)
        os.rename(tmp, os.path.join(self.share, "cmd", f"{ident}.sh"))
        return GuestJob(self, ident, what)

    def run(self, script, limit=60):
        """Runs `script` to completion: (rc, stdout, stderr)."""
        job = self.start(script, script, limit=limit)
        rc = job.wait(limit + 15)
        out, err = job.output()
        return rc, out, err

    def set_mtu(self, mtu):
        rc, out, err = self.run(f"ip link set eth0 mtu {mtu}")
        if rc != 0:
            raise RuntimeError(f"guest: ip link set eth0 mtu {mtu}: {err}")

    def active_mtu(self):
        rc, out, _ = self.run("ibv_devinfo -d rxe0")
        for line in out.splitlines():
            if "active_mtu" in line:
                return line.split(":", 1)[1].strip()
        return "?"

    def poweroff(self, limit=60):
        if self.qemu is None:
            return
        open(os.path.join(self.share, "poweroff"), "w").close()
        if self.qemu.wait(limit) is None:
            log("guest: no power-off, qemu killed")
        self.qemu = None


def kvm_boots(image_dir, work, limit=15):
    """Whether this host's KVM runs the guest kernel: it must print its
    banner on the serial console within `limit` s (where KVM cannot boot a
    stock kernel, qemu starts and then hangs silently)."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    console = os.path.join(work, "kvm-probe.log")
    job = Job(["qemu-system-x86_64", "-nodefaults", "-display", "none",
               "-accel", "kvm", "-cpu", "host", "-m", "512", "-no-reboot",
               "-serial", "file:" + console,
               "-kernel", os.path.join(image_dir, "vmlinuz"),
               "-append", "console=ttyS0 earlyprintk=ttyS0 panic=-1 init=/nonexistent"],
              os.path.join(work, "kvm-probe"))

    def banner():
        try:
            with open(console, errors="replace") as f:
                return "Linux version" in f.read()
        except OSError:
            return False

    ok = wait_until(lambda: banner() or not job.running(), limit, 0.2) and banner()
    job.kill()
    time.sleep(0.2)
    return ok

