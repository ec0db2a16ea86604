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
//! Memory windows (`mw.rs` keeps the table, the transport's
//! `qp::window` makes the verdicts) share the rkey space: a window's key
//! is 24 random index bits and 8 bits the binder picks, and no region key
//! has the upper 24 bits of a window's. A remote key that names no region
//! is looked up as a window, resolved to its region, and translated
//! there.
//!
//! Atomics are a pread, the arithmetic, and a pwrite. They are atomic
//! with respect to every other atomic through this device because the
//! daemon is single-threaded (IBV_ATOMIC_HCA), not with respect to the
//! client's CPU, and they operate on host-order 64-bit words.

pub mod access;
pub mod advise;
mod bounds;
mod combine;
mod fileio;
mod keys;
mod latency;
mod mapcheck;
mod mw;
mod readahead;
#[cfg(test)]
mod tests;
pub mod watch;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::qp::window::{MrView, MwBind, MwType, Window};
use transport::qp::{AtomicOp, MemError, Memory};

use crate::verbs::{MAX_MR, MAX_MW};
use combine::Combine;
use fileio::{read, write};
use keys::{KeyMap, KeySource};
use latency::Reservoir;
use mapcheck::MapSource;
use mw::Windows;
use readahead::ReadAhead;

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
    /// Memory windows are bound to the region (IBA 10.6.7.2.6).
    #[error("memory windows are bound to the region")]
    WindowsBound,
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
            // As rxe's dereg_mr.
            RegError::WindowsBound => libc::EINVAL,
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
    windows: Windows,
    keys: KeySource,
    registrations: u64,
    failures: u64,
    bytes: u64,
    latency: Reservoir,
    /// The rest of a multi-packet message's SGE, read with its first
    /// piece, for the rest of the send batch (`readahead.rs`).
    ahead: ReadAhead,
    /// Pieces written right after one another, kept back to be written
    /// in one pwrite (`combine.rs`).
    combine: Combine,
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
    /// How many clients have memory attached (table audits).
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    pub fn remove_client(&mut self, client: u32) {
        self.combine.flush();
        if self.clients.remove(&client).is_none() {
            return;
        }
        self.ahead.clear();
        self.windows.remove_client(client);
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
            if k != 0 && !self.mrs.contains_key(&k) && !self.windows.has_index(Window::index(k)) {
                return Ok(k);
            }
        }
        Err(RegError::NoResources("no free key"))
    }

    /// The client whose memory is the open file `fd` (the watchdog names
    /// an overdue access by its fd).
    pub fn client_with_mem_fd(&self, fd: i32) -> Option<u32> {
        use std::os::fd::AsRawFd;
        self.clients
            .iter()
            .find(|(_, c)| c.mem.as_raw_fd() == fd)
            .map(|(&id, _)| id)
    }

    /// Whether `client`'s process is gone (or going): its memory reads as
    /// end-of-file, where a live process's unmapped page 0 is EIO.
    pub fn client_gone(&self, client: u32) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return true;
        };
        let mut b = [0u8; 1];
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*c.mem);
        matches!(
            watch::memory(fd, 0, || c.mem.read_at(&mut b, 0)),
            (Ok(0), _)
        )
    }

    /// Makes `to` the owner of every region `from` registered (their
    /// memory stays `from`'s /proc/<pid>/mem): a client leaving a shared
    /// context hands its MRs to one that stays.
    pub fn reassign(&mut self, from: u32, to: u32) {
        for m in self.mrs.values_mut() {
            if m.info.client == from {
                m.info.client = to;
            }
        }
    }

    /// Deregisters the region with `lkey`, if `client` owns it and no
    /// window is bound to it.
    pub fn deregister(&mut self, client: u32, lkey: u32) -> Result<(), RegError> {
        // What was written through the region lands before it goes.
        self.combine.flush();
        match self.mrs.get(&lkey) {
            Some(m) if m.info.client == client => {}
            _ => return Err(RegError::NoSuchMr),
        }
        if self.windows.bound_to(lkey) > 0 {
            return Err(RegError::WindowsBound);
        }
        if let Some(m) = self.mrs.remove(&lkey) {
            self.bytes = self.bytes.saturating_sub(m.info.len);
        }
        Ok(())
    }

    /// `ibv_rereg_mr` of `client`'s region `key`: a new PD, a new range
    /// (`[addr, addr+len)`, addressed by peers at the same addresses) and
    /// new access flags, each when given; the keys stay. Accesses after
    /// the call see only the new region (a receive posted with the old
    /// addresses fails, as on hardware). Refused while windows are bound
    /// to it. The caller has checked that `pd` belongs to `client`.
    pub fn reregister(
        &mut self,
        client: u32,
        key: u32,
        pd: Option<u32>,
        range: Option<(u64, u64)>,
        access: Option<u32>,
    ) -> Result<(), RegError> {
        let c = self.clients.get(&client).ok_or(RegError::NoClient)?;
        let m = match self.mrs.get(&key) {
            Some(m) if m.info.client == client => m,
            _ => return Err(RegError::NoSuchMr),
        };
        if self.windows.bound_to(key) > 0 {
            return Err(RegError::WindowsBound);
        }
        let access = match access {
            Some(a) => access::check(a).map_err(RegError::Invalid)?,
            None => m.info.access,
        };
        let (addr, len, iova) = match range {
            Some((addr, len)) => {
                if len == 0 || addr.checked_add(len).is_none() {
                    return Err(RegError::Invalid("empty or wrapping range"));
                }
                (addr, len, addr)
            }
            None => (m.info.addr, m.info.len, m.info.iova),
        };
        // An on-demand region is not checked (as at registration); a
        // region that stops being one is, like a new range or new writes.
        let was_odp = m.info.access & access::ON_DEMAND != 0;
        let check = range.is_some() || was_odp || access & access::WRITABLE & !m.info.access != 0;
        if access & access::ON_DEMAND == 0 && check {
            let writable = access & access::WRITABLE != 0;
            mapcheck::check_mapped(&c.mem, &c.maps, addr, len, writable)
                .map_err(|_| RegError::Fault)?;
        }
        let old_len = m.info.len;
        if let Some(m) = self.mrs.get_mut(&key) {
            m.info.pd = pd.unwrap_or(m.info.pd);
            m.info.addr = addr;
            m.info.len = len;
            m.info.iova = iova;
            m.info.access = access;
        }
        self.bytes = self.bytes.saturating_sub(old_len).saturating_add(len);
        Ok(())
    }

    /// Allocates a memory window of `pd` for `client`; returns its rkey.
    /// The caller has checked that `pd` belongs to `client`.
    pub fn alloc_mw(&mut self, client: u32, pd: u32, ty: MwType) -> Result<u32, RegError> {
        if !self.clients.contains_key(&client) {
            return Err(RegError::NoClient);
        }
        if self.windows.len() >= MAX_MW as usize {
            return Err(RegError::NoResources("too many memory windows"));
        }
        // Bounded like fresh_key: an index clashes with probability
        // (windows + regions) / 2^24 per draw.
        for _ in 0..64 {
            let k = self
                .keys
                .next_key()
                .ok_or(RegError::NoResources("no randomness for a key"))?;
            let i = Window::index(k);
            let clash = i == 0
                || self.windows.has_index(i)
                || (0..=0xffu32).any(|lo| self.mrs.contains_key(&(i << 8 | lo)));
            if !clash {
                self.windows.insert(client, Window::new(pd, ty, k));
                return Ok(k);
            }
        }
        Err(RegError::NoResources("no free window key"))
    }

    /// Frees `client`'s window named by `rkey` (any of its keys); a bound
    /// window lets go of its region.
    pub fn dealloc_mw(&mut self, client: u32, rkey: u32) -> Result<(), RegError> {
        self.windows
            .remove(client, rkey)
            .map(|_| ())
            .ok_or(RegError::Invalid("no such memory window"))
    }

    /// QP `qpn` is destroyed: the type 2 windows bound through it are
    /// free again (the QP number may be given to another QP).
    pub fn release_qp(&mut self, qpn: u32) {
        self.windows.release_qp(qpn);
    }

    /// The window a key names (by index), for status and tests.
    pub fn mw(&self, rkey: u32) -> Option<Window> {
        self.windows.get(rkey).copied()
    }

    /// Number of memory windows `client` has allocated.
    pub fn client_mws(&self, client: u32) -> u32 {
        u32::try_from(self.windows.client_count(client)).unwrap_or(u32::MAX)
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

    /// Region and client address of a remote (rkey) access by QP `qpn`:
    /// through a region's key, or through a window onto one.
    fn remote(
        &self,
        pd: u32,
        qpn: u32,
        key: u32,
        va: u64,
        n: u64,
        need: u32,
    ) -> Result<(&Mr, u64), MemError> {
        let (m, va) = if self.mrs.contains_key(&key) {
            (self.lookup(pd, key, need)?, va)
        } else {
            let w = self.windows.get(key).ok_or(MemError::InvalidKey)?;
            let (mr, at) = w.resolve(pd, qpn, key, va, n, need)?;
            // The window's access flags decide; the region must still be
            // there, valid and of the PD.
            (self.lookup(pd, mr, 0)?, at)
        };
        let i = &m.info;
        let at = bounds::translate(i.addr, i.iova, i.len, va, n)?;
        Ok((m, at))
    }
}

impl DeviceMemory {
    /// A checked read at file offset `at` of `mem` (the region ends at
    /// `end`): from the read-ahead copy, or with the bytes ahead read
    /// along, or alone.
    fn read_kept(
        &mut self,
        mem: &Arc<File>,
        at: u64,
        dst: &mut [u8],
        ahead: u64,
        end: u64,
    ) -> Result<(), MemError> {
        self.combine.flush();
        if self.ahead.serve(mem, at, dst) || self.ahead.fill(mem, at, dst, ahead, end) {
            return Ok(());
        }
        read(mem, at, dst)
    }

    /// Reads served from the read-ahead copy since start.
    pub fn read_ahead_hits(&self) -> u64 {
        self.ahead.hits
    }

    /// (pieces written combined with the one before, combined writes that
    /// failed) since start.
    pub fn combine_counts(&self) -> (u64, u64) {
        (self.combine.combined, self.combine.failed)
    }
}

impl Memory for DeviceMemory {
    fn read_local(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        self.combine.flush();
        let (m, at) = self.local(pd, lkey, addr, dst.len(), 0)?;
        read(&m.mem, at, dst)
    }

    fn write_local(&mut self, pd: u32, lkey: u32, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let (m, at) = self.local(pd, lkey, addr, src.len(), access::LOCAL_WRITE)?;
        let mem = Arc::clone(&m.mem);
        self.ahead.wrote(&mem);
        self.combine.write(mem, at, src)
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
        self.remote(pd, qpn, rkey, va, len, need).map(|_| ())
    }

    fn read_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        dst: &mut [u8],
    ) -> Result<(), MemError> {
        self.combine.flush();
        let (m, at) = self.remote(pd, qpn, rkey, va, dst.len() as u64, access::REMOTE_READ)?;
        read(&m.mem, at, dst)
    }

    fn write_remote(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        src: &[u8],
    ) -> Result<(), MemError> {
        let (m, at) = self.remote(pd, qpn, rkey, va, src.len() as u64, access::REMOTE_WRITE)?;
        let mem = Arc::clone(&m.mem);
        self.ahead.wrote(&mem);
        self.combine.write(mem, at, src)
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
        self.combine.flush();
        let (m, at) = self.remote(pd, qpn, rkey, va, 8, op.needs())?;
        let mem = Arc::clone(&m.mem);
        self.ahead.wrote(&mem);
        let mut b = [0u8; 8];
        read(&mem, at, &mut b)?;
        let old = u64::from_ne_bytes(b);
        let new = op.apply(old);
        // An unchanged word is not written back: same result, and no
        // window in which a CPU store of the client could be overwritten.
        if new != old {
            write(&mem, at, &new.to_ne_bytes())?;
        }
        Ok(old)
    }

    /// LOCAL_INV and SEND with invalidate. A region stops answering to
    /// its key, local or remote, until deregistered: unlike rxe, which
    /// invalidates only fast-registration MRs, any region may be (rxu has
    /// no fast registration), unless windows are bound to it. A window
    /// follows [`Window::invalidate`]. An unknown or already invalid key
    /// is an error.
    fn invalidate(&mut self, pd: u32, _qpn: u32, key: u32) -> Result<(), MemError> {
        if self.mrs.contains_key(&key) {
            self.lookup(pd, key, 0)?;
            if self.windows.bound_to(key) > 0 {
                return Err(MemError::AccessDenied);
            }
            if let Some(m) = self.mrs.get_mut(&key) {
                m.info.valid = false;
            }
            return Ok(());
        }
        let w = self.windows.get_mut(key).ok_or(MemError::InvalidKey)?;
        w.invalidate(pd, key).map(|_| ())
    }

    fn read_local_ahead(
        &mut self,
        pd: u32,
        lkey: u32,
        addr: u64,
        dst: &mut [u8],
        ahead: u64,
    ) -> Result<(), MemError> {
        let (m, at) = self.local(pd, lkey, addr, dst.len(), 0)?;
        let (mem, end) = (Arc::clone(&m.mem), m.info.addr.saturating_add(m.info.len));
        self.read_kept(&mem, at, dst, ahead, end)
    }

    fn read_remote_ahead(
        &mut self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        dst: &mut [u8],
        ahead: u64,
    ) -> Result<(), MemError> {
        let n = dst.len() as u64;
        let (m, at) = self.remote(pd, qpn, rkey, va, n, access::REMOTE_READ)?;
        let (mem, end) = (Arc::clone(&m.mem), m.info.addr.saturating_add(m.info.len));
        self.read_kept(&mem, at, dst, ahead, end)
    }

    fn end_batch(&mut self) {
        self.combine.flush();
        self.ahead.clear();
    }

    fn flush_writes(&mut self) {
        self.combine.flush();
    }

    fn bind_mw(&mut self, pd: u32, qpn: u32, b: &MwBind) -> Result<(), MemError> {
        let mr = self.mrs.get(&b.mr_lkey).and_then(|m| {
            m.info.valid.then_some(MrView {
                pd: m.info.pd,
                iova: m.info.iova,
                len: m.info.len,
                access: m.info.access,
            })
        });
        let w = self
            .windows
            .get_mut(b.mw_rkey)
            .ok_or(MemError::InvalidKey)?;
        w.check_bind(pd, b, mr)?;
        w.bind(qpn, b);
        Ok(())
    }
}
