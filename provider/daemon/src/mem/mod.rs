//! Registered client memory, as the daemon reaches it.
//!
//! Each client hands the daemon its `/proc/self/mem` (opened O_RDWR by the
//! client itself, so no ptrace permission is needed by the daemon) at
//! `Hello`; the daemon reads and writes registered memory with
//! pread/pwrite on it. Memory the client unmapped gives EIO/EFAULT, which
//! becomes [`MemError::Unmapped`] — an error completion, never a crash;
//! end-of-file once the client is exiting becomes [`MemError::Gone`].
//! PD numbers are unique across clients, so a key of another client's PD
//! never passes the PD check. Keys are random 32-bit values (not
//! guessable), lkey == rkey, unique in the device.
//!
//! Every access checks, before one byte moves: the key names a valid
//! region, the region's PD is the QP's, the access flags allow it, and
//! the whole range lies in the region (overflow-safe). Local accesses
//! (lkeys) address the region by the client's own addresses; remote ones
//! (rkeys) by its iova (`va - iova + addr`).
//!
//! Like ODP rather than pinned memory, an access reaches whatever the
//! client has mapped at that address at the time of the access: a
//! registration pins nothing. So IBV_ACCESS_ON_DEMAND regions are ordinary
//! regions that skip the registration-time check that the range is
//! mapped (a kernel ODP registration does not fault pages in either), and
//! the implicit ODP region (`ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)`)
//! is the region [0, 2^64 - 1) of the client's address space. An access
//! to memory that is not mapped then is an access error (a NAK with
//! "remote access error" to a peer, an error completion locally), never
//! a fault in rxud. `ibv_advise_mr` is in `advise.rs`.
//!
//! Atomics are a pread, the arithmetic, and a pwrite. They are atomic
//! with respect to every other atomic through this device because the
//! daemon is single-threaded (IBV_ATOMIC_HCA), not with respect to the
//! client's CPU, and they operate on host-order 64-bit words.

pub mod access;
pub mod advise;
mod bounds;
mod keys;
mod latency;
mod mapcheck;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::qp::{AtomicOp, MemError, Memory};

use crate::verbs::MAX_MR;
use keys::{KeyMap, KeySource};
use latency::Reservoir;
use mapcheck::MapSource;

/// The page size ranges are rounded to (x86-64's base page).
const PAGE: u64 = 4096;

/// Keys of a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    pub lkey: u32,
    pub rkey: u32,
}

/// Why a registration was refused (maps to an errno for the client).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegError {
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("no such memory region")]
    NoSuchMr,
    #[error("memory not accessible in the client")]
    Fault,
    #[error("unknown client")]
    NoClient,
    /// Device limit reached (or no randomness for a key).
    #[error("out of resources: {0}")]
    NoResources(&'static str),
}

impl RegError {
    /// errno for the client.
    pub fn errno(self) -> i32 {
        match self {
            RegError::Invalid(_) => libc::EINVAL,
            RegError::NoSuchMr => libc::EINVAL,
            RegError::Fault => libc::EFAULT,
            RegError::NoClient => libc::EINVAL,
            RegError::NoResources(_) => libc::ENOMEM,
        }
    }
}

/// Registration figures for `rxu stats` (issue 6 extends them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Regions registered now.
    pub mrs: u64,
    /// Bytes registered now.
    pub bytes: u64,
    /// Successful registrations since start.
    pub registrations: u64,
    /// Refused registrations since start.
    pub failures: u64,
    /// Median / 99th percentile time of a successful registration, in
    /// nanoseconds, over a bounded uniform sample (0 before the first).
    pub reg_p50_ns: u64,
    pub reg_p99_ns: u64,
}

/// What a region is, for status and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    pub client: u32,
    pub pd: u32,
    pub addr: u64,
    pub len: u64,
    pub iova: u64,
    pub access: u32,
    pub valid: bool,
}

struct Client {
    mem: Arc<File>,
    maps: MapSource,
}

struct Mr {
    info: MrInfo,
    /// The owner's /proc/self/mem, shared so an access is one lookup.
    mem: Arc<File>,
}

/// All registered memory of a device.
#[derive(Default)]
pub struct DeviceMemory {
    clients: HashMap<u32, Client>,
    mrs: KeyMap<Mr>,
    keys: KeySource,
    registrations: u64,
    failures: u64,
    bytes: u64,
    latency: Reservoir,
}

impl DeviceMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// A client connected; `mem` is its /proc/self/mem. A client id that is
    /// already present is replaced, and its regions dropped first.
    pub fn add_client(&mut self, client: u32, mem: OwnedFd) {
        self.remove_client(client);
        let mem = File::from(mem);
        let maps = MapSource::for_mem(&mem);
        let mem = Arc::new(mem);
        self.clients.insert(client, Client { mem, maps });
    }

    /// A client left: forget it and every region it registered.
    pub fn remove_client(&mut self, client: u32) {
        if self.clients.remove(&client).is_none() {
            return;
        }
        let mut freed = 0u64;
        self.mrs.retain(|_, m| {
            let keep = m.info.client != client;
            if !keep {
                freed = freed.saturating_add(m.info.len);
            }
            keep
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    /// Registers `[addr, addr+len)` of `client`'s memory in `pd`; remote
    /// peers address it as `[iova, iova+len)`. Checks the range is mapped
    /// (and writable when `access` writes). The caller has checked that
    /// `pd` belongs to `client`.
    pub fn register(
        &mut self,
        client: u32,
        pd: u32,
        addr: u64,
        len: u64,
        iova: u64,
        access: u32,
    ) -> Result<MrKeys, RegError> {
        let start = Instant::now();
        let r = self.try_register(client, pd, addr, len, iova, access);
        match r {
            Ok(_) => {
                self.registrations += 1;
                self.latency.record(start.elapsed());
            }
            Err(_) => self.failures += 1,
        }
        r
    }

    fn try_register(
        &mut self,
        client: u32,
        pd: u32,
        addr: u64,
        len: u64,
        iova: u64,
        access: u32,
    ) -> Result<MrKeys, RegError> {
        let c = self.clients.get(&client).ok_or(RegError::NoClient)?;
        let access = access::check(access).map_err(RegError::Invalid)?;
        if len == 0 {
            return Err(RegError::Invalid("zero-length region"));
        }
        if addr.checked_add(len).is_none() {
            return Err(RegError::Invalid("address range wraps around"));
        }
        if iova.checked_add(len).is_none() {
            return Err(RegError::Invalid("iova range wraps around"));
        }
        if self.mrs.len() >= MAX_MR as usize {
            return Err(RegError::NoResources("too many memory regions"));
        }
        if access & access::ON_DEMAND != 0 {
            // Implicit ODP: the whole address space, at iova 0 (as mlx5).
            if addr == 0 && len == u64::MAX && iova != 0 {
                return Err(RegError::Invalid("implicit ODP region with a nonzero iova"));
            }
        } else {
            // As ib_umem_get: the page-aligned end must not wrap.
            if (addr + len).checked_next_multiple_of(PAGE).is_none() {
                return Err(RegError::Invalid("address range wraps around"));
            }
            let writable = access & access::WRITABLE != 0;
            mapcheck::check_mapped(&c.mem, &c.maps, addr, len, writable)
                .map_err(|_| RegError::Fault)?;
        }
        let mem = Arc::clone(&c.mem);
        let key = self.fresh_key()?;
        let info = MrInfo {
            client,
            pd,
            addr,
            len,
            iova,
            access,
            valid: true,
        };
        self.mrs.insert(key, Mr { info, mem });
        self.bytes = self.bytes.saturating_add(len);
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// A random key no region has. 0 is never used: it is too easily sent
    /// by mistake. With at most 2^20 of 2^32 keys taken, each draw is
    /// free with probability > 0.999, so the bound is never reached.
    fn fresh_key(&mut self) -> Result<u32, RegError> {
        for _ in 0..64 {
            let k = self
                .keys
                .next_key()
                .ok_or(RegError::NoResources("no randomness for a key"))?;
            if k != 0 && !self.mrs.contains_key(&k) {
                return Ok(k);
            }
        }
        Err(RegError::NoResources("no free key"))
    }

    /// Deregisters the region with `lkey`, if `client` owns it.
    pub fn deregister(&mut self, client: u32, lkey: u32) -> Result<(), RegError> {
        match self.mrs.get(&lkey) {
            Some(m) if m.info.client == client => {}
            _ => return Err(RegError::NoSuchMr),
        }
        if let Some(m) = self.mrs.remove(&lkey) {
            self.bytes = self.bytes.saturating_sub(m.info.len);
        }
        Ok(())
    }

    pub fn stats(&self) -> MemStats {
        let ns =
            |d: Option<Duration>| d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        MemStats {
            mrs: self.mrs.len() as u64,
            bytes: self.bytes,
            registrations: self.registrations,
            failures: self.failures,
            reg_p50_ns: ns(self.latency.quantile(0.50)),
            reg_p99_ns: ns(self.latency.quantile(0.99)),
        }
    }

    /// The region with key `key`, if any.
    pub fn mr(&self, key: u32) -> Option<MrInfo> {
        self.mrs.get(&key).map(|m| m.info)
    }

    /// Number of regions `client` has registered.
    pub fn client_mrs(&self, client: u32) -> u32 {
        let n = self
            .mrs
            .values()
            .filter(|m| m.info.client == client)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// A valid region of `pd` under `key` that allows `need`.
    fn lookup(&self, pd: u32, key: u32, need: u32) -> Result<&Mr, MemError> {
        let m = self.mrs.get(&key).ok_or(MemError::InvalidKey)?;
        if !m.info.valid {
            return Err(MemError::InvalidKey);
        }
        if m.info.pd != pd {
            return Err(MemError::WrongPd);
        }
        if m.info.access & need != need {
            return Err(MemError::AccessDenied);
        }
        Ok(m)
    }

    /// Region and client address of a local (lkey) access.
    fn local(
        &self,
        pd: u32,
        key: u32,
        addr: u64,
        n: usize,
        need: u32,
    ) -> Result<(&Mr, u64), MemError> {
        let m = self.lookup(pd, key, need)?;
        let i = &m.info;
        let at = bounds::translate(i.addr, i.addr, i.len, addr, n as u64)?;
        Ok((m, at))
    }

    /// Region and client address of a remote (rkey) access.
    fn remote(
        &self,
        pd: u32,
        key: u32,
        va: u64,
        n: u64,
        need: u32,
    ) -> Result<(&Mr, u64), MemError> {
        let m = self.lookup(pd, key, need)?;
        let i = &m.info;
        let at = bounds::translate(i.addr, i.iova, i.len, va, n)?;
        Ok((m, at))
    }
}

/// A failed pread/pwrite on a client's /proc/<pid>/mem. The kernel
/// answers EIO for an address the process has not mapped, but 0 bytes
/// (end of file) once the process has no address space at all: it is
/// exiting, and its connection (so its QPs) closes a moment later. That
/// is [`MemError::Gone`], which the transport answers with silence rather
/// than a "remote access" NAK that would blame the peer.
fn mem_error(e: &std::io::Error) -> MemError {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::WriteZero => MemError::Gone,
        _ => MemError::Unmapped,
    }
}

fn read(mem: &File, at: u64, dst: &mut [u8]) -> Result<(), MemError> {
    if dst.is_empty() {
        return Ok(());
    }
    mem.read_exact_at(dst, at).map_err(|e| mem_error(&e))
}

fn write(mem: &File, at: u64, src: &[u8]) -> Result<(), MemError> {
    if src.is_empty() {
        return Ok(());
    }
    mem.write_all_at(src, at).map_err(|e| mem_error(&e))
}

impl Memory for DeviceMemory {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        let (m, at) = self.local(pd, lkey, addr, dst.len(), 0)?;
        read(&m.mem, at, dst)
    }

    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let (m, at) = self.local(pd, lkey, addr, src.len(), access::LOCAL_WRITE)?;
        write(&m.mem, at, src)
    }

    fn check_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(), MemError> {
        self.remote(pd, rkey, va, len, need).map(|_| ())
    }

    fn read_remote(&mut self, pd: u32, rkey: u32, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (m, at) = self.remote(pd, rkey, va, dst.len() as u64, access::REMOTE_READ)?;
        read(&m.mem, at, dst)
    }

    fn write_remote(&mut self, pd: u32, rkey: u32, va: u64, src: &[u8]) -> Result<(), MemError> {
        let (m, at) = self.remote(pd, rkey, va, src.len() as u64, access::REMOTE_WRITE)?;
        write(&m.mem, at, src)
    }

    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, MemError> {
        if !va.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let (m, at) = self.remote(pd, rkey, va, 8, op.needs())?;
        let mut b = [0u8; 8];
        read(&m.mem, at, &mut b)?;
        let old = u64::from_ne_bytes(b);
        let new = op.apply(old);
        // An unchanged word is not written back: same result, and no
        // window in which a CPU store of the client could be overwritten.
        if new != old {
            write(&m.mem, at, &new.to_ne_bytes())?;
        }
        Ok(old)
    }

    /// SEND with invalidate: the region stops answering to its key, local
    /// or remote, until deregistered. Unlike rxe, which invalidates only
    /// fast-registration MRs, any region may be invalidated (rxu has no
    /// fast registration). An unknown or already invalid key is an error.
    fn invalidate_remote(&mut self, pd: u32, rkey: u32) -> Result<(), MemError> {
        self.lookup(pd, rkey, 0)?;
        if let Some(m) = self.mrs.get_mut(&rkey) {
            m.info.valid = false;
        }
        Ok(())
    }
}
