"""The rdma_cm cases: unmodified librdmacm programs (rdmacm-utils, perftest
-R) connecting through the kernel's rdma_cm in the guest and rxu's on the
host, so the IB CM runs on the wire (MADs to QP1). Each runs rxu client ->
rxe server and rxe client -> rxu server; what each program must print is
checked here, what must be on the wire in `mads`."""

import re
from dataclasses import dataclass, field

from . import cases

# What a case does: connect and finish (OK), connect to a port with no
# listener (REJECT), or connect and have the client killed (KILL).
OK = "ok"
REJECT = "reject"
KILL = "kill"

# The reason the IB CM gives for a REQ to a service ID nobody listens on
# (IB_CM_REJ_INVALID_SERVICE_ID), which rdma_cm reports as the status of
# RDMA_CM_EVENT_REJECTED.
REJ_INVALID_SERVICE_ID = 8

# udaddy has no port option: it always uses rdma_cm port 7174.
UDADDY_PORT = 7174


@dataclass
class End:
    """One side of a case: its address, the peer's, its verbs device and
    the rdma_cm port the server listens on; `progs` maps the test programs
    built from tests/c (cm_reject) to their path on this side."""
    ip: str
    peer: str
    dev: str
    port: int
    progs: dict = field(default_factory=dict)

    def prog(self, name):
        return self.progs.get(name, name)


@dataclass
class Io:
    rc: object  # exit status, None when it did not finish
    out: str
    err: str


@dataclass
class Mad:
    """A CM message that must be in the case's capture: sent by the client,
    the server or either ("any"), at least `count` times, with REJ reason
    `reason` when given."""
    role: str
    msg: str
    count: int = 1
    reason: int = None
    # The REJ's 148 bytes of private data, when given: at least one of the
    # matching MADs must carry exactly these, and its sender's comm ID (an
    # rdma_cm id rejects from MRA_REQ_SENT, where the kernel fills it in).
    rej_data: bytes = None


@dataclass
class CmCase:
    name: str
    # Port space the server listens in (as `rdma resource` / `rxu status`
    # spell it).
    ps: str
    # End -> argv; server None: nothing listens (REJECT).
    server: object
    client: object
    # (client Io, server Io, count) -> (ok, figure, detail)
    check: object
    mads: list = field(default_factory=list)
    kind: str = OK
    port: int = None  # fixed port instead of the runner's next one
    # A client failure, printed so, after which the case runs once more.
    retry_on: str = None


def _rc_detail(c, s):
    return f"client exit {c.rc}, server exit {s.rc}"


# --- rping ---------------------------------------------------------------
RPING_COUNT = 20
RPING_SIZE = 64  # rping's default -S


def rping_data(i, size=RPING_SIZE):
    """The text of ping `i` as rping writes it: "rdma-ping-<i>: " and then
    letters from 'A' + i on, cycling 'A'..'z', up to size - 1 bytes (the
    last byte is the terminating NUL)."""
    text = f"rdma-ping-{i}: "
    c = 65 + i % 58
    while len(text) < size - 1:
        text += chr(c)
        c = c + 1 if c < 122 else 65
    return text[:size - 1]


def check_rping(c, s):
    want = [rping_data(i) for i in range(RPING_COUNT)]
    got_c = [line[len("ping data: "):] for line in c.out.splitlines()
             if line.startswith("ping data: ")]
    got_s = [line[len("server ping data: "):] for line in s.out.splitlines()
             if line.startswith("server ping data: ")]
    bad = []
    if got_c != want:
        bad.append(f"client printed {len(got_c)} pings"
                   + ("" if len(got_c) != len(want) else ", data differs"))
    if got_s != want:
        bad.append(f"server printed {len(got_s)} pings"
                   + ("" if len(got_s) != len(want) else ", data differs"))
    ok = c.rc == 0 and s.rc == 0 and not bad
    fig = f"{len(got_c)}/{RPING_COUNT} pings" + (", data ok" if not bad else "")
    return ok, fig, "" if ok else "; ".join([_rc_detail(c, s), *bad])


# --- programs that say how they ended ---------------------------------------
def check_status(client_says, server_says, what):
    """Both exit 0 and print their success lines."""
    def check(c, s):
        missing = [f"{who} did not print {said!r}"
                   for who, io, said in (("client", c, client_says), ("server", s, server_says))
                   if said not in io.out]
        ok = c.rc == 0 and s.rc == 0 and not missing
        return ok, what if ok else f"exit {c.rc}/{s.rc}", \
            "" if ok else "; ".join([_rc_detail(c, s), *missing])
    return check


def check_perftest(tool, kind):
    shape = cases.Case(tool, tool, kind, None)

    def check(c, s):
        fig = cases.figure(shape, c.out)
        ok = c.rc == 0 and s.rc == 0 and fig is not None
        return ok, fig or f"exit {c.rc}/{s.rc}", "" if ok else _rc_detail(c, s)
    return check


# --- negative cases ----------------------------------------------------------
def check_rejected(pattern, want_rc=None):
    """The client fails (exit `want_rc`, or any non-zero) and prints the
    REJECTED event with status 8."""
    pat = re.compile(pattern)

    def check(c, _s):
        seen = pat.search(c.out + c.err) is not None
        rc_ok = c.rc not in (None, 0) and (want_rc is None or c.rc == want_rc)
        ok = seen and rc_ok
        fig = f"REJECTED {REJ_INVALID_SERVICE_ID}, exit {c.rc}" if seen else f"exit {c.rc}"
        return ok, fig, "" if ok else f"client exit {c.rc}, REJECTED 8 printed: {seen}"
    return check


def check_survivor(c, s):
    """The killed client's server printed DISCONNECTED (the runner times
    it)."""
    seen = "server DISCONNECT EVENT" in s.err
    return seen, "server DISCONNECTED" if seen else "no DISCONNECTED", \
        "" if seen else f"server exit {s.rc}, no DISCONNECT EVENT"


# --- rdma_reject with private data (tests/c/cm_reject.c) ----------------------
# The REJ that rdma_reject sends: reason IB_CM_REJ_CONSUMER_DEFINED, and
# the 148 bytes of private data cm_reject's server passes (0xff, 0xfe, ...),
# or zeros when it passes none.
REJ_CONSUMER_DEFINED = 28
REJ_PRIVATE_DATA_LEN = 148
REJ_PATTERN = bytes((0xff - i) & 0xff for i in range(REJ_PRIVATE_DATA_LEN))
# Where the REJ's private data sits in a RoCEv2 frame over IPv4: Ethernet
# 14 + IPv4 20 + UDP 8 + BTH 12 + DETH 8 = the MAD at 62; the REJ's private
# data at MAD offset 24 (MAD header) + 84 (comm IDs, reason, ARI).
MAD_OFFSET = 62
REJ_DATA_OFFSET = MAD_OFFSET + 24 + 84


def rej_private_data(frame):
    """The 148 bytes of a REJ's private data in a captured frame, or None
    when the frame is too short (or not IPv4 without options)."""
    if len(frame) < REJ_DATA_OFFSET + REJ_PRIVATE_DATA_LEN or frame[14] != 0x45:
        return None
    return bytes(frame[REJ_DATA_OFFSET:REJ_DATA_OFFSET + REJ_PRIVATE_DATA_LEN])


def rej_local_comm_id(frame):
    """The REJ's Local Communication ID (MAD offset 24), or None."""
    if len(frame) < MAD_OFFSET + 28 or frame[14] != 0x45:
        return None
    return int.from_bytes(frame[MAD_OFFSET + 24:MAD_OFFSET + 28], "big")


def check_cm_reject(zeros):
    """cm_reject's client saw REJECTED 28 with the 148 bytes it expected;
    both sides exit 0 (the server after checking the REQ's 56 bytes)."""
    data = "(zeros)" if zeros else "(0xff down)"
    wants = [("client", "REJECTED status 28 private_data_len 148"),
             ("client", f"REJ private data: 148 bytes as sent {data}"),
             ("server", "CONNECT_REQUEST private_data_len 56")]
    if not zeros:
        wants += [("client", "rdma_connect with 57 bytes: -1 (Invalid argument)"),
                  ("server", "rdma_reject with 149 bytes: -1 (Invalid argument)")]

    def check(c, s):
        missing = [f"{who} did not print {said!r}" for who, said in wants
                   if said not in (c if who == "client" else s).out]
        ok = c.rc == 0 and s.rc == 0 and not missing
        fig = ("REJECTED 28, 148 bytes " + ("of zeros" if zeros else "as sent")
               + ("" if zeros else ", 57/149 bytes EINVAL")) if ok else f"exit {c.rc}/{s.rc}"
        return ok, fig, "" if ok else "; ".join([_rc_detail(c, s), *missing])
    return check


def _cm_reject(mode):
    def server(e):
        return [e.prog("cm_reject"), "-s", e.ip, "-p", str(e.port), mode]

    def client(e):
        return [e.prog("cm_reject"), "-c", e.peer, "-b", e.ip, "-p", str(e.port), mode]
    return server, client


# --- the MADs of a connection --------------------------------------------------
CONNECT = [Mad("client", "REQ"), Mad("server", "REP"), Mad("client", "RTU")]
DISCONNECT = [Mad("any", "DREQ"), Mad("any", "DREP")]


def _perf(tool, extra):
    def argv(e):
        return [tool, "-R", "-d", e.dev, "-p", str(e.port), "-F", *extra]
    return argv


_BW = ["-n", "200", "-s", "65536"]
_LAT = ["-n", "200"]
# perftest -R connects twice: a connection for its data exchange, then,
# right after a handshake over it, the test QP. Its server calls
# rdma_listen for the test QP only after that handshake, so a fast client's
# REQ can reach a kernel that does not listen yet: REJ 8, correctly. The
# client is meant to retry (10 times), but perftest 4.5-0.17 then dies of
# SIGSEGV in its retry path. That race is the program's, not a transport's.
PERFTEST_RACE = "RDMA_CM_EVENT_REJECTED; error: 8"

CASES = [
    CmCase("rdma_cm rping -v -C 20", "TCP",
           lambda e: ["rping", "-s", "-v", "-C", str(RPING_COUNT), "-a", e.ip, "-p", str(e.port)],
           lambda e: ["rping", "-c", "-v", "-C", str(RPING_COUNT), "-a", e.peer, "-I", e.ip,
                      "-p", str(e.port)],
           check_rping, CONNECT + DISCONNECT),
    CmCase("rdma_cm ucmatose -c 4", "TCP",
           lambda e: ["ucmatose", "-b", e.ip, "-p", str(e.port), "-c", "4"],
           lambda e: ["ucmatose", "-s", e.peer, "-b", e.ip, "-p", str(e.port), "-c", "4"],
           check_status("return status 0", "return status 0", "4 connections"),
           [Mad(m.role, m.msg, 4) for m in CONNECT] + [Mad("any", "DREQ", 4),
                                                       Mad("any", "DREP", 4)]),
    CmCase("rdma_cm udaddy (SIDR)", "UDP",
           lambda e: ["udaddy", "-b", e.ip],
           lambda e: ["udaddy", "-s", e.peer, "-b", e.ip],
           check_status("return status 0", "return status 0", "UD data ok"),
           [Mad("client", "SIDR_REQ"), Mad("server", "SIDR_REP")], port=UDADDY_PORT),
    # rdma_client has no source address option: the route picks it.
    CmCase("rdma_cm rdma_server/client", "TCP",
           lambda e: ["rdma_server", "-s", e.ip, "-p", str(e.port)],
           lambda e: ["rdma_client", "-s", e.peer, "-p", str(e.port)],
           check_status("rdma_client: end 0", "rdma_server: end 0", "end 0"),
           CONNECT + DISCONNECT),
    CmCase("rdma_cm ib_write_bw -R", "TCP",
           _perf("ib_write_bw", _BW),
           lambda e: [*_perf("ib_write_bw", _BW)(e), "--source_ip", e.ip, e.peer],
           check_perftest("ib_write_bw", cases.BW), CONNECT + DISCONNECT,
           retry_on=PERFTEST_RACE),
    CmCase("rdma_cm ib_send_lat -R", "TCP",
           _perf("ib_send_lat", _LAT),
           lambda e: [*_perf("ib_send_lat", _LAT)(e), "--source_ip", e.ip, e.peer],
           check_perftest("ib_send_lat", cases.LAT), CONNECT + DISCONNECT,
           retry_on=PERFTEST_RACE),
    CmCase("rdma_cm no listener (ucmatose)", "TCP", None,
           lambda e: ["ucmatose", "-s", e.peer, "-b", e.ip, "-p", str(e.port), "-c", "1"],
           check_rejected(r"RDMA_CM_EVENT_REJECTED, error: 8\b", want_rc=8),
           [Mad("client", "REQ"), Mad("server", "REJ", reason=REJ_INVALID_SERVICE_ID)],
           kind=REJECT),
    CmCase("rdma_cm no listener (rping)", "TCP", None,
           lambda e: ["rping", "-c", "-C", "1", "-a", e.peer, "-I", e.ip, "-p", str(e.port)],
           check_rejected(r"cma event RDMA_CM_EVENT_REJECTED, error 8\b"),
           [Mad("client", "REQ"), Mad("server", "REJ", reason=REJ_INVALID_SERVICE_ID)],
           kind=REJECT),
    CmCase("rdma_cm rdma_reject 148 bytes (cm_reject)", "TCP", *_cm_reject("-O"),
           check_cm_reject(False),
           [Mad("client", "REQ"), Mad("server", "REJ", reason=REJ_CONSUMER_DEFINED,
                                      rej_data=REJ_PATTERN)]),
    CmCase("rdma_cm rdma_reject 0 bytes (cm_reject)", "TCP", *_cm_reject("-z"),
           check_cm_reject(True),
           [Mad("client", "REQ"), Mad("server", "REJ", reason=REJ_CONSUMER_DEFINED,
                                      rej_data=bytes(REJ_PRIVATE_DATA_LEN))]),
    # rping without a count pings until the client is killed; the server
    # must see DISCONNECTED (the DREQ the client's CM sends when its
    # process dies).
    CmCase("rdma_cm rping client killed", "TCP",
           lambda e: ["rping", "-s", "-a", e.ip, "-p", str(e.port)],
           lambda e: ["rping", "-c", "-v", "-a", e.peer, "-I", e.ip, "-p", str(e.port)],
           check_survivor, CONNECT + [Mad("client", "DREQ"), Mad("server", "DREP")],
           kind=KILL),
]

_CM_RE = re.compile(r" CM (\S+)")
_REASON_RE = re.compile(r"reason=(\d+)")


def wire_check(case, frames, client_ip, server_ip, raw=None):
    """(ok, summary, problems) of the capture frames of one case: every CM
    MAD named (none `CM ?`), every ICRC ok, and the MADs the case needs
    from the roles that must send them. `raw` (frame number -> bytes) is
    needed for the MADs whose REJ private data is checked."""
    seen = []  # (role, msg, reason, frame number)
    problems = []
    raw = raw or {}
    for num, (src, _op, line) in sorted(frames.items()):
        if "icrc=ok" not in line:
            problems.append(f"bad ICRC: {line}")
        m = _CM_RE.search(line)
        if not m:
            continue
        if m.group(1) == "?":
            problems.append(f"CM MAD not understood: {line}")
            continue
        role = "client" if src == client_ip else "server" if src == server_ip else "?"
        r = _REASON_RE.search(line)
        seen.append((role, m.group(1), int(r.group(1)) if r else None, num))
    for want in case.mads:
        match = [num for role, msg, reason, num in seen
                 if msg == want.msg and (want.role == "any" or role == want.role)
                 and (want.reason is None or reason == want.reason)]
        what = f"{want.msg}" + (f" reason={want.reason}" if want.reason is not None else "")
        if len(match) < want.count:
            problems.append(f"{want.count}x {what} from {want.role} wanted, {len(match)} seen")
        elif want.rej_data is not None:
            got = [rej_private_data(raw.get(num, b"")) for num in match]
            lcids = [rej_local_comm_id(raw.get(num, b"")) for num in match]
            if want.rej_data in got and not lcids[got.index(want.rej_data)]:
                problems.append(f"{what} from {want.role}: Local Comm ID 0, wanted the "
                                "rejecting side's")
            if want.rej_data not in got:
                shown = next((g for g in got if g is not None), None)
                problems.append(f"{what} from {want.role}: private data on the wire "
                                + (f"{shown[:8].hex()}..{shown[-4:].hex()}" if shown
                                   else "not readable")
                                + f", wanted {want.rej_data[:8].hex()}..{want.rej_data[-4:].hex()}")
    order = []
    for _role, msg, _reason, _num in seen:
        if msg not in order:
            order.append(msg)
    return not problems, " ".join(order) or "no CM MADs", problems
