"""MPI over UCX on rxu, shared by scripts/middleware/openmpi and
scripts/middleware/mpich: the four cases (UCX_TLS=rc and ud_verbs; both
ranks on one device, one rank per device), each running mpi_check.c and
checking with `rxu stats` that the bytes went through the rank's device.

A launcher says how its MPI builds the program and starts two ranks with
a UCX_NET_DEVICES per rank; everything else is the same for both MPIs.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import mwkit

HERE = os.path.dirname(os.path.abspath(__file__))
LIMIT = 150.0
# What mpi_check moves at least, per rank: 2 x 3 x (8 B .. 4 MiB) p2p,
# 1 MiB put + 1 MiB get: a floor for the bytes `rxu stats` must show.
MIN_BYTES = 2 * 3 * (4 << 20)
# Variables every rank needs to reach rxu (as `rxu env` sets them).
RXU_VARS = ("LD_PRELOAD", "RDMAV_DRIVERS", "SYSFS_PATH", "RXU_RUNTIME_DIR")


class OpenMpi:
    """Open MPI 4.1 (openmpi-bin): `--mca pml ucx --mca osc ucx`."""

    family = "openmpi"
    prefix = "rxo"
    cc = "mpicc.openmpi"

    def argv(self, devices, binary, arg):
        base = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
        base += ["--mca", "pml", "ucx", "--mca", "osc", "ucx"]
        # Open MPI's own verbs BTLs would open the device behind UCX's back.
        base += ["--mca", "btl", "self,vader", "-x", "UCX_TLS"]
        for v in RXU_VARS:
            base += ["-x", v]
        out = base
        for i, dev in enumerate(devices):
            out += ([":"] if i else []) + ["-np", str(3 - len(devices))]
            out += ["-x", f"UCX_NET_DEVICES={dev}:1", binary, arg]
        return out

    def env(self):
        return {"OMPI_MCA_plm": "isolated"}


class Mpich:
    """MPICH 4.0 (Debian's mpich is built with ch4:ucx), hydra with the
    fork launcher; hydra passes the whole environment on by itself."""

    family = "mpich"
    prefix = "rxh"
    cc = "mpicc.mpich"

    def argv(self, devices, binary, arg):
        out = ["mpiexec.mpich", "-launcher", "fork"]
        for i, dev in enumerate(devices):
            out += ([":"] if i else []) + ["-n", str(3 - len(devices))]
            out += ["-env", "UCX_NET_DEVICES", f"{dev}:1", binary, arg]
        return out

    def env(self):
        return {}


def sent_bytes(devs):
    """`sent_bytes` of `rxu stats`, per device."""
    out = []
    for name in devs.names:
        m = re.search(r"^\s*sent_bytes\s+(\d+)", devs.stats(name), re.M)
        if not m:
            raise RuntimeError(f"rxu stats {name}: no sent_bytes line")
        out.append(int(m.group(1)))
    return out


def main(launcher, doc):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    opts = ap.parse_args()
    fam = launcher.family
    if os.geteuid() != 0:
        sys.exit(f"{fam}: needs root (rxu up creates /dev/infiniband/uverbsN)")
    if not opts.no_build:
        mwkit.build()
    logdir = tempfile.mkdtemp(prefix=f"rxu-{fam}-logs-")
    binary = os.path.join(logdir, "mpi_check")
    subprocess.run(
        [launcher.cc, "-O2", "-Wall", "-o", binary, os.path.join(HERE, "mpi_check.c")], check=True
    )
    devs = mwkit.Devices(launcher.prefix, 2)
    rep = mwkit.Report(fam)
    try:
        for tls in ("rc", "ud_verbs"):
            for topo in ("one", "two"):
                name = f"{topo} UCX_TLS={tls}"
                t0 = time.monotonic()
                before = sent_bytes(devs)
                arg = "figures" if opts.figures else "check"
                ranks_on = devs.names[:1] if topo == "one" else devs.names
                env = dict(devs.env, UCX_TLS=tls, **launcher.env())
                p = mwkit.Proc(
                    launcher.argv(ranks_on, binary, arg), env, os.path.join(logdir, name.replace(" ", "_"))
                )
                rc = p.wait(LIMIT)
                out = p.output()
                per_dev = [a - b for a, b in zip(sent_bytes(devs), before)]
                moved = sum(per_dev)
                # Both ranks send half of it: on "two" each device must
                # carry its rank's share, on "one" the first carries all.
                if topo == "two":
                    placed = min(per_dev) >= MIN_BYTES // 2
                else:
                    placed = per_dev[0] >= MIN_BYTES and per_dev[1] == 0
                oks = re.findall(r"^ok (.*)$", out, re.M)
                figs = re.findall(r"^figures: (.*)$", out, re.M)
                if opts.figures:
                    good = rc == 0 and len(figs) == 1
                    detail = figs[0] if figs else f"rc={rc}"
                else:
                    good = rc == 0 and len(oks) == 12 and moved >= MIN_BYTES and placed
                    shares = " + ".join(f"{n} {b}" for n, b in zip(devs.names, per_dev))
                    detail = f"{len(oks)} checks, rxu sent {moved} bytes ({shares})"
                    if rc != 0:
                        detail = f"rc={rc}, " + detail
                rep.case(name, good, time.monotonic() - t0, detail)
                if not good:
                    print(mwkit.tail(out, 20), flush=True)
        return rep.finish()
    finally:
        devs.down()
