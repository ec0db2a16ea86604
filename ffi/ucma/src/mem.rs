//! Copies to and from the application's memory through user pointers of
//! ucma commands, with the kernel's `copy_{to,from}_user` behaviour: a bad
//! pointer is EFAULT, never a crash. `process_vm_{readv,writev}` on our
//! own pid does the check in the kernel.

use crate::command::Errno;

fn iov(addr: usize, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    }
}

/// Whether the process_vm calls are usable here (a seccomp profile may
/// refuse them); decided by the first call.
fn unavailable(e: i32) -> bool {
    e == libc::ENOSYS || e == libc::EPERM
}

/// Reads `buf.len()` bytes at `addr`.
pub fn read(addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Ok(());
    }
    let Ok(addr) = usize::try_from(addr) else {
        return Err(libc::EFAULT);
    };
    let local = iov(buf.as_mut_ptr() as usize, buf.len());
    let remote = iov(addr, buf.len());
    // SAFETY: `local` describes `buf`, which we own mutably; `remote` is
    // only dereferenced by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        return Ok(());
    }
    if n < 0 && unavailable(errno()) && addr != 0 {
        // SAFETY: without process_vm_readv a non-null pointer from the
        // application is trusted, as librdmacm's always are.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        return Ok(());
    }
    Err(libc::EFAULT)
}

/// Writes `data` at `addr`.
pub fn write(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    let Ok(addr) = usize::try_from(addr) else {
        return Err(libc::EFAULT);
    };
    let local = iov(data.as_ptr() as usize, data.len());
    let remote = iov(addr, data.len());
    // SAFETY: `local` describes `data`, which we only read; `remote` is
    // only dereferenced by the kernel, which checks it.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        return Ok(());
    }
    if n < 0 && unavailable(errno()) && addr != 0 {
        // SAFETY: as in `read`: a non-null pointer is trusted when the
        // kernel cannot check it for us.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
        return Ok(());
    }
    Err(libc::EFAULT)
}

/// Whether `len` bytes at `addr` can be written (read back and rewritten,
/// so the content is unchanged): GET_EVENT checks before it consumes an
/// event, because the kernel keeps the event when the copy faults.
pub fn probe_writable(addr: u64, len: usize) -> Result<(), Errno> {
    let mut buf = [0u8; 512];
    let buf = buf.get_mut(..len).ok_or(libc::EINVAL)?;
    read(addr, buf)?;
    write(addr, buf)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_faults() {
        let mut target = [0u8; 16];
        let addr = target.as_mut_ptr() as u64;
        write(addr, b"hello").unwrap();
        let mut back = [0u8; 5];
        read(addr, &mut back).unwrap();
        assert_eq!(&back, b"hello");
        assert_eq!(&target[..5], b"hello");
        assert_eq!(write(0, b"x"), Err(libc::EFAULT));
        assert_eq!(write(8, b"x"), Err(libc::EFAULT));
        assert_eq!(read(u64::MAX - 3, &mut back), Err(libc::EFAULT));
        probe_writable(addr, 16).unwrap();
        assert_eq!(&target[..5], b"hello", "probe keeps the content");
        assert_eq!(probe_writable(0, 16), Err(libc::EFAULT));
    }
}
