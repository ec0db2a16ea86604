//! pread/pwrite on a client's `/proc/<pid>/mem`, and what their errors
//! mean for the transport.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use transport::qp::MemError;

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

pub fn read(mem: &File, at: u64, dst: &mut [u8]) -> Result<(), MemError> {
    if dst.is_empty() {
        return Ok(());
    }
    let (r, late) = super::watch::memory(mem.as_raw_fd(), at, || mem.read_exact_at(dst, at));
    finish(r, late)
}

pub fn write(mem: &File, at: u64, src: &[u8]) -> Result<(), MemError> {
    if src.is_empty() {
        return Ok(());
    }
    let (r, late) = super::watch::memory(mem.as_raw_fd(), at, || mem.write_all_at(src, at));
    finish(r, late)
}

/// An access that went past the watchdog's deadline failed its client
/// (the loop closes the session), whatever it returned in the end:
/// [`MemError::Gone`], which the transport answers with silence.
fn finish(r: std::io::Result<()>, late: bool) -> Result<(), MemError> {
    if late {
        return Err(MemError::Gone);
    }
    r.map_err(|e| mem_error(&e))
}

/// A file holding `data`, standing in for a client's memory in tests (its
/// name is gone as soon as it is open).
#[cfg(test)]
pub fn scratch_file(data: &[u8]) -> std::sync::Arc<File> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "rxu-mem-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let _ = std::fs::remove_file(&path);
    f.write_all_at(data, 0).unwrap();
    std::sync::Arc::new(f)
}
