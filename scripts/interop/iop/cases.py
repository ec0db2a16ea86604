"""The test matrix: which programs, with which arguments, and how to read
their verdict and figure. A case runs twice per phase: rxu client -> rxe
server, and rxe client -> rxu server."""

import re
from dataclasses import dataclass, field

PINGPONG = "pingpong"
BW = "bw"
LAT = "lat"

# IBV_WC_* numbers (enum ibv_wc_status).
WC_LOC_LEN_ERR = 1
WC_LOC_QP_OP_ERR = 2
WC_REM_INV_REQ_ERR = 9
WC_REM_OP_ERR = 11


@dataclass
class Case:
    name: str
    tool: str
    kind: str
    # Arguments for a path MTU (bytes) and whether the loss phase runs it.
    args: object
    loss: bool = False
    # Expected failure instead of success: {direction: (client statuses,
    # server statuses)}; a side's status must be one of its set.
    expect_fail: dict = field(default_factory=dict)
    # Arguments only the server / only the client gets.
    server_args: tuple = ()
    client_args: tuple = ()


def _pp(n, size=4096, extra=()):
    return lambda mtu, loss: ["-n", str(n if not loss else n // 2), "-s", str(size),
                              "-m", str(mtu), "-c", *extra]


def _perf(n, *extra, size=None):
    def args(mtu, loss):
        # Under loss every go-back-N costs up to a window: fewer iterations.
        a = ["-n", str(n if not loss else max(n // 4, 5)), "-m", str(mtu), *extra]
        if size is not None:
            a += ["-s", str(mtu if size == "mtu" else size)]
        return a
    return args


CASES = [
    Case("ibv_rc_pingpong", "ibv_rc_pingpong", PINGPONG, _pp(100), loss=True),
    Case("ibv_ud_pingpong", "ibv_ud_pingpong", PINGPONG,
         lambda mtu, loss: ["-n", "100", "-s", str(mtu), "-c"]),
    Case("ibv_uc_pingpong", "ibv_uc_pingpong", PINGPONG, _pp(100)),
    Case("ibv_srq_pingpong", "ibv_srq_pingpong", PINGPONG, _pp(40, extra=("-q", "4")),
         loss=True),
    Case("ib_write_bw", "ib_write_bw", BW, _perf(200, size=65536), loss=True),
    Case("ib_read_bw", "ib_read_bw", BW, _perf(200, size=65536), loss=True),
    Case("ib_send_bw", "ib_send_bw", BW, _perf(200, size=65536), loss=True),
    Case("ib_atomic_bw", "ib_atomic_bw", BW, _perf(200), loss=True),
    Case("ib_write_lat", "ib_write_lat", LAT, _perf(200), loss=True),
    Case("ib_send_lat", "ib_send_lat", LAT, _perf(200), loss=True),
    Case("ib_read_lat", "ib_read_lat", LAT, _perf(200), loss=True),
    Case("ib_send_bw -c UD", "ib_send_bw", BW, _perf(200, "-c", "UD", size="mtu")),
    # One receive posted at a time: SENDs meet an empty receive queue, the
    # responder answers RNR NAK and the requester retries after its timer.
    Case("ib_send_bw RNR", "ib_send_bw", BW, _perf(200, size=65536), loss=True,
         server_args=("-r", "1")),
    # A SEND longer than the posted receive: kernel 6.1 rxe NAKs it 0x63
    # (remote operational error) and completes the receive LOC_QP_OP_ERR;
    # rxu NAKs 0x61 (invalid request, as the IBA says) and completes it
    # LOC_LEN_ERR.
    Case("SEND > receive", "ibv_rc_pingpong", PINGPONG,
         lambda mtu, loss: ["-n", "1", "-s", "4096", "-m", str(mtu)],
         server_args=("-s", "1024"),
         expect_fail={"rxu->rxe": ({WC_REM_OP_ERR}, {WC_LOC_QP_OP_ERR}),
                      "rxe->rxu": ({WC_REM_INV_REQ_ERR}, {WC_LOC_LEN_ERR})}),
]


def device_args(case, dev, gid, port):
    if case.kind == PINGPONG:
        return ["-d", dev, "-g", str(gid), "-p", str(port)]
    return ["-d", dev, "-x", str(gid), "-p", str(port), "-F"]


_PP_RE = re.compile(r"(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter")
_FAIL_RE = re.compile(r"Failed status .*?\((\d+)\)")


def figure(case, out):
    """The result figure from the client's output, or None."""
    if case.kind == PINGPONG:
        m = _PP_RE.search(out)
        return f"{float(m.group(3)):.0f} us/iter" if m else None
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            for row in lines[i + 1:]:
                cols = row.split()
                if len(cols) >= 5 and cols[0].isdigit():
                    if case.tool == "ib_atomic_bw":
                        return f"{float(cols[4]) * 1e3:.1f} kop/s"
                    if case.kind == BW:
                        return f"{float(cols[3]):.1f} MB/s"
                    return f"{float(cols[4]):.0f} us"
    return None


def wc_statuses(out, err):
    """Work-completion error statuses a pingpong printed."""
    return {int(s) for s in _FAIL_RE.findall(out + err)}
