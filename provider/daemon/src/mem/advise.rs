//! `ibv_advise_mr`: prefetch advice. rxud reaches memory on demand at
//! every access, so there is nothing to load ahead; the answers are the
//! kernel's.
//!
//! - Synchronous (IB_UVERBS_ADVISE_MR_FLAG_FLUSH): mlx5's. The lkey must
//!   name an ODP region of this client and PD (writable for
//!   PREFETCH_WRITE), else ENOENT, and the named ranges must be mapped in
//!   the client (writable for PREFETCH_WRITE), else EFAULT. rxe's
//!   synchronous path faults ODP pages in and is only meant for ODP
//!   regions; mlx5's answers say so.
//! - Asynchronous (no flag): rxe's, which queues the prefetch best-effort
//!   after looking each key up as a local key of the PD with local write
//!   access (`lookup_mr(pd, IB_ACCESS_LOCAL_WRITE, lkey, LOCAL)`, for
//!   every advice): any such region, ODP or not, is 0; another key EINVAL.
//!   No range is checked (a failed prefetch is reported nowhere).

use super::{access, bounds, mapcheck, DeviceMemory};

/// `enum ibv_advise_mr_advice`.
pub mod advice {
    pub const PREFETCH: u32 = 0;
    pub const PREFETCH_WRITE: u32 = 1;
    pub const PREFETCH_NO_FAULT: u32 = 2;
}

/// `IBV_ADVISE_MR_FLAG_FLUSH`: advise synchronously.
pub const FLAG_FLUSH: u32 = 1;

/// Why advice was refused (each with the errno mlx5 gives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdviseError {
    #[error("advice {0} is not known")]
    Unsupported(u32),
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("lkey {0:#x} names no on-demand region of this PD that allows the advice")]
    NoSuchMr(u32),
    #[error("range not mapped in the client (or not writable)")]
    Fault,
}

impl AdviseError {
    pub fn errno(self) -> i32 {
        match self {
            AdviseError::Unsupported(_) => libc::EOPNOTSUPP,
            AdviseError::Invalid(_) => libc::EINVAL,
            AdviseError::NoSuchMr(_) => libc::ENOENT,
            AdviseError::Fault => libc::EFAULT,
        }
    }
}

/// One range of advice: `len` bytes at the client's `addr` through `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

impl DeviceMemory {
    /// Advice from `client` about ranges of its regions in `pd`.
    pub fn advise(
        &self,
        client: u32,
        pd: u32,
        adv: u32,
        flags: u32,
        ranges: &[Range],
    ) -> Result<(), AdviseError> {
        // The kernel's order: its uverbs layer checks flags and the list,
        // then the driver the advice.
        if flags & !FLAG_FLUSH != 0 {
            return Err(AdviseError::Invalid("unknown flags"));
        }
        if ranges.is_empty() {
            return Err(AdviseError::Invalid("no ranges"));
        }
        if adv > advice::PREFETCH_NO_FAULT {
            return Err(AdviseError::Unsupported(adv));
        }
        let flush = flags & FLAG_FLUSH != 0;
        let c = self
            .clients
            .get(&client)
            .ok_or(AdviseError::Invalid("unknown client"))?;
        for r in ranges {
            let writes = adv == advice::PREFETCH_WRITE;
            let m = self.mrs.get(&r.lkey).filter(|m| {
                let i = &m.info;
                i.client == client && i.pd == pd && i.valid
            });
            if !flush {
                // rxe: a local key of the PD with local write, any kind.
                if m.is_none_or(|m| m.info.access & access::LOCAL_WRITE == 0) {
                    return Err(AdviseError::Invalid(
                        "lkey of no region of this PD with local write",
                    ));
                }
                continue;
            }
            let i = match m {
                Some(m)
                    if m.info.access & access::ON_DEMAND != 0
                        && (!writes || m.info.access & access::LOCAL_WRITE != 0) =>
                {
                    &m.info
                }
                _ => return Err(AdviseError::NoSuchMr(r.lkey)),
            };
            if adv == advice::PREFETCH_NO_FAULT || r.len == 0 {
                continue;
            }
            let at = bounds::translate(i.addr, i.addr, i.len, r.addr, u64::from(r.len))
                .map_err(|_| AdviseError::Fault)?;
            mapcheck::check_mapped(&c.mem, &c.maps, at, u64::from(r.len), writes)
                .map_err(|_| AdviseError::Fault)?;
        }
        Ok(())
    }
}
