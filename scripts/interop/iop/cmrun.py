"""Runs the rdma_cm cases (cmcases) of a phase: servers found listening
through `rdma resource` (guest) and `rxu status` (host), clients bound to
their side's address, killed clients timed until their server sees
DISCONNECTED. Each case is then judged on its programs' output and on its
slice of the phase's capture (by time)."""

import os
import shlex
import signal
import time

from . import cmcases, netns, rxu, vectors
from .cmcases import End, Io
from .proc import log, wait_until

RXU_TO_RXE = "rxu->rxe"
RXE_TO_RXU = "rxe->rxu"

# Seconds a program may run; the CM cases are short.
LIMIT = 60
# A killed client's server must see DISCONNECTED within this many seconds:
# the DREQ of the client's CM comes at once; without it, nothing would
# tell rping's server (it waits on its peer's next message).
KILL_BUDGET = 30
# Attempts of a case whose client fails with its retry_on message.
RETRIES = 4


class Run:
    """One case in one direction: the programs' verdict, and when it ran
    (its frames are those captured from its start to the next one's)."""

    def __init__(self, case, direction, client_ip, server_ip):
        self.case = case
        self.direction = direction
        self.client_ip = client_ip
        self.server_ip = server_ip
        self.t0 = time.time()
        self.ok = False
        self.figure = ""
        self.detail = ""
        self.client_said = ""


class CmRunner:
    def __init__(self, runner):
        self.r = runner

    def run(self, case, direction, logdir):
        run = self._run(case, direction, logdir)
        t0 = run.t0
        tries = 1
        while not run.ok and case.retry_on and case.retry_on in run.client_said and tries < RETRIES:
            # perftest -R's race (see CmCase.retry_on): again; the capture
            # slice keeps every attempt. On a loaded machine the guest's
            # server can lose the race twice in a row (seen in CI).
            log(f"  -> {run.figure}: {case.retry_on!r}, try {tries + 1} of {RETRIES}")
            time.sleep(1)
            run = self._run(case, direction, logdir)
            tries += 1
        if tries > 1:
            run.t0 = t0
            run.figure = f"{run.figure} (try {tries}: {case.retry_on})"
        return run

    def _run(self, case, direction, logdir):
        port = case.port or self.r.next_port()
        rxu_client = direction == RXU_TO_RXE
        host = End(netns.HOST_IP, netns.GUEST_IP, rxu.NAME, port, self.r.host_progs)
        guest = End(netns.GUEST_IP, netns.HOST_IP, "rxe0", port, self.r.guest.progs)
        c_end, s_end = (host, guest) if rxu_client else (guest, host)
        run = Run(case, direction, c_end.ip, s_end.ip)
        tag = "".join(ch if ch.isalnum() else "_" for ch in case.name).strip("_")
        base = os.path.join(logdir, f"{tag}.{direction.replace('->', '-')}")
        log(f"rdmacm {case.name} {direction}")
        server = None
        if case.server is not None:
            s_argv = case.server(s_end)
            if rxu_client:
                server = self.r.guest.start(shlex.join(s_argv), "server", limit=LIMIT + KILL_BUDGET,
                                            listen_cm=(case.ps, port))
                up = wait_until(lambda: server.listening() or server.done(), 60, 0.1)
                listening = up and server.listening()
            else:
                server = self.r.host_start(s_argv, base + ".server")
                up = wait_until(lambda: self.r.dev.cm_listening(case.ps, port)
                                or not server.running(), 30, 0.2)
                listening = up and server.running()
            if not listening:
                server.kill()
                server.wait(10)
                s_io = self._io(server, rxu_client, base + ".server")
                run.figure = "server did not listen"
                run.detail = _tail(s_io)
                return run
        c_argv = case.client(c_end)
        if rxu_client:
            client = self.r.host_start(c_argv, base + ".client")
        else:
            script = shlex.join(c_argv)
            if case.kind == cmcases.KILL:
                # The client in the background, its pid where the kill finds it.
                script = (f"trap 'kill -9 $c 2>/dev/null' TERM\n{script} &\nc=$!\n"
                          f"echo $c >/tmp/cm-kill-{port}.pid\nwait $c")
            client = self.r.guest.start(script, "client", limit=LIMIT)
        if case.kind == cmcases.KILL:
            self._kill(run, client, server, rxu_client, port)
        else:
            client.wait(LIMIT + 15)
            if server is not None:
                # A server whose client failed may wait for ever.
                server.wait(20 if client.rc == 0 else 5)
        c_io = self._io(client, not rxu_client, base + ".client")
        s_io = self._io(server, rxu_client, base + ".server") if server else Io(None, "", "")
        run.client_said = c_io.out + c_io.err
        if case.kind == cmcases.KILL:
            return run
        timed_out = client.timed_out or (server is not None and server.timed_out)
        run.ok, run.figure, run.detail = case.check(c_io, s_io)
        if timed_out:
            run.ok = False
            run.detail = f"timed out; {run.detail} (logs: {base}.*)"
        if not run.ok:
            run.detail += " " + _tail(c_io) + " " + _tail(s_io)
        return run

    def _kill(self, run, client, server, rxu_client, port):
        """Waits until the client pings, kills it (SIGKILL), and times its
        server's DISCONNECTED."""
        running = wait_until(lambda: "ping data:" in client.output()[0]
                             or (client.done() if not rxu_client else not client.running()),
                             30, 0.2)
        pinging = running and "ping data:" in client.output()[0]
        if pinging:
            time.sleep(1)
        t_kill = time.monotonic()
        if rxu_client:
            client.kill(signal.SIGKILL)
        else:
            self.r.guest.run(f"kill -9 $(cat /tmp/cm-kill-{port}.pid)", limit=10)
        seen = pinging and wait_until(lambda: "DISCONNECT EVENT" in server.output()[1],
                                      KILL_BUDGET, 0.1)
        after = time.monotonic() - t_kill
        client.wait(15)
        server.wait(15 if seen else 5)
        ok, fig, detail = run.case.check(Io(client.rc, *client.output()),
                                         Io(server.rc, *server.output()))
        run.ok = pinging and seen and ok
        if not pinging:
            run.figure = "client never pinged"
            run.detail = "the client printed no ping before the kill"
        elif seen:
            run.figure = f"DISCONNECTED {after:.1f} s after the kill"
            run.detail = detail
        else:
            run.figure = f"no DISCONNECTED in {KILL_BUDGET} s"
            run.detail = detail

    def _io(self, job, on_guest, keep_base):
        if on_guest:
            job.keep(keep_base)
        out, err = job.output()
        return Io(job.rc, out, err)

    # --- after the phase: the capture -------------------------------------
    def judge(self, runs, pcap, decoded, label, vectors_dir=None):
        """(test, direction, MTU, ok, figure, detail) rows for the runs:
        program verdict and wire verdict together. With `vectors_dir`, the
        CM MADs of the first passing rping run in each direction are written
        there as reference captures."""
        times = vectors.frame_times(pcap)
        # The frames' bytes, for the REJ private data checks.
        _, recs = vectors.read_pcap(pcap)
        rows = []
        kept = set()
        for i, run in enumerate(runs):
            end = runs[i + 1].t0 if i + 1 < len(runs) else float("inf")
            frames = {n: f for n, f in decoded.frames.items()
                      if n - 1 < len(times) and run.t0 <= times[n - 1] < end}
            raw = {n: recs[n - 1][1] for n in frames if n - 1 < len(recs)}
            w_ok, summary, problems = cmcases.wire_check(run.case, frames, run.client_ip,
                                                         run.server_ip, raw)
            ok = run.ok and w_ok
            detail = "; ".join(x for x in [run.detail.strip(), *problems[:4]] if x)
            rows.append((run.case.name, run.direction, label, ok,
                         f"{run.figure}; CM {summary}", detail))
            if (vectors_dir and ok and run.case.name.startswith("rdma_cm rping -v")
                    and run.direction not in kept):
                kept.add(run.direction)
                who = "rxu-client" if run.direction == RXU_TO_RXE else "rxe-client"
                cm = {n: f for n, f in frames.items() if " CM " in f[2]}
                vectors.write_frames(vectors_dir, f"rxe-interop-cm-rping-{who}", pcap, cm)
        return rows


def _tail(io, n=300):
    text = (io.out + io.err).strip()
    return ("…" + text[-n:]) if len(text) > n else text


def cm_counters(before, after, decoded):
    """(ok, figure, detail) of rxu's CM counters (`rxu stats`) over the
    phase against the CM MADs on the wire: every MAD rxu put on the wire
    counted as sent, every one of the kernel's as received (the engine
    counts a MAD received before it judges it; duplicates and stale ones,
    such as the DREP that crosses our own DREP after crossed DREQs, are
    then dropped and counted again), none malformed. Unknown ones are
    reported, not failed: a kernel answer (REJ 8, DREP) that arrives after
    the process holding the id was killed finds no id, as it would on a
    kernel peer (`cm_send_rej_locked` resets a REQ_SENT id to idle)."""
    def d(key):
        return int(after.get(key, 0)) - int(before.get(key, 0))

    def total(pred):
        return sum(d(k) for k in set(after) | set(before) if pred(k))

    sent = total(lambda k: k.startswith("cm_") and k.endswith("_sent")
                 and not k.startswith("cm_rej_sent_reason_"))
    rcvd = total(lambda k: k.startswith("cm_") and k.endswith("_received")
                 and not k.startswith("cm_rej_received_reason_"))
    dup = d("cm_dropped_duplicate") + d("cm_dropped_stale")
    bad = d("cm_dropped_malformed")
    unknown = d("cm_dropped_unknown")
    wire_h2g = sum(1 for src, _op, line in decoded.frames.values()
                   if src == netns.HOST_IP and " CM " in line)
    wire_g2h = sum(1 for src, _op, line in decoded.frames.values()
                   if src == netns.GUEST_IP and " CM " in line)
    problems = []
    if sent != wire_h2g:
        problems.append(f"rxu counted {sent} CM MADs sent, the wire carried {wire_h2g}")
    if rcvd != wire_g2h:
        problems.append(f"rxu counted {rcvd} CM MADs received, the kernel sent {wire_g2h}")
    if bad:
        problems.append(f"{bad} of the kernel's MADs dropped as malformed")
    rej = {k[len("cm_rej_sent_reason_"):]: d(k) for k in after
           if k.startswith("cm_rej_sent_reason_") and d(k)}
    timeouts = total(lambda k: k.startswith("cm_timeouts_"))
    fig = (f"CM sent {sent} (wire {wire_h2g}), rcvd {rcvd} (wire {wire_g2h}; {dup} dup/stale, "
           f"{unknown} for ids already gone), "
           f"retx {d('cm_retransmissions')}, timeouts {timeouts}, "
           f"REJ sent {rej or 'none'}")
    return not problems, fig, "; ".join(problems)
