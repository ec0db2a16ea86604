//! XRC through two endpoints wired back to back in memory (no socket):
//! an initiator QP on one side, a target QP and XRC SRQs of two domains on
//! the other, over a wire that may lose packets.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::{Endpoint, QpSpec, RecvMeta, TransmitSink, XrcSrq};
use crate::qp::{
    access, send_flags, BufferMemory, Completion, Mtu, Payload, QpAttr, QpState, QpType, RecvWqe,
    SendOp, SendWqe, Sge, Transmit, WcOpcode, WcStatus,
};
use crate::wire::icrc::{fill_icrc, IcrcIp};
use crate::wire::{Service, MAX_PACKET};
use crate::Psn;

const A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const PORT: u16 = 4791;
const VA: u64 = 0x20_0000;
const SEND_CQ: u32 = 7;
/// The CQs of the two XRC SRQs on B.
const SRQ_CQ: u32 = 21;
const OTHER_CQ: u32 = 22;
/// The XRC domains on B: the target QP's, and another.
const XRCD: u32 = 3;
const OTHER_XRCD: u32 = 4;
/// PDs on B: the SRQ's (where the buffers and the rkey live), and another.
const SRQ_PD: u32 = 9;

struct Wire {
    src: Ipv4Addr,
    buf: Vec<u8>,
    out: Vec<Vec<u8>>,
}

impl TransmitSink for Wire {
    fn capacity(&self) -> usize {
        16
    }
    fn has_room(&self) -> bool {
        self.out.len() < 16
    }
    fn buffer(&mut self) -> Option<&mut [u8]> {
        self.has_room().then_some(&mut self.buf[..])
    }
    fn commit(&mut self, t: Transmit, _src: Option<IpAddr>) {
        let IpAddr::V4(dst) = t.dst else {
            panic!("IPv4 only here")
        };
        let mut p = self.buf[..t.len].to_vec();
        fill_icrc(&IcrcIp::v4(self.src, dst), PORT, PORT, &mut p).unwrap();
        self.out.push(p);
    }
}

fn meta(src: Ipv4Addr, dst: Ipv4Addr) -> RecvMeta {
    RecvMeta {
        src: SocketAddr::from((src, PORT)),
        dst: Some(IpAddr::V4(dst)),
        dst_port: PORT,
        tos: None,
        ttl: None,
        flow_label: None,
        seg: 0,
    }
}

struct Pair {
    a: Endpoint<BufferMemory>,
    b: Endpoint<BufferMemory>,
    ini: u32,
    tgt: u32,
    srq: u32,
    other_srq: u32,
    ca: VecDeque<(u32, Completion)>,
    cb: VecDeque<(u32, Completion)>,
    now: Instant,
    /// Every opcode that crossed the wire, both ways.
    seen: Vec<u8>,
    rng: u64,
}

fn steps(peer: u32, addr: Ipv4Addr, tgt: bool) -> [QpAttr; 3] {
    [
        QpAttr {
            state: Some(QpState::Init),
            access_flags: Some(access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::M1024),
            rq_psn: Some(Psn::new(9)),
            dest_qpn: Some(peer),
            dest_addr: Some(IpAddr::V4(addr)),
            min_rnr_timer: tgt.then_some(1),
            max_dest_rd_atomic: tgt.then_some(4),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(9)),
            timeout: Some(10),
            retry_cnt: (!tgt).then_some(7),
            rnr_retry: (!tgt).then_some(7),
            max_rd_atomic: (!tgt).then_some(4),
            ..QpAttr::default()
        },
    ]
}

impl Pair {
    fn new() -> Pair {
        let mut a = Endpoint::new(0x11, BufferMemory::new()).unwrap();
        let mut b = Endpoint::new(0x40, BufferMemory::new()).unwrap();
        let srq = b.create_xrc_srq(
            64,
            XrcSrq {
                xrcd: XRCD,
                cq: SRQ_CQ,
                pd: SRQ_PD,
            },
        );
        let other_srq = b.create_xrc_srq(
            64,
            XrcSrq {
                xrcd: OTHER_XRCD,
                cq: OTHER_CQ,
                pd: SRQ_PD,
            },
        );
        let ini = a
            .create_qp(QpSpec {
                qp_type: QpType::XrcSend,
                pd: 1,
                send_cq: SEND_CQ,
                recv_cq: SEND_CQ,
                srq: None,
                xrcd: None,
                sq_sig_all: false,
                max_send_wr: 64,
                max_recv_wr: 0,
            })
            .unwrap();
        // A target QP has no PD and no CQ of its own.
        let tgt = b
            .create_qp(QpSpec {
                qp_type: QpType::XrcRecv,
                pd: 0,
                send_cq: 0,
                recv_cq: 0,
                srq: None,
                xrcd: Some(XRCD),
                sq_sig_all: false,
                max_send_wr: 0,
                max_recv_wr: 0,
            })
            .unwrap();
        let mut none = VecDeque::new();
        for s in steps(tgt, B, false) {
            a.modify_qp(ini, &s, &mut none).unwrap();
        }
        for s in steps(ini, A, true) {
            b.modify_qp(tgt, &s, &mut none).unwrap();
        }
        assert!(none.is_empty());
        Pair {
            a,
            b,
            ini,
            tgt,
            srq,
            other_srq,
            ca: VecDeque::new(),
            cb: VecDeque::new(),
            now: Instant::now(),
            seen: Vec::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn lost(&mut self, loss: u32) -> bool {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % 100) < u64::from(loss)
    }

    /// Moves packets both ways, `loss` percent of them lost, letting ACK
    /// timers fire, until both sides are quiet and nothing is pending.
    fn run(&mut self, loss: u32) {
        for _ in 0..2000 {
            let (mut wa, mut wb) = (wire(A), wire(B));
            self.a.poll_transmit(self.now, &mut wa, &mut self.ca);
            for p in &wa.out {
                self.seen.push(p[0]);
                if !self.lost(loss) {
                    self.b
                        .handle_datagram(self.now, &meta(A, B), p, &mut self.cb);
                }
            }
            self.b.poll_transmit(self.now, &mut wb, &mut self.cb);
            for p in &wb.out {
                self.seen.push(p[0]);
                if !self.lost(loss) {
                    self.a
                        .handle_datagram(self.now, &meta(B, A), p, &mut self.ca);
                }
            }
            if wa.out.is_empty() && wb.out.is_empty() {
                match self.a.poll_timeout() {
                    None => return,
                    Some(t) => {
                        self.now = self.now.max(t) + Duration::from_micros(1);
                        self.a.handle_timeout(self.now, &mut self.ca);
                    }
                }
            }
        }
        panic!("XRC pair did not settle");
    }

    fn post(&mut self, wr_id: u64, op: SendOp, srqn: u32, sge: Sge) {
        let w = SendWqe {
            wr_id,
            op,
            flags: send_flags::SIGNALED,
            payload: Payload::Sges(vec![sge]),
            ud: None,
            xrc_srqn: Some(srqn),
        };
        self.a.post_send(self.ini, w, &mut self.ca).unwrap();
    }
}

fn wire(src: Ipv4Addr) -> Wire {
    Wire {
        src,
        buf: vec![0; MAX_PACKET + 64],
        out: Vec::new(),
    }
}

#[test]
fn sends_land_in_the_named_srq_and_complete_on_its_cq_under_loss() {
    let mut p = Pair::new();
    let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    let la = p.a.memory_mut().register(1, VA, msg.clone(), 0);
    // 8 receive buffers of 5000 bytes in the SRQ's PD.
    let lb =
        p.b.memory_mut()
            .register(SRQ_PD, VA, vec![0; 8 * 5000], access::LOCAL_WRITE);
    for i in 0..8u64 {
        let sge = Sge {
            addr: VA + i * 5000,
            length: 5000,
            lkey: lb,
        };
        p.b.post_srq_recv(
            p.srq,
            RecvWqe {
                wr_id: 100 + i,
                sges: vec![sge],
            },
        )
        .unwrap();
    }
    let sge = Sge {
        addr: VA,
        length: 5000,
        lkey: la,
    };
    for i in 0..8 {
        let op = if i % 2 == 0 {
            SendOp::Send
        } else {
            SendOp::SendImm { imm: i as u32 }
        };
        let srq = p.srq;
        p.post(i, op, srq, sge);
    }
    p.run(20);
    let sent: Vec<_> = p.ca.drain(..).collect();
    assert_eq!(sent.len(), 8);
    for (i, (cq, c)) in sent.iter().enumerate() {
        assert_eq!(
            (*cq, c.wr_id, c.status),
            (SEND_CQ, i as u64, WcStatus::Success)
        );
    }
    let got: Vec<_> = p.cb.drain(..).collect();
    assert_eq!(got.len(), 8, "{got:?}");
    for (i, (cq, c)) in got.iter().enumerate() {
        assert_eq!(*cq, SRQ_CQ, "on the SRQ's CQ");
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (100 + i as u64, WcStatus::Success, WcOpcode::Recv)
        );
        assert_eq!(c.qp_num, p.tgt, "names the target QP");
        assert_eq!(c.byte_len, 5000);
    }
    let mem = p.b.memory().region(lb).unwrap();
    for i in 0..8 {
        assert_eq!(&mem.data[i * 5000..(i + 1) * 5000], &msg[..]);
    }
    // Requests went out as XRC requests, answers as XRC responses.
    assert!(p
        .seen
        .iter()
        .all(|&o| crate::wire::Opcode(o).service() == Service::Xrc));
    assert!(
        p.a.qp(p.ini).unwrap().counters().retransmitted_pkts > 0,
        "loss was exercised"
    );
}

#[test]
fn rdma_and_atomics_through_a_target_use_the_srqs_pd() {
    let mut p = Pair::new();
    let la =
        p.a.memory_mut()
            .register(1, VA, vec![0xab; 3000], access::LOCAL_WRITE);
    let target = p.b.memory_mut().register(
        SRQ_PD,
        VA,
        vec![0; 4096],
        access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    );
    let srq = p.srq;
    p.post(
        1,
        SendOp::Write {
            remote_addr: VA,
            rkey: target,
        },
        srq,
        Sge {
            addr: VA,
            length: 3000,
            lkey: la,
        },
    );
    p.post(
        2,
        SendOp::FetchAdd {
            remote_addr: VA + 3000,
            rkey: target,
            add: 5,
        },
        srq,
        Sge {
            addr: VA + 100,
            length: 8,
            lkey: la,
        },
    );
    p.post(
        3,
        SendOp::Read {
            remote_addr: VA + 8,
            rkey: target,
        },
        srq,
        Sge {
            addr: VA + 200,
            length: 16,
            lkey: la,
        },
    );
    p.run(10);
    let sent: Vec<_> = p.ca.drain(..).map(|(_, c)| (c.wr_id, c.status)).collect();
    assert_eq!(
        sent,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let r = p.b.memory().region(target).unwrap();
    assert!(r.data[..3000].iter().all(|&b| b == 0xab));
    assert_eq!(r.data[3000], 5, "the fetch-add landed");
    let mine = p.a.memory().region(la).unwrap();
    assert_eq!(
        &mine.data[100..108],
        &[0; 8],
        "fetch-add returned the old value"
    );
    assert_eq!(
        &mine.data[200..216],
        &[0xab; 16],
        "the READ returned what was written"
    );
    assert!(p.cb.is_empty(), "RDMA consumes no receive");
}

#[test]
fn an_srq_of_another_domain_or_none_is_an_invalid_request() {
    for (wrong, why) in [(true, "other domain"), (false, "no such SRQ")] {
        let mut p = Pair::new();
        let la = p.a.memory_mut().register(1, VA, vec![1; 64], 0);
        let lb =
            p.b.memory_mut()
                .register(SRQ_PD, VA, vec![0; 64], access::LOCAL_WRITE);
        let other = p.other_srq;
        p.b.post_srq_recv(
            other,
            RecvWqe {
                wr_id: 9,
                sges: vec![Sge {
                    addr: VA,
                    length: 64,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
        let srqn = if wrong { other } else { 0xab_cdef };
        p.post(
            1,
            SendOp::Send,
            srqn,
            Sge {
                addr: VA,
                length: 64,
                lkey: la,
            },
        );
        p.run(0);
        let (_, c) = p.ca.pop_front().expect(why);
        assert_eq!(c.status, WcStatus::RemInvReqErr, "{why}");
        assert!(p.cb.is_empty(), "{why}: nothing received");
        assert_eq!(
            p.b.srq_len(other),
            Some(1),
            "{why}: the other SRQ untouched"
        );
        assert_eq!(p.b.qp(p.tgt).unwrap().state(), QpState::Err);
    }
}

#[test]
fn an_rkey_outside_the_srqs_pd_is_a_remote_access_error() {
    let mut p = Pair::new();
    let la = p.a.memory_mut().register(1, VA, vec![1; 64], 0);
    // The region is the target side's, but in a PD the SRQ is not in.
    let elsewhere =
        p.b.memory_mut()
            .register(SRQ_PD + 1, VA, vec![0; 64], access::REMOTE_WRITE);
    let srq = p.srq;
    p.post(
        1,
        SendOp::Write {
            remote_addr: VA,
            rkey: elsewhere,
        },
        srq,
        Sge {
            addr: VA,
            length: 64,
            lkey: la,
        },
    );
    p.run(0);
    let (_, c) = p.ca.pop_front().expect("completion");
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert!(p
        .b
        .memory()
        .region(elsewhere)
        .unwrap()
        .data
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn xrc_qps_refuse_what_their_side_lacks() {
    let mut p = Pair::new();
    let w = RecvWqe {
        wr_id: 1,
        sges: vec![],
    };
    assert!(p.b.post_recv(p.tgt, w.clone(), &mut p.cb).is_err());
    assert!(p.a.post_recv(p.ini, w, &mut p.ca).is_err());
    let no_srqn = SendWqe {
        wr_id: 1,
        op: SendOp::Send,
        flags: 0,
        payload: Payload::Inline(vec![1]),
        ud: None,
        xrc_srqn: None,
    };
    assert!(p.a.post_send(p.ini, no_srqn.clone(), &mut p.ca).is_err());
    let on_target = SendWqe {
        xrc_srqn: Some(p.srq),
        ..no_srqn
    };
    assert!(p.b.post_send(p.tgt, on_target, &mut p.cb).is_err());
}
