//! FUSE, the one way a client can make rxud's syscalls wait forever: a
//! read of memory backed by a FUSE file, or the close of a FUSE file it
//! passed (close sends FLUSH and waits for the answer), blocks until the
//! file system's server answers. A server that never does is the attack.
//!
//! Found without touching the file system: `statx` with
//! `AT_STATX_DONT_SYNC` and an empty mask asks the FUSE server nothing,
//! and the device number names the connection in the kernel's control
//! file system (`/sys/fs/fuse/connections/<dev>`, the number the kernel
//! gives the superblock's dev_t). Its `abort` file ends every wait on
//! that connection; the kernel makes it the mount owner's.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::log::{info, warning};

const CONNECTIONS: &str = "/sys/fs/fuse/connections";

/// The kernel's dev_t of (major, minor), as fusectl names connections.
fn kernel_dev(major: u32, minor: u32) -> u64 {
    (u64::from(major) << 20) | u64::from(minor)
}

fn conn_dir(conn: u64) -> PathBuf {
    Path::new(CONNECTIONS).join(conn.to_string())
}

/// The FUSE connection of a file on device (major, minor), if it is one.
pub fn conn_of_dev(major: u32, minor: u32) -> Option<u64> {
    let conn = kernel_dev(major, minor);
    conn_dir(conn).join("abort").exists().then_some(conn)
}

/// The device (major, minor) `fd`'s file lives on, asking no file
/// system server (`AT_STATX_DONT_SYNC`, no attributes wanted).
pub fn fd_dev(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    // SAFETY: statx is plain data; all-zero is a valid value to fill.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open for the call, the path is an empty C string
    // (AT_EMPTY_PATH: fd itself), st is a valid statx to fill.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            0,
            &mut st,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.stx_dev_major, st.stx_dev_minor))
}

/// The FUSE connection `fd`'s file is on, if any.
pub fn fd_conn(fd: BorrowedFd<'_>) -> Option<u64> {
    let (major, minor) = fd_dev(fd).ok()?;
    conn_of_dev(major, minor)
}

/// The FUSE connection of the mapping at `addr` in process `pid`, read
/// from its maps (the device field of the line that covers `addr`).
pub fn conn_at(pid: u32, addr: u64) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).ok()?,
            u64::from_str_radix(hi, 16).ok()?,
        );
        if addr < lo || addr >= hi {
            continue;
        }
        let (major, minor) = f.nth(2)?.split_once(':')?;
        let major = u32::from_str_radix(major, 16).ok()?;
        let minor = u32::from_str_radix(minor, 16).ok()?;
        return conn_of_dev(major, minor);
    }
    None
}

/// As [`conn_at`], but gives up after `limit` (None): reading a
/// process's maps takes its mmap lock, which a client can keep waiting
/// behind its own stuck fault. The reader thread is left to finish.
pub fn conn_at_within(pid: u32, addr: u64, limit: std::time::Duration) -> Option<Option<u64>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("rxud-maps".into())
        .spawn(move || {
            let _ = tx.send(conn_at(pid, addr));
        })
        .ok()?;
    rx.recv_timeout(limit).ok()
}

/// The FUSE connections of `uid` with requests waiting for their server
/// (the `waiting` count in fusectl): where a client's stuck syscall may
/// wait when its maps cannot be read.
pub fn busy_conns_of(uid: u32) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(CONNECTIONS) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
        .filter(|&c| owned_by(c, uid).is_ok())
        .filter(|&c| {
            std::fs::read_to_string(conn_dir(c).join("waiting"))
                .ok()
                .and_then(|w| w.trim().parse::<u64>().ok())
                .is_some_and(|w| w > 0)
        })
        .collect()
}

/// Whether FUSE connection `conn` belongs to `uid` (a client's own file
/// system, which rxud may end; another user's is not its to end).
pub fn owned_by(conn: u64, uid: u32) -> Result<(), String> {
    let file = conn_dir(conn).join("abort");
    let owner = std::fs::metadata(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .uid();
    if owner != uid {
        return Err(format!(
            "FUSE connection {conn} is uid {owner}'s, not the client's (uid {uid})"
        ));
    }
    Ok(())
}

/// Ends every wait on FUSE connection `conn`.
pub fn abort(conn: u64) -> Result<(), String> {
    let file = conn_dir(conn).join("abort");
    std::fs::write(&file, b"1").map_err(|e| format!("{}: {e}", file.display()))
}

/// Makes sure the FUSE control file system is mounted (systemd mounts it
/// at boot; a container or a bare machine may not have): without it rxud
/// can neither tell FUSE files apart nor end a wait on one. Says so once.
pub fn ensure_control_fs() {
    let dir = Path::new(CONNECTIONS);
    if !dir.is_dir() {
        info!("no {CONNECTIONS} (no FUSE in this kernel): FUSE checks are off");
        return;
    }
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| m.lines().any(|l| l.split(' ').nth(4) == Some(CONNECTIONS)))
        .unwrap_or(false);
    if mounted {
        return;
    }
    // SAFETY: every argument is a valid NUL-terminated string; mount only
    // reads them.
    let r = unsafe {
        libc::mount(
            c"fusectl".as_ptr(),
            c"/sys/fs/fuse/connections".as_ptr(),
            c"fusectl".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if r != 0 {
        warning!(
            "cannot mount fusectl on {CONNECTIONS} ({}): a client's FUSE-backed memory could stall rxud",
            io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusectl_names_connections_by_the_kernels_dev_t() {
        assert_eq!(kernel_dev(0, 57), 57);
        assert_eq!(kernel_dev(8, 1), (8 << 20) | 1);
    }

    #[test]
    fn an_ordinary_file_is_on_no_fuse_connection() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        use std::os::fd::AsFd;
        assert!(fd_dev(f.as_fd()).is_ok());
        assert_eq!(fd_conn(f.as_fd()), None);
        let own = std::process::id();
        let code = conn_at as *const () as usize as u64;
        assert_eq!(conn_at(own, code), None);
    }
}
