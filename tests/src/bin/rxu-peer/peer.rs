//! The verbs side of rxu-peer: one RC QP with a CQ and a registered
//! buffer of `slots` slots of `size` bytes, brought up against the peer.

use std::time::{Duration, Instant};

use rxu_client::*;

use crate::args::{Args, Workload};
use crate::ctl::PeerInfo;

pub type Res<T> = Result<T, String>;

pub const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

pub struct Peer {
    pub ctx: Context,
    pub cq: Cq,
    pub qp: Qp,
    pub buf: MrBuf,
    pub slots: usize,
    pub size: usize,
    pub psn: u32,
}

/// Byte `j` of test message `seed`: distinct per message and position.
pub fn pattern_byte(seed: u64, j: usize) -> u8 {
    (seed.wrapping_mul(131) as usize)
        .wrapping_add(j.wrapping_mul(31))
        .wrapping_add((j >> 8).wrapping_mul(7)) as u8
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| pattern_byte(seed, j)).collect()
}

/// The RC connection parameters the arguments ask for.
pub fn connect_opts(args: &Args) -> ConnectOpts {
    ConnectOpts {
        timeout: args.qp_timeout,
        retry_cnt: args.retry_cnt,
        ..ConnectOpts::default()
    }
}

/// Waiting politely for completions: yields at first (a reply is often
/// microseconds away), then sleeps briefly, so many peers on two cores
/// leave the daemon its share.
#[derive(Default)]
pub struct Idle {
    empty: u32,
}

impl Idle {
    pub fn busy(&mut self) {
        self.empty = 0;
    }

    pub fn wait(&mut self) {
        self.empty = self.empty.saturating_add(1);
        if self.empty < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

pub fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("{what}: {err}")
}

impl Peer {
    pub fn new(args: &Args) -> Res<Peer> {
        let ctx = Context::open(&args.device).map_err(e("open device"))?;
        let pd = Pd::alloc(&ctx).map_err(e("alloc_pd"))?;
        let cq = Cq::create(&ctx, 2 * args.depth + 16, 0, None, 0).map_err(e("create_cq"))?;
        let cap = QpCap {
            max_send_wr: args.depth,
            max_recv_wr: args.depth + 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp =
            Qp::create(&pd, &QpInit::new(QpType::Rc, &cq, &cq, cap)).map_err(e("create_qp"))?;
        let slots = args.iters.min(u64::from(args.depth)) as usize;
        let size = args.size;
        let buf = MrBuf::new(&pd, slots * size, ALL_ACCESS).map_err(e("reg_mr"))?;
        let psn = std::process::id() & 0xff_ffff;
        Ok(Peer {
            ctx,
            cq,
            qp,
            buf,
            slots,
            size,
            psn,
        })
    }

    pub fn info(&self) -> Res<PeerInfo> {
        Ok(PeerInfo::single(
            self.qp.qpn(),
            self.psn,
            self.ctx.query_gid(0).map_err(e("query_gid"))?,
            self.buf.rkey(),
            self.buf.addr(),
            (self.slots * self.size) as u64,
        ))
    }

    pub fn connect(&self, remote: &PeerInfo, opts: &ConnectOpts) -> Res<()> {
        let ep = QpEndpoint {
            qpn: remote.qpn,
            psn: remote.psn,
            gid: remote.gid,
        };
        self.qp
            .connect(self.psn, &ep, opts)
            .map_err(e("modify_qp to RTS"))
    }

    pub fn slot_sge(&self, slot: usize) -> Sge {
        self.buf.sge(slot * self.size, self.size as u32)
    }

    /// Posts a receive into `slot` (wr_id = slot).
    pub fn post_recv_slot(&self, slot: usize) -> Res<()> {
        let sge = [self.slot_sge(slot)];
        self.qp
            .post_recv(&[RecvWr::new(slot as u64, &sge)])
            .map_err(e("post_recv"))
    }

    /// The next completion, successful, before `deadline`.
    pub fn next_wc(&self, deadline: Instant) -> Res<Wc> {
        let mut wc = [Wc::default()];
        let mut idle = Idle::default();
        // Bounded by the deadline; spin politely (2 cores shared).
        loop {
            let n = self.cq.poll(&mut wc).map_err(e("poll_cq"))?;
            if n == 1 {
                let w = wc[0];
                if !w.is_success() {
                    return Err(format!(
                        "completion of wr {} failed: {} (vendor_err {})",
                        w.wr_id,
                        w.status_str(),
                        w.vendor_err
                    ));
                }
                return Ok(w);
            }
            if Instant::now() >= deadline {
                return Err("timed out waiting for a completion".into());
            }
            idle.wait();
        }
    }

    /// Checks `slot` holds message `seed`.
    pub fn verify_slot(&self, slot: usize, seed: u64) -> Res<()> {
        let mut got = vec![0u8; self.size];
        self.buf
            .read(slot * self.size, &mut got)
            .map_err(e("read buffer"))?;
        match got
            .iter()
            .enumerate()
            .find(|(j, b)| **b != pattern_byte(seed, *j))
        {
            None => Ok(()),
            Some((j, b)) => Err(format!(
                "slot {slot}: byte {j} is {b:#04x}, expected {:#04x} (message {seed})",
                pattern_byte(seed, j)
            )),
        }
    }

    pub fn fill_slot(&mut self, slot: usize, seed: u64) -> Res<()> {
        let data = pattern(seed, self.size);
        self.buf
            .write(slot * self.size, &data)
            .map_err(e("write buffer"))
    }
}

/// What the server prepares before saying READY.
pub fn server_prepare(p: &mut Peer, w: Workload) -> Res<()> {
    match w {
        Workload::Mixed | Workload::Violate | Workload::Lat => Err("not a one-QP workload".into()),
        Workload::Send => (0..p.slots).try_for_each(|s| p.post_recv_slot(s)),
        Workload::Write => {
            p.qp.post_recv(&[RecvWr::new(u64::MAX, &[])])
                .map_err(e("post_recv"))
        }
        Workload::Read => (0..p.slots).try_for_each(|s| p.fill_slot(s, s as u64)),
        Workload::Atomic => p.buf.write_u64(0, 0).map_err(e("write buffer")),
    }
}
