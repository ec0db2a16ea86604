//! Registered client memory, as the daemon reaches it.
//!
//! CONTRACT (used by the daemon; bodies filled in by the memory work).
//! Each client hands the daemon its `/proc/self/mem` (opened O_RDWR by the
//! client itself, so no ptrace permission is needed by the daemon) at
//! `Hello`; the daemon reads and writes registered memory with
//! pread/pwrite on it. Memory the client unmapped gives EIO/EFAULT, which
//! becomes [`MemError::Unmapped`] — an error completion, never a crash.
//! PD numbers are unique across clients, so a key of another client's PD
//! never passes the PD check. Keys are random 32-bit values (not
//! guessable), lkey == rkey, unique in the device.

use std::os::fd::OwnedFd;
use transport::qp::{AtomicOp, MemError, Memory};

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
}

impl RegError {
    /// errno for the client.
    pub fn errno(self) -> i32 {
        match self {
            RegError::Invalid(_) => libc::EINVAL,
            RegError::NoSuchMr => libc::EINVAL,
            RegError::Fault => libc::EFAULT,
            RegError::NoClient => libc::EINVAL,
        }
    }
}

/// Registration figures for `rxu stats` (issue 6 extends them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    pub mrs: u64,
    pub bytes: u64,
    pub registrations: u64,
    pub failures: u64,
}

/// All registered memory of a device.
#[derive(Default)]
pub struct DeviceMemory {}

impl DeviceMemory {
    pub fn new() -> Self {
        DeviceMemory {}
    }
    /// A client connected; `mem` is its /proc/self/mem.
    pub fn add_client(&mut self, _client: u32, _mem: OwnedFd) {
        unimplemented!("memory work")
    }
    /// A client left: forget it and every region it registered.
    pub fn remove_client(&mut self, _client: u32) {
        unimplemented!("memory work")
    }
    /// Registers `[addr, addr+len)` of `client`'s memory in `pd`; remote
    /// peers address it as `[iova, iova+len)`. Checks the range is mapped.
    pub fn register(
        &mut self,
        _client: u32,
        _pd: u32,
        _addr: u64,
        _len: u64,
        _iova: u64,
        _access: u32,
    ) -> Result<MrKeys, RegError> {
        unimplemented!("memory work")
    }
    /// Deregisters the region with `lkey`, if `client` owns it.
    pub fn deregister(&mut self, _client: u32, _lkey: u32) -> Result<(), RegError> {
        unimplemented!("memory work")
    }
    pub fn stats(&self) -> MemStats {
        unimplemented!("memory work")
    }
}

impl Memory for DeviceMemory {
    fn read_local(
        &mut self,
        _pd: u32,
        _lkey: u32,
        _addr: u64,
        _dst: &mut [u8],
    ) -> Result<(), MemError> {
        unimplemented!("memory work")
    }
    fn write_local(
        &mut self,
        _pd: u32,
        _lkey: u32,
        _addr: u64,
        _src: &[u8],
    ) -> Result<(), MemError> {
        unimplemented!("memory work")
    }
    fn check_remote(
        &mut self,
        _pd: u32,
        _rkey: u32,
        _va: u64,
        _len: u64,
        _need: u32,
    ) -> Result<(), MemError> {
        unimplemented!("memory work")
    }
    fn read_remote(
        &mut self,
        _pd: u32,
        _rkey: u32,
        _va: u64,
        _dst: &mut [u8],
    ) -> Result<(), MemError> {
        unimplemented!("memory work")
    }
    fn write_remote(
        &mut self,
        _pd: u32,
        _rkey: u32,
        _va: u64,
        _src: &[u8],
    ) -> Result<(), MemError> {
        unimplemented!("memory work")
    }
    fn atomic_remote(
        &mut self,
        _pd: u32,
        _rkey: u32,
        _va: u64,
        _op: AtomicOp,
    ) -> Result<u64, MemError> {
        unimplemented!("memory work")
    }
    fn invalidate_remote(&mut self, _pd: u32, _rkey: u32) -> Result<(), MemError> {
        unimplemented!("memory work")
    }
}
