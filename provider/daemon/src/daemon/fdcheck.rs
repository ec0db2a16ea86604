//! What every fd a client passes must be, checked by identity and not by
//! type alone, in one place for every request that takes fds.
//!
//! rxud runs as root: whatever it reads, writes or sends through a
//! client's fd carries root's rights, not the client's. So an fd is taken
//! only when it is what the request says, of this client:
//!
//! - the memory grant (Hello) is the `/proc/<pid>/mem` of the process at
//!   the other end of the control socket (SO_PEERCRED's pid, taken at
//!   accept), the same file (device and inode) and open for reading and
//!   writing; a file of the client's, another process's memory or a
//!   /proc file that checks its *writer's* rights is refused;
//! - event sockets (the async socket, completion channels, rdma_cm event
//!   channels) are `AF_UNIX` `SOCK_SEQPACKET` socket pairs the client
//!   made: unnamed peer, and the peer's SO_PEERCRED pid the client's, so
//!   rxud never writes to a listener of a third process or daemon;
//! - doorbells are eventfds;
//! - the cmd_fd of a context and an XRC domain's file may be any file the
//!   client opened, but not an `O_PATH` descriptor (which needs no right
//!   on the file: the kernel's `fdget` refuses those too).
//!
//! Errnos: an `O_PATH` fd, or a memory fd not open read-write, is EBADF
//! (what the kernel answers for an fd not usable that way); an fd of the
//! wrong kind is EINVAL; an fd of the right kind that is not the client's
//! (another file, another process, a socket connected elsewhere) is
//! EPERM: the fd is valid, granting it is what is not permitted. EACCES
//! is left to permission bits on paths, which are not in play here.

use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;

use super::reply::{refuse, Refused};
use super::sys;

fn open_flags(fd: BorrowedFd<'_>, what: &str) -> Result<libc::c_int, Refused> {
    let flags = sys::fd_flags(fd).map_err(|e| Refused {
        errno: libc::EBADF,
        msg: format!("{what}: {e}"),
    })?;
    if flags & libc::O_PATH != 0 {
        return refuse(
            libc::EBADF,
            format!("{what} is an O_PATH descriptor (it grants no access to the file)"),
        );
    }
    Ok(flags)
}

/// Any file the client opened (a context's cmd_fd, an XRC domain's file):
/// not `O_PATH`.
pub fn opened_file(fd: BorrowedFd<'_>, what: &str) -> Result<(), Refused> {
    open_flags(fd, what).map(|_| ())
}

/// The memory grant: `/proc/<peer_pid>/mem`, open read-write.
pub fn memory(fd: BorrowedFd<'_>, peer_pid: u32) -> Result<(), Refused> {
    let what = "the memory fd";
    let flags = open_flags(fd, what)?;
    if flags & libc::O_ACCMODE != libc::O_RDWR {
        return refuse(
            libc::EBADF,
            format!("{what} is not open for reading and writing"),
        );
    }
    if peer_pid == 0 {
        return refuse(
            libc::EPERM,
            "the daemon cannot see the client's process (SO_PEERCRED gave no pid)",
        );
    }
    let path = format!("/proc/{peer_pid}/mem");
    let want = std::fs::metadata(&path).map_err(|e| Refused {
        errno: libc::EPERM,
        msg: format!("{path} of the client: {e}"),
    })?;
    let got = sys::file_id(fd).map_err(|e| Refused {
        errno: libc::EBADF,
        msg: format!("{what}: {e}"),
    })?;
    if got != (want.dev(), want.ino()) {
        return refuse(
            libc::EPERM,
            format!(
                "{what} is not {path}, the memory of the process at the other end of the socket"
            ),
        );
    }
    Ok(())
}

/// An event socket: one end of an `AF_UNIX` `SOCK_SEQPACKET` socket pair
/// made by process `peer_pid` (the client).
pub fn event_socket(fd: BorrowedFd<'_>, peer_pid: u32, what: &str) -> Result<(), Refused> {
    open_flags(fd, what)?;
    if !sys::is_socket(fd) {
        return refuse(libc::EINVAL, format!("{what} is not a socket"));
    }
    match sys::socket_kind(fd) {
        Ok((libc::AF_UNIX, libc::SOCK_SEQPACKET)) => {}
        Ok(_) => {
            return refuse(
                libc::EINVAL,
                format!("{what} is not an AF_UNIX SOCK_SEQPACKET socket"),
            )
        }
        Err(e) => return refuse(libc::EINVAL, format!("{what}: {e}")),
    }
    match sys::peer_unnamed(fd) {
        Ok(true) => {}
        Ok(false) => {
            return refuse(
                libc::EPERM,
                format!(
                    "{what} is connected to a listening socket, not a socket pair of the client"
                ),
            )
        }
        Err(e) => return refuse(libc::EINVAL, format!("{what} has no peer: {e}")),
    }
    let cred = sys::peer_cred(fd).map_err(|e| Refused {
        errno: libc::EINVAL,
        msg: format!("{what}: SO_PEERCRED: {e}"),
    })?;
    if peer_pid == 0 || cred.pid != peer_pid {
        return refuse(
            libc::EPERM,
            format!(
                "{what} was made by pid {}, not by the client (pid {peer_pid})",
                cred.pid
            ),
        );
    }
    Ok(())
}

/// A doorbell: an eventfd.
pub fn eventfd(fd: BorrowedFd<'_>, what: &str) -> Result<(), Refused> {
    use std::os::fd::AsRawFd;
    open_flags(fd, what)?;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    match link {
        Ok(l) if l.as_os_str() == "anon_inode:[eventfd]" => Ok(()),
        Ok(_) => refuse(libc::EINVAL, format!("{what} is not an eventfd")),
        Err(e) => refuse(libc::EINVAL, format!("{what}: {e}")),
    }
}
