"""Keeps a handful of the kernel's packets from the captures as test
vectors: the first rxe packet of each wanted kind, one small pcap per kind."""

import os
import struct

from . import netns

# file stem -> the kinds (decode opcode, or opcode + AETH kind) it keeps.
WANTED = {
    "read-response": ["RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE",
                      "RC_RDMA_READ_RESPONSE_LAST", "RC_RDMA_READ_RESPONSE_ONLY"],
    "atomic": ["RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE"],
    "ud-send": ["UD_SEND_ONLY"],
    "send-multi": ["RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST"],
    "write-multi": ["RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"],
    "rnr-nak": ["RC_ACKNOWLEDGE rnr-nak"],
    "seq-nak": ["RC_ACKNOWLEDGE nak psn-sequence-error"],
    "remote-op-nak": ["RC_ACKNOWLEDGE nak remote-operational-error"],
    "jumbo": ["RC_RDMA_WRITE_MIDDLE len=4096", "RC_RDMA_READ_RESPONSE_MIDDLE len=4096"],
}


def kinds(op, line):
    """The kinds a packet counts as: its opcode (with the AETH kind for
    ACKs), and for full 4 KiB payloads also opcode + len=4096."""
    if op == "RC_ACKNOWLEDGE":
        for k in ("rnr-nak", "nak psn-sequence-error", "nak remote-operational-error"):
            if f"aeth({k}" in line:
                return [f"{op} {k}"]
    if " len=4096 " in line:
        return [op, f"{op} len=4096"]
    return [op]


def read_pcap(path):
    """(header bytes, [(record header, data)]) of a classic pcap."""
    with open(path, "rb") as f:
        d = f.read()
    if len(d) < 24:
        return d, []
    le = d[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    fmt = "<IIII" if le else ">IIII"
    recs, off = [], 24
    while off + 16 <= len(d):
        _, _, incl, _ = struct.unpack(fmt, d[off:off + 16])
        recs.append((d[off:off + 16], d[off + 16:off + 16 + incl]))
        off += 16 + incl
    return d[:24], recs


class Picker:
    def __init__(self):
        self.found = {}  # kind -> (pcap header, record header, data, line)

    def scan(self, pcap, decoded):
        header, recs = read_pcap(pcap)
        for num, (src, op, line) in sorted(decoded.frames.items()):
            if src != netns.GUEST_IP or "icrc=ok" not in line:
                continue
            if not 1 <= num <= len(recs):
                continue
            for k in kinds(op, line):
                if k not in self.found:
                    rh, data = recs[num - 1]
                    self.found[k] = (header, rh, data, line)

    def write(self, out_dir):
        """Writes rxe-interop-<stem>.pcap for each kind found; returns
        (written stems, missing kinds)."""
        os.makedirs(out_dir, exist_ok=True)
        written, missing = [], []
        for stem, kinds in WANTED.items():
            have = [self.found[k] for k in kinds if k in self.found]
            missing += [k for k in kinds if k not in self.found]
            if not have:
                continue
            with open(os.path.join(out_dir, f"rxe-interop-{stem}.pcap"), "wb") as f:
                f.write(have[0][0])
                for _, rh, data, _ in have:
                    f.write(rh + data)
            with open(os.path.join(out_dir, f"rxe-interop-{stem}.txt"), "w") as f:
                f.write("".join(line + "\n" for *_, line in have))
            written.append(stem)
        return written, missing


def frame_times(path):
    """Capture time (s since the epoch) of each record of a classic pcap,
    in order (frame n is index n - 1)."""
    with open(path, "rb") as f:
        d = f.read()
    if len(d) < 24:
        return []
    magic = d[:4]
    le = magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    fmt = "<IIII" if le else ">IIII"
    out, off = [], 24
    while off + 16 <= len(d):
        sec, frac, incl, _ = struct.unpack(fmt, d[off:off + 16])
        out.append(sec + frac / (1e9 if nano else 1e6))
        off += 16 + incl
    return out


def write_frames(out_dir, stem, pcap, frames):
    """Writes the records `frames` (frame number -> (src, op, decode line))
    of `pcap` as <stem>.pcap, and their decode lines as <stem>.txt."""
    header, recs = read_pcap(pcap)
    nums = [n for n in sorted(frames) if 1 <= n <= len(recs)]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.pcap"), "wb") as f:
        f.write(header)
        for n in nums:
            f.write(b"".join(recs[n - 1]))
    with open(os.path.join(out_dir, f"{stem}.txt"), "w") as f:
        f.write("".join(frames[n][2] + "\n" for n in nums))
