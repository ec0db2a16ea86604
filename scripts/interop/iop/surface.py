"""Phase "surface": tests/c/verbs_surface on kernel rxe (the guest) and on
rxu (the host), compared line by line. A line may differ only when the
table of documented differences (tests/vectors/verbs-surface-differences.txt,
which tests/tests/verbs_surface.rs reads too) names its key, with the
reason. The kernel's dump is kept as the reference the Rust test compares
rxu with (tests/vectors/rxe-verbs-surface.txt)."""

import os
import shutil

from . import rxu
from .proc import Job, log

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VECTORS = os.path.join(REPO, "tests", "vectors")
TABLE = os.path.join(VECTORS, "verbs-surface-differences.txt")
REFERENCE = os.path.join(VECTORS, "rxe-verbs-surface.txt")
PROG = "verbs_surface"
# Seconds the program may run (the guest may be emulated, not virtualised).
LIMIT = 600


def parse(text):
    """{key: value} of the program's `key=value` lines, in order; lines
    starting with '#' (the reference's header) and blank ones skipped. A
    key printed twice keeps both, the second as `key#2`."""
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, value = line, "(no '=')"
        k, n = key, 1
        while k in out:
            n += 1
            k = f"{key}#{n}"
        out[k] = value
    return out


def load_table(path=TABLE):
    """[(pattern, reason)]: one entry per line, the key pattern (`*` matches
    any run of characters) then its reason, blank lines and '#' comments
    skipped."""
    table = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition(" ")
            table.append((pattern, reason.strip()))
    return table


def matches(pattern, key):
    """Glob with `*` only (the Rust side implements the same)."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == key
    if not key.startswith(parts[0]):
        return False
    pos = len(parts[0])
    for mid in parts[1:-1]:
        at = key.find(mid, pos)
        if at < 0:
            return False
        pos = at + len(mid)
    return key.endswith(parts[-1]) and len(key) - len(parts[-1]) >= pos


class Comparison:
    def __init__(self, reference, rxu, table):
        self.equal = 0
        self.documented = []    # (key, rxe value, rxu value, reason)
        self.undocumented = []  # (key, rxe value, rxu value)
        used = set()
        for key in list(reference) + [k for k in rxu if k not in reference]:
            a, b = reference.get(key, "(missing)"), rxu.get(key, "(missing)")
            if a == b:
                self.equal += 1
                continue
            reason = next(((p, r) for p, r in table if matches(p, key)), None)
            if reason is None:
                self.undocumented.append((key, a, b))
            else:
                used.add(reason[0])
                self.documented.append((key, a, b, reason[1]))
        self.unused = [p for p, _ in table if p not in used]

    def ok(self):
        return not self.undocumented

    def figure(self):
        return (f"{self.equal} lines equal, {len(self.documented)} documented differences, "
                f"{len(self.undocumented)} undocumented")

    def report(self):
        lines = [self.figure()]
        lines += [f"UNDOCUMENTED {k}: rxe {a!r}, rxu {b!r}" for k, a, b in self.undocumented]
        lines += [f"documented {k}: rxe {a!r}, rxu {b!r} ({r})" for k, a, b, r in self.documented]
        lines += [f"table entry matching no difference here: {p}" for p in self.unused]
        return "\n".join(lines) + "\n"


def run(runner, label):
    """Runs the program on both sides; returns rows (test, direction, MTU,
    ok, figure, detail) for the phase."""
    logdir = os.path.join(runner.work, "surface")
    os.makedirs(logdir, exist_ok=True)
    host = runner.host_progs.get(PROG)
    guest = runner.guest.progs.get(PROG)
    if host is None or guest is None:
        return [("verbs surface", "both", label, False, f"{PROG} was not built", "")]
    rc, info, _ = runner.guest.run("uname -r; dpkg-query -W -f='${Version}\\n' rdma-core", limit=30)
    kernel, rdma_core = (info.split() + ["?", "?"])[:2] if rc == 0 else ("?", "?")
    log(f"surface: {PROG} on rxe0 (Linux {kernel}, rdma-core {rdma_core})")
    g = runner.guest.start(f"{guest} rxe0", "surface", limit=LIMIT)
    g_rc = g.wait(LIMIT + 15)
    g.keep(os.path.join(logdir, "rxe"))
    g_out, g_err = g.output()
    log(f"surface: {PROG} on {rxu.NAME}")
    argv, env = runner.dev.command([host, rxu.NAME])
    h = Job(argv, os.path.join(logdir, "rxu"), env=env)
    h_rc = h.wait(LIMIT)
    h_out, h_err = h.output()
    rows = []
    if g_rc != 0 or "end=ok" not in g_out:
        rows.append(("verbs surface (rxe run)", "rxe", label, False, f"exit {g_rc}",
                     g_err.strip()[-300:]))
        return rows
    header = (f"# {PROG} on kernel rxe: Linux {kernel}, rdma-core {rdma_core} (the Debian 12 "
              f"guest of scripts/interop/run, phase surface).\n"
              f"# Written by the interop run; tests/tests/verbs_surface.rs compares rxu with it.\n")
    dump = os.path.join(logdir, "rxe-verbs-surface.txt")
    with open(dump, "w") as f:
        f.write(header + g_out)
    if runner.args.vectors:
        os.makedirs(runner.args.vectors, exist_ok=True)
        shutil.copy(dump, os.path.join(runner.args.vectors, "rxe-verbs-surface.txt"))
    table = load_table()
    live = parse(g_out)
    # The committed reference must still be what the kernel says.
    if os.path.exists(REFERENCE):
        with open(REFERENCE) as f:
            ref = parse(f.read())
        drift = Comparison(ref, live, [])
        with open(os.path.join(logdir, "reference-vs-rxe.txt"), "w") as f:
            f.write(drift.report())
        rows.append(("verbs surface: reference = rxe", "rxe", label, drift.ok(),
                     f"{drift.equal} lines equal, {len(drift.undocumented)} differ",
                     "; ".join(f"{k}: {a!r} now {b!r}" for k, a, b in drift.undocumented[:4])))
    if h_rc != 0 or "end=ok" not in h_out:
        rows.append(("verbs surface (rxu run)", "rxu", label, False,
                     "timed out" if h.timed_out else f"exit {h_rc}", h_err.strip()[-300:]))
    cmp = Comparison(live, parse(h_out), table)
    with open(os.path.join(logdir, "compare.txt"), "w") as f:
        f.write(cmp.report())
    log(f"surface: {cmp.figure()} (details: {logdir}/compare.txt)")
    rows.append(("verbs surface: rxu = rxe", "both", label, cmp.ok(), cmp.figure(),
                 "; ".join(f"{k}: rxe {a!r} rxu {b!r}" for k, a, b in cmp.undocumented[:6])))
    return rows
