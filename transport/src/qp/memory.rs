//! Memory access through a trait, so the state machines never touch
//! memory themselves: tests use plain buffers ([`BufferMemory`]), the
//! daemon uses registered client memory.

pub use super::mem_error::MemError;
use super::types::access;
use super::window::{MrView, MwBind, MwType, Window};
use std::collections::HashMap;

/// An atomic operation on 8 bytes of remote memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    CmpSwap {
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        add: u64,
    },
    /// ATOMIC WRITE: store the value, return the old one.
    Write {
        value: u64,
    },
}

impl AtomicOp {
    /// The access flag the target region needs for this operation.
    pub const fn needs(self) -> u32 {
        match self {
            AtomicOp::Write { .. } => access::REMOTE_WRITE,
            _ => access::REMOTE_ATOMIC,
        }
    }

    /// The value the 8-byte word holds after the operation, given `old`.
    pub const fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::CmpSwap { compare, swap } if old == compare => swap,
            AtomicOp::CmpSwap { .. } => old,
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            AtomicOp::Write { value } => value,
        }
    }
}

/// Memory as the transport sees it. Local accesses go through lkeys,
/// remote ones through rkeys (of a region, or of a memory window: then
/// the window's rules of [`super::window`] apply, and `qpn`, the QP the
/// request came to, matters for type 2 windows); every call checks key,
/// PD, bounds and access flags before a byte moves.
pub trait Memory {
    /// Copies `dst.len()` bytes from local address `addr` under `lkey`.
    fn read_local(&mut self, pd: u32, lkey: u32, addr: u64, dst: &mut [u8])
        -> Result<(), MemError>;
    /// Copies `src` to local address `addr` under `lkey` (needs LOCAL_WRITE).
    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError>;
    /// Checks that `len` bytes at `va` under `rkey` may be accessed with
    /// `need` (bits of [`access`]) by QP `qpn` of `pd`.
    fn check_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(), MemError>;
    /// Remote read (needs REMOTE_READ).
    fn read_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError>;
    /// Remote write (needs REMOTE_WRITE).
    fn write_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        src: &[u8],
    ) -> Result<(), MemError>;
    /// Remote atomic on the 8 bytes at `va` (needs REMOTE_ATOMIC, or
    /// REMOTE_WRITE for [`AtomicOp::Write`]); returns the original value.
    fn atomic_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError>;
    /// Invalidates `key` for QP `qpn` of `pd`: LOCAL_INV, or a SEND with
    /// invalidate that arrived.
    fn invalidate(&mut self, pd: u32, qpn: u32, key: u32) -> Result<(), MemError>;
    /// Binds a memory window (BIND_MW) through QP `qpn` of `pd`.
    fn bind_mw(&mut self, pd: u32, qpn: u32, bind: &MwBind) -> Result<(), MemError>;

    /// [`Memory::read_local`], saying that the `ahead` bytes after `dst`
    /// (the rest of the same SGE) are read next: an implementation whose
    /// every access has a high fixed cost may read them now and keep them
    /// until [`Memory::end_batch`].
    fn read_local_ahead(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        dst: &mut [u8],
        ahead: u64,
    ) -> Result<(), MemError> {
        let _ = ahead;
        self.read_local(pd, lkey, addr, dst)
    }

    /// [`Memory::read_remote`] with the same hint (the rest of a READ
    /// response stream).
    fn read_remote_ahead(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        dst: &mut [u8],
        ahead: u64,
    ) -> Result<(), MemError> {
        let _ = ahead;
        self.read_remote(pd, qpn, rkey, va, dst)
    }

    /// A send batch is built: whatever `*_ahead` kept is dropped, so that
    /// no later batch sees memory older than its WQEs; writes kept back
    /// are done (as [`Memory::flush_writes`]).
    fn end_batch(&mut self) {}

    /// Writes an implementation kept back to combine them are done now.
    /// The endpoint calls it before it reports a completion; a driver
    /// after each receive batch, before anything is sent.
    fn flush_writes(&mut self) {}
}

/// A registered region backed by a `Vec<u8>`, for tests and benches.
#[derive(Clone, Debug)]
pub struct Region {
    pub pd: u32,
    pub addr: u64,
    pub data: Vec<u8>,
    pub access: u32,
    pub valid: bool,
}

/// [`Memory`] over plain buffers: regions keyed by key (lkey == rkey),
/// windows by the upper 24 bits of their rkey.
#[derive(Clone, Debug, Default)]
pub struct BufferMemory {
    regions: HashMap<u32, Region>,
    windows: HashMap<u32, Window>,
    next_key: u32,
    /// Simulates an owner that exited: every access that passes the key,
    /// PD, access and bounds checks then fails with [`MemError::Gone`].
    pub gone: bool,
}

impl BufferMemory {
    pub fn new() -> Self {
        BufferMemory {
            regions: HashMap::new(),
            windows: HashMap::new(),
            next_key: 0x1000,
            gone: false,
        }
    }

    /// Registers `data` at virtual address `addr`; returns its key.
    pub fn register(&mut self, pd: u32, addr: u64, data: Vec<u8>, access: u32) -> u32 {
        // Keys are spread out so that tests catch a key confused with another.
        self.next_key = self.next_key.wrapping_add(0x0101_0107);
        let key = self.next_key;
        self.regions.insert(
            key,
            Region {
                pd,
                addr,
                data,
                access,
                valid: true,
            },
        );
        key
    }

    /// Allocates a memory window of `pd` (like alloc_mw); returns its rkey.
    pub fn alloc_mw(&mut self, pd: u32, ty: MwType) -> u32 {
        loop {
            self.next_key = self.next_key.wrapping_add(0x0101_0107);
            let rkey = self.next_key;
            let i = Window::index(rkey);
            let clash = self.regions.keys().any(|k| Window::index(*k) == i);
            if !clash && !self.windows.contains_key(&i) {
                self.windows.insert(i, Window::new(pd, ty, rkey));
                return rkey;
            }
        }
    }

    /// The window with key `rkey` (current or not), if allocated.
    pub fn window(&self, rkey: u32) -> Option<&Window> {
        self.windows.get(&Window::index(rkey))
    }

    /// Frees a window (like dealloc_mw).
    pub fn dealloc_mw(&mut self, rkey: u32) -> Option<Window> {
        self.windows.remove(&Window::index(rkey))
    }

    /// Removes a region (like dereg_mr).
    pub fn deregister(&mut self, key: u32) -> Option<Region> {
        self.regions.remove(&key)
    }

    pub fn region(&self, key: u32) -> Option<&Region> {
        self.regions.get(&key)
    }

    pub fn region_mut(&mut self, key: u32) -> Option<&mut Region> {
        self.regions.get_mut(&key)
    }

    /// A remote key: a region's, or a window's (resolved to its region,
    /// whose own access flags then do not matter).
    fn find_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        key: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(&mut Region, usize), MemError> {
        if self.regions.contains_key(&key) {
            return self.find(pd, key, va, len, need);
        }
        let w = self
            .windows
            .get(&Window::index(key))
            .ok_or(MemError::InvalidKey)?;
        let (mr, at) = w.resolve(pd, qpn, key, va, len, need)?;
        self.find(pd, mr, at, len, 0)
    }

    /// [`BufferMemory::find_remote`] for an access that moves data.
    fn data_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        key: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(&mut Region, usize), MemError> {
        let gone = self.gone;
        let found = self.find_remote(pd, qpn, key, va, len, need)?;
        if gone {
            return Err(MemError::Gone);
        }
        Ok(found)
    }

    fn find(
        &mut self,
        pd: u32,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&mut Region, usize), MemError> {
        let r = self.regions.get_mut(&key).ok_or(MemError::InvalidKey)?;
        if !r.valid {
            return Err(MemError::InvalidKey);
        }
        if r.pd != pd {
            return Err(MemError::WrongPd);
        }
        if r.access & need != need {
            return Err(MemError::AccessDenied);
        }
        let off = addr.checked_sub(r.addr).ok_or(MemError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > r.data.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok((r, off as usize))
    }

    /// [`BufferMemory::find`] for an access that moves data.
    fn data(
        &mut self,
        pd: u32,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&mut Region, usize), MemError> {
        let gone = self.gone;
        let found = self.find(pd, key, addr, len, need)?;
        if gone {
            return Err(MemError::Gone);
        }
        Ok(found)
    }
}

impl Memory for BufferMemory {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        let (r, off) = self.data(pd, lkey, addr, dst.len() as u64, 0)?;
        dst.copy_from_slice(&r.data[off..off + dst.len()]);
        Ok(())
    }
    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let (r, off) = self.data(pd, lkey, addr, src.len() as u64, access::LOCAL_WRITE)?;
        r.data[off..off + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn check_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(), MemError> {
        self.find_remote(pd, qpn, rkey, va, len, need).map(|_| ())
    }
    fn read_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        let n = dst.len() as u64;
        let (r, off) = self.data_remote(pd, qpn, rkey, va, n, access::REMOTE_READ)?;
        dst.copy_from_slice(&r.data[off..off + dst.len()]);
        Ok(())
    }
    fn write_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        src: &[u8],
    ) -> Result<(), MemError> {
        let n = src.len() as u64;
        let (r, off) = self.data_remote(pd, qpn, rkey, va, n, access::REMOTE_WRITE)?;
        r.data[off..off + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn atomic_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (r, off) = self.data_remote(pd, qpn, rkey, va, 8, op.needs())?;
        let cell = &mut r.data[off..off + 8];
        let mut b = [0u8; 8];
        b.copy_from_slice(cell);
        // Atomics operate on host-order 64-bit words, as the NIC does on x86.
        let old = u64::from_ne_bytes(b);
        let new = op.apply(old);
        cell.copy_from_slice(&new.to_ne_bytes());
        Ok(old)
    }
    fn invalidate(&mut self, pd: u32, _qpn: u32, key: u32) -> Result<(), MemError> {
        if let Some(r) = self.regions.get_mut(&key) {
            if r.pd != pd {
                return Err(MemError::WrongPd);
            }
            r.valid = false;
            return Ok(());
        }
        let w = self
            .windows
            .get_mut(&Window::index(key))
            .ok_or(MemError::InvalidKey)?;
        w.invalidate(pd, key).map(|_| ())
    }
    fn bind_mw(&mut self, pd: u32, qpn: u32, b: &MwBind) -> Result<(), MemError> {
        let mr = self.regions.get(&b.mr_lkey).and_then(|r| {
            r.valid.then_some(MrView {
                pd: r.pd,
                iova: r.addr,
                len: r.data.len() as u64,
                access: r.access,
            })
        });
        let w = self
            .windows
            .get_mut(&Window::index(b.mw_rkey))
            .ok_or(MemError::InvalidKey)?;
        w.check_bind(pd, b, mr)?;
        w.bind(qpn, b);
        Ok(())
    }
}
