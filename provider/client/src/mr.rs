//! Memory regions, and [`MrBuf`]: an owned, registered buffer for Rust
//! programs and tests.

use std::ptr;
use std::sync::atomic::{fence, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::context::unexpected;
use super::error::{Error, Result};
use super::pd::Pd;
use super::wr::Sge;
use rxu_abi::proto::{Request, Response};

/// A registered memory region. Deregistered on drop (errors ignored) or by
/// [`Mr::dereg`].
pub struct Mr {
    pd: Pd,
    handle: u32,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    iova: u64,
    access: u32,
    live: bool,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("handle", &self.handle)
            .field("lkey", &self.lkey)
            .field("addr", &self.addr)
            .field("len", &self.len)
            .finish()
    }
}

/// Registers `[addr, addr+len)` of this process's memory in `pd` with
/// `access` (`ibv_access_flags`), as `ibv_reg_mr`.
///
/// # Safety
/// While registered, the daemon may write any byte of the range whenever a
/// local receive/READ/atomic or (with remote access) a peer says so — like
/// a NIC's DMA, behind the compiler's back. The caller must not hold Rust
/// references to those bytes across such writes; access them through raw
/// pointers (as [`MrBuf`] does). Memory unmapped while registered is safe
/// for this process: operations on it complete with an error.
pub unsafe fn reg_mr(pd: &Pd, addr: *mut u8, len: usize, access: u32) -> Result<Mr> {
    // SAFETY: reg_mr_iova's contract is this function's, which our caller
    // keeps.
    unsafe { reg_mr_iova(pd, addr, len, addr as usize as u64, access) }
}

/// As [`reg_mr`], with peers addressing the region as `[iova, iova+len)`.
///
/// # Safety
/// As [`reg_mr`].
pub unsafe fn reg_mr_iova(
    pd: &Pd,
    addr: *mut u8,
    len: usize,
    iova: u64,
    access: u32,
) -> Result<Mr> {
    let addr = addr as usize as u64;
    let len = len as u64;
    let req = Request::RegMr {
        pd: pd.handle(),
        addr,
        len,
        iova,
        access,
    };
    match pd.context().call(&req, &[])?.0 {
        Response::Mr { mr, lkey, rkey } => Ok(Mr {
            pd: pd.clone(),
            handle: mr,
            lkey,
            rkey,
            addr,
            len,
            iova,
            access,
            live: true,
        }),
        other => Err(unexpected("Mr", &other)),
    }
}

impl Mr {
    /// `ibv_import_mr`: MR `handle` of the context `pd`'s context imported
    /// (its keys and length; its address is not known here, 0). Dropping
    /// it releases nothing (`ibv_unimport_mr`); [`Mr::dereg`] destroys the
    /// shared MR, as on a kernel.
    pub fn import(pd: &Pd, handle: u32) -> Result<Mr> {
        match pd.context().call(&Request::ImportMr { mr: handle }, &[])?.0 {
            Response::ImportedMr {
                lkey, rkey, len, ..
            } => Ok(Mr {
                pd: pd.clone(),
                handle,
                lkey,
                rkey,
                addr: 0,
                len,
                iova: 0,
                access: 0,
                live: false,
            }),
            other => Err(unexpected("ImportedMr", &other)),
        }
    }

    pub fn handle(&self) -> u32 {
        self.handle
    }
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn iova(&self) -> u64 {
        self.iova
    }
    pub fn access(&self) -> u32 {
        self.access
    }
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// `ibv_rereg_mr`: a new PD, range and access flags, each when given
    /// (the keys stay). On failure nothing changed.
    ///
    /// # Safety
    /// With a new range, as [`reg_mr`] for `[addr, addr+len)`.
    pub unsafe fn rereg(
        &mut self,
        pd: Option<&Pd>,
        range: Option<(*mut u8, usize)>,
        access: Option<u32>,
    ) -> Result<()> {
        let mut flags = 0;
        if range.is_some() {
            flags |= 1;
        }
        if pd.is_some() {
            flags |= 2;
        }
        if access.is_some() {
            flags |= 4;
        }
        let (addr, len) = range.map_or((0, 0), |(a, l)| (a as usize as u64, l as u64));
        let req = Request::ReregMr {
            mr: self.handle,
            flags,
            pd: pd.map_or(0, Pd::handle),
            addr,
            len,
            access: access.unwrap_or(0),
        };
        match self.pd.context().call(&req, &[])?.0 {
            Response::Mr { lkey, rkey, .. } => {
                (self.lkey, self.rkey) = (lkey, rkey);
                if let Some(p) = pd {
                    self.pd = p.clone();
                }
                if range.is_some() {
                    (self.addr, self.len, self.iova) = (addr, len, addr);
                }
                if let Some(a) = access {
                    self.access = a;
                }
                Ok(())
            }
            other => Err(unexpected("Mr", &other)),
        }
    }

    fn dereg_inner(&mut self) -> Result<()> {
        self.pd
            .context()
            .call_ok(&Request::DeregMr { mr: self.handle })?;
        self.live = false;
        Ok(())
    }

    /// Deregisters now, reporting errors; on failure the MR is handed back.
    pub fn dereg(mut self) -> Result<(), (Mr, Error)> {
        match self.dereg_inner() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if self.live {
            let _ = self.dereg_inner();
        }
    }
}

/// A page-aligned anonymous mapping registered as an MR.
///
/// The daemon writes into it behind Rust's back (like DMA), so its bytes
/// are never exposed as a Rust slice: [`MrBuf::read`] and [`MrBuf::write`]
/// copy through raw pointers. Read results after polling the completion
/// that says the data arrived (the CQ ring's acquire ordering makes the
/// daemon's writes visible).
pub struct MrBuf {
    // Field order matters: the MR is deregistered before the unmap.
    mr: Mr,
    map: MmapRaw,
    len: usize,
}

impl MrBuf {
    /// Maps `len` zeroed bytes (rounded up to pages) and registers them.
    pub fn new(pd: &Pd, len: usize, access: u32) -> Result<MrBuf> {
        if len == 0 {
            return Err(Error::Invalid("zero-length buffer"));
        }
        let map: MmapRaw = MmapOptions::new().len(len).map_anon()?.into();
        // SAFETY: the mapping is ours and lives as long as the MR (field
        // order), and no Rust reference to its bytes is ever created.
        let mr = unsafe { reg_mr(pd, map.as_mut_ptr(), len, access)? };
        Ok(MrBuf { mr, map, len })
    }

    pub fn mr(&self) -> &Mr {
        &self.mr
    }
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Start of the buffer (for SGEs and for peers' remote_addr).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
    pub fn addr(&self) -> u64 {
        self.as_ptr() as usize as u64
    }

    /// An SGE for `len` bytes at `off`. Not checked here: the daemon checks
    /// every SGE against the MR.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr().wrapping_add(off as u64),
            length: len,
            lkey: self.lkey(),
        }
    }

    fn range(&self, off: usize, n: usize) -> Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::Invalid("range outside the buffer")),
        }
    }

    /// Copies `out.len()` bytes at `off` out of the buffer.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        self.range(off, out.len())?;
        fence(Ordering::Acquire);
        // SAFETY: `off..off+len` lies in the live mapping (checked above);
        // `out` is a distinct private buffer. The daemon may be writing the
        // same bytes (via /proc/self/mem): we read some mix of old and new
        // values of plain bytes, which is what a NIC's DMA gives as well.
        unsafe { ptr::copy_nonoverlapping(self.as_ptr().add(off), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into the buffer at `off`.
    pub fn write(&mut self, off: usize, data: &[u8]) -> Result<()> {
        self.range(off, data.len())?;
        // SAFETY: as in `read`; `&mut self` keeps other threads of this
        // process from copying into or out of the buffer concurrently.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(off), data.len()) };
        fence(Ordering::Release);
        Ok(())
    }

    /// Sets every byte to `byte`.
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole mapping of `len` bytes is ours; see `write`.
        unsafe { ptr::write_bytes(self.as_ptr(), byte, self.len) };
        fence(Ordering::Release);
    }

    /// The buffer's bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        let _ = self.read(0, &mut v);
        v
    }

    /// The native-endian u64 at `off` (atomics' results and targets).
    pub fn read_u64(&self, off: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    pub fn write_u64(&mut self, off: usize, v: u64) -> Result<()> {
        self.write(off, &v.to_ne_bytes())
    }
}
