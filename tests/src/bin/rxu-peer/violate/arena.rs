//! The server's side of the violate workload: the arena (guards and MRs
//! in one page-aligned allocation) and the final byte-for-byte check.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use rxu_client::*;

use super::{expected_arena, guard_byte, Target, ARENA, FIRST_LOCAL, PAGE, TARGETS};
use crate::lanes::Lanes;
use crate::peer::{e, Res};

/// Page-aligned memory of this process that is not an MrBuf: only the
/// sub-ranges registered below are reachable by the daemon.
struct Arena {
    ptr: *mut u8,
}

impl Arena {
    fn layout() -> Layout {
        Layout::from_size_align(ARENA, PAGE).expect("constant layout")
    }

    fn new() -> Res<Arena> {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(Self::layout()) };
        if ptr.is_null() {
            return Err("arena allocation failed".into());
        }
        let a = Arena { ptr };
        let img: Vec<u8> = (0..ARENA).map(guard_byte).collect();
        // SAFETY: `ptr` holds ARENA bytes, nothing is registered yet.
        unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), a.ptr, ARENA) };
        Ok(a)
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; ARENA];
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: `ptr` holds ARENA bytes for the arena's life; the daemon
        // may write registered parts concurrently (as DMA would), which
        // gives some mix of old and new plain bytes, never UB for u8 copies
        // through raw pointers.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, v.as_mut_ptr(), ARENA) };
        v
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with the same layout.
        unsafe { dealloc(self.ptr, Self::layout()) };
    }
}

/// The server's MRs; dropped (deregistered) before the arena.
pub(super) struct Exposed {
    mrs: Vec<Mr>,
    _other_pd: Pd,
    arena: Arena,
}

impl Exposed {
    pub(super) fn new(l: &Lanes) -> Res<Exposed> {
        let arena = Arena::new()?;
        let other_pd = Pd::alloc(&l.ctx).map_err(e("alloc_pd"))?;
        let mut mrs = Vec::new();
        for t in TARGETS {
            let (off, len) = t.range();
            let pd = if t == Target::Other { &other_pd } else { &l.pd };
            // SAFETY: the range lies in the arena, which outlives the MR
            // (field order); the arena is read only through raw pointers.
            let mr =
                unsafe { reg_mr(pd, arena.ptr.add(off), len, t.access()) }.map_err(e("reg_mr"))?;
            mrs.push(mr);
        }
        Ok(Exposed {
            mrs,
            _other_pd: other_pd,
            arena,
        })
    }

    /// `TARGETS NAME=rkey:addr:len:arena_offset ...`
    pub(super) fn line(&self) -> String {
        let mut s = String::from("TARGETS");
        for (t, mr) in TARGETS.iter().zip(&self.mrs) {
            s += &format!(
                " {}={}:{}:{}:{}",
                t.name(),
                mr.rkey(),
                mr.addr(),
                mr.len(),
                t.range().0
            );
        }
        s
    }

    pub(super) fn deregister_gone(&mut self) -> Res<()> {
        let i = TARGETS.iter().position(|t| *t == Target::Gone).unwrap_or(0);
        let mr = self.mrs.remove(i);
        mr.dereg().map_err(|(_, err)| format!("dereg_mr: {err}"))
    }
}

pub(super) fn server_after(l: &Lanes, ex: &Exposed) -> Res<()> {
    let got = ex.arena.snapshot();
    let want = expected_arena();
    if let Some(j) = got.iter().zip(&want).position(|(a, b)| a != b) {
        let what = TARGETS
            .iter()
            .find(|t| {
                let (o, n) = t.range();
                (o..o + n).contains(&j)
            })
            .map_or("a guard byte".to_string(), |t| format!("MR {}", t.name()));
        return Err(format!(
            "arena byte {j} ({what}) is {:#04x}, expected {:#04x}",
            got[j], want[j]
        ));
    }
    // Refusing a request takes the responder QP to ERR too (IBA: RC
    // responder, remote access error); the working lanes and those whose
    // requests were fine (the local misuse is the requester's) stay in RTS.
    for (q, qp) in l.qps.iter().enumerate() {
        let (attr, _) = qp.query(qp_attr_mask::STATE).map_err(e("query_qp"))?;
        let want = if (1..FIRST_LOCAL).contains(&q) {
            QpState::Err
        } else {
            QpState::Rts
        };
        if attr.qp_state != want as u8 {
            return Err(format!(
                "server lane {q}: QP state {}, expected {want:?}",
                attr.qp_state
            ));
        }
    }
    Ok(())
}
