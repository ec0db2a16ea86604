//! Tests of the engine: two engines back to back (A = 127.0.0.1, B =
//! 127.0.0.2), MADs carried as bytes from one's `poll_transmit` to the
//! other's `handle_mad`, a virtual clock. No sockets.

mod bad_input;
mod bind;
mod cycles;
mod destroy;
mod disconnect;
mod prop;
mod rc;
mod ud;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use rxu_abi::proto::cm::{port_space, CmEventRecord, ConnParam, Ece};
use rxu_abi::proto::QpType;

use super::{Cm, CmConfig, CmTiming, MadRx, Owner};
use crate::wire::{self, CmMad};

pub(super) const A_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
pub(super) const B_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
pub(super) const A_GUID: u64 = 0x0002_c9ff_fe00_000a;
pub(super) const B_GUID: u64 = 0x0002_c9ff_fe00_000b;
pub(super) const OWNER_A: Owner = 0xA;
pub(super) const OWNER_B: Owner = 0xB;
pub(super) const PORT: u16 = 7174;

pub(super) fn config(ip: IpAddr, guid: u64, seed: u64, timing: CmTiming) -> CmConfig {
    CmConfig {
        node_guid: guid,
        local_addrs: vec![ip],
        mtu: 3,
        timing,
        port_range: (32768, 60999),
        seed,
    }
}

/// Short timers: 4 ms response timeout, 2 ms life time, 3 retries.
pub(super) fn fast() -> CmTiming {
    CmTiming {
        cm_response_timeout: 10,
        max_cm_retries: 3,
        packet_life_time: 9,
        local_ack_delay: 9,
    }
}

/// What the network does to one MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    Deliver,
    Drop,
    Duplicate,
}

pub(super) struct Pair {
    pub a: Cm,
    pub b: Cm,
    pub now: Instant,
    /// Every MAD carried, in order: (from A?, message).
    pub log: Vec<(bool, CmMad)>,
}

impl Pair {
    pub fn new() -> Pair {
        Pair::with_timing(CmTiming::default())
    }

    pub fn with_timing(t: CmTiming) -> Pair {
        Pair {
            a: Cm::new(config(A_IP, A_GUID, 1, t)),
            b: Cm::new(config(B_IP, B_GUID, 2, t)),
            now: Instant::now(),
            log: Vec::new(),
        }
    }

    /// Carries MADs both ways until none is left (at most `limit`),
    /// deciding the fate of each; returns how many were taken.
    pub fn pump_with(&mut self, mut fate: impl FnMut(bool, &CmMad) -> Fate) -> usize {
        let mut n = 0;
        while n < 10_000 {
            let (from_a, tx) = match self.a.poll_transmit() {
                Some(tx) => (true, tx),
                None => match self.b.poll_transmit() {
                    Some(tx) => (false, tx),
                    None => break,
                },
            };
            n += 1;
            let msg = wire::parse(&tx.mad).expect("the engine sends valid MADs");
            assert_eq!(tx.dst_qpn, 1);
            let f = fate(from_a, &msg);
            self.log.push((from_a, msg));
            let rx = MadRx {
                src: tx.src,
                dst: tx.dst,
                hop_limit: 64,
                traffic_class: 0,
            };
            let copies = match f {
                Fate::Deliver => 1,
                Fate::Drop => 0,
                Fate::Duplicate => 2,
            };
            for _ in 0..copies {
                let to = if tx.dst == A_IP {
                    &mut self.a
                } else {
                    &mut self.b
                };
                to.handle_mad(self.now, &rx, &tx.mad);
            }
        }
        n
    }

    pub fn pump(&mut self) -> usize {
        self.pump_with(|_, _| Fate::Deliver)
    }

    /// Moves the clock by `d`, running due timers and carrying MADs.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.pump();
    }

    /// The next timer of either side, if any.
    pub fn next_timer(&self) -> Option<Instant> {
        match (self.a.poll_timeout(), self.b.poll_timeout()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// Runs timers (and carries MADs) until none is left; bounded.
    pub fn run_out(&mut self) {
        self.run_out_with(|_, _| Fate::Deliver);
    }

    pub fn run_out_with(&mut self, mut fate: impl FnMut(bool, &CmMad) -> Fate) {
        self.pump_with(&mut fate);
        for _ in 0..100_000 {
            let Some(t) = self.next_timer() else {
                return;
            };
            self.now = self.now.max(t);
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
            self.pump_with(&mut fate);
        }
        panic!("timers never ran out");
    }

    pub fn events_a(&mut self) -> Vec<(Owner, CmEventRecord)> {
        std::iter::from_fn(|| self.a.poll_event()).collect()
    }

    pub fn events_b(&mut self) -> Vec<(Owner, CmEventRecord)> {
        std::iter::from_fn(|| self.b.poll_event()).collect()
    }

    /// MADs sent by A (or B) of one kind since the log began.
    pub fn sent(&self, from_a: bool, kind: fn(&CmMad) -> bool) -> usize {
        self.log
            .iter()
            .filter(|(f, m)| *f == from_a && kind(m))
            .count()
    }
}

pub(super) fn is<const K: u8>(m: &CmMad) -> bool {
    use crate::wire::CmMsg::*;
    let k = match m.msg {
        Req(_) => 0,
        Rep(_) => 1,
        Rtu(_) => 2,
        Rej(_) => 3,
        Mra(_) => 4,
        Dreq(_) => 5,
        Drep(_) => 6,
        SidrReq(_) => 7,
        SidrRep(_) => 8,
    };
    k == K
}
pub(super) const REQ: u8 = 0;
pub(super) const REP: u8 = 1;
pub(super) const RTU: u8 = 2;
pub(super) const REJ: u8 = 3;
pub(super) const DREQ: u8 = 5;
pub(super) const DREP: u8 = 6;
pub(super) const SIDR_REQ: u8 = 7;
pub(super) const SIDR_REP: u8 = 8;

pub(super) fn param(qp_num: u32, pd: &[u8]) -> ConnParam {
    ConnParam {
        private_data: pd.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num,
        qkey: 0,
    }
}

/// B listens on `PORT` (wildcard), A resolves to it.
pub(super) fn listen_and_resolve(p: &mut Pair, ps: u16, qpt: QpType) -> (u32, u32) {
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT);
    let (l, _) = p.b.bind(OWNER_B, ps, qpt, any, false, false, None).unwrap();
    p.b.listen(l, 4).unwrap();
    let (a, _) =
        p.a.bind(
            OWNER_A,
            ps,
            qpt,
            SocketAddr::new(A_IP, 0),
            false,
            false,
            None,
        )
        .unwrap();
    p.a.resolve(a, SocketAddr::new(B_IP, PORT)).unwrap();
    (l, a)
}

/// An established RC connection: (listener on B, id on A, id on B).
pub(super) fn establish(p: &mut Pair, qpn_a: u32, qpn_b: u32) -> (u32, u32, u32) {
    let (l, a) = listen_and_resolve(p, port_space::TCP, QpType::Rc);
    p.a.connect(p.now, a, &param(qpn_a, b"hi"), Ece::default())
        .unwrap();
    p.pump();
    let ev = p.events_b();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let nb = ev[0].1.new_id;
    p.b.accept(p.now, nb, Some(&param(qpn_b, b"ok")), Ece::default())
        .unwrap();
    p.pump();
    assert_eq!(p.events_a().len(), 1);
    p.a.accept(p.now, a, None, Ece::default()).unwrap();
    p.pump();
    assert_eq!(p.events_b().len(), 1);
    (l, a, nb)
}
