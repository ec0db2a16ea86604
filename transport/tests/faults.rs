//! Two engines on loopback move 64 MiB with injected loss, duplication,
//! reordering and corruption (1 %, 1 %, 1 %, 0.1 %):
//!
//! - RC, mixed SEND / WRITE / WRITE_WITH_IMM / READ / CmpSwap / FetchAdd:
//!   every byte lands exactly, every WQE completes exactly once and in
//!   order, the counters show retransmissions and ICRC drops.
//! - UC (SEND / WRITE / WRITE_WITH_IMM) and UD (SEND, SEND_WITH_IMM):
//!   messages may be lost, but whatever is delivered is byte-exact, and
//!   nothing corrupted is ever delivered.
//!
//! The faults are injected by the engines' own injectors: for RC on the
//! requester's send and receive paths (each packet, either way, passes
//! one injector), for UC and UD (one-way traffic) on the sender's send
//! path and the receiver's receive path.

mod common;

use common::*;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use transport::engine::fault::{FaultConfig, FaultCounters};
use transport::engine::EngineCounters;
use transport::qp::{
    access, send_flags, wc_flags, BufferMemory, Completion, Payload, QpCounters, QpType, RecvWqe,
    SendOp, SendWqe, Sge, UdDest, WcOpcode, WcStatus,
};

/// Bytes moved per test (scaled down in unoptimised builds).
const TOTAL: usize = if cfg!(debug_assertions) {
    8 << 20
} else {
    64 << 20
};
/// Source data the requester cycles through.
const SRC_LEN: usize = 16 << 20;
/// Wall-clock limit for one transfer.
const LIMIT: Duration = Duration::from_secs(50);

const VA_SRC: u64 = 0x1000_0000_0000;
const VA_HDR: u64 = 0x2000_0000_0000;
const VA_RDST: u64 = 0x3000_0000_0000;
const VA_ARES: u64 = 0x4000_0000_0000;
const VA_WDST: u64 = 0x5000_0000_0000;
const VA_RECV: u64 = 0x6000_0000_0000;
const VA_RSRC: u64 = 0x7000_0000_0000;
const VA_ATOM: u64 = 0x8000_0000_0000;

const CELLS: usize = 8;

fn faults(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        drop: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
    }
}

fn data(seed: u64, n: usize) -> Vec<u8> {
    Rng(seed).bytes(n)
}

fn sges(va: u64, len: usize, key: u32) -> Payload {
    if len == 0 {
        Payload::Sges(vec![])
    } else {
        Payload::Sges(vec![Sge {
            addr: va,
            length: len as u32,
            lkey: key,
        }])
    }
}

fn region(m: &BufferMemory, key: u32) -> &[u8] {
    &m.region(key).expect("region").data
}

fn fmt_counts(e: &EngineCounters, q: &QpCounters, f: (FaultCounters, FaultCounters)) -> String {
    format!(
        "sent={} rcvd={} icrc_errors={} parse_errors={} unknown_qp={} | qp: retransmitted={} dup_req={} seq_nak={} rnr={} timeouts={} dropped={} | faults tx={:?} rx={:?}",
        e.sent_pkts,
        e.rcvd_pkts,
        e.icrc_errors,
        e.parse_errors,
        e.unknown_qp,
        q.retransmitted_pkts,
        q.duplicate_request,
        q.rcvd_seq_err,
        q.rcvd_rnr_err,
        q.local_ack_timeout_err,
        q.dropped_pkts,
        f.0,
        f.1
    )
}

// ------------------------------------------------------------------- RC

#[derive(Clone, Copy, Debug)]
enum RcOp {
    Send {
        src: usize,
        len: usize,
        dst: usize,
    },
    Write {
        src: usize,
        len: usize,
        dst: usize,
    },
    WriteImm {
        src: usize,
        len: usize,
        dst: usize,
        imm: u32,
    },
    Read {
        rsrc: usize,
        len: usize,
        dst: usize,
    },
    CmpSwap {
        cell: usize,
        compare: u64,
        swap: u64,
        res: usize,
    },
    FetchAdd {
        cell: usize,
        add: u64,
        res: usize,
    },
}

struct RcPlan {
    ops: Vec<RcOp>,
    wdst_len: usize,
    recv_len: usize,
    rdst_len: usize,
    atomics: usize,
    cells0: [u64; CELLS],
    /// Expected atomic results (by result slot) and final cells.
    results: Vec<u64>,
    cells: [u64; CELLS],
    bytes: usize,
}

fn msg_len(r: &mut Rng) -> usize {
    match r.range(0, 99) {
        0 => 0,
        1..=30 => r.range(1, 4096) as usize,
        31..=70 => r.range(4097, 65536) as usize,
        _ => r.range(65537, 262_144) as usize,
    }
}

fn rc_plan(seed: u64) -> RcPlan {
    let mut r = Rng(seed);
    let mut p = RcPlan {
        ops: Vec::new(),
        wdst_len: 0,
        recv_len: 0,
        rdst_len: 0,
        atomics: 0,
        cells0: [0; CELLS],
        results: Vec::new(),
        cells: [0; CELLS],
        bytes: 0,
    };
    for c in p.cells0.iter_mut() {
        *c = r.next_u64();
    }
    p.cells = p.cells0;
    while p.bytes < TOTAL {
        let len = msg_len(&mut r);
        let src = r.range(0, (SRC_LEN - len) as u64) as usize;
        let op = match r.range(0, 99) {
            0..=21 => {
                p.recv_len += len;
                RcOp::Send {
                    src,
                    len,
                    dst: p.recv_len - len,
                }
            }
            22..=51 => {
                p.wdst_len += len;
                RcOp::Write {
                    src,
                    len,
                    dst: p.wdst_len - len,
                }
            }
            52..=66 => {
                p.wdst_len += len;
                RcOp::WriteImm {
                    src,
                    len,
                    dst: p.wdst_len - len,
                    imm: r.next_u64() as u32,
                }
            }
            67..=91 => {
                p.rdst_len += len;
                RcOp::Read {
                    rsrc: src,
                    len,
                    dst: p.rdst_len - len,
                }
            }
            92..=95 => {
                let cell = r.range(0, CELLS as u64 - 1) as usize;
                let cur = p.cells[cell];
                let compare = if r.chance(0.7) { cur } else { cur ^ 1 };
                let swap = r.next_u64();
                if cur == compare {
                    p.cells[cell] = swap;
                }
                p.results.push(cur);
                p.atomics += 1;
                RcOp::CmpSwap {
                    cell,
                    compare,
                    swap,
                    res: p.atomics - 1,
                }
            }
            _ => {
                let cell = r.range(0, CELLS as u64 - 1) as usize;
                let add = r.next_u64() >> 8;
                let cur = p.cells[cell];
                p.cells[cell] = cur.wrapping_add(add);
                p.results.push(cur);
                p.atomics += 1;
                RcOp::FetchAdd {
                    cell,
                    add,
                    res: p.atomics - 1,
                }
            }
        };
        if !matches!(op, RcOp::CmpSwap { .. } | RcOp::FetchAdd { .. }) {
            p.bytes += len;
        }
        p.ops.push(op);
    }
    p
}

/// Keys and QP number the responder hands the requester.
struct RcKeys {
    wdst: u32,
    rsrc: u32,
    atom: u32,
}

#[test]
fn rc_64mib_mixed_ops_under_faults() {
    let _g = heavy_lock();
    const SEED: u64 = 0x5eed_0001;
    let plan = rc_plan(SEED);
    let (a_ip, b_ip) = ("127.0.0.11", "127.0.0.12");
    let conn = Conn {
        timeout: 12,
        ..Conn::default()
    };
    let started = Instant::now();
    let plan_ref = &plan;
    let (a, b) = pair(
        // Requester, with the faults.
        |link| {
            let plan = plan_ref;
            let mut e = engine(a_ip, |c| {
                c.fault_tx = Some(faults(SEED + 1));
                c.fault_rx = Some(faults(SEED + 2));
            });
            let m = e.memory_mut();
            let src = m.register(PD, VA_SRC, data(SEED + 10, SRC_LEN), 0);
            let rdst = m.register(PD, VA_RDST, vec![0; plan.rdst_len], access::LOCAL_WRITE);
            let ares = m.register(PD, VA_ARES, vec![0; 8 * plan.atomics], access::LOCAL_WRITE);
            let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
            link.send(u64::from(qpn));
            let peer = link.recv() as u32;
            let keys = RcKeys {
                wdst: link.recv() as u32,
                rsrc: link.recv() as u32,
                atom: link.recv() as u32,
            };
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(b_ip))), &conn);
            let deadline = Deadline::after(LIMIT);
            let n = plan.ops.len();
            let (mut next, mut done) = (0usize, 0usize);
            let mut comps: Vec<Completion> = Vec::new();
            while done < n {
                while next < n && next - done < 128 {
                    let (op, payload) = match plan.ops[next] {
                        RcOp::Send { src: s, len, .. } => {
                            (SendOp::Send, sges(VA_SRC + s as u64, len, src))
                        }
                        RcOp::Write { src: s, len, dst } => (
                            SendOp::Write {
                                remote_addr: VA_WDST + dst as u64,
                                rkey: keys.wdst,
                            },
                            sges(VA_SRC + s as u64, len, src),
                        ),
                        RcOp::WriteImm {
                            src: s,
                            len,
                            dst,
                            imm,
                        } => (
                            SendOp::WriteImm {
                                remote_addr: VA_WDST + dst as u64,
                                rkey: keys.wdst,
                                imm,
                            },
                            sges(VA_SRC + s as u64, len, src),
                        ),
                        RcOp::Read { rsrc, len, dst } => (
                            SendOp::Read {
                                remote_addr: VA_RSRC + rsrc as u64,
                                rkey: keys.rsrc,
                            },
                            sges(VA_RDST + dst as u64, len, rdst),
                        ),
                        RcOp::CmpSwap {
                            cell,
                            compare,
                            swap,
                            res,
                        } => (
                            SendOp::CmpSwap {
                                remote_addr: VA_ATOM + 8 * cell as u64,
                                rkey: keys.atom,
                                compare,
                                swap,
                            },
                            sges(VA_ARES + 8 * res as u64, 8, ares),
                        ),
                        RcOp::FetchAdd { cell, add, res } => (
                            SendOp::FetchAdd {
                                remote_addr: VA_ATOM + 8 * cell as u64,
                                rkey: keys.atom,
                                add,
                            },
                            sges(VA_ARES + 8 * res as u64, 8, ares),
                        ),
                    };
                    let wqe = SendWqe {
                        wr_id: next as u64,
                        op,
                        flags: send_flags::SIGNALED,
                        payload,
                        ud: None,
                        xrc_srqn: None,
                    };
                    e.post_send(qpn, wqe).expect("post_send");
                    next += 1;
                }
                e.run_once(Some(Duration::from_millis(2)))
                    .expect("run_once");
                comps.clear();
                comps.extend(e.poll_cq(SEND_CQ, 256));
                for c in &comps {
                    assert_eq!(c.wr_id, done as u64, "send completions out of order: {c:?}");
                    assert_eq!(
                        c.status,
                        WcStatus::Success,
                        "WQE {} ({:?}): {:?}; {}",
                        c.wr_id,
                        plan.ops[done],
                        c,
                        fmt_counts(
                            &e.counters(),
                            e.qp(qpn).unwrap().counters(),
                            e.fault_counters()
                        )
                    );
                    let want = match plan.ops[done] {
                        RcOp::Send { .. } => WcOpcode::Send,
                        RcOp::Write { .. } | RcOp::WriteImm { .. } => WcOpcode::RdmaWrite,
                        RcOp::Read { .. } => WcOpcode::RdmaRead,
                        RcOp::CmpSwap { .. } => WcOpcode::CompSwap,
                        RcOp::FetchAdd { .. } => WcOpcode::FetchAdd,
                    };
                    assert_eq!(c.opcode, want, "{c:?}");
                    done += 1;
                }
                deadline.check(|| {
                    format!(
                        "{done}/{n} WQEs completed; {}",
                        fmt_counts(
                            &e.counters(),
                            e.qp(qpn).unwrap().counters(),
                            e.fault_counters()
                        )
                    )
                });
            }
            // Nothing completes twice: the CQ stays empty.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(100) {
                e.run_once(Some(Duration::from_millis(5)))
                    .expect("run_once");
            }
            assert_eq!(
                e.cq_len(SEND_CQ),
                0,
                "extra completions: {:?}",
                e.poll_cq(SEND_CQ, 8)
            );
            let summary = (
                e.counters(),
                *e.qp(qpn).unwrap().counters(),
                e.fault_counters(),
            );
            (e.into_memory(), src, rdst, ares, summary)
        },
        // Responder.
        |link| {
            let plan = plan_ref;
            let mut e = engine(b_ip, |_| {});
            let m = e.memory_mut();
            let wdst = m.register(
                PD,
                VA_WDST,
                vec![0; plan.wdst_len],
                access::LOCAL_WRITE | access::REMOTE_WRITE,
            );
            let recv = m.register(PD, VA_RECV, vec![0; plan.recv_len], access::LOCAL_WRITE);
            let rsrc = m.register(PD, VA_RSRC, data(SEED + 11, SRC_LEN), access::REMOTE_READ);
            let cells: Vec<u8> = plan.cells0.iter().flat_map(|c| c.to_ne_bytes()).collect();
            let atom = m.register(PD, VA_ATOM, cells, access::REMOTE_ATOMIC);
            let qpn = e.create_qp(spec(QpType::Rc)).expect("qp");
            let peer = link.recv() as u32;
            link.send(u64::from(qpn));
            link.send(u64::from(wdst));
            link.send(u64::from(rsrc));
            link.send(u64::from(atom));
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip(a_ip))), &conn);
            // The ops that consume a receive WQE, in order.
            let recvs: Vec<usize> = (0..plan.ops.len())
                .filter(|&i| matches!(plan.ops[i], RcOp::Send { .. } | RcOp::WriteImm { .. }))
                .collect();
            let (mut posted, mut got) = (0usize, 0usize);
            let deadline = Deadline::after(LIMIT + Duration::from_secs(5));
            let check = |c: &Completion, got: usize| {
                let i = recvs[got];
                assert_eq!(c.wr_id, i as u64, "receive completions out of order: {c:?}");
                assert_eq!(c.status, WcStatus::Success, "receive for op {i}: {c:?}");
                match plan.ops[i] {
                    RcOp::Send { len, .. } => {
                        assert_eq!(c.opcode, WcOpcode::Recv, "{c:?}");
                        assert_eq!(c.byte_len as usize, len, "{c:?}");
                    }
                    RcOp::WriteImm { imm, .. } => {
                        assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm, "{c:?}");
                        assert!(c.wc_flags & wc_flags::WITH_IMM != 0, "{c:?}");
                        assert_eq!(c.imm, imm, "{c:?}");
                    }
                    _ => unreachable!(),
                }
            };
            loop {
                while posted < recvs.len() && posted - got < 512 {
                    let i = recvs[posted];
                    let sg = match plan.ops[i] {
                        RcOp::Send { len, dst, .. } => {
                            match sges(VA_RECV + dst as u64, len, recv) {
                                Payload::Sges(v) => v,
                                Payload::Inline(_) => unreachable!(),
                            }
                        }
                        _ => vec![],
                    };
                    e.post_recv(
                        qpn,
                        RecvWqe {
                            wr_id: i as u64,
                            sges: sg,
                        },
                    )
                    .expect("post_recv");
                    posted += 1;
                }
                e.run_once(Some(Duration::from_millis(2)))
                    .expect("run_once");
                for c in e.poll_cq(RECV_CQ, 256) {
                    assert!(got < recvs.len(), "extra receive completion {c:?}");
                    check(&c, got);
                    got += 1;
                }
                if link.stopped() {
                    break;
                }
                deadline.check(|| format!("responder: {got}/{} receives", recvs.len()));
            }
            for c in e.poll_cq(RECV_CQ, usize::MAX) {
                assert!(got < recvs.len(), "extra receive completion {c:?}");
                check(&c, got);
                got += 1;
            }
            let summary = (
                e.counters(),
                *e.qp(qpn).unwrap().counters(),
                e.fault_counters(),
            );
            (
                e.into_memory(),
                wdst,
                recv,
                rsrc,
                atom,
                got,
                recvs.len(),
                summary,
            )
        },
    );
    let elapsed = started.elapsed();
    let (am, a_src, a_rdst, a_ares, (ae, aq, af)) = a;
    let (bm, b_wdst, b_recv, b_rsrc, b_atom, got, want, (be, bq, _)) = b;
    eprintln!(
        "rc: {} ops, {} MiB in {:.1?}",
        plan.ops.len(),
        plan.bytes >> 20,
        elapsed
    );
    eprintln!("rc requester: {}", fmt_counts(&ae, &aq, af));
    eprintln!(
        "rc responder: {}",
        fmt_counts(
            &be,
            &bq,
            (FaultCounters::default(), FaultCounters::default())
        )
    );
    assert_eq!(got, want, "receive completions");
    // Every byte where it belongs.
    let (src, rsrc) = (region(&am, a_src), region(&bm, b_rsrc));
    let (wdst, recv, rdst) = (
        region(&bm, b_wdst),
        region(&bm, b_recv),
        region(&am, a_rdst),
    );
    for (i, op) in plan.ops.iter().enumerate() {
        let ok = match *op {
            RcOp::Send { src: s, len, dst } => recv[dst..dst + len] == src[s..s + len],
            RcOp::Write { src: s, len, dst }
            | RcOp::WriteImm {
                src: s, len, dst, ..
            } => wdst[dst..dst + len] == src[s..s + len],
            RcOp::Read { rsrc: s, len, dst } => rdst[dst..dst + len] == rsrc[s..s + len],
            RcOp::CmpSwap { res, .. } | RcOp::FetchAdd { res, .. } => {
                let r = &region(&am, a_ares)[8 * res..8 * res + 8];
                u64::from_ne_bytes(r.try_into().unwrap()) == plan.results[res]
            }
        };
        assert!(ok, "op {i} {op:?}: data differs");
    }
    let cells = region(&bm, b_atom);
    for c in 0..CELLS {
        let v = u64::from_ne_bytes(cells[8 * c..8 * c + 8].try_into().unwrap());
        assert_eq!(v, plan.cells[c], "atomic cell {c}");
    }
    // The faults happened and were recovered from.
    assert!(
        af.0.dropped > 0 && af.0.duplicated > 0 && af.0.reordered > 0 && af.0.corrupted > 0,
        "{af:?}"
    );
    assert!(
        af.1.dropped > 0 && af.1.duplicated > 0 && af.1.reordered > 0,
        "{af:?}"
    );
    assert!(aq.retransmitted_pkts > 0, "no retransmissions: {aq:?}");
    assert!(
        ae.icrc_errors + be.icrc_errors > 0,
        "no ICRC drops: {ae:?} {be:?}"
    );
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

// ----------------------------------------------------------- UC and UD

/// One message of the unreliable tests. SENDs carry their index in an
/// 8-byte header (a second SGE) so that the receiver can tell which one
/// arrived; WRITE_WITH_IMM carries it as the immediate.
#[derive(Clone, Copy, Debug)]
enum UOp {
    Send {
        src: usize,
        len: usize,
        imm: Option<u32>,
    },
    Write {
        src: usize,
        len: usize,
        dst: usize,
    },
    WriteImm {
        src: usize,
        len: usize,
        dst: usize,
    },
}

fn u_plan(seed: u64, ud: bool) -> (Vec<UOp>, usize) {
    let mut r = Rng(seed);
    let (mut ops, mut bytes, mut wdst) = (Vec::new(), 0usize, 0usize);
    while bytes < TOTAL {
        let i = ops.len() as u32;
        let op = if ud {
            let len = r.range(8, 4096) as usize;
            let imm = r.chance(0.3).then_some(i);
            UOp::Send {
                src: r.range(0, (SRC_LEN - len) as u64) as usize,
                len,
                imm,
            }
        } else {
            match r.range(0, 99) {
                0..=39 => {
                    // Half of them single-packet: a duplicated SEND ONLY
                    // is the case a UC responder must not deliver twice.
                    let len = if r.chance(0.5) {
                        r.range(8, 4096)
                    } else {
                        r.range(4097, 65536)
                    } as usize;
                    UOp::Send {
                        src: r.range(0, (SRC_LEN - len) as u64) as usize,
                        len,
                        imm: None,
                    }
                }
                k => {
                    let len = if r.chance(0.3) {
                        r.range(1, 4096)
                    } else {
                        r.range(4097, 131_072)
                    } as usize;
                    let src = r.range(0, (SRC_LEN - len) as u64) as usize;
                    wdst += len;
                    if k < 70 {
                        UOp::Write {
                            src,
                            len,
                            dst: wdst - len,
                        }
                    } else {
                        UOp::WriteImm {
                            src,
                            len,
                            dst: wdst - len,
                        }
                    }
                }
            }
        };
        bytes += match op {
            UOp::Send { len, .. } | UOp::Write { len, .. } | UOp::WriteImm { len, .. } => len,
        };
        ops.push(op);
    }
    (ops, wdst)
}

/// Initial content of the UC write target: differs from any plausible
/// source byte pattern position by position.
fn wdst_init(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ 0xa5) as u8)
        .collect()
}

const SLOTS: usize = 256;
const SLOT: usize = 40 + 65536;

struct URecv {
    delivered: usize,
    twice: usize,
    by_kind: [usize; 3],
}

fn unreliable(t: QpType, seed: u64, a_ip: &str, b_ip: &str) {
    let _g = heavy_lock();
    let ud = t == QpType::Ud;
    let (ops, wdst_len) = u_plan(seed, ud);
    let n = ops.len();
    let started = Instant::now();
    let ops_ref = &ops;
    let (a_ipa, b_ipa): (IpAddr, IpAddr) = (ip(a_ip), ip(b_ip));
    let conn = Conn::default();
    let (a, b) = pair(
        |link| {
            let ops = ops_ref;
            let mut e = engine(a_ip, |c| c.fault_tx = Some(faults(seed + 1)));
            let m = e.memory_mut();
            let src = m.register(PD, VA_SRC, data(seed + 10, SRC_LEN), 0);
            let hdrs: Vec<u8> = (0..n as u64).flat_map(|i| i.to_le_bytes()).collect();
            let hdr = m.register(PD, VA_HDR, hdrs, 0);
            let qpn = e.create_qp(spec(t)).expect("qp");
            link.send(u64::from(qpn));
            let peer = link.recv() as u32;
            let wkey = link.recv() as u32;
            connect(&mut e, qpn, t, (!ud).then_some((peer, b_ipa)), &conn);
            let deadline = Deadline::after(LIMIT);
            let (mut next, mut done) = (0usize, 0usize);
            let mut last_progress = (0u64, Instant::now());
            while done < n {
                // Pace by the receiver's progress (it reports the highest
                // index it saw); go on anyway if it saw nothing for 20 ms
                // (the rest of a window may all have been lost).
                let seen = link.shared[0].load(Ordering::Relaxed);
                if seen != last_progress.0 {
                    last_progress = (seen, Instant::now());
                }
                let stalled = last_progress.1.elapsed() > Duration::from_millis(20);
                while next < n && next - done < 128 && ((next as u64) < seen + 64 || stalled) {
                    let (op, payload) = match ops[next] {
                        UOp::Send { src: s, len, imm } => {
                            let p = Payload::Sges(vec![
                                Sge {
                                    addr: VA_HDR + 8 * next as u64,
                                    length: 8,
                                    lkey: hdr,
                                },
                                Sge {
                                    addr: VA_SRC + s as u64,
                                    length: (len - 8) as u32,
                                    lkey: src,
                                },
                            ]);
                            (imm.map_or(SendOp::Send, |imm| SendOp::SendImm { imm }), p)
                        }
                        UOp::Write { src: s, len, dst } => (
                            SendOp::Write {
                                remote_addr: VA_WDST + dst as u64,
                                rkey: wkey,
                            },
                            sges(VA_SRC + s as u64, len, src),
                        ),
                        UOp::WriteImm { src: s, len, dst } => (
                            SendOp::WriteImm {
                                remote_addr: VA_WDST + dst as u64,
                                rkey: wkey,
                                imm: next as u32,
                            },
                            sges(VA_SRC + s as u64, len, src),
                        ),
                    };
                    let wqe = SendWqe {
                        wr_id: next as u64,
                        op,
                        flags: send_flags::SIGNALED,
                        payload,
                        ud: ud.then_some(UdDest {
                            addr: b_ipa,
                            qpn: peer,
                            qkey: QKEY,
                        }),
                        xrc_srqn: None,
                    };
                    e.post_send(qpn, wqe).expect("post_send");
                    next += 1;
                    if stalled {
                        last_progress.1 = Instant::now();
                    }
                }
                e.run_once(Some(Duration::from_millis(2)))
                    .expect("run_once");
                for c in e.poll_cq(SEND_CQ, 256) {
                    assert_eq!(c.wr_id, done as u64, "send completions out of order: {c:?}");
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    done += 1;
                }
                deadline.check(|| format!("sender: {done}/{n} completions"));
            }
            // Let the last packets land.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(100) {
                e.run_once(Some(Duration::from_millis(5)))
                    .expect("run_once");
            }
            assert_eq!(e.cq_len(SEND_CQ), 0, "extra send completions");
            (
                e.counters(),
                *e.qp(qpn).unwrap().counters(),
                e.fault_counters(),
            )
        },
        |link| {
            let ops = ops_ref;
            let src = data(seed + 10, SRC_LEN);
            let mut e = engine(b_ip, |c| c.fault_rx = Some(faults(seed + 2)));
            let m = e.memory_mut();
            let slots = m.register(PD, VA_RECV, vec![0; SLOTS * SLOT], access::LOCAL_WRITE);
            let wdst = m.register(
                PD,
                VA_WDST,
                wdst_init(wdst_len),
                access::LOCAL_WRITE | access::REMOTE_WRITE,
            );
            let qpn = e.create_qp(spec(t)).expect("qp");
            let peer = link.recv() as u32;
            link.send(u64::from(qpn));
            link.send(u64::from(wdst));
            connect(&mut e, qpn, t, (!ud).then_some((peer, a_ipa)), &conn);
            let post = |e: &mut Eng, q: u64| {
                let slot = q as usize % SLOTS;
                let wqe = RecvWqe {
                    wr_id: q,
                    sges: vec![Sge {
                        addr: VA_RECV + (slot * SLOT) as u64,
                        length: SLOT as u32,
                        lkey: slots,
                    }],
                };
                e.post_recv(qpn, wqe).expect("post_recv");
            };
            for q in 0..SLOTS as u64 {
                post(&mut e, q);
            }
            let mut seen = vec![false; n];
            let mut res = URecv {
                delivered: 0,
                twice: 0,
                by_kind: [0; 3],
            };
            let mut max_seen = 0u64;
            let mut next_q = 0u64;
            let deadline = Deadline::after(LIMIT + Duration::from_secs(5));
            loop {
                e.run_once(Some(Duration::from_millis(2)))
                    .expect("run_once");
                for c in e.poll_cq(RECV_CQ, 256) {
                    assert_eq!(c.wr_id, next_q, "receive completions out of order: {c:?}");
                    next_q += 1;
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    let slot = c.wr_id as usize % SLOTS;
                    let buf = &region(e.memory(), slots)[slot * SLOT..(slot + 1) * SLOT];
                    let idx = match c.opcode {
                        WcOpcode::RecvRdmaWithImm => {
                            let i = c.imm as usize;
                            let UOp::WriteImm { src: s, len, dst } = ops[i] else {
                                panic!("imm {i} is not a WRITE_WITH_IMM: {c:?}");
                            };
                            let w = &region(e.memory(), wdst)[dst..dst + len];
                            assert!(
                                w == &src[s..s + len],
                                "WRITE_WITH_IMM {i} delivered wrong bytes"
                            );
                            res.by_kind[2] += 1;
                            i
                        }
                        WcOpcode::Recv => {
                            let off = if ud {
                                // The GRH area: IPv4 header in its last 20 bytes.
                                assert!(c.wc_flags & wc_flags::GRH != 0, "{c:?}");
                                let g = &buf[20..40];
                                assert_eq!(g[0], 0x45, "GRH {g:?}");
                                assert_eq!(
                                    IpAddr::from(<[u8; 4]>::try_from(&g[12..16]).unwrap()),
                                    a_ipa
                                );
                                assert_eq!(
                                    IpAddr::from(<[u8; 4]>::try_from(&g[16..20]).unwrap()),
                                    b_ipa
                                );
                                assert_eq!(c.src_qp, peer, "{c:?}");
                                assert_eq!(c.src_addr, Some(a_ipa), "{c:?}");
                                40
                            } else {
                                0
                            };
                            let got = c.byte_len as usize - off;
                            assert!(got >= 8, "{c:?}");
                            let i =
                                u64::from_le_bytes(buf[off..off + 8].try_into().unwrap()) as usize;
                            assert!(i < n, "bad header {i}: {c:?}");
                            let UOp::Send { src: s, len, imm } = ops[i] else {
                                panic!("header {i} is not a SEND: {c:?}");
                            };
                            assert_eq!(got, len, "SEND {i} length: {c:?}");
                            assert!(
                                buf[off + 8..off + len] == src[s..s + len - 8],
                                "SEND {i} delivered wrong bytes"
                            );
                            if let Some(imm) = imm {
                                assert!(
                                    c.wc_flags & wc_flags::WITH_IMM != 0 && c.imm == imm,
                                    "{c:?}"
                                );
                            }
                            res.by_kind[0] += 1;
                            i
                        }
                        other => panic!("unexpected completion {other:?}"),
                    };
                    if seen[idx] {
                        res.twice += 1;
                    }
                    seen[idx] = true;
                    res.delivered += 1;
                    max_seen = max_seen.max(idx as u64 + 1);
                    link.shared[0].store(max_seen, Ordering::Relaxed);
                    post(&mut e, c.wr_id + SLOTS as u64);
                }
                if link.stopped() {
                    break;
                }
                deadline.check(|| format!("receiver: {} delivered", res.delivered));
            }
            // Plain WRITEs: every byte is either untouched or right.
            let w = region(e.memory(), wdst);
            let init = wdst_init(wdst_len);
            for (i, op) in ops.iter().enumerate() {
                if let UOp::Write { src: s, len, dst } = *op {
                    let whole = w[dst..dst + len] == src[s..s + len];
                    if whole {
                        res.by_kind[1] += 1;
                    } else {
                        for k in 0..len {
                            let b = w[dst + k];
                            assert!(
                                b == init[dst + k] || b == src[s + k],
                                "WRITE {i}: byte {k} is {b:#x}, neither untouched nor the source"
                            );
                        }
                    }
                }
            }
            (
                res,
                e.counters(),
                *e.qp(qpn).unwrap().counters(),
                e.fault_counters(),
            )
        },
    );
    let elapsed = started.elapsed();
    let (ae, aq, af) = a;
    let (res, be, bq, bf) = b;
    let kinds = ops.iter().fold([0usize; 3], |mut k, o| {
        k[match o {
            UOp::Send { .. } => 0,
            UOp::Write { .. } => 1,
            UOp::WriteImm { .. } => 2,
        }] += 1;
        k
    });
    eprintln!(
        "{t:?}: {n} messages in {elapsed:.1?}; delivered {} (SEND {}/{}, WRITE whole {}/{}, WRITE_IMM {}/{}), delivered twice {}",
        res.delivered, res.by_kind[0], kinds[0], res.by_kind[1], kinds[1], res.by_kind[2], kinds[2], res.twice
    );
    eprintln!("{t:?} sender: {}", fmt_counts(&ae, &aq, af));
    eprintln!("{t:?} receiver: {}", fmt_counts(&be, &bq, bf));
    // Faults happened on both paths.
    assert!(
        af.0.dropped > 0 && af.0.duplicated > 0 && af.0.reordered > 0 && af.0.corrupted > 0,
        "{af:?}"
    );
    assert!(
        bf.1.dropped > 0 && bf.1.duplicated > 0 && bf.1.reordered > 0 && bf.1.corrupted > 0,
        "{bf:?}"
    );
    assert!(be.icrc_errors > 0, "no ICRC drops at the receiver: {be:?}");
    // Loss is allowed, but most messages get through.
    assert!(res.by_kind[0] * 2 > kinds[0], "too few SENDs delivered");
    if !ud {
        assert!(
            res.by_kind[1] > 0 && res.by_kind[2] > 0,
            "no WRITE delivered"
        );
    }
    // Duplication is never delivered: the UC responder drops packets behind
    // its expected PSN, the UD one remembers recent PSNs per source.
    let dups = af.0.duplicated + bf.1.duplicated;
    assert!(dups > 0, "the injector duplicated nothing");
    assert_eq!(
        res.twice, 0,
        "{} delivered twice ({dups} duplicated)",
        res.twice
    );
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

#[test]
fn uc_64mib_under_faults() {
    unreliable(QpType::Uc, 0x5eed_0002, "127.0.0.13", "127.0.0.14");
}

#[test]
fn ud_64mib_under_faults() {
    unreliable(QpType::Ud, 0x5eed_0003, "127.0.0.15", "127.0.0.16");
}
