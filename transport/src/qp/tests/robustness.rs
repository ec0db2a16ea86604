//! Malformed, unexpected and hostile packet input: nothing panics, wrong
//! packets are dropped and counted, and forged packets cannot make a WQE
//! complete twice.

use super::harness::*;
use crate::qp::*;
use crate::wire::opcode::{flags, ALL_OPCODES};
use crate::wire::packet::emit_packet;
use crate::wire::{
    Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Headers, Opcode, Packet, Reth, MAX_PACKET,
};
use crate::Psn;
use proptest::prelude::*;
use std::collections::HashMap;

const ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// Raw material for one packet: every header filled from the values.
#[derive(Clone, Debug)]
struct Raw {
    op: Opcode,
    psn: u32,
    bits: u8,
    va: u64,
    key: u32,
    len: u32,
    syndrome: u8,
    msn: u32,
    data: u64,
    payload: usize,
    /// Offset from the receiver's current PSNs (near misses are the
    /// interesting ones).
    near: Option<i32>,
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        prop::sample::select(ALL_OPCODES.to_vec()),
        any::<u32>(),
        any::<u8>(),
        prop_oneof![Just(0x8000u64), Just(0x1000u64), any::<u64>()],
        any::<u32>(),
        prop_oneof![
            Just(0u32),
            Just(8),
            Just(1024),
            Just(u32::MAX),
            any::<u32>()
        ],
        any::<u8>(),
        any::<u32>(),
        any::<u64>(),
        prop_oneof![Just(0usize), Just(8), Just(1024), 0usize..=4096],
        prop::option::of(-3i32..300),
    )
        .prop_map(
            |(op, psn, bits, va, key, len, syndrome, msn, data, payload, near)| Raw {
                op,
                psn,
                bits,
                va,
                key,
                len,
                syndrome,
                msn,
                data,
                payload,
                near,
            },
        )
}

fn build(r: &Raw, base: Psn, dest_qpn: u32, real_key: u32) -> Vec<u8> {
    let info = r.op.info().unwrap();
    let mut h = Headers::default();
    h.bth.opcode = r.op;
    h.bth.dest_qpn = dest_qpn;
    h.bth.psn = match r.near {
        Some(d) => base.add(d as u32),
        None => Psn::new(r.psn),
    };
    h.bth.se = r.bits & 1 != 0;
    h.bth.mig_req = r.bits & 2 != 0;
    h.bth.ack_req = r.bits & 4 != 0;
    h.bth.fecn = r.bits & 8 != 0;
    // Half the time use a key that exists, so execution paths run.
    let key = if r.bits & 16 != 0 { real_key } else { r.key };
    let has = |f| info.has(f);
    if has(flags::DETH) {
        h.deth = Some(Deth {
            qkey: if r.bits & 32 != 0 { QKEY } else { r.key },
            src_qpn: r.msn & 0xFF_FFFF,
        });
    }
    if has(flags::FETH) {
        h.feth = Some(Feth {
            plt: r.bits & 0xf,
            sel: r.bits >> 6,
        });
    }
    if has(flags::RETH) {
        h.reth = Some(Reth {
            va: r.va,
            rkey: key,
            dma_len: r.len,
        });
    }
    if has(flags::ATOMIC_ETH) {
        h.atomic_eth = Some(AtomicEth {
            va: r.va,
            rkey: key,
            swap_add: r.data,
            compare: r.data.rotate_left(7),
        });
    }
    if has(flags::AETH) {
        h.aeth = Some(Aeth {
            syndrome: r.syndrome,
            msn: r.msn & 0xFF_FFFF,
        });
    }
    if has(flags::ATOMIC_ACK_ETH) {
        h.atomic_ack = Some(AtomicAckEth { orig: r.data });
    }
    if has(flags::IMM) {
        h.imm = Some(r.msn);
    }
    if has(flags::IETH) {
        h.ieth = Some(key);
    }
    let n = if has(flags::PAYLOAD) { r.payload } else { 0 };
    let payload = vec![0xA5u8; n];
    let mut buf = vec![0u8; MAX_PACKET];
    let len = emit_packet(&h, &payload, &mut buf).unwrap();
    buf.truncate(len);
    buf
}

/// A pair mid-traffic in both directions.
fn busy_pair(t: QpType) -> (Harness, u32, u32) {
    let mut h = Harness::new(&Setup {
        qp_type: t,
        mtu: Mtu::M1024,
        timeout: 8,
        retry_cnt: 2,
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..Setup::default()
    });
    let ka = h.a.reg(0x1000, 1 << 16, ALL, pat(70));
    let kb = h.b.reg(0x1000, 1 << 16, ALL, pat(71));
    for (i, s) in [&mut h.a, &mut h.b].into_iter().enumerate() {
        let k = if i == 0 { ka } else { kb };
        let peer = if i == 0 { kb } else { ka };
        let peer_addr = if i == 0 { "10.0.0.2" } else { "10.0.0.1" };
        let peer_qpn = if i == 0 { QPN_B } else { QPN_A };
        for j in 0..4u64 {
            s.qp.post_recv(recv(100 + j, vec![sge(0x8000 + j * 4096, 4096, k)]))
                .unwrap();
        }
        let mut ops = vec![
            SendOp::Send,
            SendOp::Write {
                remote_addr: 0x4000,
                rkey: peer,
            },
        ];
        if t == QpType::Rc {
            ops.push(SendOp::Read {
                remote_addr: 0x2000,
                rkey: peer,
            });
            ops.push(SendOp::FetchAdd {
                remote_addr: 0x3000,
                rkey: peer,
                add: 1,
            });
        }
        if t == QpType::Ud {
            ops.truncate(1);
        }
        for (j, op) in ops.into_iter().enumerate() {
            let len = if matches!(op, SendOp::FetchAdd { .. }) {
                8
            } else {
                3000
            };
            let mut w = wqe(j as u64, op, vec![sge(0x6000 + j as u64 * 4096, len, k)]);
            if t == QpType::Ud {
                w.ud = Some(UdDest {
                    addr: peer_addr.parse().unwrap(),
                    qpn: peer_qpn,
                    qkey: QKEY,
                });
            }
            s.qp.post_send(w).unwrap();
        }
    }
    h.step();
    (h, ka, kb)
}

fn check_exactly_once(s: &Side) {
    let mut seen = HashMap::new();
    for c in &s.cqes {
        *seen.entry((c.side == CqSide::Send, c.wr_id)).or_insert(0) += 1;
    }
    assert!(seen.values().all(|&n| n == 1), "{:?}", s.cqes);
    // Every send WQE finished one way or another once the pair is quiet.
    assert_eq!(s.qp.send_queue_len(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_packets_never_panic(
        t in prop::sample::select(vec![QpType::Rc, QpType::Uc, QpType::Ud]),
        pkts in prop::collection::vec((raw(), any::<bool>(), 0u8..3), 1..24),
    ) {
        let (mut h, ka, kb) = busy_pair(t);
        for (r, to_b, steps) in pkts {
            // Aim near the PSNs the receiver is using.
            let (qp, key, qpn) = if to_b { (&h.b.qp, kb, QPN_B) } else { (&h.a.qp, ka, QPN_A) };
            let base = if r.op.info().unwrap().has(flags::RESPONSE) {
                qp.sq_comp_psn()
            } else {
                qp.rq_expected_psn()
            };
            let bytes = build(&r, base, qpn, key);
            h.inject(to_b, &bytes);
            for _ in 0..steps {
                h.step();
            }
        }
        h.run_max(200_000);
        check_exactly_once(&h.a);
        check_exactly_once(&h.b);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), to_b in any::<bool>()) {
        let (mut h, _, _) = busy_pair(QpType::Rc);
        if Packet::parse(&bytes).is_ok() {
            h.inject(to_b, &bytes);
        }
        h.run_max(200_000);
        check_exactly_once(&h.a);
        check_exactly_once(&h.b);
    }
}

fn inject_to_a(h: &mut Harness, op: Opcode, psn: Psn, aeth: Option<Aeth>, payload: &[u8]) {
    let mut hdr = Headers::default();
    hdr.bth.opcode = op;
    hdr.bth.dest_qpn = QPN_A;
    hdr.bth.psn = psn;
    hdr.aeth = aeth;
    if op == Opcode::RC_ATOMIC_ACK {
        hdr.atomic_ack = Some(AtomicAckEth { orig: 1 });
    }
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(&hdr, payload, &mut buf).unwrap();
    h.inject(false, &buf[..n]);
}

#[test]
fn bogus_responses_are_dropped() {
    let mut h = Harness::rc();
    h.cut_a_to_b = true;
    let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(72));
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Read {
                remote_addr: 0,
                rkey: 1,
            },
            vec![sge(0x1000, 2000, a)],
        ))
        .unwrap();
    h.step();
    let ack = Some(Aeth::ack(31, 1));
    let before = h.a.qp.counters().dropped_pkts;
    // ACK for a PSN never sent.
    inject_to_a(&mut h, Opcode::RC_ACK, Psn::new(5000), ack, &[]);
    // READ response of the wrong length, wrong position, wrong QP type.
    inject_to_a(
        &mut h,
        Opcode::RC_READ_RESPONSE_FIRST,
        Psn::new(100),
        ack,
        &[0; 1000],
    );
    inject_to_a(
        &mut h,
        Opcode::RC_READ_RESPONSE_LAST,
        Psn::new(100),
        ack,
        &[0; 1024],
    );
    inject_to_a(&mut h, Opcode::RC_ATOMIC_ACK, Psn::new(100), ack, &[]);
    inject_to_a(&mut h, Opcode::UC_SEND_ONLY, Psn::new(0), None, &[]);
    inject_to_a(
        &mut h,
        Opcode::RC_READ_RESPONSE_MIDDLE,
        Psn::new(100),
        None,
        &[0; 1024],
    );
    // A CNP is ignored without being an error.
    inject_to_a(&mut h, Opcode::CNP, Psn::new(0), None, &[0; 16]);
    assert_eq!(h.a.qp.counters().dropped_pkts - before, 6);
    assert!(h.a.cqes.is_empty());
    assert_eq!(h.a.qp.state(), QpState::Rts);
    // The real responses still work.
    h.cut_a_to_b = false;
    h.run();
    assert_eq!(h.a.cqes[0].status, WcStatus::RemAccessErr);
}

#[test]
fn packets_from_a_stranger_or_in_reset_are_dropped() {
    let mut h = Harness::rc();
    let b = h.b.reg(0x1000, 64, ALL, |_| 0);
    let mut hdr = Headers::default();
    hdr.bth.opcode = Opcode::RC_WRITE_ONLY;
    hdr.bth.dest_qpn = QPN_B;
    hdr.bth.psn = Psn::new(100);
    hdr.reth = Some(Reth {
        va: 0x1000,
        rkey: b,
        dma_len: 4,
    });
    let mut buf = vec![0u8; MAX_PACKET];
    let n = emit_packet(&hdr, &[1, 2, 3, 4], &mut buf).unwrap();
    let pkt = Packet::parse(&buf[..n]).unwrap();
    let meta = RxMeta {
        src: "10.9.9.9".parse().unwrap(),
        src_port: 1,
        dst: h.b.addr,
        tos: 0,
        ttl: 64,
        ip_id: 0,
        flow_label: 0,
    };
    let (qp, mut env) = h.b.env();
    qp.handle_packet(h.now, &pkt, &meta, &mut env);
    assert_eq!(h.b.bytes(b)[..4], [0; 4]);
    assert_eq!(h.b.qp.counters().dropped_pkts, 1);
    let mut fresh = Qp::new(QpConfig {
        qpn: QPN_B,
        qp_type: QpType::Rc,
        pd: 7,
        srq: None,
        sq_sig_all: false,
        max_send_wr: 1,
        max_recv_wr: 1,
    });
    let mut mem = BufferMemory::new();
    let mut env = Env {
        mem: &mut mem,
        srq: None,
    };
    fresh.handle_packet(h.now, &pkt, &meta, &mut env);
    assert_eq!(fresh.counters().dropped_pkts, 1);
    assert!(!fresh.has_transmit());
}

#[test]
fn comm_established_in_rtr() {
    let mut h = Harness::rc();
    h.b.qp
        .modify(&QpAttr {
            state: Some(QpState::Reset),
            ..Default::default()
        })
        .unwrap();
    for attr in [
        QpAttr {
            state: Some(QpState::Init),
            access_flags: Some(ALL),
            ..Default::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::M1024),
            dest_qpn: Some(QPN_A),
            dest_addr: Some(h.a.addr),
            rq_psn: Some(Psn::new(100)),
            ..Default::default()
        },
    ] {
        h.b.qp.modify(&attr).unwrap();
    }
    let a = h.a.reg(0x1000, 64, 0, pat(73));
    let b = h.b.reg(0x1000, 64, ALL, |_| 0);
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: b,
            },
            vec![sge(0x1000, 64, a)],
        ))
        .unwrap();
    h.run();
    // RTR executes requests and ACKs them.
    assert_ok_in_order(&h.a.cqes, &[1]);
    assert_eq!(h.b.events, vec![QpEvent::CommEstablished]);
}

#[test]
fn length_rules_violations_are_invalid_requests() {
    // A FIRST shorter than the PMTU, a LAST with no payload, a MIDDLE
    // without a FIRST: each NAKs "invalid request" and fails B.
    type Case = (Opcode, usize, bool);
    let cases: [&[Case]; 3] = [
        &[(Opcode::RC_SEND_FIRST, 100, true)],
        &[
            (Opcode::RC_SEND_FIRST, 1024, true),
            (Opcode::RC_SEND_LAST, 0, true),
        ],
        &[(Opcode::RC_SEND_MIDDLE, 1024, true)],
    ];
    for pkts in cases {
        let mut h = Harness::rc();
        h.capture_on();
        let b = h.b.reg(0x1000, 8192, ALL, |_| 0);
        h.b.qp
            .post_recv(recv(1, vec![sge(0x1000, 8192, b)]))
            .unwrap();
        for (i, &(op, n, _)) in pkts.iter().enumerate() {
            let mut hdr = Headers::default();
            hdr.bth.opcode = op;
            hdr.bth.dest_qpn = QPN_B;
            hdr.bth.psn = Psn::new(100 + i as u32);
            let mut buf = vec![0u8; MAX_PACKET];
            let len = emit_packet(&hdr, &vec![1; n], &mut buf).unwrap();
            h.inject(true, &buf[..len]);
        }
        h.run();
        assert_eq!(h.b.qp.state(), QpState::Err, "{pkts:?}");
        let nak = h
            .captured()
            .iter()
            .find(|c| c.dir == Dir::BtoA)
            .unwrap()
            .pkt();
        assert_eq!(nak.hdr.aeth.unwrap().syndrome, 0x61);
    }
}
