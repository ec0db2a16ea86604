//! One RC lane: an initiator QP and a target QP (on the same device or on
//! two), one operation in flight at a time, every completed one checked
//! byte for byte where its data landed.
//!
//! SEND and WRITE_WITH_IMM land in the target's buffer (checked when the
//! receive completes), WRITE too (checked when the initiator's completion
//! says it was placed: RC acknowledges after placement), READ in the
//! initiator's buffer; the atomics return the target word's old value,
//! which the lane predicts from its own history, and leave the new one.
//! The bytes right before and after each landing area are guards that
//! must come through unchanged.

use std::time::Instant;

use rxu_client::*;

use crate::pattern::{fill, first_bad, op_seed, Rng};

pub const KINDS: [&str; 6] = [
    "SEND",
    "WRITE",
    "WRITE_IMM",
    "READ",
    "CMP_SWAP",
    "FETCH_ADD",
];
const SEND: usize = 0;
const WRITE: usize = 1;
const WRITE_IMM: usize = 2;
const READ: usize = 3;
const CAS: usize = 4;
const FADD: usize = 5;

/// Bytes written just before and after a transfer's landing area and
/// checked once it completed: a transfer placed past its bounds breaks
/// them.
const GUARD: usize = 16;
const GUARD_MARK: u64 = 0x6a7d_0000_0000_0000;

/// Where the guards of a landing area `off..off + len` in a buffer whose
/// data part is `max` bytes go (the atomic word after it is not one).
fn guard_spots(off: usize, len: usize, max: usize) -> impl Iterator<Item = usize> {
    let before = (off >= GUARD).then(|| off - GUARD);
    let after = (off + len + GUARD <= max).then_some(off + len);
    before.into_iter().chain(after)
}

pub const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// What a lane's completed operation adds to the totals.
pub struct Done {
    pub kind: usize,
    pub bytes: u64,
}

struct Pending {
    kind: usize,
    seq: u64,
    len: usize,
    off: usize,
    /// The initiator's completion is still due.
    send: bool,
    /// The target's receive completion is still due.
    recv: bool,
    posted: Instant,
    /// CMP_SWAP / FETCH_ADD: the target word's value after this one.
    next_word: u64,
}

pub struct Lane {
    pub id: usize,
    nonce: u64,
    pub init: Qp,
    pub tgt: Qp,
    src: MrBuf,
    dst: MrBuf,
    /// Transfer bytes at most; the target's atomic word sits right after.
    max: usize,
    word: u64,
    seq: u64,
    pending: Option<Pending>,
    scratch: Vec<u8>,
    /// The checker's own test: every n-th operation gets one byte of its
    /// landing area flipped before it is checked (0: never).
    pub corrupt_every: u64,
}

pub type Res<T> = Result<T, String>;

impl Lane {
    /// Buffers of `max` bytes (+ the atomic word) on each side.
    pub fn new(id: usize, nonce: u64, init: Qp, tgt: Qp, max: usize) -> Res<Lane> {
        let err = |what: &'static str| move |e: Error| format!("lane {id}: {what}: {e}");
        let max = max.max(8).next_multiple_of(8);
        let src = MrBuf::new(init.pd().expect("RC QP has a PD"), max + 8, ALL_ACCESS)
            .map_err(err("reg_mr (initiator)"))?;
        let dst = MrBuf::new(tgt.pd().expect("RC QP has a PD"), max + 8, ALL_ACCESS)
            .map_err(err("reg_mr (target)"))?;
        Ok(Lane {
            id,
            nonce,
            init,
            tgt,
            src,
            dst,
            max,
            word: 0,
            seq: 0,
            pending: None,
            scratch: Vec::new(),
            corrupt_every: 0,
        })
    }

    pub fn idle(&self) -> bool {
        self.pending.is_none()
    }

    /// Since when the operation in flight waits, if one does.
    pub fn waiting_since(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.posted)
    }

    fn wr_id(&self, seq: u64) -> u64 {
        (self.id as u64) << 32 | (seq & 0xffff_ffff)
    }

    /// Posts the next operation, of a kind and size drawn from `r`.
    pub fn start(&mut self, r: &mut Rng, max: usize) -> Res<()> {
        let seq = self.seq;
        self.seq += 1;
        let kind = r.below(KINDS.len() as u64) as usize;
        let len = match kind {
            CAS | FADD => 8,
            _ => r.size(max.min(self.max)),
        };
        let off = if len < self.max {
            r.below((self.max - len + 1) as u64) as usize
        } else {
            0
        };
        let seed = op_seed(self.nonce, self.id, seq);
        let id = self.wr_id(seq);
        let word_addr = self.dst.addr() + self.max as u64;
        let result = [self.src.sge(self.max, 8)];
        let mut p = Pending {
            kind,
            seq,
            len,
            off,
            send: true,
            recv: matches!(kind, SEND | WRITE_IMM),
            posted: Instant::now(),
            next_word: self.word,
        };
        if kind <= READ {
            let mut g = [0u8; GUARD];
            let buf = if kind == READ {
                &mut self.src
            } else {
                &mut self.dst
            };
            for at in guard_spots(off, len, self.max) {
                fill(seed ^ GUARD_MARK ^ at as u64, &mut g);
                buf.write(at, &g).map_err(|e| e.to_string())?;
            }
        }
        let post = |e: PostError| format!("lane {}: post {}: {e}", self.id, KINDS[kind]);
        if p.recv {
            // The receive area is the target buffer at `off` (WRITE_IMM's
            // receive gets no bytes: a zero-SGE receive).
            let sge = [self.dst.sge(off, len as u32)];
            let sges: &[Sge] = if kind == SEND { &sge } else { &[] };
            self.tgt.post_recv(&[RecvWr::new(id, sges)]).map_err(post)?;
        }
        match kind {
            SEND | WRITE | WRITE_IMM => {
                self.scratch.resize(len, 0);
                fill(seed, &mut self.scratch);
                let at = if kind == SEND { 0 } else { off };
                self.src
                    .write(at, &self.scratch)
                    .map_err(|e| e.to_string())?;
                let sge = [self.src.sge(at, len as u32)];
                let remote = self.dst.addr() + off as u64;
                let wr = match kind {
                    SEND => SendWr::send(id, &sge),
                    WRITE => SendWr::write(id, &sge, remote, self.dst.rkey()),
                    _ => SendWr::write_imm(id, &sge, remote, self.dst.rkey(), seq as u32),
                };
                self.init.post_send(&[wr.signaled()]).map_err(post)?;
            }
            READ => {
                self.scratch.resize(len, 0);
                fill(seed, &mut self.scratch);
                self.dst
                    .write(off, &self.scratch)
                    .map_err(|e| e.to_string())?;
                let sge = [self.src.sge(off, len as u32)];
                let remote = self.dst.addr() + off as u64;
                let wr = SendWr::read(id, &sge, remote, self.dst.rkey());
                self.init.post_send(&[wr.signaled()]).map_err(post)?;
            }
            CAS => {
                p.next_word = seed;
                let wr = SendWr::cmp_swap(id, &result, word_addr, self.dst.rkey(), self.word, seed);
                self.init.post_send(&[wr.signaled()]).map_err(post)?;
            }
            _ => {
                let add = seed >> 8;
                p.next_word = self.word.wrapping_add(add);
                let wr = SendWr::fetch_add(id, &result, word_addr, self.dst.rkey(), add);
                self.init.post_send(&[wr.signaled()]).map_err(post)?;
            }
        }
        self.pending = Some(p);
        Ok(())
    }

    /// A successful completion for this lane (`send`: the initiator's,
    /// else the target's receive). Returns the operation once all its
    /// completions came and its bytes were checked; a wrong byte, length
    /// or immediate is an Err starting with "VIOLATION".
    pub fn complete(&mut self, wc: &Wc, send: bool) -> Res<Option<Done>> {
        let id = self.id;
        let Some(p) = self.pending.as_mut() else {
            return Err(format!(
                "VIOLATION lane {id}: a completion with nothing in flight: {wc:?}"
            ));
        };
        if wc.wr_id & 0xffff_ffff != p.seq & 0xffff_ffff {
            return Err(format!(
                "VIOLATION lane {id}: completion of wr {:#x}, op {} is in flight",
                wc.wr_id, p.seq
            ));
        }
        if send {
            p.send = false;
        } else {
            p.recv = false;
            // WRITE_IMM's receive reports the written length too.
            let want_len = p.len as u32;
            if wc.byte_len != want_len {
                return Err(format!(
                    "VIOLATION lane {id}: {} {} received {} bytes, sent {want_len}",
                    KINDS[p.kind], p.seq, wc.byte_len
                ));
            }
            if p.kind == WRITE_IMM && wc.imm_data != p.seq as u32 {
                return Err(format!(
                    "VIOLATION lane {id}: WRITE_IMM {} carried immediate {:#x}",
                    p.seq, wc.imm_data
                ));
            }
        }
        if p.send || p.recv {
            return Ok(None);
        }
        let p = self.pending.take().expect("checked above");
        if self.corrupt_every > 0 && p.seq % self.corrupt_every == self.corrupt_every - 1 {
            self.corrupt(&p)?;
        }
        self.check(&p)?;
        Ok(Some(Done {
            kind: p.kind,
            bytes: p.len as u64,
        }))
    }

    /// Flips the last byte that landed (or the atomic result).
    fn corrupt(&mut self, p: &Pending) -> Res<()> {
        let (buf, at) = match p.kind {
            READ => (&mut self.src, p.off + p.len - 1),
            CAS | FADD => (&mut self.src, self.max),
            _ => (&mut self.dst, p.off + p.len - 1),
        };
        let mut b = [0u8];
        buf.read(at, &mut b).map_err(|e| e.to_string())?;
        buf.write(at, &[!b[0]]).map_err(|e| e.to_string())
    }

    fn check(&mut self, p: &Pending) -> Res<()> {
        let seed = op_seed(self.nonce, self.id, p.seq);
        let where_ = |what: &str, off: usize| {
            format!(
                "VIOLATION lane {}: {} {} of {} bytes completed but byte {off} {what} is wrong",
                self.id, KINDS[p.kind], p.seq, p.len
            )
        };
        match p.kind {
            SEND | WRITE | WRITE_IMM | READ => {
                let (buf, what) = if p.kind == READ {
                    (&self.src, "read into the initiator")
                } else {
                    (&self.dst, "at the target")
                };
                self.scratch.resize(p.len, 0);
                buf.read(p.off, &mut self.scratch)
                    .map_err(|e| e.to_string())?;
                if let Some(off) = first_bad(seed, &self.scratch) {
                    return Err(where_(what, off));
                }
                let mut g = [0u8; GUARD];
                for at in guard_spots(p.off, p.len, self.max) {
                    buf.read(at, &mut g).map_err(|e| e.to_string())?;
                    if first_bad(seed ^ GUARD_MARK ^ at as u64, &g).is_some() {
                        return Err(format!(
                            "VIOLATION lane {}: {} {} of {} bytes at {} changed bytes outside \
                             it, at {at}..{}",
                            self.id,
                            KINDS[p.kind],
                            p.seq,
                            p.len,
                            p.off,
                            at + GUARD
                        ));
                    }
                }
            }
            _ => {
                let old = self.src.read_u64(self.max).map_err(|e| e.to_string())?;
                let now = self.dst.read_u64(self.max).map_err(|e| e.to_string())?;
                if old != self.word || now != p.next_word {
                    return Err(format!(
                        "VIOLATION lane {}: {} {} returned {old:#x} (expected {:#x}), left \
                         {now:#x} (expected {:#x})",
                        self.id, KINDS[p.kind], p.seq, self.word, p.next_word
                    ));
                }
                self.word = p.next_word;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_sit_outside_the_landing_area_and_inside_the_buffer() {
        let spots = |off, len| guard_spots(off, len, 100).collect::<Vec<_>>();
        assert_eq!(spots(0, 10), [10]);
        assert_eq!(spots(20, 10), [4, 30]);
        assert_eq!(
            spots(80, 10),
            [64],
            "no room after: the atomic word follows"
        );
        assert_eq!(spots(0, 100), Vec::<usize>::new());
    }
}
