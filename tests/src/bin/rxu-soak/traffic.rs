//! `rxu-soak traffic`: RC lanes and one UD lane of one process
//! incarnation, on one device or across two, until told to stop.
//!
//! Exit status: 0 stopped as asked, 1 a violation (a completed transfer
//! with a wrong byte, a foreign message), 2 setup refused by a live
//! daemon, 3 a device went away (its daemon died; expected while the
//! soak kills daemons), 4 an error or a stall on live devices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rxu_client::*;

use crate::lane::{Lane, KINDS};
use crate::pattern::{splitmix, Rng};
use crate::ud::{Ud, QKEY};

pub struct Opts {
    pub dev_a: String,
    pub dev_b: String,
    pub lanes: usize,
    pub max: usize,
    pub secs: u64,
    /// After a device went away, how long the survivors' QPs stay (their
    /// retransmissions reach the next incarnation of the dead daemon).
    pub linger: Duration,
    /// An operation waiting longer on live devices is a stall.
    pub stall: Duration,
    /// Tests the checker: see [`Lane::corrupt_every`].
    pub corrupt_every: u64,
}

struct World {
    ctx_a: Context,
    ctx_b: Context,
    cqs: Vec<(Cq, bool)>,
    lanes: Vec<Lane>,
    ud: Ud,
}

pub fn nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    splitmix(t ^ u64::from(std::process::id()) << 32)
}

fn setup(o: &Opts, nonce: u64) -> Result<World, (i32, String)> {
    let gone = |what: &'static str| move |e: Error| (3, format!("{what}: {e}"));
    let refused = |what: &'static str| move |e: Error| (2, format!("{what}: {e}"));
    let ctx_a = Context::open(&o.dev_a).map_err(gone("open device a"))?;
    let two = o.dev_b != o.dev_a;
    let ctx_b = if two {
        Context::open(&o.dev_b).map_err(gone("open device b"))?
    } else {
        ctx_a.clone()
    };
    let pd_a = Pd::alloc(&ctx_a).map_err(refused("alloc_pd"))?;
    let pd_b = if two {
        Pd::alloc(&ctx_b).map_err(refused("alloc_pd"))?
    } else {
        pd_a.clone()
    };
    let cqe = (o.lanes as u32 + 1) * 4 + 64;
    let cq = |ctx: &Context| Cq::create(ctx, cqe, 0, None, 0).map_err(refused("create_cq"));
    let (cq_i, cq_ta, cq_tb) = (cq(&ctx_a)?, cq(&ctx_a)?, cq(&ctx_b)?);
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let opts = ConnectOpts {
        // 4.096 us * 2^17 = 0.5 s per try, 7 retries: a loaded two-core
        // machine never looks like a dead peer.
        timeout: 17,
        ..ConnectOpts::default()
    };
    let (gid_a, gid_b) = (
        ctx_a.query_gid(0).map_err(gone("query_gid"))?,
        ctx_b.query_gid(0).map_err(gone("query_gid"))?,
    );
    let mut r = Rng::new(nonce);
    let mut pair = |ty: QpType, on_b: bool, cap: QpCap| -> Result<(Qp, Qp), (i32, String)> {
        let (pd_t, cq_t, gid_t) = if on_b {
            (&pd_b, &cq_tb, gid_b)
        } else {
            (&pd_a, &cq_ta, gid_a)
        };
        let i =
            Qp::create(&pd_a, &QpInit::new(ty, &cq_i, &cq_i, cap)).map_err(refused("create_qp"))?;
        let t =
            Qp::create(pd_t, &QpInit::new(ty, cq_t, cq_t, cap)).map_err(refused("create_qp"))?;
        let (pi, pt) = ((r.next() as u32) & 0xff_ffff, (r.next() as u32) & 0xff_ffff);
        let ei = QpEndpoint {
            qpn: i.qpn(),
            psn: pi,
            gid: gid_a,
        };
        let et = QpEndpoint {
            qpn: t.qpn(),
            psn: pt,
            gid: gid_t,
        };
        i.connect(pi, &et, &opts).map_err(gone("connect"))?;
        t.connect(pt, &ei, &opts).map_err(gone("connect"))?;
        Ok((i, t))
    };
    let mut lanes = Vec::with_capacity(o.lanes);
    for id in 0..o.lanes {
        let (i, t) = pair(QpType::Rc, two && id % 2 == 1, cap)?;
        let mut l = Lane::new(id, nonce, i, t, o.max).map_err(|e| (2, e))?;
        l.corrupt_every = o.corrupt_every;
        lanes.push(l);
    }
    let ud_cap = QpCap {
        max_recv_wr: 32,
        ..cap
    };
    let (ua, ub) = pair(QpType::Ud, two, ud_cap)?;
    debug_assert_eq!(opts.qkey, QKEY);
    let ud = Ud::new(o.lanes, nonce, ua, ub, gid_b).map_err(|e| (2, e))?;
    Ok(World {
        ctx_a,
        ctx_b,
        cqs: vec![(cq_i, true), (cq_ta, false), (cq_tb, false)],
        lanes,
        ud,
    })
}

#[derive(Default)]
struct Totals {
    ops: u64,
    bytes: u64,
    kinds: [u64; KINDS.len()],
}

impl Totals {
    fn line(&self, ud: &Ud) -> String {
        let kinds: Vec<String> = KINDS
            .iter()
            .zip(&self.kinds)
            .map(|(k, n)| format!("{k}:{n}"))
            .collect();
        format!(
            "STAT ops={} bytes={} kinds={} ud_sent={} ud_rcvd={} ud_bytes={}",
            self.ops + ud.received,
            self.bytes + ud.bytes,
            kinds.join(","),
            ud.sent,
            ud.received,
            ud.bytes
        )
    }
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn run(o: &Opts, stop: &AtomicBool) -> i32 {
    let nonce = nonce();
    let mut w = match setup(o, nonce) {
        Ok(w) => w,
        Err((code, e)) => {
            say(&format!("SETUP failed: {e}"));
            return code;
        }
    };
    // The orchestrator tells the QPNs of each daemon incarnation apart.
    let (mut on_a, mut on_b) = (vec![format!("{:#x}", w.ud.a.qpn())], Vec::new());
    for l in &w.lanes {
        on_a.push(format!("{:#x}", l.init.qpn()));
        let t = format!("{:#x}", l.tgt.qpn());
        if l.tgt.context().device_name() == o.dev_a {
            on_a.push(t);
        } else {
            on_b.push(t);
        }
    }
    if o.dev_b == o.dev_a {
        on_a.push(format!("{:#x}", w.ud.b.qpn()));
    } else {
        on_b.push(format!("{:#x}", w.ud.b.qpn()));
    }
    say(&format!(
        "START nonce={nonce:#x} lanes={} qpns_a={} qpns_b={}",
        o.lanes,
        on_a.join(","),
        on_b.join(",")
    ));
    let mut t = Totals::default();
    let code = match drive(o, &mut w, &mut t, stop, nonce) {
        Ok(()) => 0,
        Err((code, e)) => {
            // A violation's message says so itself.
            if e.starts_with("VIOLATION") {
                say(&e);
            } else {
                say(&format!("ERROR {e}"));
            }
            code
        }
    };
    say(&t.line(&w.ud));
    if code == 3 {
        std::thread::sleep(o.linger);
    }
    code
}

fn drive(
    o: &Opts,
    w: &mut World,
    t: &mut Totals,
    stop: &AtomicBool,
    nonce: u64,
) -> Result<(), (i32, String)> {
    let deadline = Instant::now() + Duration::from_secs(o.secs);
    let mut r = Rng::new(nonce ^ 0x5eed);
    let mut wcs = [Wc::default(); 32];
    let mut last_stat = Instant::now();
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        if w.ctx_a.is_dead() || w.ctx_b.is_dead() {
            return Err((3, lost(w)));
        }
        let mut started = Ok(());
        for l in w.lanes.iter_mut().filter(|l| l.idle()) {
            started = started.and_then(|()| l.start(&mut r, o.max));
        }
        if w.ud.idle() {
            started = started.and_then(|()| w.ud.start());
        }
        if let Err(e) = started {
            return Err(fail(w, e));
        }
        let mut got = 0;
        for ci in 0..w.cqs.len() {
            let n = w.cqs[ci]
                .0
                .poll(&mut wcs)
                .map_err(|e| fail(w, format!("poll: {e}")))?;
            got += n;
            for wc in &wcs[..n] {
                complete(w, t, wc, w.cqs[ci].1)?;
            }
        }
        if got == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        if last_stat.elapsed() >= Duration::from_millis(500) {
            last_stat = Instant::now();
            say(&t.line(&w.ud));
            if let Some(l) = w
                .lanes
                .iter()
                .find(|l| l.waiting_since().is_some_and(|s| s.elapsed() > o.stall))
            {
                return Err(fail(w, format!("lane {} stalled for {:?}", l.id, o.stall)));
            }
        }
    }
    Ok(())
}

fn complete(w: &mut World, t: &mut Totals, wc: &Wc, send: bool) -> Result<(), (i32, String)> {
    if !wc.is_success() {
        return Err(fail(
            w,
            format!("completion {} of wr {:#x}", wc.status_str(), wc.wr_id),
        ));
    }
    let lane = (wc.wr_id >> 32) as usize;
    let verdict = |e: String| {
        if e.starts_with("VIOLATION") {
            (1, e)
        } else {
            (4, e)
        }
    };
    if lane == w.lanes.len() {
        w.ud.complete(wc).map_err(verdict)?;
        return Ok(());
    }
    let Some(l) = w.lanes.get_mut(lane) else {
        return Err((1, format!("VIOLATION a completion for no lane: {wc:?}")));
    };
    if let Some(d) = l.complete(wc, send).map_err(verdict)? {
        t.ops += 1;
        t.bytes += d.bytes;
        t.kinds[d.kind] += 1;
    }
    Ok(())
}

/// Which device went away.
fn lost(w: &World) -> String {
    let dead = if w.ctx_a.is_dead() {
        w.ctx_a.device_name()
    } else {
        w.ctx_b.device_name()
    };
    format!("LOST device {dead}")
}

/// An error: expected when a device went away (its death is seen within
/// 2 s), else unexpected.
fn fail(w: &World, e: String) -> (i32, String) {
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        if w.ctx_a.is_dead() || w.ctx_b.is_dead() {
            return (3, format!("{} ({e})", lost(w)));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (4, format!("on live devices: {e}"))
}
