#!/usr/bin/env python3
"""Splits rxud's on-CPU samples into the stages of the data path.

Reads `perf script -F tid,period,ip,sym --no-inline` output (cpu-clock
samples with call stacks) on stdin and prints, per stage, the CPU time
and its share; with --packets N also nanoseconds per data packet.

A sample belongs to the first stage (in STAGES order) whose pattern
matches any frame of its stack; so a memcpy inside pread counts as
client memory access, a memcpy inside the transport as transport.

    perf script ... | stages.py --packets 123456 [--wall-ns W --threads T]
    stages.py --json ...   one JSON object instead of the table
"""

import argparse
import json
import re
import sys

# (stage, what it covers, frame pattern). Order matters: first match wins.
STAGES = [
    (
        "client memory",
        "pread/pwrite of /proc/<pid>/mem (syscall and kernel copy)",
        re.compile(
            r"^(mem_rw|mem_read|mem_write|__x64_sys_pread64|__x64_sys_pwrite64"
            r"|__libc_pread|__libc_pwrite|pread64|pwrite64|process_vm_rw"
            r"|__x64_sys_process_vm_(readv|writev)|process_vm_(readv|writev))$"
        ),
    ),
    ("icrc", "ICRC generate and check (crc32fast)", re.compile(r"crc32fast|icrc")),
    (
        "socket send",
        "sendmsg/sendmmsg (on loopback including the receive side's softirq)",
        re.compile(r"^(__libc_sendmsg|sendmmsg|__sendmmsg|__x64_sys_sendmmsg|__x64_sys_sendmsg|__sys_sendmmsg|__sys_sendmsg)$"),
    ),
    (
        "socket recv",
        "recvmsg/recvmmsg",
        re.compile(r"^(__libc_recvmsg|recvmmsg|__recvmmsg|__x64_sys_recvmmsg|__x64_sys_recvmsg|__sys_recvmmsg|__sys_recvmsg|do_recvmmsg)$"),
    ),
    (
        "poll syscalls",
        "epoll_wait(0) every 20 us and ppoll before sleeping (the on-CPU part)",
        re.compile(r"^(epoll_wait|__x64_sys_epoll_wait|do_epoll_wait|ppoll|__ppoll|__x64_sys_ppoll|do_sys_poll)$"),
    ),
    (
        "rings, WQEs, CQEs",
        "SQ/RQ ring slots -> WQEs, completions -> CQ rings, doorbells, events",
        re.compile(
            r"rxu_abi::ring|rxud::daemon::(completion|cq|wqe|srq)::"
            r"|Device>::(consume|take_posted|consume_session|deliver|refill_receives|prepare_sleep|end_sleep|check_srq_limits|deliver_events)"
            r"|datapath::(consume_sq|consume_rq|consume_srq|refill_receives|post_one|take)\b"
        ),
    ),
    (
        "transport",
        "parse, QP state machines, ACK generation, timers, endpoint dispatch",
        re.compile(r"^(transport::|<transport::|rxud::mem::|<rxud::mem::)"),
    ),
    (
        "loop and spin",
        "the event loop itself: idle spinning, clock reads, the work check",
        re.compile(r"event_loop::Daemon::run|datapath::<impl rxud::daemon::device::Device>::pump"),
    ),
]
OTHER = ("other", "anything else (control requests, page faults, scheduler)")


def samples(lines):
    """Yields (tid, period_ns, [frame symbols leaf first])."""
    head = None
    frames = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head[0], head[1], frames
            head, frames = None, []
            continue
        if not line.startswith("\t"):
            parts = line.split()
            if head is not None:
                yield head[0], head[1], frames
            head, frames = (int(parts[0]), int(parts[1])), []
            continue
        # "\t addr symbol (dso)"
        body = line.strip()
        sp = body.find(" ")
        sym = body[sp + 1 :] if sp >= 0 else ""
        dso = sym.rfind(" (")
        if dso >= 0:
            sym = sym[:dso]
        # perf prints symbol+offset with some options; drop the offset.
        sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
        frames.append(sym)
    if head is not None:
        yield head[0], head[1], frames


def classify(frames):
    for name, _, pat in STAGES:
        for f in frames:
            if pat.search(f):
                return name
    return OTHER[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packets", type=int, default=0, help="data packets in the sampled window")
    ap.add_argument("--wall-ns", type=int, default=0, help="length of the sampled window")
    ap.add_argument("--threads", type=int, default=1, help="rxud threads sampled")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    ns = {name: 0 for name, _, _ in STAGES}
    ns[OTHER[0]] = 0
    n = 0
    for _tid, period, frames in samples(sys.stdin):
        ns[classify(frames)] += period
        n += 1
    on_cpu = sum(ns.values())
    off_cpu = max(0, a.wall_ns * a.threads - on_cpu) if a.wall_ns else None
    rows = []
    for name, what, _ in STAGES + [(OTHER[0], OTHER[1], None)]:
        rows.append(
            {
                "stage": name,
                "what": what,
                "cpu_ns": ns[name],
                "ns_per_packet": ns[name] / a.packets if a.packets else None,
                "share": ns[name] / on_cpu if on_cpu else 0.0,
            }
        )
    out = {
        "samples": n,
        "on_cpu_ns": on_cpu,
        "off_cpu_ns": off_cpu,
        "packets": a.packets,
        "stages": rows,
    }
    if a.json:
        json.dump(out, sys.stdout)
        print()
        return
    print(f"{'stage':<20} {'ns/packet':>10} {'share':>7}  what")
    for r in rows:
        per = f"{r['ns_per_packet']:10.0f}" if r["ns_per_packet"] is not None else f"{'-':>10}"
        print(f"{r['stage']:<20} {per} {100 * r['share']:6.1f}%  {r['what']}")
    tot = f"{on_cpu / a.packets:10.0f}" if a.packets else f"{'-':>10}"
    print(f"{'on-CPU total':<20} {tot} {100.0:6.1f}%  {n} samples")
    if off_cpu is not None:
        per = f"{off_cpu / a.packets:10.0f}" if a.packets else f"{'-':>10}"
        print(f"{'off-CPU (asleep)':<20} {per} {'':>7}  window x threads - on-CPU")


if __name__ == "__main__":
    main()
