//! The mixed workload: `--qps` RC lanes on one CQ; on each, the client
//! runs operation i as kind i % 6 — SEND, WRITE, WRITE_WITH_IMM, READ,
//! CmpSwap, FetchAdd — with `--depth` in flight per lane.
//!
//! What is checked, per lane: every send wr_id completes exactly once and
//! in order (RC completes a QP's sends in order; wr_id = lane << 32 | i);
//! the server's receives likewise (wr_id = lane << 32 | k for its k-th
//! receive). SENDs are compared byte for byte on arrival; WRITE_WITH_IMM
//! carries i as immediate; each READ reads back the target of the WRITE
//! (even rounds) or WRITE_WITH_IMM (odd rounds) two or one ops before it —
//! RC executes a QP's requests in order, so it must see exactly those
//! bytes; CmpSwap and FetchAdd results follow from the lane's own history
//! (CmpSwap m swaps m for m + 1, FetchAdd m adds m + 1); at the end the
//! server checks every write target holds its last writer's bytes and the
//! atomic words their final values.

use std::time::{Duration, Instant};

use provider::client::*;

use crate::args::{Args, Role};
use crate::ctl::{Ctl, PeerInfo};
use crate::flow::{self, Outcome};
use crate::lanes::Lanes;
use crate::peer::{connect_opts, e, Idle, Res};

const KINDS: u64 = 6;
const SEND: u64 = 0;
const WRITE: u64 = 1;
const WRITE_IMM: u64 = 2;
const READ: u64 = 3;
const CAS: u64 = 4;
const FADD: u64 = 5;
const KIND_NAMES: [&str; 6] = [
    "SEND",
    "WRITE",
    "WRITE_IMM",
    "READ",
    "CMP_SWAP",
    "FETCH_ADD",
];
/// Write targets per lane and kind; a target is reused after this many.
const MAX_TARGETS: u64 = 64;
/// How often the control channel is checked for the peer's death.
const CTL_CHECK: Duration = Duration::from_millis(1);

/// Operations of `kind` among the first `n`.
fn count(n: u64, kind: u64) -> u64 {
    if n > kind {
        (n - kind).div_ceil(KINDS)
    } else {
        0
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes of lane `q`'s operation `i`: distinct per lane, op and offset.
pub fn pattern(q: usize, i: u64, out: &mut [u8]) {
    let mut x = splitmix(((q as u64) << 40) ^ i ^ 0x5eed);
    for chunk in out.chunks_mut(8) {
        x = splitmix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// Where everything sits in the two sides' buffers (both derive it from
/// the same arguments).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub size: usize,
    pub depth: usize,
    pub n: u64,
    pub qps: usize,
    /// Server lane: receive slots, WRITE targets, WRITE_IMM targets, then
    /// the FetchAdd and CmpSwap words.
    pub recv_slots: usize,
    pub write_slots: u64,
    pub imm_slots: u64,
    pub write_off: usize,
    pub imm_off: usize,
    pub atom_off: usize,
    pub server_stride: usize,
    /// Client lane: `depth` slots (sources, READ and atomic results).
    pub client_slot: usize,
    pub client_stride: usize,
}

impl Layout {
    pub fn new(args: &Args) -> Layout {
        let size = args.size;
        let depth = args.depth as usize;
        let n = args.iters;
        let recv_slots = depth;
        let write_slots = count(n, WRITE).clamp(1, MAX_TARGETS);
        let imm_slots = count(n, WRITE_IMM).clamp(1, MAX_TARGETS);
        let write_off = recv_slots * size;
        let imm_off = write_off + write_slots as usize * size;
        let atom_off = (imm_off + imm_slots as usize * size).next_multiple_of(8);
        let server_stride = (atom_off + 16).next_multiple_of(64);
        let client_slot = size.max(8).next_multiple_of(8);
        Layout {
            size,
            depth,
            n,
            qps: args.qps as usize,
            recv_slots,
            write_slots,
            imm_slots,
            write_off,
            imm_off,
            atom_off,
            server_stride,
            client_slot,
            client_stride: (depth * client_slot).next_multiple_of(64),
        }
    }

    pub fn server_len(&self) -> usize {
        self.qps * self.server_stride
    }

    pub fn client_len(&self) -> usize {
        self.qps * self.client_stride
    }

    /// Receive-consuming operations (SEND, WRITE_IMM) among `n`.
    pub fn recvs(n: u64) -> u64 {
        count(n, SEND) + count(n, WRITE_IMM)
    }

    /// The operation behind a lane's k-th receive (they alternate).
    pub fn recv_op(k: u64) -> u64 {
        KINDS * (k / 2) + if k.is_multiple_of(2) { SEND } else { WRITE_IMM }
    }

    fn client_off(&self, q: usize, i: u64) -> usize {
        q * self.client_stride + (i % self.depth as u64) as usize * self.client_slot
    }

    fn write_target(&self, q: usize, m: u64) -> usize {
        q * self.server_stride + self.write_off + (m % self.write_slots) as usize * self.size
    }

    fn imm_target(&self, q: usize, m: u64) -> usize {
        q * self.server_stride + self.imm_off + (m % self.imm_slots) as usize * self.size
    }

    fn recv_slot(&self, q: usize, k: u64) -> usize {
        q * self.server_stride + (k % self.recv_slots as u64) as usize * self.size
    }

    fn fadd_word(&self, q: usize) -> usize {
        q * self.server_stride + self.atom_off
    }

    fn cas_word(&self, q: usize) -> usize {
        self.fadd_word(q) + 8
    }
}

fn cap(depth: u32) -> QpCap {
    QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

pub fn run(args: &Args) -> Res<Outcome> {
    if args.iters > u64::from(u32::MAX) {
        return Err("mixed: --iters at most 2^32 - 1".into());
    }
    let deadline = Instant::now() + args.timeout;
    let lay = Layout::new(args);
    let len = match args.role {
        Role::Server => lay.server_len(),
        Role::Client => lay.client_len(),
    };
    let cqe = args.qps * 2 * args.depth + 16;
    let mut l = Lanes::new(&args.device, lay.qps, cap(args.depth), cqe, len)?;
    let mut ctl = Ctl::open(&args.link, args.timeout).map_err(flow::io)?;
    let remote = flow::exchange_info(&mut ctl, &l.info()?)?;
    l.connect(&remote, &connect_opts(args))?;
    match args.role {
        Role::Server => {
            post_initial_recvs(&l, &lay)?;
            flow::ready(&mut ctl)?;
            let start = Instant::now();
            let mut sv = Server::new(lay);
            let outcome = sv.run(&l, &mut ctl, deadline);
            let secs = start.elapsed().as_secs_f64();
            if let Err(err) = &outcome {
                let _ = ctl.send(&format!("VERDICT fail {err}"));
                return Err(err.clone());
            }
            if !sv.done_seen {
                let done = ctl.expect("DONE").map_err(flow::io)?;
                if done != "ok" {
                    let _ = ctl.send("VERDICT fail client failed");
                    return Err(format!("client: {done}"));
                }
            }
            let checked = server_after(&l, &lay, &sv.n);
            match &checked {
                Ok(()) => ctl.send("VERDICT ok"),
                Err(err) => ctl.send(&format!("VERDICT fail {err}")),
            }
            .map_err(flow::io)?;
            checked?;
            let ops: u64 = sv.n.iter().sum();
            Ok(Outcome {
                bytes: sv.bytes,
                secs,
                extra: format!("lanes={} ops={ops}", lay.qps),
            })
        }
        Role::Client => {
            if remote.len != lay.server_len() as u64 {
                return Err(format!(
                    "server buffer is {} bytes, expected {} (same arguments on both sides?)",
                    remote.len,
                    lay.server_len()
                ));
            }
            flow::ready(&mut ctl)?;
            if let Some(f) = &args.go_file {
                await_go(args, f, deadline)?;
            }
            let start = Instant::now();
            let mut c = Client::new(args, lay, &remote);
            c.stop_at = args.secs.map(|d| start + d);
            let mut outcome = c.run(&mut l, &mut ctl, deadline);
            let secs = start.elapsed().as_secs_f64();
            if args.expect_peer_death {
                // The server is gone: no DONE/VERDICT.
                let extra = outcome?;
                return Ok(Outcome {
                    bytes: c.bytes,
                    secs,
                    extra,
                });
            }
            if outcome.is_ok() && args.secs.is_some() {
                let ns: Vec<String> = c.st.iter().map(|s| s.limit.to_string()).collect();
                if let Err(err) = ctl.send(&format!("STOP {}", ns.join(","))) {
                    outcome = Err(flow::io(err));
                }
            }
            let extra = flow::client_done(&mut ctl, outcome)?;
            Ok(Outcome {
                bytes: c.bytes,
                secs,
                extra,
            })
        }
    }
}

/// Waits (bounded by the deadline) for the go file.
fn await_go(args: &Args, f: &std::path::Path, deadline: Instant) -> Res<()> {
    crate::note(args, "WAITING");
    while !f.exists() {
        if Instant::now() >= deadline {
            return Err(format!("{} never appeared", f.display()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

#[derive(Clone, Copy, Default)]
struct LaneState {
    posted: u64,
    done: u64,
    /// Operations this lane will run (lowered when --secs runs out).
    limit: u64,
    /// Failed (peer death): posts stop, the rest flushes.
    dead: bool,
}

struct Client<'a> {
    args: &'a Args,
    lay: Layout,
    remote: &'a PeerInfo,
    st: Vec<LaneState>,
    scratch: Vec<u8>,
    expect: Vec<u8>,
    bytes: u64,
    started: bool,
    eof_at: Option<Instant>,
    retry_exc: u64,
    flushed: u64,
    lost_after_eof_ms: Option<f64>,
    stop_at: Option<Instant>,
}

impl<'a> Client<'a> {
    fn new(args: &'a Args, lay: Layout, remote: &'a PeerInfo) -> Client<'a> {
        Client {
            args,
            lay,
            remote,
            st: vec![
                LaneState {
                    limit: lay.n,
                    ..LaneState::default()
                };
                lay.qps
            ],
            scratch: vec![0u8; lay.size],
            expect: vec![0u8; lay.size],
            bytes: 0,
            started: false,
            eof_at: None,
            retry_exc: 0,
            flushed: 0,
            lost_after_eof_ms: None,
            stop_at: None,
        }
    }

    fn finished(&self) -> bool {
        self.st
            .iter()
            .all(|s| s.done == s.limit || (s.dead && s.done == s.posted))
    }

    fn run(&mut self, l: &mut Lanes, ctl: &mut Ctl, deadline: Instant) -> Res<String> {
        let mut wcs = vec![Wc::default(); 64];
        let mut idle = Idle::default();
        let mut last_check = Instant::now();
        // Bounded by the deadline.
        while !self.finished() {
            if self.stop_at.is_some_and(|t| Instant::now() >= t) {
                self.stop_at = None;
                for s in &mut self.st {
                    s.limit = s.posted;
                }
            }
            for q in 0..self.lay.qps {
                self.post_lane(l, q)?;
            }
            let n = l.cq.poll(&mut wcs).map_err(e("poll_cq"))?;
            for wc in &wcs[..n] {
                self.complete(l, wc)?;
            }
            if n == 0 {
                idle.wait();
            } else {
                idle.busy();
            }
            let now = Instant::now();
            if now.duration_since(last_check) >= CTL_CHECK {
                last_check = now;
                if self.eof_at.is_none() && ctl.peer_closed() {
                    self.eof_at = Some(now);
                    if !self.args.expect_peer_death {
                        return Err("the server closed the control channel mid-run".into());
                    }
                }
            }
            if now >= deadline {
                let s: Vec<String> = self
                    .st
                    .iter()
                    .map(|s| format!("{}/{}", s.done, s.posted))
                    .collect();
                return Err(format!("timed out; lanes done/posted: {}", s.join(" ")));
            }
        }
        if !self.args.expect_peer_death {
            let ops: u64 = self.st.iter().map(|s| s.limit).sum();
            return Ok(format!("lanes={} ops={ops}", self.lay.qps));
        }
        if let Some(q) = self.st.iter().position(|s| !s.dead) {
            return Err(format!(
                "lane {q} finished all {} ops: the server did not die",
                self.st[q].limit
            ));
        }
        let events = self.await_fatal_events(l, Duration::from_secs(5))?;
        Ok(format!(
            "peer_death=1 lanes={} retry_exc={} flushed={} fatal_events={events} lost_after_eof_ms={}",
            self.lay.qps,
            self.retry_exc,
            self.flushed,
            self.lost_after_eof_ms
                .map_or("unknown".to_string(), |ms| format!("{ms:.1}"))
        ))
    }

    fn post_lane(&mut self, l: &mut Lanes, q: usize) -> Res<()> {
        let depth = self.lay.depth as u64;
        // Bounded: at most `depth` posts per call.
        loop {
            let s = self.st[q];
            if s.dead || s.posted >= s.limit || s.posted - s.done >= depth {
                return Ok(());
            }
            if !self.post_op(l, q, s.posted)? {
                return Ok(());
            }
            self.st[q].posted += 1;
        }
    }

    /// Posts lane `q`'s op `i`; false when the SQ is full.
    fn post_op(&mut self, l: &mut Lanes, q: usize, i: u64) -> Res<bool> {
        let lay = &self.lay;
        let (kind, m) = (i % KINDS, i / KINDS);
        let off = lay.client_off(q, i);
        let size = lay.size as u32;
        let rbase = self.remote.addr;
        let rkey = self.remote.rkey;
        if matches!(kind, SEND | WRITE | WRITE_IMM) {
            pattern(q, i, &mut self.scratch);
            l.buf.write(off, &self.scratch).map_err(e("write buffer"))?;
        }
        let data = [l.buf.sge(off, size)];
        let word = [l.buf.sge(off, 8)];
        let wr_id = ((q as u64) << 32) | i;
        let at = |o: usize| rbase + o as u64;
        let wr = match kind {
            SEND => SendWr::send(wr_id, &data),
            WRITE => SendWr::write(wr_id, &data, at(lay.write_target(q, m)), rkey),
            WRITE_IMM => SendWr::write_imm(wr_id, &data, at(lay.imm_target(q, m)), rkey, i as u32),
            READ => SendWr::read(wr_id, &data, at(read_source(lay, q, m)), rkey),
            CAS => SendWr::cmp_swap(wr_id, &word, at(lay.cas_word(q)), rkey, m, m + 1),
            _ => SendWr::fetch_add(wr_id, &word, at(lay.fadd_word(q)), rkey, m + 1),
        };
        match l.qps[q].post_send(&[wr.signaled()]) {
            Ok(()) => Ok(true),
            Err(err) if err.errno() == Error::QueueFull.errno() => Ok(false),
            Err(err) => Err(format!("lane {q} op {i}: post_send: {err}")),
        }
    }

    fn complete(&mut self, l: &Lanes, wc: &Wc) -> Res<()> {
        let q = (wc.wr_id >> 32) as usize;
        let i = wc.wr_id & 0xffff_ffff;
        if q >= self.lay.qps || l.qps[q].qpn() != wc.qp_num {
            return Err(format!("completion with a wr_id we never posted: {wc:?}"));
        }
        let s = &mut self.st[q];
        if i != s.done || s.done >= s.posted {
            return Err(format!(
                "lane {q}: completion for op {i} while expecting op {} ({} posted): lost or duplicated ({})",
                s.done,
                s.posted,
                wc.status_str()
            ));
        }
        s.done += 1;
        let kind = i % KINDS;
        let name = KIND_NAMES[kind as usize];
        if !wc.is_success() {
            if !self.args.expect_peer_death {
                return Err(format!(
                    "lane {q} op {i} ({name}) failed: {} (vendor_err {})",
                    wc.status_str(),
                    wc.vendor_err
                ));
            }
            return self.peer_death_completion(q, i, wc);
        }
        if s.dead {
            return Err(format!(
                "lane {q} op {i} ({name}) succeeded after its QP failed"
            ));
        }
        let want = match kind {
            SEND => WcOpcode::Send,
            WRITE | WRITE_IMM => WcOpcode::RdmaWrite,
            READ => WcOpcode::RdmaRead,
            CAS => WcOpcode::CompSwap,
            _ => WcOpcode::FetchAdd,
        };
        if wc.opcode != want as u32 {
            return Err(format!("lane {q} op {i} ({name}): completion {wc:?}"));
        }
        let (lay, m) = (self.lay, i / KINDS);
        let off = lay.client_off(q, i);
        match kind {
            READ => {
                let src = KINDS * m
                    + if m.is_multiple_of(2) {
                        WRITE
                    } else {
                        WRITE_IMM
                    };
                pattern(q, src, &mut self.expect);
                l.buf
                    .read(off, &mut self.scratch)
                    .map_err(e("read buffer"))?;
                if let Some(j) = first_diff(&self.scratch, &self.expect) {
                    return Err(format!(
                        "lane {q} op {i} (READ of op {src}'s bytes): byte {j} is {:#04x}, expected {:#04x}",
                        self.scratch[j], self.expect[j]
                    ));
                }
            }
            CAS | FADD => {
                let got = l.buf.read_u64(off).map_err(e("read buffer"))?;
                let want = if kind == CAS { m } else { m * (m + 1) / 2 };
                if got != want {
                    return Err(format!(
                        "lane {q} op {i} ({name}): fetched {got}, expected {want}"
                    ));
                }
            }
            _ => {}
        }
        self.bytes += match kind {
            CAS | FADD => 8,
            _ => lay.size as u64,
        };
        if !self.started
            && self
                .st
                .iter()
                .all(|s| s.done >= (lay.depth as u64).min(s.limit))
        {
            self.started = true;
            crate::note(self.args, "STARTED");
        }
        Ok(())
    }

    /// With the server expected to die: each lane's first failure is the
    /// retry budget running out, everything after it is flushed.
    fn peer_death_completion(&mut self, q: usize, i: u64, wc: &Wc) -> Res<()> {
        let s = &mut self.st[q];
        if !s.dead {
            if wc.wc_status() != Some(WcStatus::RetryExcErr) {
                return Err(format!(
                    "lane {q} op {i}: first failure is {}, expected IBV_WC_RETRY_EXC_ERR",
                    wc.status_str()
                ));
            }
            s.dead = true;
            self.retry_exc += 1;
            if self.retry_exc == 1 {
                let after = self.eof_at.map(|t| t.elapsed().as_secs_f64() * 1e3);
                self.lost_after_eof_ms = after;
                let after = after.map_or("unknown".to_string(), |ms| format!("{ms:.1}"));
                crate::note(
                    self.args,
                    &format!(
                        "PEER_LOST lane={q} op={i} status={} after_eof_ms={after}",
                        wc.status_str()
                    ),
                );
            }
            return Ok(());
        }
        if wc.wc_status() != Some(WcStatus::WrFlushErr) {
            return Err(format!(
                "lane {q} op {i}: after the failure got {}, expected IBV_WC_WR_FLUSH_ERR",
                wc.status_str()
            ));
        }
        self.flushed += 1;
        Ok(())
    }

    /// Every lane's QP raised IBV_EVENT_QP_FATAL; returns how many came.
    fn await_fatal_events(&self, l: &Lanes, limit: Duration) -> Res<usize> {
        let mut seen = vec![false; self.lay.qps];
        let end = Instant::now() + limit;
        while seen.iter().any(|s| !s) && Instant::now() < end {
            match l
                .ctx
                .get_async_event_timeout(Some(Duration::from_millis(50)))
            {
                Ok(Some(ev)) if ev.event_type == event_type::QP_FATAL => {
                    let q = ev.element.wrapping_sub(1) as usize;
                    if q >= seen.len() {
                        return Err(format!("QP_FATAL for unknown QP handle {}", ev.element));
                    }
                    if seen[q] {
                        return Err(format!("two QP_FATAL events for lane {q}"));
                    }
                    seen[q] = true;
                }
                Ok(Some(ev)) => return Err(format!("unexpected async event {ev:?}")),
                Ok(None) => {}
                Err(err) => return Err(format!("get_async_event: {err}")),
            }
        }
        match seen.iter().position(|s| !s) {
            Some(q) => Err(format!("no IBV_EVENT_QP_FATAL for lane {q}")),
            None => Ok(seen.len()),
        }
    }
}

/// READ m reads back WRITE m (even m) or WRITE_IMM m (odd m).
fn read_source(lay: &Layout, q: usize, m: u64) -> usize {
    if m.is_multiple_of(2) {
        lay.write_target(q, m)
    } else {
        lay.imm_target(q, m)
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

fn post_recv(l: &Lanes, lay: &Layout, q: usize, k: u64) -> Res<()> {
    let sge = [l.buf.sge(lay.recv_slot(q, k), lay.size as u32)];
    l.qps[q]
        .post_recv(&[RecvWr::new(((q as u64) << 32) | k, &sge)])
        .map_err(|err| format!("lane {q}: post_recv {k}: {err}"))
}

fn post_initial_recvs(l: &Lanes, lay: &Layout) -> Res<()> {
    for q in 0..lay.qps {
        for k in 0..Layout::recvs(lay.n).min(lay.recv_slots as u64) {
            post_recv(l, lay, q, k)?;
        }
    }
    Ok(())
}

/// The server's side of a run: takes every receive in order, checking
/// SEND bytes and WRITE_IMM immediates, and reposts.
struct Server {
    lay: Layout,
    /// Operations per lane (lowered by the client's STOP).
    n: Vec<u64>,
    got: Vec<u64>,
    bytes: u64,
    /// The client's `DONE ok` arrived during the run.
    done_seen: bool,
}

impl Server {
    fn new(lay: Layout) -> Server {
        Server {
            lay,
            n: vec![lay.n; lay.qps],
            got: vec![0; lay.qps],
            bytes: 0,
            done_seen: false,
        }
    }

    fn complete(&mut self, l: &Lanes, wc: &Wc, data: &mut [u8], expect: &mut [u8]) -> Res<()> {
        let lay = &self.lay;
        let q = (wc.wr_id >> 32) as usize;
        let k = wc.wr_id & 0xffff_ffff;
        if q >= lay.qps || l.qps[q].qpn() != wc.qp_num {
            return Err(format!("completion with a wr_id we never posted: {wc:?}"));
        }
        if k != self.got[q] {
            return Err(format!(
                "lane {q}: receive {k} completed while expecting {}: lost or duplicated ({})",
                self.got[q],
                wc.status_str()
            ));
        }
        if !wc.is_success() {
            return Err(format!(
                "lane {q} receive {k} failed: {} (vendor_err {})",
                wc.status_str(),
                wc.vendor_err
            ));
        }
        let i = Layout::recv_op(k);
        if wc.byte_len as usize != lay.size {
            return Err(format!("lane {q} op {i}: byte_len {}", wc.byte_len));
        }
        if i % KINDS == SEND {
            if wc.opcode != WcOpcode::Recv as u32 || wc.wc_flags & wc_flags::WITH_IMM != 0 {
                return Err(format!("lane {q} op {i} (SEND): completion {wc:?}"));
            }
            l.buf
                .read(lay.recv_slot(q, k), data)
                .map_err(e("read buffer"))?;
            pattern(q, i, expect);
            if let Some(j) = first_diff(data, expect) {
                return Err(format!(
                    "lane {q} op {i} (SEND): byte {j} is {:#04x}, expected {:#04x}",
                    data[j], expect[j]
                ));
            }
        } else if wc.opcode != WcOpcode::RecvRdmaWithImm as u32 || wc.imm_data != i as u32 {
            return Err(format!(
                "lane {q} op {i} (WRITE_IMM): completion {wc:?}, expected immediate {i}"
            ));
        }
        self.bytes += lay.size as u64;
        self.got[q] += 1;
        // Posted up front for the largest run; a STOP only lowers n.
        let next = k + lay.recv_slots as u64;
        if next < Layout::recvs(lay.n) {
            post_recv(l, lay, q, next)?;
        }
        Ok(())
    }

    fn all_in(&self) -> bool {
        self.got
            .iter()
            .zip(&self.n)
            .all(|(&g, &n)| g >= Layout::recvs(n))
    }

    /// A control line during the run: STOP (per-lane counts), DONE.
    fn control(&mut self, line: &str) -> Res<()> {
        if let Some(rest) = line.strip_prefix("STOP ") {
            let n: Vec<u64> = rest
                .split(',')
                .map(|v| v.parse().map_err(|_| format!("bad STOP line {line:?}")))
                .collect::<Res<_>>()?;
            if n.len() != self.lay.qps || n.iter().any(|&v| v > self.lay.n) {
                return Err(format!("bad STOP line {line:?}"));
            }
            self.n = n;
            return Ok(());
        }
        match line.strip_prefix("DONE") {
            Some(" ok") => {
                self.done_seen = true;
                Ok(())
            }
            Some(rest) => Err(format!("client:{rest}")),
            None => Err(format!("unexpected control line {line:?}")),
        }
    }

    fn run(&mut self, l: &Lanes, ctl: &mut Ctl, deadline: Instant) -> Res<()> {
        let mut wcs = vec![Wc::default(); 64];
        let (mut data, mut expect) = (vec![0u8; self.lay.size], vec![0u8; self.lay.size]);
        let mut idle = Idle::default();
        let mut last_check = Instant::now();
        // Bounded by the deadline.
        while !self.all_in() {
            let n = l.cq.poll(&mut wcs).map_err(e("poll_cq"))?;
            for wc in &wcs[..n] {
                self.complete(l, wc, &mut data, &mut expect)?;
            }
            if n == 0 {
                idle.wait();
            } else {
                idle.busy();
            }
            let now = Instant::now();
            if now.duration_since(last_check) >= CTL_CHECK {
                last_check = now;
                match ctl.try_recv() {
                    Ok(Some(line)) => self.control(&line)?,
                    Ok(None) => {}
                    Err(err) => return Err(format!("the client is gone mid-run ({err})")),
                }
            }
            if now >= deadline {
                return Err(format!(
                    "timed out; receives per lane: {:?} of {:?}",
                    self.got,
                    self.n.iter().map(|&n| Layout::recvs(n)).collect::<Vec<_>>()
                ));
            }
        }
        if let Some(q) = (0..self.lay.qps).find(|&q| self.got[q] > Layout::recvs(self.n[q])) {
            return Err(format!(
                "lane {q}: more receives than the client's STOP says"
            ));
        }
        Ok(())
    }
}

/// After the client's DONE: every write target holds its last writer's
/// bytes, the atomic words their final values.
fn server_after(l: &Lanes, lay: &Layout, ns: &[u64]) -> Res<()> {
    let (mut data, mut expect) = (vec![0u8; lay.size], vec![0u8; lay.size]);
    for (q, &n) in ns.iter().enumerate() {
        let rounds = |kind: u64| count(n, kind);
        for (kind, slots) in [(WRITE, lay.write_slots), (WRITE_IMM, lay.imm_slots)] {
            let c = rounds(kind);
            for s in 0..slots.min(c) {
                let m = s + (c - 1 - s) / slots * slots;
                let off = if kind == WRITE {
                    lay.write_target(q, m)
                } else {
                    lay.imm_target(q, m)
                };
                l.buf.read(off, &mut data).map_err(e("read buffer"))?;
                let i = KINDS * m + kind;
                pattern(q, i, &mut expect);
                if let Some(j) = first_diff(&data, &expect) {
                    return Err(format!(
                        "lane {q}: target of op {i} ({}): byte {j} is {:#04x}, expected {:#04x}",
                        KIND_NAMES[kind as usize], data[j], expect[j]
                    ));
                }
            }
        }
        let fadd = l.buf.read_u64(lay.fadd_word(q)).map_err(e("read buffer"))?;
        let c = rounds(FADD);
        if fadd != c * (c + 1) / 2 {
            return Err(format!(
                "lane {q}: FetchAdd word is {fadd}, expected {}",
                c * (c + 1) / 2
            ));
        }
        let cas = l.buf.read_u64(lay.cas_word(q)).map_err(e("read buffer"))?;
        if cas != rounds(CAS) {
            return Err(format!(
                "lane {q}: CmpSwap word is {cas}, expected {}",
                rounds(CAS)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_receive_order() {
        assert_eq!(count(1, SEND), 1);
        assert_eq!(count(1, WRITE), 0);
        assert_eq!(count(7, SEND), 2);
        assert_eq!(count(7, WRITE_IMM), 1);
        assert_eq!(count(12, FADD), 2);
        let ops: Vec<u64> = (0..5).map(Layout::recv_op).collect();
        assert_eq!(ops, [0, 2, 6, 8, 12]);
        // Every receive-consuming op of a run is some recv_op(k), k < recvs.
        for n in 1..40u64 {
            let want: Vec<u64> = (0..n).filter(|i| i % 6 == 0 || i % 6 == 2).collect();
            let k = count(n, SEND) + count(n, WRITE_IMM);
            let got: Vec<u64> = (0..k).map(Layout::recv_op).collect();
            assert_eq!(got, want, "n={n}");
        }
    }

    #[test]
    fn patterns_differ_by_lane_and_op() {
        let (mut a, mut b, mut c) = ([0u8; 13], [0u8; 13], [0u8; 13]);
        pattern(0, 1, &mut a);
        pattern(1, 1, &mut b);
        pattern(0, 2, &mut c);
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
