//! Ring memory from the application (a parent domain's custom allocator,
//! `ibv_alloc_parent_domain`): a ring is the provider's buffer for a queue,
//! as mlx5's QP, CQ and SRQ buffers are, so an object created with such an
//! allocator asks it for the ring's pages and rxu maps the ring's memfd
//! over them (`rxu_abi::ring::Ring::attach_at`); when the object goes they
//! are zeroed private memory again and handed back to the allocator.

use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;

use super::error::{Error, Result};
use rxu_abi::ring::{page_size, Place, Ring};

/// Which ring memory is asked for (the allocator's `resource_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingKind {
    Cq = 1,
    Sq = 2,
    Rq = 3,
    Srq = 4,
}

/// What an allocator answers.
pub enum Alloc {
    /// Memory of at least the size asked, aligned as asked.
    Memory(NonNull<u8>),
    /// Use the default (the ring gets a mapping of its own).
    Default,
    /// No memory: creating the object fails with ENOMEM.
    Failed,
}

/// An application's allocator of ring memory.
pub trait RingAlloc: Send + Sync {
    /// `len` bytes (a multiple of the page size) aligned to `align` (the
    /// page size), for a ring of `kind`.
    fn alloc(&self, len: usize, align: usize, kind: RingKind) -> Alloc;
    /// Gives back memory `alloc` returned, once the ring no longer uses it.
    fn free(&self, addr: NonNull<u8>, kind: RingKind);
}

/// Maps the ring in `fd`: in memory from `alloc` if there is one and it
/// hands some out, else a mapping of its own. Memory the ring cannot be
/// mapped over (not page-aligned, a huge page) goes back to the allocator
/// at once and the ring gets a mapping of its own: still a working queue.
pub(crate) fn attach(
    fd: OwnedFd,
    alloc: Option<&Arc<dyn RingAlloc>>,
    kind: RingKind,
) -> Result<Ring> {
    let Some(a) = alloc else {
        return Ok(Ring::attach(fd)?);
    };
    let page = page_size();
    let len = Ring::mapped_len(&fd)?.div_ceil(page) * page;
    let addr = match a.alloc(len, page, kind) {
        Alloc::Memory(addr) => addr,
        Alloc::Default => return Ok(Ring::attach(fd)?),
        Alloc::Failed => return Err(Error::Io(std::io::Error::from_raw_os_error(libc::ENOMEM))),
    };
    let give_back = a.clone();
    // An address, not a pointer, crosses into the (Send) closure.
    let at = addr.as_ptr() as usize;
    let release = Box::new(move || {
        if let Some(p) = NonNull::new(at as *mut u8) {
            give_back.free(p, kind);
        }
    });
    // SAFETY: the allocator lent `len` bytes at `addr` for this ring and
    // uses them no more until `free` (the parent-domain contract: the
    // provider's buffer); they are no Rust object's memory.
    let place = unsafe { Place::new(addr, len, release) };
    match Ring::attach_at(&fd, place) {
        Ok(r) => Ok(r),
        // The place was given back; map the ring the default way.
        Err(_) => Ok(Ring::attach(fd)?),
    }
}
