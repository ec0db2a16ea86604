//! A batch of the `ibv_wr_*` interface: the work requests built between
//! `wr_start` and `wr_complete` (callbacks in `crate::ops::qp_ex`), with
//! their SGEs and inline bytes copied at call time, as the verbs API
//! allows the caller to reuse them at once, and the first error of a
//! builder call, which `wr_complete` returns.

use std::ffi::c_int;
use std::ops::Range;

use rxu_client::{send_flags, MwBind, Sge, WrOpcode};

use crate::guard::OpResult;

/// One work request of the batch; `sges` and `inline` index the batch's
/// arrays.
pub struct Pending {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub flags: u32,
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    pub sges: Range<usize>,
    pub inline: Option<Range<usize>>,
    /// (`struct ibv_ah *`, remote QPN, remote Q_Key)
    pub ud: Option<(usize, u32, u32)>,
    /// BIND_MW.
    pub bind: Option<MwBind>,
}

/// A batch being built.
#[derive(Default)]
pub struct Builder {
    pub wrs: Vec<Pending>,
    pub sges: Vec<Sge>,
    pub inline: Vec<u8>,
    pub err: Option<c_int>,
}

impl Builder {
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.err = None;
    }
    pub fn fail(&mut self, e: c_int) {
        self.err.get_or_insert(e);
    }
    /// The WR the setters apply to.
    pub fn last(&mut self) -> Option<&mut Pending> {
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL);
        }
        self.wrs.last_mut()
    }
}

pub fn push_sges(b: &mut Builder, s: &[Sge]) -> OpResult<()> {
    let start = b.sges.len();
    let Some(p) = b.last() else { return Ok(()) };
    if p.inline.is_some() || p.sges.start != p.sges.end {
        return Err(libc::EINVAL);
    }
    p.sges = start..start + s.len();
    b.sges.extend_from_slice(s);
    Ok(())
}

pub fn push_inline(b: &mut Builder, parts: &[&[u8]]) -> OpResult<()> {
    let start = b.inline.len();
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let Some(p) = b.last() else { return Ok(()) };
    if p.inline.is_some() || p.sges.start != p.sges.end {
        return Err(libc::EINVAL);
    }
    p.inline = Some(start..start + total);
    p.flags |= send_flags::INLINE;
    for part in parts {
        b.inline.extend_from_slice(part);
    }
    Ok(())
}
