//! The test harness: two [`Side`]s (QP + memory + completions), a lossy
//! in-memory wire and a fake clock.

// Shared helpers: not every test file uses every one.
#![allow(dead_code)]

use crate::qp::*;
use crate::wire::{Packet, MAX_PACKET};
use crate::Psn;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// xorshift64*: small, seeded, good enough for fault injection.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `ppm` per million.
    pub fn chance(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < u64::from(ppm)
    }
}

/// An SRQ for tests.
#[derive(Default)]
pub struct TestSrq(pub VecDeque<RecvWqe>);

impl RecvSource for TestSrq {
    fn pop(&mut self) -> Option<RecvWqe> {
        self.0.pop_front()
    }
}

pub struct Side {
    pub qp: Qp,
    pub mem: BufferMemory,
    pub srq: Option<TestSrq>,
    pub cqes: Vec<Completion>,
    pub events: Vec<QpEvent>,
    pub addr: IpAddr,
    pub pd: u32,
}

impl Side {
    pub fn env(&mut self) -> (&mut Qp, Env<'_>) {
        let srq = self.srq.as_mut().map(|s| s as &mut dyn RecvSource);
        (
            &mut self.qp,
            Env {
                mem: &mut self.mem,
                srq,
            },
        )
    }

    /// Registers `len` bytes at `addr` filled with `fill(i)`.
    pub fn reg(&mut self, addr: u64, len: usize, acc: u32, fill: impl Fn(usize) -> u8) -> u32 {
        let data = (0..len).map(fill).collect();
        self.mem.register(self.pd, addr, data, acc)
    }

    pub fn bytes(&self, key: u32) -> &[u8] {
        &self.mem.region(key).expect("region").data
    }

    pub fn drain(&mut self) {
        while let Some(c) = self.qp.poll_completion() {
            self.cqes.push(c);
        }
        while let Some(e) = self.qp.poll_event() {
            self.events.push(e);
        }
    }

    /// Completions of one side of the CQ.
    pub fn cq(&self, side: CqSide) -> Vec<Completion> {
        self.cqes
            .iter()
            .filter(|c| c.side == side)
            .copied()
            .collect()
    }
}

/// Which way a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// What the wire does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
}

/// A packet as seen on the wire.
#[derive(Clone, Debug)]
pub struct Captured {
    pub dir: Dir,
    pub bytes: Vec<u8>,
    pub at: Instant,
}

impl Captured {
    pub fn pkt(&self) -> Packet<'_> {
        Packet::parse(&self.bytes).expect("captured packet parses")
    }
}

/// Random faults, in parts per million per packet.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub loss: u32,
    pub dup: u32,
    pub reorder: u32,
}

pub type Filter = Box<dyn FnMut(Dir, &Packet<'_>) -> Fate>;

struct InFlight {
    dir: Dir,
    bytes: Vec<u8>,
}

pub struct Harness {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
    pub start: Instant,
    pub rng: Rng,
    pub faults: Faults,
    /// Links that deliver nothing (a dead peer).
    pub cut_a_to_b: bool,
    pub cut_b_to_a: bool,
    pub capture: Option<Vec<Captured>>,
    pub filter: Option<Filter>,
    /// Most packets one side sends per step (an engine batch).
    pub burst: usize,
    wire: VecDeque<InFlight>,
    buf: Vec<u8>,
    pub steps: u64,
    pub delivered: u64,
}

/// How a pair of QPs is set up.
#[derive(Clone, Debug)]
pub struct Setup {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub access: u32,
    pub sq_sig_all: bool,
    pub srq_b: bool,
    pub max_wr: u32,
    pub v6: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            qp_type: QpType::Rc,
            mtu: Mtu::M1024,
            psn_a: 100,
            psn_b: 0xFF_FF00,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            access: access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC,
            sq_sig_all: true,
            srq_b: false,
            max_wr: 4096,
            v6: false,
        }
    }
}

pub const QPN_A: u32 = 0x11;
pub const QPN_B: u32 = 0x22;
pub const QKEY: u32 = 0x1234_5678;

fn side(s: &Setup, qpn: u32, addr: IpAddr, srq: bool) -> Side {
    let qp = Qp::new(QpConfig {
        qpn,
        qp_type: s.qp_type,
        pd: 7,
        srq: srq.then_some(1),
        sq_sig_all: s.sq_sig_all,
        max_send_wr: s.max_wr,
        max_recv_wr: s.max_wr,
    });
    Side {
        qp,
        mem: BufferMemory::new(),
        srq: srq.then(TestSrq::default),
        cqes: Vec::new(),
        events: Vec::new(),
        addr,
        pd: 7,
    }
}

impl Harness {
    pub fn new(s: &Setup) -> Harness {
        let (aa, ab): (IpAddr, IpAddr) = if s.v6 {
            ("fd00::a".parse().unwrap(), "fd00::b".parse().unwrap())
        } else {
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
        };
        let mut a = side(s, QPN_A, aa, false);
        let mut b = side(s, QPN_B, ab, s.srq_b);
        for (me, peer, my_psn, peer_psn) in [
            (&mut a, ab, s.psn_a, s.psn_b),
            (&mut b, aa, s.psn_b, s.psn_a),
        ] {
            let other = if me.qp.qpn() == QPN_A { QPN_B } else { QPN_A };
            let init = QpAttr {
                state: Some(QpState::Init),
                access_flags: Some(s.access),
                qkey: Some(QKEY),
                ..Default::default()
            };
            me.qp.modify(&init).unwrap();
            let rtr = QpAttr {
                state: Some(QpState::Rtr),
                path_mtu: Some(s.mtu),
                dest_qpn: (s.qp_type != QpType::Ud).then_some(other),
                dest_addr: (s.qp_type != QpType::Ud).then_some(peer),
                rq_psn: Some(Psn::new(peer_psn)),
                max_dest_rd_atomic: Some(s.max_dest_rd_atomic),
                min_rnr_timer: Some(s.min_rnr_timer),
                ..Default::default()
            };
            me.qp.modify(&rtr).unwrap();
            let rts = QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(my_psn)),
                timeout: Some(s.timeout),
                retry_cnt: Some(s.retry_cnt),
                rnr_retry: Some(s.rnr_retry),
                max_rd_atomic: Some(s.max_rd_atomic),
                ..Default::default()
            };
            me.qp.modify(&rts).unwrap();
        }
        let now = Instant::now();
        Harness {
            a,
            b,
            now,
            start: now,
            rng: Rng::new(1),
            faults: Faults::default(),
            cut_a_to_b: false,
            cut_b_to_a: false,
            capture: None,
            filter: None,
            burst: 64,
            wire: VecDeque::new(),
            buf: vec![0; MAX_PACKET],
            steps: 0,
            delivered: 0,
        }
    }

    pub fn rc() -> Harness {
        Harness::new(&Setup::default())
    }

    pub fn side(&mut self, dir: Dir) -> &mut Side {
        match dir {
            Dir::AtoB => &mut self.a,
            Dir::BtoA => &mut self.b,
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    pub fn capture_on(&mut self) {
        self.capture = Some(Vec::new());
    }

    pub fn captured(&self) -> &[Captured] {
        self.capture.as_deref().unwrap_or(&[])
    }

    /// Sends from one side into the wire; returns packets produced.
    fn transmit(&mut self, dir: Dir) -> usize {
        let now = self.now;
        let mut n = 0;
        for _ in 0..self.burst {
            let mut buf = std::mem::take(&mut self.buf);
            let s = self.side(dir);
            let (qp, mut env) = s.env();
            let t = qp.poll_transmit(now, &mut env, &mut buf);
            let Some(t) = t else {
                self.buf = buf;
                break;
            };
            n += 1;
            let bytes = buf[..t.len].to_vec();
            self.buf = buf;
            assert_eq!(&bytes[t.len - 4..], &[0; 4], "ICRC room is zeroed");
            let pkt = Packet::parse(&bytes).expect("QP emitted a packet that parses");
            assert!(t.src_port >= 0xC000);
            let expect_dst = match dir {
                Dir::AtoB => self.b.addr,
                Dir::BtoA => self.a.addr,
            };
            assert_eq!(t.dst, expect_dst, "packet addressed to the peer");
            if let Some(c) = self.capture.as_mut() {
                c.push(Captured {
                    dir,
                    bytes: bytes.clone(),
                    at: now,
                });
            }
            let cut = match dir {
                Dir::AtoB => self.cut_a_to_b,
                Dir::BtoA => self.cut_b_to_a,
            };
            let mut fate = match self.filter.as_mut() {
                Some(f) => f(dir, &pkt),
                None => Fate::Deliver,
            };
            if fate == Fate::Deliver && self.rng.chance(self.faults.loss) {
                fate = Fate::Drop;
            }
            if fate == Fate::Deliver && self.rng.chance(self.faults.dup) {
                fate = Fate::Duplicate;
            }
            if cut {
                fate = Fate::Drop;
            }
            let copies = match fate {
                Fate::Drop => 0,
                Fate::Deliver => 1,
                Fate::Duplicate => 2,
            };
            for _ in 0..copies {
                let f = InFlight {
                    dir,
                    bytes: bytes.clone(),
                };
                if self.rng.chance(self.faults.reorder) && !self.wire.is_empty() {
                    let back = 1 + self.rng.below(4.min(self.wire.len() as u64)) as usize;
                    let at = self.wire.len() - back;
                    self.wire.insert(at, f);
                } else {
                    self.wire.push_back(f);
                }
            }
        }
        n
    }

    fn deliver_all(&mut self) -> usize {
        let mut n = 0;
        while let Some(f) = self.wire.pop_front() {
            n += 1;
            self.delivered += 1;
            let (from, to) = match f.dir {
                Dir::AtoB => (self.a.addr, &mut self.b),
                Dir::BtoA => (self.b.addr, &mut self.a),
            };
            let pkt = Packet::parse(&f.bytes).unwrap();
            let meta = RxMeta {
                src: from,
                src_port: 0xC001,
                dst: to.addr,
                tos: 0,
                ttl: 64,
                ip_id: 0,
                flow_label: 0,
            };
            let (qp, mut env) = to.env();
            qp.handle_packet(self.now, &pkt, &meta, &mut env);
            to.drain();
        }
        n
    }

    /// Injects raw bytes into a side as if they came from its peer.
    pub fn inject(&mut self, to_b: bool, bytes: &[u8]) {
        let (from, to) = if to_b {
            (self.a.addr, &mut self.b)
        } else {
            (self.b.addr, &mut self.a)
        };
        let Ok(pkt) = Packet::parse(bytes) else {
            return;
        };
        let meta = RxMeta {
            src: from,
            src_port: 0xC001,
            dst: to.addr,
            tos: 0,
            ttl: 64,
            ip_id: 0,
            flow_label: 0,
        };
        let (qp, mut env) = to.env();
        qp.handle_packet(self.now, &pkt, &meta, &mut env);
        to.drain();
    }

    /// One round: both sides transmit a burst, the wire delivers, and if
    /// nothing moved the clock jumps to the next timer. Returns false
    /// when everything is quiet (nothing to send, no timer).
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        let sent = self.transmit(Dir::AtoB) + self.transmit(Dir::BtoA);
        let got = self.deliver_all();
        self.a.drain();
        self.b.drain();
        if sent + got > 0 {
            return true;
        }
        let next = [self.a.qp.poll_timeout(), self.b.qp.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else {
            return false;
        };
        if t > self.now {
            self.now = t;
        }
        let now = self.now;
        for s in [&mut self.a, &mut self.b] {
            if s.qp.poll_timeout().is_some_and(|d| d <= now) {
                let (qp, mut env) = s.env();
                qp.handle_timeout(now, &mut env);
                s.drain();
            }
        }
        true
    }

    /// Steps until quiet; panics if that takes more than `max` steps.
    pub fn run(&mut self) {
        self.run_max(2_000_000);
    }

    pub fn run_max(&mut self, max: u64) {
        for _ in 0..max {
            if !self.step() {
                return;
            }
        }
        panic!("harness did not go quiet in {max} steps");
    }

    /// Steps until `f` holds (or quiet); returns whether it held.
    pub fn run_until(&mut self, mut f: impl FnMut(&Harness) -> bool) -> bool {
        for _ in 0..2_000_000 {
            if f(self) {
                return true;
            }
            if !self.step() {
                return f(self);
            }
        }
        panic!("run_until: no end");
    }
}

// ------------------------------------------------------------ WQE helpers

pub fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

pub fn wqe(wr_id: u64, op: SendOp, sges: Vec<Sge>) -> SendWqe {
    SendWqe {
        wr_id,
        op,
        flags: send_flags::SIGNALED,
        payload: Payload::Sges(sges),
        ud: None,
    }
}

pub fn recv(wr_id: u64, sges: Vec<Sge>) -> RecvWqe {
    RecvWqe { wr_id, sges }
}

/// A byte pattern that differs per message and per offset.
pub fn pat(seed: u64) -> impl Fn(usize) -> u8 {
    move |i| {
        (i as u64)
            .wrapping_mul(31)
            .wrapping_add(seed.wrapping_mul(131)) as u8
            ^ (i >> 8) as u8
    }
}

/// Asserts that `cqes` are exactly `ids` in order, all successful.
pub fn assert_ok_in_order(cqes: &[Completion], ids: &[u64]) {
    let got: Vec<(u64, WcStatus)> = cqes.iter().map(|c| (c.wr_id, c.status)).collect();
    let want: Vec<(u64, WcStatus)> = ids.iter().map(|&i| (i, WcStatus::Success)).collect();
    assert_eq!(got, want);
}
