//! The responder's memory owner exited ([`MemError::Gone`]): requests are
//! dropped as if the QP were already destroyed, never NAKed "remote
//! access" (which blames the requester's rkey), never completed in error
//! on the dead side. Regression for `ib_write_bw -a` reporting
//! IBV_WC_REM_ACCESS_ERR when its server was killed mid-run.

use super::harness::*;
use crate::qp::*;
use crate::wire::{AethKind, NakCode};

const ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

fn setup() -> (Harness, u32, u32) {
    let mut h = Harness::new(&Setup {
        mtu: Mtu::M256,
        retry_cnt: 2,
        ..Setup::default()
    });
    h.capture_on();
    let a = h.a.reg(0x1000, 1 << 16, access::LOCAL_WRITE, pat(50));
    let b = h.b.reg(0x1000, 1 << 16, ALL, |_| 0);
    (h, a, b)
}

/// NAK codes B sent other than PSN sequence errors (those only ask for a
/// resend).
fn fatal_naks(h: &Harness) -> Vec<NakCode> {
    h.captured()
        .iter()
        .filter(|c| c.dir == Dir::BtoA)
        .filter_map(|c| c.pkt().hdr.aeth)
        .filter_map(|a| match a.kind() {
            AethKind::Nak(NakCode::PsnSequence) => None,
            AethKind::Nak(n) => Some(n),
            _ => None,
        })
        .collect()
}

fn statuses(cqes: &[Completion]) -> Vec<(u64, WcStatus)> {
    cqes.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// B's owner is gone: B stays quiet and alive, A runs out of retries.
fn assert_dropped_silently(h: &Harness, last_ok: Option<u64>, failed: u64) {
    assert_eq!(fatal_naks(h), vec![], "no NAK may blame the requester");
    let mut want: Vec<(u64, WcStatus)> = last_ok
        .map(|i| (0..=i).map(|i| (i, WcStatus::Success)).collect())
        .unwrap_or_default();
    want.push((failed, WcStatus::RetryExcErr));
    assert_eq!(statuses(&h.a.cq(CqSide::Send)), want);
    assert_eq!(h.b.qp.state(), QpState::Rts, "the dead side is not failed");
    assert!(
        h.b.cqes.iter().all(|c| c.status == WcStatus::Success),
        "no error completion on the dead side: {:?}",
        h.b.cqes
    );
    assert!(h.b.qp.counters().dropped_pkts > 0);
}

#[test]
fn write_into_memory_whose_owner_exited_mid_message_is_dropped_not_naked() {
    let (mut h, a, b) = setup();
    let write = |id, len| {
        wqe(
            id,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: b,
            },
            vec![sge(0x1000, len, a)],
        )
    };
    h.a.qp.post_send(write(0, 4096)).unwrap();
    h.run();
    // A 40-packet WRITE: the owner exits after its first 8 packets landed.
    h.a.qp.post_send(write(1, 40 * 256)).unwrap();
    h.burst = 8;
    h.step();
    assert_eq!(h.b.qp.rq_expected_psn(), h.a.qp.sq_comp_psn().add(8));
    h.b.mem.gone = true;
    h.burst = 64;
    h.run();
    assert_dropped_silently(&h, Some(0), 1);
}

#[test]
fn send_read_and_atomic_to_an_exited_owner_are_dropped_not_naked() {
    type Op = fn(u32, u32) -> SendWqe;
    let ops: [(&str, Op); 4] = [
        ("send", |a, _| {
            wqe(0, SendOp::Send, vec![sge(0x1000, 3000, a)])
        }),
        ("read", |a, b| {
            wqe(
                0,
                SendOp::Read {
                    remote_addr: 0x1000,
                    rkey: b,
                },
                vec![sge(0x1000, 3000, a)],
            )
        }),
        ("fetch-add", |a, b| {
            wqe(
                0,
                SendOp::FetchAdd {
                    remote_addr: 0x1000,
                    rkey: b,
                    add: 1,
                },
                vec![sge(0x1000, 8, a)],
            )
        }),
        ("write-imm", |a, b| {
            wqe(
                0,
                SendOp::WriteImm {
                    remote_addr: 0x1000,
                    rkey: b,
                    imm: 7,
                },
                vec![sge(0x1000, 600, a)],
            )
        }),
    ];
    for (what, op) in ops {
        let (mut h, a, b) = setup();
        h.b.qp
            .post_recv(recv(9, vec![sge(0x4000, 4096, b)]))
            .unwrap();
        h.b.mem.gone = true;
        h.a.qp.post_send(op(a, b)).unwrap();
        h.run();
        assert_eq!(fatal_naks(&h), vec![], "{what}");
        assert_dropped_silently(&h, None, 0);
    }
}

#[test]
fn uc_and_ud_receivers_whose_owner_exited_drop_and_stay_up() {
    for qp_type in [QpType::Uc, QpType::Ud] {
        let mut h = Harness::new(&Setup {
            qp_type,
            mtu: Mtu::M1024,
            ..Setup::default()
        });
        let a = h.a.reg(0x1000, 4096, access::LOCAL_WRITE, pat(51));
        let b = h.b.reg(0x1000, 8192, ALL, |_| 0);
        h.b.qp
            .post_recv(recv(9, vec![sge(0x1000, 8192, b)]))
            .unwrap();
        let send = |id, addr| {
            let mut w = wqe(id, SendOp::Send, vec![sge(0x1000, 1000, a)]);
            if qp_type == QpType::Ud {
                w.ud = Some(UdDest {
                    addr,
                    qpn: QPN_B,
                    qkey: QKEY,
                });
            }
            w
        };
        h.b.mem.gone = true;
        h.a.qp.post_send(send(1, h.b.addr)).unwrap();
        h.run();
        assert_eq!(statuses(&h.a.cq(CqSide::Send)), [(1, WcStatus::Success)]);
        assert_eq!(h.b.qp.state(), QpState::Rts, "{qp_type:?}");
        assert_eq!(h.b.cqes.len(), 0, "{qp_type:?}: {:?}", h.b.cqes);
        assert_eq!(h.b.qp.counters().dropped_pkts, 1, "{qp_type:?}");
        // The dropped message did not use up the receive WQE.
        h.b.mem.gone = false;
        h.a.qp.post_send(send(2, h.b.addr)).unwrap();
        h.run();
        let got = statuses(&h.b.cq(CqSide::Recv));
        assert_eq!(got, [(9, WcStatus::Success)], "{qp_type:?}");
    }
}
