"""Checks over a phase: `rxu decode` of the tap capture (every ICRC good,
both directions) and the two sides' packet counters against each other and
against the wire."""

import re
from collections import Counter

from . import netns

_LINE = re.compile(r"^\s*(\d+) RoCEv2 ([\d.]+):\d+ -> ([\d.]+):\d+ (\S+) .*icrc=(\S+)")
_SUMMARY = re.compile(r"summary: .*?(\d+) bad ICRC, (\d+) malformed")


class Decoded:
    """What `rxu decode` said about one capture."""

    def __init__(self, status, text):
        self.status = status
        self.text = text
        self.h2g = 0  # rxu -> rxe packets on the wire
        self.g2h = 0  # rxe -> rxu
        self.bad = []
        self.frames = {}  # frame number -> (src, opcode, line)
        self.opcodes = Counter()
        for line in text.splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            num, src, _dst, op, icrc = m.groups()
            if src == netns.HOST_IP:
                self.h2g += 1
            elif src == netns.GUEST_IP:
                self.g2h += 1
            if icrc != "ok":
                self.bad.append(line.strip())
            self.frames[int(num)] = (src, op, line.strip())
            self.opcodes[(src, op)] += 1
        m = _SUMMARY.search(text)
        self.bad_summary = (int(m.group(1)) + int(m.group(2))) if m else None

    def ok(self):
        return self.status == 0 and not self.bad and self.bad_summary == 0

    def figure(self):
        bad = len(self.bad) if self.bad_summary is None else self.bad_summary
        return f"{self.h2g} rxu->rxe + {self.g2h} rxe->rxu pkts, {bad} bad"


def delta(after, before, key):
    return int(after.get(key, 0)) - int(before.get(key, 0))


class Counters:
    """Counter deltas over a phase and the verdict on them.

    Both ends count what they sent (rxu sent_pkts, rxe sent_pkts) and what
    they accepted (rcvd_pkts). On a clean wire the sender's count equals the
    capture of its direction exactly. rxe's count falls short by exactly the
    packets rxe_rcv turned away (counted in the guest, rxe_rejects), and
    beyond that only by what the peer's retransmissions cover: the
    tolerance for each direction is the retransmissions the sides report,
    rxu's retransmitted_pkts and the duplicates each responder saw."""

    def __init__(self, rxu0, rxu1, rxe0, rxe1, decoded, lossy, tap_dropped, rxe_rejected=0):
        d = lambda a, b, k: delta(a, b, k)  # noqa: E731
        self.rxu_sent = d(rxu1, rxu0, "sent_pkts")
        self.rxu_rcvd = d(rxu1, rxu0, "rcvd_pkts")
        self.rxu_retx = d(rxu1, rxu0, "retransmitted_pkts")
        self.rxu_dup = d(rxu1, rxu0, "duplicate_request")
        self.rxe_sent = d(rxe1, rxe0, "sent_pkts")
        self.rxe_rcvd = d(rxe1, rxe0, "rcvd_pkts")
        self.rxe_dup = d(rxe1, rxe0, "duplicate_request")
        self.rxe_retry = d(rxe1, rxe0, "completer_retry_err") + d(rxe1, rxe0, "rcvd_seq_err")
        self.tap_dropped = tap_dropped
        self.rxe_rejected = rxe_rejected
        self.wire_h2g = decoded.h2g
        self.wire_g2h = decoded.g2h
        self.lossy = lossy
        self.problems = []
        # What the capture saw each way must match what the sender counted
        # (exactly when nothing is dropped in between).
        for who, sent, wire in (("rxu", self.rxu_sent, self.wire_h2g),
                                ("rxe", self.rxe_sent, self.wire_g2h)):
            if sent < wire or (not lossy and sent != wire):
                self.problems.append(f"{who} sent {sent} but the wire carried {wire}")
        # rxu -> rxe: rxe may miss what rxu retransmits or re-ACKs anyway.
        tol_h2g = self.rxu_retx + self.rxu_dup
        # rxe -> rxu: rxe's retransmissions show as duplicates at rxu; its
        # re-ACKs as rxe's duplicate_request.
        tol_g2h = self.rxu_dup + self.rxe_dup + self.rxe_retry
        self.tol_h2g = tol_h2g
        self.tol_g2h = tol_g2h
        # What rxe turned away in rxe_rcv (a QP already destroyed or out of
        # RTS, as when its program exits before rxu's last ACK arrives) it
        # never counts: those leave the gap first, exactly.
        gap_h2g = self.rxu_sent - self.rxe_rcvd - rxe_rejected
        gap_g2h = self.rxe_sent - self.rxu_rcvd
        if not 0 <= gap_h2g <= tol_h2g:
            self.problems.append(f"rxu sent {self.rxu_sent}, rxe received {self.rxe_rcvd}: "
                                 f"gap {gap_h2g} outside 0..{tol_h2g}")
        if not 0 <= gap_g2h <= tol_g2h:
            self.problems.append(f"rxe sent {self.rxe_sent}, rxu received {self.rxu_rcvd}: "
                                 f"gap {gap_g2h} outside 0..{tol_g2h}")

    def ok(self):
        return not self.problems

    def figure(self):
        drop = f", tap dropped {self.tap_dropped}" if self.tap_dropped else ""
        rej = f", rxe rejected {self.rxe_rejected}" if self.rxe_rejected else ""
        return (f"rxu sent {self.rxu_sent}, rxe rcvd {self.rxe_rcvd} "
                f"(retx {self.rxu_retx}{drop}{rej}); "
                f"rxe sent {self.rxe_sent}, rxu rcvd {self.rxu_rcvd} (rxe retries {self.rxe_retry})")


# rxe's rcvd_pkts counts a packet only once rxe_rcv has accepted it; what
# rxe_rcv (or the UDP hook before it) turns away goes to kfree_skb there and
# is counted nowhere else. A histogram on the kfree_skb tracepoint, keyed by
# the calling function, counts those drops in the guest.
_KFREE = "/sys/kernel/tracing/events/skb/kfree_skb"
ARM_REJECTS = ("[ -e /sys/kernel/tracing/events ] || "
               "mount -t tracefs tracefs /sys/kernel/tracing && "
               f"echo 'hist:keys=location.sym:vals=hitcount' > {_KFREE}/trigger")
READ_REJECTS = f"cat {_KFREE}/hist"
_REJECTERS = ("rxe_rcv", "rxe_udp_encap_recv")
_HIST_LINE = re.compile(r"location: \[[0-9a-f]+\] ([A-Za-z0-9_.]+)\W.*hitcount:\s*(\d+)")


def rxe_rejects(hist):
    """The packets rxe dropped before counting them, from READ_REJECTS."""
    total = 0
    for line in hist.splitlines():
        m = _HIST_LINE.search(line)
        if m and m.group(1) in _REJECTERS:
            total += int(m.group(2))
    return total


def rxe_counters(text):
    """Counters from `rdma statistic show link rxe0/1` (text form)."""
    words = text.split()
    out = {}
    for i in range(len(words) - 1):
        if re.fullmatch(r"[a-z_]+", words[i]) and words[i + 1].isdigit():
            out[words[i]] = int(words[i + 1])
    return out
