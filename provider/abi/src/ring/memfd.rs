//! The memory object behind a ring: a sealed memfd.
//!
//! The creator seals it against shrinking: a peer that could truncate the
//! file under our mapping would turn every later access into SIGBUS. The
//! attacher refuses any fd that lacks that seal.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use super::error::RingError;

/// Creates a memfd of `len` bytes, lets `init` write its initial contents,
/// then seals its size (and further sealing) for good.
pub fn create_sealed(
    name: &str,
    len: u64,
    init: impl FnOnce(&File) -> io::Result<()>,
) -> Result<File, RingError> {
    let cname = CString::new(name).map_err(|_| RingError::BadName)?;
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call;
    // the flags are plain bits.
    let raw =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        let err = io::Error::last_os_error();
        // The kernel rejects names over 249 bytes with EINVAL.
        return Err(match err.raw_os_error() {
            Some(libc::EINVAL) => RingError::BadName,
            _ => err.into(),
        });
    }
    // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    file.set_len(len)?;
    init(&file)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error().into());
    }
    Ok(file)
}

/// Fails unless `fd` is sealed so that its size can never shrink.
pub fn check_sealed(fd: impl AsFd) -> Result<(), RingError> {
    // SAFETY: F_GET_SEALS takes no argument and only reads the fd's seals; a
    // borrowed fd is open for the duration of the call.
    let seals = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(RingError::NotSealed);
    }
    Ok(())
}
