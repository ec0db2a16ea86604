//! `ibv_advise_mr`: prefetch advice for on-demand-paging regions. rxud
//! reaches memory on demand at every access, so there is nothing to load
//! ahead; what a synchronous prefetch (IBV_ADVISE_MR_FLAG_FLUSH) does is
//! what mlx5 reports from one: the named ranges must be mapped in the
//! client (and writable for PREFETCH_WRITE), else EFAULT. The keys are
//! checked as mlx5 checks them: an lkey of this client and PD that names
//! an ODP region (writable for PREFETCH_WRITE), else ENOENT when
//! synchronous and EINVAL when not; an asynchronous prefetch checks no
//! range (mlx5 reports those failures nowhere).

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
            let bad_key = || {
                if flush {
                    AdviseError::NoSuchMr(r.lkey)
                } else {
                    AdviseError::Invalid("lkey of no on-demand region of this PD")
                }
            };
            let m = self.mrs.get(&r.lkey).ok_or_else(bad_key)?;
            let i = &m.info;
            let writes = adv == advice::PREFETCH_WRITE;
            if i.client != client
                || i.pd != pd
                || !i.valid
                || i.access & access::ON_DEMAND == 0
                || (writes && i.access & access::LOCAL_WRITE == 0)
            {
                return Err(bad_key());
            }
            if !flush || adv == advice::PREFETCH_NO_FAULT || r.len == 0 {
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
