//! Random mixed RC workloads in both directions over a wire that loses,
//! duplicates and reorders, checked against a sequential model: RC
//! executes each direction's requests in order, so every byte and every
//! completion is predictable — except READ data that a later WRITE
//! overwrites: the IBA lets the responder run the WRITE before the READ's
//! data is read (FENCE exists for that), and ours reads lazily, so such
//! bytes may come out either way and are not checked.

use super::harness::*;
use crate::qp::*;
use proptest::prelude::*;

const L_BASE: u64 = 0x10_0000; // local: sources, READ/atomic results
const L_LEN: usize = 512 << 10;
const R_BASE: u64 = 0x20_0000; // remote target of WRITE/READ/atomics
const R_LEN: usize = 64 << 10;
const V_BASE: u64 = 0x40_0000; // receive buffers, one per SEND
const V_SLOT: usize = 16 << 10;
const ATOMIC_AT: usize = 60 << 10;

#[derive(Clone, Debug)]
enum Op {
    Send { len: usize, imm: bool },
    Write { off: usize, len: usize, imm: bool },
    Read { off: usize, len: usize },
    FetchAdd { slot: usize, add: u64 },
    CmpSwap { slot: usize, hit: bool, swap: u64 },
    AtomicWrite { slot: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![0usize..16, 200usize..1100, 1usize..12_000];
    let off = 0usize..40_000;
    prop_oneof![
        (len.clone(), any::<bool>()).prop_map(|(len, imm)| Op::Send { len, imm }),
        (off.clone(), len.clone(), any::<bool>()).prop_map(|(off, len, imm)| Op::Write {
            off,
            len,
            imm
        }),
        (off, len).prop_map(|(off, len)| Op::Read { off, len }),
        (0usize..4, any::<u64>()).prop_map(|(slot, add)| Op::FetchAdd { slot, add }),
        (0usize..4, any::<bool>(), any::<u64>()).prop_map(|(slot, hit, swap)| Op::CmpSwap {
            slot,
            hit,
            swap
        }),
        (0usize..4).prop_map(|slot| Op::AtomicWrite { slot }),
    ]
}

/// What one side expects after its WQEs ran.
struct Expect {
    /// Local slots: (offset in L, expected bytes, which bytes to check).
    local: Vec<Local>,
    /// The peer's R region at the end.
    remote: Vec<u8>,
    /// Receives at the peer: (wr_id, slot bytes, imm).
    recvs: Vec<(u64, Vec<u8>, Option<u32>)>,
    /// Send WQEs posted, in order.
    ids: Vec<u64>,
    /// Local region, the peer's R region, the peer's receive region.
    keys: (u32, u32, u32),
}

struct Local {
    at: usize,
    bytes: Vec<u8>,
    /// READ only: where it read in the peer's R region.
    remote_off: Option<usize>,
    check: Vec<bool>,
}

impl Local {
    fn new(at: usize, bytes: Vec<u8>, remote_off: Option<usize>) -> Local {
        let check = vec![true; bytes.len()];
        Local {
            at,
            bytes,
            remote_off,
            check,
        }
    }
}

fn word(d: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(d[at..at + 8].try_into().unwrap())
}

/// Posts `ops` from `me` to `peer` and builds the model's expectations.
fn post(
    me: &mut Side,
    peer: &mut Side,
    lkey: u32,
    rkey: u32,
    vkey: u32,
    ops: &[Op],
    tag: u64,
) -> Expect {
    let src = me.bytes(lkey).to_vec();
    let mut remote = peer.bytes(rkey).to_vec();
    let mut local: Vec<Local> = vec![];
    let mut recvs = vec![];
    // Results go to the upper half of L, each op its own slot.
    let mut res_at = L_LEN / 2;
    for (i, op) in ops.iter().enumerate() {
        let id = tag + i as u64;
        let s_off = (i * 977) % 4096;
        let (sop, sg, payload_len) = match *op {
            Op::Send { len, imm } => {
                let n = recvs.len() as u64;
                let vaddr = V_BASE + n * V_SLOT as u64;
                peer.qp
                    .post_recv(recv(tag + 1000 + n, vec![sge(vaddr, V_SLOT as u32, vkey)]))
                    .unwrap();
                let imm = imm.then_some(id as u32);
                recvs.push((tag + 1000 + n, src[s_off..s_off + len].to_vec(), imm));
                let sop = match imm {
                    Some(v) => SendOp::SendImm { imm: v },
                    None => SendOp::Send,
                };
                (sop, sge(L_BASE + s_off as u64, len as u32, lkey), len)
            }
            Op::Write { off, len, imm } => {
                let len = len.min(ATOMIC_AT - off);
                remote[off..off + len].copy_from_slice(&src[s_off..s_off + len]);
                // Earlier READs of these bytes may see old or new data.
                for l in local.iter_mut() {
                    if let Some(r) = l.remote_off {
                        for k in off.max(r)..(off + len).min(r + l.bytes.len()) {
                            l.check[k - r] = false;
                        }
                    }
                }
                let va = R_BASE + off as u64;
                let sop = if imm {
                    let n = recvs.len() as u64;
                    peer.qp.post_recv(recv(tag + 1000 + n, vec![])).unwrap();
                    recvs.push((tag + 1000 + n, vec![], Some(id as u32)));
                    SendOp::WriteImm {
                        remote_addr: va,
                        rkey,
                        imm: id as u32,
                    }
                } else {
                    SendOp::Write {
                        remote_addr: va,
                        rkey,
                    }
                };
                (sop, sge(L_BASE + s_off as u64, len as u32, lkey), len)
            }
            Op::Read { off, len } => {
                let len = len.min(R_LEN - off);
                local.push(Local::new(
                    res_at,
                    remote[off..off + len].to_vec(),
                    Some(off),
                ));
                let sg = sge(L_BASE + res_at as u64, len as u32, lkey);
                res_at += len + 8;
                (
                    SendOp::Read {
                        remote_addr: R_BASE + off as u64,
                        rkey,
                    },
                    sg,
                    len,
                )
            }
            Op::FetchAdd { slot, add } => {
                let at = ATOMIC_AT + 8 * slot;
                let old = word(&remote, at);
                remote[at..at + 8].copy_from_slice(&old.wrapping_add(add).to_ne_bytes());
                local.push(Local::new(res_at, old.to_ne_bytes().to_vec(), None));
                let sg = sge(L_BASE + res_at as u64, 8, lkey);
                res_at += 16;
                (
                    SendOp::FetchAdd {
                        remote_addr: R_BASE + at as u64,
                        rkey,
                        add,
                    },
                    sg,
                    8,
                )
            }
            Op::CmpSwap { slot, hit, swap } => {
                let at = ATOMIC_AT + 8 * slot;
                let old = word(&remote, at);
                let compare = if hit { old } else { old ^ 1 };
                if hit {
                    remote[at..at + 8].copy_from_slice(&swap.to_ne_bytes());
                }
                local.push(Local::new(res_at, old.to_ne_bytes().to_vec(), None));
                let sg = sge(L_BASE + res_at as u64, 8, lkey);
                res_at += 16;
                (
                    SendOp::CmpSwap {
                        remote_addr: R_BASE + at as u64,
                        rkey,
                        compare,
                        swap,
                    },
                    sg,
                    8,
                )
            }
            Op::AtomicWrite { slot } => {
                let at = ATOMIC_AT + 8 * slot;
                remote[at..at + 8].copy_from_slice(&src[s_off..s_off + 8]);
                (
                    SendOp::AtomicWrite {
                        remote_addr: R_BASE + at as u64,
                        rkey,
                    },
                    sge(L_BASE + s_off as u64, 8, lkey),
                    8,
                )
            }
        };
        let _ = payload_len;
        me.qp.post_send(wqe(id, sop, vec![sg])).unwrap();
    }
    assert!(res_at <= L_LEN);
    Expect {
        local,
        remote,
        recvs,
        ids: (0..ops.len() as u64).map(|i| tag + i).collect(),
        keys: (lkey, rkey, vkey),
    }
}

fn check(me: &Side, peer: &Side, e: &Expect) {
    let (lkey, rkey, vkey) = e.keys;
    assert_ok_in_order(&me.cq(CqSide::Send), &e.ids);
    let l = me.bytes(lkey);
    for x in &e.local {
        let got = &l[x.at..x.at + x.bytes.len()];
        let bad = (0..got.len()).find(|&k| x.check[k] && got[k] != x.bytes[k]);
        assert_eq!(bad, None, "local result at {:#x}", x.at);
    }
    assert!(peer.bytes(rkey) == &e.remote[..], "remote region");
    let r = peer.cq(CqSide::Recv);
    let ids: Vec<u64> = e.recvs.iter().map(|x| x.0).collect();
    assert_ok_in_order(&r, &ids);
    let v = peer.bytes(vkey);
    for (k, (c, (_, bytes, imm))) in r.iter().zip(&e.recvs).enumerate() {
        assert_eq!(c.imm, imm.unwrap_or(0));
        assert_eq!(c.wc_flags & wc_flags::WITH_IMM != 0, imm.is_some());
        if c.opcode == WcOpcode::Recv {
            assert_eq!(c.byte_len as usize, bytes.len());
            let _ = k;
        }
    }
    // Each SEND landed in its own receive slot (slots in posting order).
    for (slot, (_, bytes, _)) in e.recvs.iter().enumerate() {
        let at = slot * V_SLOT;
        if !bytes.is_empty() {
            assert_eq!(&v[at..at + bytes.len()], &bytes[..]);
        }
    }
}

fn workload(
    mtu: Mtu,
    faults: Faults,
    seed: u64,
    depth: u8,
    window: u32,
    ops_a: Vec<Op>,
    ops_b: Vec<Op>,
) {
    let mut h = Harness::new(&Setup {
        mtu,
        timeout: 10,
        max_rd_atomic: depth,
        max_dest_rd_atomic: 16,
        ..Setup::default()
    });
    for s in [&mut h.a, &mut h.b] {
        s.qp.set_tuning(QpTuning {
            max_unacked_psns: window,
            ..QpTuning::default()
        });
    }
    h.rng = super::harness::Rng::new(seed);
    h.faults = faults;
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let mut keys = vec![];
    for (i, s) in [&mut h.a, &mut h.b].into_iter().enumerate() {
        let l = s.reg(L_BASE, L_LEN, access::LOCAL_WRITE, pat(80 + i as u64));
        let r = s.reg(R_BASE, R_LEN, all, pat(90 + i as u64));
        let v = s.reg(V_BASE, V_SLOT * 64, access::LOCAL_WRITE, |_| 0);
        keys.push((l, r, v));
    }
    let ((la, ra, va), (lb, rb, vb)) = (keys[0], keys[1]);
    let ea = post(&mut h.a, &mut h.b, la, rb, vb, &ops_a, 0);
    let eb = post(&mut h.b, &mut h.a, lb, ra, va, &ops_b, 1 << 32);
    h.run();
    check(&h.a, &h.b, &ea);
    check(&h.b, &h.a, &eb);
    assert_eq!(h.a.qp.state(), QpState::Rts);
    assert_eq!(h.b.qp.state(), QpState::Rts);
}

/// Cases per run; `QP_PROP_CASES` raises it for a long soak.
fn cases() -> u32 {
    std::env::var("QP_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn mixed_workload_over_a_lossy_wire(
        mtu in prop::sample::select(vec![Mtu::M256, Mtu::M1024, Mtu::M4096]),
        loss in prop_oneof![Just(0u32), 0u32..60_000],
        dup in prop_oneof![Just(0u32), 0u32..50_000],
        reorder in prop_oneof![Just(0u32), 0u32..100_000],
        seed in any::<u64>(),
        depth in 1u8..6,
        window in prop_oneof![Just(256u32), 4u32..64],
        ops_a in prop::collection::vec(op(), 1..16),
        ops_b in prop::collection::vec(op(), 0..8),
    ) {
        workload(mtu, Faults { loss, dup, reorder }, seed, depth, window, ops_a, ops_b);
    }
}

#[test]
fn heavy_loss_long_run() {
    let ops: Vec<Op> = (0..60)
        .map(|i| match i % 6 {
            0 => Op::Send {
                len: 5000 + i,
                imm: i % 4 == 0,
            },
            1 => Op::Write {
                off: i * 100,
                len: 9000,
                imm: false,
            },
            2 => Op::Read {
                off: i * 50,
                len: 7000,
            },
            3 => Op::FetchAdd {
                slot: i % 4,
                add: i as u64,
            },
            4 => Op::CmpSwap {
                slot: i % 4,
                hit: i % 3 == 0,
                swap: i as u64,
            },
            _ => Op::Write {
                off: 100,
                len: 10,
                imm: true,
            },
        })
        .collect();
    let back: Vec<Op> = ops.iter().rev().take(20).cloned().collect();
    for seed in 0..3 {
        workload(
            Mtu::M1024,
            Faults {
                loss: 80_000,
                dup: 30_000,
                reorder: 80_000,
            },
            seed,
            4,
            64,
            ops.clone(),
            back.clone(),
        );
    }
}
