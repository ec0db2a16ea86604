//! Parent domains (`ibv_alloc_parent_domain`): an `ibv_pd` that stands for
//! the PD it was made from everywhere a PD is taken, and whose custom
//! allocator (if any) holds the rings of the QPs, CQs and SRQs created on
//! it. The counts behind the kernel-style EBUSY of `ibv_dealloc_pd` live
//! here: a PD with parent domains on it, and a parent domain with objects
//! on it, stay.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::abi::IbvPd;

/// What a parent domain adds to the PD it wraps.
pub struct ParentDomain {
    /// The `ibv_pd` it was made from (`attr->pd`), whose count it holds.
    pub protection: *mut IbvPd,
    /// Objects created on it (QPs, CQs, SRQs).
    pub users: Arc<AtomicU32>,
}

/// A counted use of a parent domain by one object, dropped with it.
pub struct DomainUse(Arc<AtomicU32>);

impl DomainUse {
    pub fn new(users: &Arc<AtomicU32>) -> DomainUse {
        users.fetch_add(1, Ordering::AcqRel);
        DomainUse(users.clone())
    }
}

impl Drop for DomainUse {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
