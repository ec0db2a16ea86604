//! The mixed workload's server: takes every receive in order (SEND bytes,
//! WRITE_IMM immediates), reposts, and checks the write targets and atomic
//! words at the end.

use std::time::Instant;

use rxu_client::*;

use super::workload::{
    count, first_diff, pattern, Layout, CAS, CTL_CHECK, FADD, KINDS, KIND_NAMES, SEND, WRITE,
    WRITE_IMM,
};
use crate::ctl::Ctl;
use crate::lanes::Lanes;
use crate::peer::{e, Idle, Res};

fn post_recv(l: &Lanes, lay: &Layout, q: usize, k: u64) -> Res<()> {
    let sge = [l.buf.sge(lay.recv_slot(q, k), lay.size as u32)];
    l.qps[q]
        .post_recv(&[RecvWr::new(((q as u64) << 32) | k, &sge)])
        .map_err(|err| format!("lane {q}: post_recv {k}: {err}"))
}

pub(super) fn post_initial_recvs(l: &Lanes, lay: &Layout) -> Res<()> {
    for q in 0..lay.qps {
        for k in 0..Layout::recvs(lay.n).min(lay.recv_slots as u64) {
            post_recv(l, lay, q, k)?;
        }
    }
    Ok(())
}

/// The server's side of a run: takes every receive in order, checking
/// SEND bytes and WRITE_IMM immediates, and reposts.
pub(super) struct Server {
    lay: Layout,
    /// Operations per lane (lowered by the client's STOP).
    pub(super) n: Vec<u64>,
    got: Vec<u64>,
    pub(super) bytes: u64,
    /// The client's `DONE ok` arrived during the run.
    pub(super) done_seen: bool,
}

impl Server {
    pub(super) fn new(lay: Layout) -> Server {
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

    pub(super) fn run(&mut self, l: &Lanes, ctl: &mut Ctl, deadline: Instant) -> Res<()> {
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

/// After the client's DONE: every target slot holds its last writers'
/// bytes, the atomic words their final values.
pub(super) fn server_after(l: &Lanes, lay: &Layout, ns: &[u64]) -> Res<()> {
    let (mut data, mut expect) = (vec![0u8; lay.size], vec![0u8; lay.size]);
    for (q, &n) in ns.iter().enumerate() {
        let rounds = |kind: u64| count(n, kind);
        let slots = lay.target_slots;
        for kind in [WRITE, WRITE_IMM] {
            let c = rounds(kind);
            for s in 0..slots.min(c) {
                // The last round that used slot s.
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
