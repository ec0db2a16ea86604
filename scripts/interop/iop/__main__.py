"""The interop matrix against kernel rxe (run by scripts/interop/run).

Phases: path MTU 1024 (netdev MTU 1500), path MTU 4096 (netdev MTU 9000),
path MTU 1024 with loss and reordering on both sides of the tap, the
rdma_cm programs (cmcases) at path MTU 1024, and "surface": every field and
errno a verbs program can read (tests/c/verbs_surface), rxu's against rxe's
(surface.py). In each, every case runs rxu
client -> rxe server and rxe client -> rxu server while tcpdump records the
tap; then `rxu decode` checks every ICRC of that capture (and, for rdma_cm,
that each case's CM MADs are there and named) and the counters of both
sides are compared. Exit status 0 only when every row passed."""

import argparse
import json
import os
import re
import sys
import time

from . import cases, checks, cmcases, cmrun, netns, rxu, surface, vm
from .proc import Job, listening_in, log, wait_until

RXU_TO_RXE = cmrun.RXU_TO_RXE
RXE_TO_RXU = cmrun.RXE_TO_RXU

# netem: 1% loss, and 1% of the packets held back 1 ms (overtaken by the
# next ones: reordering). It runs in the guest, on both directions of its
# end of the link (eth0's egress, and its ingress through ifb0): the host
# kernels these runs meet may have no sch_netem (this one has not).
NETEM = "delay 1ms reorder 99% loss 1%"


def impair_script(dev, acks_too):
    """tc commands putting NETEM on `dev`'s egress; with `acks_too` false,
    RC ACK/NAK packets (BTH opcode 0x11, byte 28 of an IPv4 RoCE packet)
    bypass it through band 0 of a prio qdisc."""
    if acks_too:
        return f"tc qdisc replace dev {dev} root netem {NETEM}"
    return "\n".join([
        f"tc qdisc replace dev {dev} root handle 1: prio bands 2 "
        "priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1",
        f"tc qdisc add dev {dev} parent 1:1 handle 10: pfifo",
        f"tc qdisc add dev {dev} parent 1:2 handle 20: netem {NETEM}",
        f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 "
        "match u8 0x11 0xff at 28 flowid 1:1",
    ])


def impair(acks_too):
    return "\n".join([
        "modprobe ifb numifbs=1",
        "ip link add ifb0 type ifb 2>/dev/null",
        "ip link set ifb0 up",
        impair_script("eth0", acks_too),
        "tc qdisc add dev eth0 handle ffff: ingress",
        "tc filter add dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0",
        impair_script("ifb0", acks_too),
    ])


UNIMPAIR = """tc -s qdisc show dev eth0 | grep -A1 netem
tc -s qdisc show dev ifb0 | grep -A1 netem
tc qdisc del dev eth0 root
tc qdisc del dev eth0 ingress
tc qdisc del dev ifb0 root"""


class Phase:
    """impair: None, "all" (every packet may be lost or reordered) or
    "data" (RC ACKs/NAKs pass untouched); cm: the phase runs the rdma_cm
    cases instead of the verbs ones; verbs_surface: the phase runs
    tests/c/verbs_surface on both sides and compares (surface.py)."""

    def __init__(self, name, netdev_mtu, path_mtu, impair=None, cm=False, verbs_surface=False):
        self.name = name
        self.netdev_mtu = netdev_mtu
        self.path_mtu = path_mtu
        self.impair = impair
        self.cm = cm
        self.verbs_surface = verbs_surface

    @property
    def lossy(self):
        return self.impair is not None

    def label(self):
        return {None: f"{self.path_mtu}", "all": f"{self.path_mtu} loss",
                "data": f"{self.path_mtu} loss (data)"}[self.impair]

    def runs(self, case):
        """perftest synchronises over TCP before it tears down, so it runs
        with every packet impaired. The pingpongs close without that: a
        lost last ACK leaves the peer retrying against a destroyed QP (for
        ever on rxe, where retry_cnt 7 means infinite) — a property of the
        programs, not of the transports — so they run with ACKs spared."""
        if not self.lossy:
            return True
        return case.loss and (self.impair == "data") == (case.kind == cases.PINGPONG)


PHASES = [Phase("mtu1024", 1500, 1024),
          Phase("mtu4096", 9000, 4096),
          Phase("loss", 1500, 1024, "all"),
          Phase("loss-data", 1500, 1024, "data"),
          Phase("rdmacm", 1500, 1024, cm=True),
          Phase("surface", 1500, 1024, verbs_surface=True)]


# Programs of tests/c run on both sides: by the rdma_cm cases, and by the
# surface phase.
TEST_PROGS = ["cm_reject", surface.PROG]


class Row:
    def __init__(self, test, direction, mtu, ok, figure, detail=""):
        self.test, self.direction, self.mtu = test, direction, mtu
        self.ok, self.figure, self.detail = ok, figure, detail


class Runner:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        # Test programs built from tests/c (scripts/interop/run puts them in
        # the bindir): run from there on the host, from the share in the guest.
        self.host_progs = {p: os.path.join(args.bindir, p) for p in TEST_PROGS
                           if os.path.isfile(os.path.join(args.bindir, p))}
        self.guest = vm.Guest(args.image, self.work, args.accel, PHASES[0].netdev_mtu,
                              self.host_progs.values())
        self.dev = rxu.Device(args.bindir, os.path.join(self.work, "runtime"))
        self.rows = []
        self.port = 18515
        self.timings = []
        self.picker = None
        self.cm = cmrun.CmRunner(self)
        if args.vectors:
            from .vectors import Picker
            self.picker = Picker()

    def timed(self, what, fn, *a):
        t = time.monotonic()
        try:
            return fn(*a)
        finally:
            self.timings.append((what, time.monotonic() - t))
            log(f"{what}: {time.monotonic() - t:.1f} s")

    # --- one program pair ---------------------------------------------
    def next_port(self):
        self.port = 18515 + (self.port - 18515 + 1) % 400
        return self.port

    def host_start(self, argv, base):
        # The programs busy-poll; niced, they leave the two cores to rxud
        # and qemu (a starved rxud made rxe time out and retransmit).
        argv, env = self.dev.command(argv)
        return Job(argv, base, env=env)

    def run_case(self, case, direction, phase, logdir):
        port = self.next_port()
        limit = self.args.limit * (2 if phase.lossy else 1)
        mtu = phase.path_mtu
        common = case.args(mtu, phase.lossy)
        host_args = cases.device_args(case, rxu.NAME, 0, port)
        guest_args = cases.device_args(case, "rxe0", self.guest.gid_index, port)
        tag = f"{case.name.replace(' ', '_').replace('>', 'gt')}.{direction.replace('->', '-')}"
        base = os.path.join(logdir, tag)
        server_on_guest = direction == RXU_TO_RXE
        s_argv = [case.tool, *(guest_args if server_on_guest else host_args), *common,
                  *case.server_args]
        c_argv = [case.tool, *(host_args if server_on_guest else guest_args), *common,
                  *case.client_args,
                  netns.GUEST_IP if server_on_guest else netns.HOST_IP]
        log(f"{phase.name} {case.name} {direction}")
        # Server first, client once it listens.
        if server_on_guest:
            server = self.guest.start(" ".join(s_argv), "server", limit=limit + 20,
                                      listen_port=port)
            up = wait_until(lambda: server.listening() or server.done(), 60, 0.1)
        else:
            server = self.host_start(s_argv, base + ".server")
            up = wait_until(lambda: listening_in(server.pid, port) or not server.running(), 30)
        listening = up and (server.listening() if server_on_guest else server.running())
        client = None
        if listening:
            if server_on_guest:
                client = self.host_start(c_argv, base + ".client")
            else:
                client = self.guest.start(" ".join(c_argv), "client", limit=limit + 10)
            client.wait(limit + 15)
        server.wait(30 if listening else 5)
        if server_on_guest:
            server.keep(base + ".server")
        elif client is not None:
            client.keep(base + ".client")
        c_out, c_err = client.output() if client is not None else ("", "")
        s_out, s_err = server.output()
        return self.verdict(case, direction, phase, listening, client, server,
                            (c_out, c_err), (s_out, s_err), base)

    def verdict(self, case, direction, phase, listening, client, server, c_io, s_io, base):
        name = case.name
        if not listening:
            return Row(name, direction, phase.label(), False, "server did not listen",
                       _tail(s_io))
        fig = cases.figure(case, c_io[0])
        expect = case.expect_fail.get(direction)
        if expect is not None:
            cst = cases.wc_statuses(*c_io)
            sst = cases.wc_statuses(*s_io)
            ok = (client.rc not in (None, 0) and server.rc not in (None, 0)
                  and bool(cst & expect[0]) and bool(sst & expect[1]))
            fig = f"client WC {sorted(cst)}, server WC {sorted(sst)}"
            return Row(name, direction, phase.label(), ok, fig,
                       "" if ok else _tail(c_io) + _tail(s_io))
        if client.timed_out or server.timed_out:
            return Row(name, direction, phase.label(), False, "timed out",
                       _tail(c_io) + _tail(s_io) + f" (logs: {base}.*)")
        ok = client.rc == 0 and server.rc == 0 and fig is not None
        detail = "" if ok else (f"client exit {client.rc}, server exit {server.rc}: "
                                + _tail(c_io) + _tail(s_io))
        return Row(name, direction, phase.label(), ok, fig or f"exit {client.rc}/{server.rc}",
                   detail)

    # --- a phase ----------------------------------------------------
    def rxe_counters(self):
        rc, out, err = self.guest.run("rdma statistic show link rxe0/1")
        if rc != 0:
            raise RuntimeError(f"guest: rdma statistic show: {err}")
        return checks.rxe_counters(out)

    def arm_rejects(self):
        rc, _, err = self.guest.run(checks.ARM_REJECTS)
        if rc != 0:
            raise RuntimeError(f"guest: cannot count rxe's rejected packets: {err}")

    def rxe_rejects(self, keep):
        rc, out, err = self.guest.run(checks.READ_REJECTS)
        if rc != 0:
            raise RuntimeError(f"guest: reading the kfree_skb histogram: {err}")
        with open(keep, "w") as f:
            f.write(out)
        return checks.rxe_rejects(out)

    def phase(self, phase, selected):
        logdir = os.path.join(self.work, phase.name)
        os.makedirs(logdir, exist_ok=True)
        netns.set_mtu(phase.netdev_mtu)
        self.guest.set_mtu(phase.netdev_mtu)
        self.dev.up()
        if phase.verbs_surface:
            try:
                self.rows += [Row(*r) for r in surface.run(self, phase.label())]
            finally:
                self.dev.keep_log(os.path.join(logdir, "rxud.log"))
                self.dev.down()
            return
        try:
            host_mtu, guest_mtu = self.dev.active_mtu(), self.guest.active_mtu()
            log(f"{phase.name}: netdev MTU {phase.netdev_mtu}, active MTU rxu {host_mtu}, "
                f"rxe {guest_mtu}")
            if host_mtu != str(phase.path_mtu) or not guest_mtu.startswith(str(phase.path_mtu)):
                self.rows.append(Row("active MTU", "both", phase.label(), False,
                                     f"rxu {host_mtu}, rxe {guest_mtu}"))
            if phase.lossy:
                rc, _, err = self.guest.run(impair(phase.impair == "all"))
                if rc != 0:
                    raise RuntimeError(f"guest netem: {err}")
            pcap = os.path.join(self.work, f"{phase.name}.pcap")
            cap = rxu.Capture(pcap)
            rxu0, rxe0 = self.dev.stats(), self.rxe_counters()
            rej0 = self.rxe_rejects(os.path.join(logdir, "kfree_skb.before.txt"))
            drops0 = netns.tap_tx_dropped()
            cm_runs = []
            for case in selected[1] if phase.cm else selected[0]:
                if not phase.cm and not phase.runs(case):
                    continue
                for direction in (RXU_TO_RXE, RXE_TO_RXU):
                    if phase.cm:
                        run = self.cm.run(case, direction, logdir)
                        log(f"  -> {'ok' if run.ok else 'FAIL'} {run.figure} {run.detail}")
                        cm_runs.append(run)
                        continue
                    row = self.run_case(case, direction, phase, logdir)
                    log(f"  -> {'PASS' if row.ok else 'FAIL'} {row.figure} {row.detail}")
                    self.rows.append(row)
            # Let retransmissions and last ACKs settle before counting.
            time.sleep(2)
            rxu1, rxe1 = self.dev.stats(), self.rxe_counters()
            rejected = self.rxe_rejects(os.path.join(logdir, "kfree_skb.after.txt")) - rej0
            with open(os.path.join(logdir, "rxu-stats.json"), "w") as f:
                json.dump({"before": rxu0, "after": rxu1}, f, indent=1)
            drops = netns.tap_tx_dropped() - drops0
            cap_err = cap.stop()
            if phase.lossy:
                _, out, _ = self.guest.run(UNIMPAIR)
                dropped = [int(x) for x in re.findall(r"dropped (\d+)", out)]
                log(f"netem dropped {sum(dropped)} packets (guest egress, ingress): {dropped}")
            status, text = self.dev.decode(pcap)
            with open(pcap[:-5] + ".decode.txt", "w") as f:
                f.write(text)
            dec = checks.Decoded(status, text)
            if cm_runs:
                self.rows += [Row(*r) for r in self.cm.judge(cm_runs, pcap, dec, phase.label(),
                                                              self.args.vectors)]
            dropped = re.search(r"(\d+) packets? dropped by kernel", cap_err)
            detail = "" if dec.ok() else "; ".join(dec.bad[:3]) or text[-300:]
            if dropped and int(dropped.group(1)) > 0:
                detail += f" tcpdump dropped {dropped.group(1)}"
            self.rows.append(Row("ICRC (rxu decode)", "both", phase.label(),
                                 dec.ok() and not (dropped and int(dropped.group(1))),
                                 dec.figure(), detail))
            if phase.cm:
                self.rows.append(Row("CM counters (rxu stats)", "both", phase.label(),
                                     *cmrun.cm_counters(rxu0, rxu1, dec)))
            cnt = checks.Counters(rxu0, rxu1, rxe0, rxe1, dec, phase.lossy, drops, rejected)
            self.rows.append(Row("counters", "both", phase.label(), cnt.ok(), cnt.figure(),
                                 "; ".join(cnt.problems)))
            if self.picker is not None:
                self.picker.scan(pcap, dec)
        finally:
            # The daemon's log goes with its runtime directory: keep it.
            self.dev.keep_log(os.path.join(logdir, "rxud.log"))
            self.dev.down()

    def main(self):
        def pick(all_cases):
            return [c for c in all_cases
                    if not self.args.only or re.search(self.args.only, c.name)]
        selected = (pick(cases.CASES), pick(cmcases.CASES))
        phases = [p for p in PHASES if not self.args.phases or p.name in self.args.phases]
        netns.create(PHASES[0].netdev_mtu)
        try:
            self.timed(f"boot guest ({self.args.accel})", self.guest.boot, 300)
            log(f"guest: rxe0 IPv4 GID index {self.guest.gid_index}")
            self.arm_rejects()
            for p in phases:
                self.timed(f"phase {p.name}", self.phase, p, selected)
        finally:
            self.guest.poweroff()
            netns.destroy()
        if self.picker is not None:
            written, missing = self.picker.write(self.args.vectors)
            log(f"vectors written to {self.args.vectors}: {', '.join(written)}; "
                f"not seen: {', '.join(missing) or 'none'}")
        return self.report()

    def report(self):
        header = ("test", "direction", "MTU", "result", "figure")
        lines = [header] + [(r.test, r.direction, r.mtu, "PASS" if r.ok else "FAIL", r.figure)
                            for r in self.rows]
        widths = [max(len(str(line[i])) for line in lines) for i in range(5)]
        md = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths)) + " |"
              for line in lines]
        md.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        table = "\n".join(md)
        with open(os.path.join(self.work, "table.md"), "w") as f:
            f.write(table + "\n")
        print(table)
        failed = [r for r in self.rows if not r.ok]
        for r in failed:
            print(f"FAIL {r.test} {r.direction} {r.mtu}: {r.detail}")
        print(f"{len(self.rows) - len(failed)}/{len(self.rows)} passed")
        with open(os.path.join(self.work, "timings.txt"), "w") as f:
            for what, secs in self.timings:
                f.write(f"{what}: {secs:.1f} s\n")
        return 0 if self.rows and not failed else 1


def _tail(io, n=300):
    text = (io[0] + io[1]).strip()
    return ("…" + text[-n:]) if len(text) > n else text


def parse():
    p = argparse.ArgumentParser(prog="iop")
    p.add_argument("--image", required=True, help="guest image directory (build-guest)")
    p.add_argument("--work", required=True, help="directory for logs and captures")
    p.add_argument("--bindir", required=True,
                   help="directory with rxu, rxud and the provider (scripts/copy-provider)")
    p.add_argument("--accel", choices=["kvm", "tcg"], default="tcg")
    p.add_argument("--limit", type=int, default=120, help="seconds per program run")
    p.add_argument("--only", help="regex: run only matching cases")
    p.add_argument("--phases", nargs="*", help="run only these phases")
    p.add_argument("--vectors", help="write kernel packets as test vectors here")
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(Runner(parse()).main())
