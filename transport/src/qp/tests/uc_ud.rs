//! UC (no ACKs, loss drops the message, resync at the next FIRST/ONLY)
//! and UD (DETH, Q_Key, the GRH area, one packet per message).

use super::harness::*;
use crate::qp::*;
use crate::wire::Opcode;
use std::net::IpAddr;

fn uc() -> Harness {
    let mut h = Harness::new(&Setup {
        qp_type: QpType::Uc,
        mtu: Mtu::M256,
        ..Setup::default()
    });
    h.capture_on();
    h
}

#[test]
fn uc_send_write_without_acks() {
    let mut h = uc();
    let a = h.a.reg(0x1000, 4096, 0, pat(60));
    let b = h.b.reg(
        0x8000,
        8192,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
        |_| 0,
    );
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 4096, b)]))
        .unwrap();
    h.b.qp.post_recv(recv(2, vec![])).unwrap();
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::SendImm { imm: 3 },
            vec![sge(0x1000, 1000, a)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            2,
            SendOp::Write {
                remote_addr: 0x9000,
                rkey: b,
            },
            vec![sge(0x1000, 600, a)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(
            3,
            SendOp::WriteImm {
                remote_addr: 0x9800,
                rkey: b,
                imm: 4,
            },
            vec![sge(0x1000, 10, a)],
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[1, 2, 3]);
    assert_ok_in_order(&h.b.cqes, &[1, 2]);
    assert_eq!((h.b.cqes[0].imm, h.b.cqes[0].byte_len), (3, 1000));
    assert_eq!(
        (h.b.cqes[1].opcode, h.b.cqes[1].imm),
        (WcOpcode::RecvRdmaWithImm, 4)
    );
    assert_eq!(&h.b.bytes(b)[..1000], &h.a.bytes(a)[..1000]);
    assert_eq!(&h.b.bytes(b)[0x1000..0x1000 + 600], &h.a.bytes(a)[..600]);
    assert!(
        h.captured().iter().all(|c| c.dir == Dir::AtoB),
        "UC is never acknowledged"
    );
    let ops: Vec<Opcode> = h.captured().iter().map(|c| c.pkt().opcode()).collect();
    assert_eq!(ops[0], Opcode::UC_SEND_FIRST);
    assert_eq!(ops[3], Opcode::UC_SEND_LAST_IMM);
    assert_eq!(ops[4], Opcode::UC_WRITE_FIRST);
    assert_eq!(ops[7], Opcode::UC_WRITE_ONLY_IMM);
    assert!(h.captured().iter().all(|c| !c.pkt().hdr.bth.ack_req));
}

#[test]
fn uc_loss_drops_the_message_and_resyncs() {
    for lost in [0u32, 1, 2] {
        let mut h = uc();
        let first = 100;
        h.filter = Some(Box::new(move |_, p| {
            if p.hdr.bth.psn.value() == first + lost {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        }));
        let a = h.a.reg(0x1000, 4096, 0, pat(61));
        let b = h.b.reg(0x8000, 8192, access::LOCAL_WRITE, |_| 0);
        h.b.qp
            .post_recv(recv(1, vec![sge(0x8000, 4096, b)]))
            .unwrap();
        h.b.qp
            .post_recv(recv(2, vec![sge(0x9000, 4096, b)]))
            .unwrap();
        // Three packets, then one.
        h.a.qp
            .post_send(wqe(1, SendOp::Send, vec![sge(0x1000, 700, a)]))
            .unwrap();
        h.a.qp
            .post_send(wqe(2, SendOp::Send, vec![sge(0x1100, 200, a)]))
            .unwrap();
        h.run();
        // The sender completes both: UC completes when the packets leave.
        assert_ok_in_order(&h.a.cqes, &[1, 2]);
        // Only the second message arrives, in the first receive WQE when
        // the FIRST packet was lost, in the held one otherwise.
        let r = &h.b.cqes;
        assert_eq!(r.len(), 1, "lost {lost}");
        assert_eq!((r[0].byte_len, r[0].status), (200, WcStatus::Success));
        assert_eq!(r[0].wr_id, 1);
        assert_eq!(&h.b.bytes(b)[..200], &h.a.bytes(a)[0x100..0x100 + 200]);
        // The packets after the lost one, up to the next FIRST/ONLY.
        assert_eq!(h.b.qp.counters().dropped_pkts, u64::from(2 - lost));
        assert_eq!(h.b.qp.state(), QpState::Rts);
    }
}

#[test]
fn uc_errors_drop_silently() {
    let mut h = uc();
    let a = h.a.reg(0x1000, 4096, 0, pat(62));
    let b = h.b.reg(
        0x8000,
        4096,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
        |_| 0,
    );
    // Bad rkey, no receive WQE, too small a buffer: each message is lost.
    h.a.qp
        .post_send(wqe(
            1,
            SendOp::Write {
                remote_addr: 0x8000,
                rkey: b ^ 1,
            },
            vec![sge(0x1000, 600, a)],
        ))
        .unwrap();
    h.a.qp
        .post_send(wqe(2, SendOp::Send, vec![sge(0x1000, 10, a)]))
        .unwrap();
    h.run();
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 100, b)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(3, SendOp::Send, vec![sge(0x1000, 300, a)]))
        .unwrap();
    h.a.qp
        .post_send(wqe(4, SendOp::Send, vec![sge(0x1000, 50, a)]))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[1, 2, 3, 4]);
    assert_ok_in_order(&h.b.cqes, &[1]);
    assert_eq!(h.b.cqes[0].byte_len, 50);
    assert_eq!(h.b.qp.state(), QpState::Rts);
    assert!(h.b.bytes(b)[50..].iter().all(|&x| x == 0));
}

fn ud(v6: bool) -> Harness {
    let mut h = Harness::new(&Setup {
        qp_type: QpType::Ud,
        v6,
        ..Setup::default()
    });
    h.capture_on();
    h
}

fn ud_wqe(h: &Harness, id: u64, op: SendOp, sges: Vec<Sge>, qkey: u32) -> SendWqe {
    let mut w = wqe(id, op, sges);
    w.ud = Some(UdDest {
        addr: h.b.addr,
        qpn: QPN_B,
        qkey,
    });
    w
}

#[test]
fn ud_send_with_grh_ipv4_and_ipv6() {
    for v6 in [false, true] {
        let mut h = ud(v6);
        let a = h.a.reg(0x1000, 4096, 0, pat(63));
        let b = h.b.reg(0x8000, 16384, access::LOCAL_WRITE, |_| 0xFF);
        h.b.qp
            .post_recv(recv(1, vec![sge(0x8000, 40 + 4096, b)]))
            .unwrap();
        h.b.qp
            .post_recv(recv(2, vec![sge(0xA000, 10, b), sge(0xA010, 100, b)]))
            .unwrap();
        let w1 = ud_wqe(&h, 1, SendOp::Send, vec![sge(0x1000, 4096, a)], QKEY);
        let w2 = ud_wqe(
            &h,
            2,
            SendOp::SendImm { imm: 0xAB },
            vec![sge(0x1000, 13, a)],
            QKEY,
        );
        h.a.qp.post_send(w1).unwrap();
        h.a.qp.post_send(w2).unwrap();
        h.run();
        assert_ok_in_order(&h.a.cqes, &[1, 2]);
        assert_ok_in_order(&h.b.cqes, &[1, 2]);
        let c = h.b.cqes[0];
        assert_eq!(c.byte_len, 40 + 4096);
        assert_eq!(c.wc_flags, wc_flags::GRH);
        assert_eq!(c.src_qp, QPN_A);
        assert_eq!(c.src_addr, Some(h.a.addr));
        let hdr = if v6 {
            NetworkHdr::Ipv6
        } else {
            NetworkHdr::Ipv4
        };
        assert_eq!(c.network_hdr, Some(hdr));
        // The sender's own completion names no network header.
        assert_eq!(h.a.cqes[0].network_hdr, None);
        assert_eq!(h.b.cqes[1].wc_flags, wc_flags::GRH | wc_flags::WITH_IMM);
        assert_eq!(h.b.cqes[1].imm, 0xAB);
        assert_eq!(h.b.cqes[1].byte_len, 53);
        let d = h.b.bytes(b);
        assert_eq!(&d[40..40 + 4096], &h.a.bytes(a)[..4096]);
        // The wire: DETH with our QPN and the Q_Key.
        let p = h.captured()[0].pkt();
        assert_eq!(p.opcode(), Opcode::UD_SEND_ONLY);
        let deth = p.hdr.deth.unwrap();
        assert_eq!((deth.qkey, deth.src_qpn), (QKEY, QPN_A));
        assert_eq!(p.hdr.bth.dest_qpn, QPN_B);
        // UDP payload: BTH + DETH + 4096 + ICRC.
        let udp = 12 + 8 + 4096 + 4;
        match (h.a.addr, h.b.addr) {
            (IpAddr::V4(s), IpAddr::V4(t)) => {
                assert_eq!(&d[..20], &[0u8; 20]);
                assert_eq!(d[20], 0x45);
                assert_eq!(u16::from_be_bytes([d[22], d[23]]) as usize, 20 + 8 + udp);
                assert_eq!(d[29], 17);
                assert_eq!(&d[32..36], &s.octets());
                assert_eq!(&d[36..40], &t.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(t)) => {
                assert_eq!(d[0] >> 4, 6);
                assert_eq!(u16::from_be_bytes([d[4], d[5]]) as usize, 8 + udp);
                assert_eq!(d[6], 17);
                assert_eq!(&d[8..24], &s.octets());
                assert_eq!(&d[24..40], &t.octets());
            }
            _ => unreachable!(),
        }
        // The second went across two SGEs: 10 bytes then 100.
        let g: Vec<u8> = [&d[0x2000..0x200A], &d[0x2010..0x2010 + 43]].concat();
        assert_eq!(&g[40..], &h.a.bytes(a)[..13]);
    }
}

#[test]
fn ud_qkey_rules() {
    let mut h = ud(false);
    let a = h.a.reg(0x1000, 4096, 0, pat(64));
    let b = h.b.reg(0x8000, 8192, access::LOCAL_WRITE, |_| 0);
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 4096, b)]))
        .unwrap();
    let bad = ud_wqe(&h, 1, SendOp::Send, vec![sge(0x1000, 8, a)], QKEY + 1);
    // MSB set: the sender uses its own QP's Q_Key.
    let own = ud_wqe(&h, 2, SendOp::Send, vec![sge(0x1000, 8, a)], 0x8000_0000);
    h.a.qp.post_send(bad).unwrap();
    h.a.qp.post_send(own).unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[1, 2]);
    assert_ok_in_order(&h.b.cqes, &[1]);
    assert_eq!(h.b.qp.counters().qkey_violations, 1);
    assert_eq!(h.captured()[1].pkt().hdr.deth.unwrap().qkey, QKEY);
}

#[test]
fn ud_too_long_or_no_receive_is_dropped() {
    let mut h = ud(false);
    let a = h.a.reg(0x1000, 8192, 0, pat(65));
    let b = h.b.reg(0x8000, 8192, access::LOCAL_WRITE, |_| 0);
    let too_big = ud_wqe(&h, 9, SendOp::Send, vec![sge(0x1000, 4097, a)], QKEY);
    assert!(matches!(
        h.a.qp.post_send(too_big),
        Err(QpError::InvalidWr(_))
    ));
    // No receive posted: dropped.
    h.a.qp
        .post_send(ud_wqe(&h, 1, SendOp::Send, vec![sge(0x1000, 100, a)], QKEY))
        .unwrap();
    h.run();
    // 100 bytes need 140: this buffer is too small, the packet is
    // dropped and the WQE stays for the next one that fits.
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 139, b)]))
        .unwrap();
    h.a.qp
        .post_send(ud_wqe(&h, 2, SendOp::Send, vec![sge(0x1000, 100, a)], QKEY))
        .unwrap();
    h.a.qp
        .post_send(ud_wqe(&h, 3, SendOp::Send, vec![sge(0x1000, 99, a)], QKEY))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[1, 2, 3]);
    assert_ok_in_order(&h.b.cqes, &[1]);
    assert_eq!(h.b.cqes[0].byte_len, 139);
    assert_eq!(h.b.qp.counters().dropped_pkts, 2);
    assert_eq!(h.b.qp.state(), QpState::Rts);
}

#[test]
fn ud_srq_too_small_completes_in_error() {
    let mut h = Harness::new(&Setup {
        qp_type: QpType::Ud,
        srq_b: true,
        ..Setup::default()
    });
    let a = h.a.reg(0x1000, 4096, 0, pat(66));
    let b = h.b.reg(0x8000, 8192, access::LOCAL_WRITE, |_| 0);
    let srq = h.b.srq.as_mut().unwrap();
    srq.0.push_back(recv(1, vec![sge(0x8000, 50, b)]));
    srq.0.push_back(recv(2, vec![sge(0x8000, 500, b)]));
    h.a.qp
        .post_send(ud_wqe(&h, 1, SendOp::Send, vec![sge(0x1000, 100, a)], QKEY))
        .unwrap();
    h.a.qp
        .post_send(ud_wqe(&h, 2, SendOp::Send, vec![sge(0x1000, 100, a)], QKEY))
        .unwrap();
    h.run();
    let st: Vec<_> = h.b.cqes.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, WcStatus::LocLenErr), (2, WcStatus::Success)]);
    assert_eq!(h.b.qp.state(), QpState::Rts);
}

#[test]
fn ud_payload_above_the_port_mtu_is_dropped() {
    let mut h = ud(false);
    h.b.qp.set_tuning(QpTuning {
        port_mtu: Mtu::M1024,
        ..QpTuning::default()
    });
    let a = h.a.reg(0x1000, 8192, 0, pat(67));
    let b = h.b.reg(0x8000, 8192, access::LOCAL_WRITE, |_| 0);
    h.b.qp
        .post_recv(recv(1, vec![sge(0x8000, 8192, b)]))
        .unwrap();
    h.a.qp
        .post_send(ud_wqe(
            &h,
            1,
            SendOp::Send,
            vec![sge(0x1000, 2048, a)],
            QKEY,
        ))
        .unwrap();
    h.a.qp
        .post_send(ud_wqe(
            &h,
            2,
            SendOp::Send,
            vec![sge(0x1000, 1024, a)],
            QKEY,
        ))
        .unwrap();
    h.run();
    assert_ok_in_order(&h.a.cqes, &[1, 2]);
    assert_ok_in_order(&h.b.cqes, &[1]);
    assert_eq!(h.b.cqes[0].byte_len, 40 + 1024);
    assert_eq!(h.b.qp.counters().dropped_pkts, 1);
}
