//! A ring mapped into memory its owner handed out (a parent domain's
//! custom allocator): the memfd is mapped over that range with MAP_FIXED,
//! and when the ring goes the range becomes fresh zeroed private memory
//! again before it is given back ([`Place`]'s release), so the owner frees
//! ordinary memory, never a mapping it did not make.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Mutex;

/// A page-aligned range of memory lent for a ring, and what gives it back.
pub struct Place {
    addr: NonNull<u8>,
    len: usize,
    /// Run once, when the range is no longer used (dropped unused or after
    /// the ring's mapping was replaced by anonymous memory).
    release: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

// SAFETY: a Place is only an address range and a Send closure; the range
// is touched only by `Placed` (through the mmap calls below) and by
// `Region`'s atomic accesses, which are fine from any thread.
unsafe impl Send for Place {}
// SAFETY: as above; the closure sits behind a Mutex.
unsafe impl Sync for Place {}

/// The page size (a mapping's granularity).
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

impl Place {
    /// # Safety
    /// `addr..addr + len` must be memory of this process that nothing else
    /// reads or writes until `release` runs (the ring maps over it: what it
    /// held is lost), and not the memory of a Rust object.
    pub unsafe fn new(addr: NonNull<u8>, len: usize, release: Box<dyn FnOnce() + Send>) -> Place {
        Place {
            addr,
            len,
            release: Mutex::new(Some(release)),
        }
    }

    pub fn addr(&self) -> NonNull<u8> {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a ring can be mapped here: page-aligned start and length.
    pub fn page_aligned(&self) -> bool {
        let p = page_size();
        (self.addr.as_ptr() as usize).is_multiple_of(p) && self.len.is_multiple_of(p)
    }

    /// Makes the range fresh zeroed private memory (also what undoes a
    /// failed or finished ring mapping).
    fn reset(&self) -> io::Result<()> {
        // SAFETY: the range is ours to replace (Place::new's contract);
        // MAP_FIXED swaps whatever is mapped there for anonymous memory.
        let p = unsafe {
            libc::mmap(
                self.addr.as_ptr().cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let f = self.release.get_mut().map(Option::take).unwrap_or(None);
        if let Some(f) = f {
            f();
        }
    }
}

/// A ring's memfd mapped at a [`Place`].
pub(crate) struct Placed {
    place: Place,
}

impl Placed {
    /// Maps `len` bytes of `fd` (shared, read/write) at the place's start.
    pub(crate) fn map(fd: BorrowedFd<'_>, len: usize, place: Place) -> io::Result<Placed> {
        if len > place.len || !place.page_aligned() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the range is ours to replace (Place::new's contract) and
        // len fits in it; fd is an open memfd of at least len bytes (the
        // caller checked its header against its size).
        let p = unsafe {
            libc::mmap(
                place.addr.as_ptr().cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // A failed MAP_FIXED may already have unmapped part of the range.
            let _ = place.reset();
            return Err(e);
        }
        Ok(Placed { place })
    }

    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.place.addr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.place.len
    }
}

impl Drop for Placed {
    fn drop(&mut self) {
        // Then `place` drops and gives the (now anonymous) range back. If
        // even this mmap failed the shared pages stay: still memory, only
        // shared with a daemon that no longer uses them.
        let _ = self.place.reset();
    }
}
