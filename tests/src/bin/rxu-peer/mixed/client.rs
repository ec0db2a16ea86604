//! The mixed workload's client: posts each lane's operations, checks
//! every completion (order, status, opcode, fetched values, READ bytes).

use std::time::{Duration, Instant};

use rxu_client::*;

use super::workload::{
    first_diff, pattern, Layout, CAS, CTL_CHECK, FADD, KINDS, KIND_NAMES, READ, SEND, WRITE,
    WRITE_IMM,
};
use crate::args::Args;
use crate::ctl::{Ctl, PeerInfo};
use crate::lanes::Lanes;
use crate::peer::{e, Idle, Res};

#[derive(Clone, Copy, Default)]
pub(super) struct LaneState {
    posted: u64,
    done: u64,
    /// Operations this lane will run (lowered when --secs runs out).
    pub(super) limit: u64,
    /// Failed (peer death): posts stop, the rest flushes.
    dead: bool,
}

pub(super) struct Client<'a> {
    args: &'a Args,
    lay: Layout,
    remote: &'a PeerInfo,
    pub(super) st: Vec<LaneState>,
    scratch: Vec<u8>,
    expect: Vec<u8>,
    pub(super) bytes: u64,
    started: bool,
    eof_at: Option<Instant>,
    retry_exc: u64,
    flushed: u64,
    lost_after_eof_ms: Option<f64>,
    pub(super) stop_at: Option<Instant>,
}

impl<'a> Client<'a> {
    pub(super) fn new(args: &'a Args, lay: Layout, remote: &'a PeerInfo) -> Client<'a> {
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
            scratch: vec![0u8; 2 * lay.size],
            expect: vec![0u8; 2 * lay.size],
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

    pub(super) fn run(&mut self, l: &mut Lanes, ctl: &mut Ctl, deadline: Instant) -> Res<String> {
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
            let src = &mut self.scratch[..lay.size];
            pattern(q, i, src);
            l.buf.write(off, src).map_err(e("write buffer"))?;
        }
        let data = [l.buf.sge(off, size)];
        let both = [l.buf.sge(off, 2 * size)];
        let word = [l.buf.sge(off, 8)];
        let wr_id = ((q as u64) << 32) | i;
        let at = |o: usize| rbase + o as u64;
        let wr = match kind {
            SEND => SendWr::send(wr_id, &data),
            WRITE => SendWr::write(wr_id, &data, at(lay.write_target(q, m)), rkey),
            WRITE_IMM => SendWr::write_imm(wr_id, &data, at(lay.imm_target(q, m)), rkey, i as u32),
            READ => SendWr::read(wr_id, &both, at(lay.write_target(q, m)), rkey),
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
                // Round m's WRITE bytes, then its WRITE_IMM bytes.
                let size = lay.size;
                if wc.byte_len as usize != 2 * size {
                    return Err(format!("lane {q} op {i} (READ): byte_len {}", wc.byte_len));
                }
                let (w, wi) = (KINDS * m + WRITE, KINDS * m + WRITE_IMM);
                pattern(q, w, &mut self.expect[..size]);
                pattern(q, wi, &mut self.expect[size..]);
                l.buf
                    .read(off, &mut self.scratch)
                    .map_err(e("read buffer"))?;
                if let Some(j) = first_diff(&self.scratch, &self.expect) {
                    let (src, at) = if j < size { (w, j) } else { (wi, j - size) };
                    return Err(format!(
                        "lane {q} op {i} (READ back of op {src}): byte {at} is {:#04x}, expected {:#04x}",
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
            READ => 2 * lay.size as u64,
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
