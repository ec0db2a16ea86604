//! Where a device's files live at run time.
//!
//! Shared by `rxu`, `rxud`, the client library and the C provider. The
//! runtime directory is `$RXU_RUNTIME_DIR` if set, else
//! `/run/rxu` for root, else `$XDG_RUNTIME_DIR/rxu`, else
//! `/tmp/rxu-<uid>`. Inside it:
//!
//! ```text
//! <name>.sock    the daemon's control socket (SOCK_SEQPACKET, 0600)
//! <name>.pid     the daemon's pid
//! <name>.log     the daemon's log
//! sysfs/         the SYSFS_PATH libibverbs reads (see devnode)
//! ```
//!
//! A client finds a device's socket from the ibdev name alone, and
//! trusts it only after [`check_runtime_dir`] (the directory is this
//! user's or root's, writable by nobody else, not a symbolic link) and
//! [`check_daemon_peer`] (the daemon runs as root or this user):
//! [`connect_trusted`] does both.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The runtime directory (not created here).
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RXU_RUNTIME_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/rxu");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("rxu");
    }
    PathBuf::from(format!("/tmp/rxu-{uid}"))
}

/// The control socket of device `name`.
pub fn socket_path(name: &str) -> PathBuf {
    runtime_dir().join(format!("{name}.sock"))
}

/// The pid file of device `name`.
pub fn pid_path(name: &str) -> PathBuf {
    runtime_dir().join(format!("{name}.pid"))
}

/// The log file of device `name`.
pub fn log_path(name: &str) -> PathBuf {
    runtime_dir().join(format!("{name}.log"))
}

/// The sysfs root written for libibverbs (the value of SYSFS_PATH).
pub fn sysfs_root() -> PathBuf {
    runtime_dir().join("sysfs")
}

/// Why a runtime directory, or what answers in it, is not to be trusted
/// with a client's fds (issue 19 finding 5: without `RXU_RUNTIME_DIR` or
/// `XDG_RUNTIME_DIR` the directory is `/tmp/rxu-<uid>`, which another
/// user may have made first).
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("runtime directory {} is a symbolic link (owned by uid {owner}): refused", path.display())]
    Symlink { path: PathBuf, owner: u32 },
    #[error("runtime directory {} is not a directory (owned by uid {owner}): refused", path.display())]
    NotDir { path: PathBuf, owner: u32 },
    #[error("runtime directory {} is owned by uid {owner}, not by uid {me} or root: refused", path.display())]
    Owner { path: PathBuf, owner: u32, me: u32 },
    #[error("runtime directory {} (owned by uid {owner}) is writable by others (mode {mode:o}): refused", path.display())]
    Mode {
        path: PathBuf,
        owner: u32,
        mode: u32,
    },
    #[error("{} is served by a process of uid {peer} (pid {pid}), not by root or uid {me}: nothing sent", path.display())]
    Peer {
        path: PathBuf,
        peer: u32,
        pid: u32,
        me: u32,
    },
}

impl TrustError {
    /// The errno a verbs call reports for it: EACCES for a directory
    /// that may have been planted (a path not to be used), EPERM for a
    /// daemon of another user (talking to it is what is not permitted).
    pub fn errno(&self) -> i32 {
        match self {
            TrustError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            TrustError::Peer { .. } => libc::EPERM,
            _ => libc::EACCES,
        }
    }

    /// Whether the directory is simply not there (no daemon was ever up).
    pub fn is_not_found(&self) -> bool {
        matches!(self, TrustError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn me() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks runtime directory `dir` before anything in it is used: it is
/// a directory itself, not a symbolic link (opened with O_NOFOLLOW and
/// checked through that fd), owned by this user or root, and writable by
/// nobody else (0700, or 0755 as root's /run/rxu). Nobody else can then
/// put a socket in it, nor (in a sticky /tmp) rename it away.
pub fn check_runtime_dir(dir: &Path) -> Result<(), TrustError> {
    // Without its trailing slashes: "link/" would resolve the link even
    // with O_NOFOLLOW.
    let dir: PathBuf = dir.components().collect();
    let dir = dir.as_path();
    let io = |source| TrustError::Io {
        path: dir.to_owned(),
        source,
    };
    let path = dir.to_owned();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir);
    let st = match f {
        Ok(f) => f.metadata().map_err(io)?,
        // ELOOP: the last component is a symbolic link; ENOTDIR: not a
        // directory. Say who made it.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            let l = std::fs::symlink_metadata(dir).map_err(io)?;
            let owner = l.uid();
            return Err(if l.file_type().is_symlink() {
                TrustError::Symlink { path, owner }
            } else {
                TrustError::NotDir { path, owner }
            });
        }
        Err(e) => return Err(io(e)),
    };
    let (owner, mode, me) = (st.uid(), st.mode() & 0o7777, me());
    if owner != me && owner != 0 {
        return Err(TrustError::Owner { path, owner, me });
    }
    if mode & 0o022 != 0 {
        return Err(TrustError::Mode { path, owner, mode });
    }
    Ok(())
}

/// Checks who answers on a connected control socket before anything is
/// sent on it: the daemon must run as root or as this user
/// (SO_PEERCRED). `path` names the socket in the error.
pub fn check_daemon_peer(sock: BorrowedFd<'_>, path: &Path) -> Result<(), TrustError> {
    let c = crate::proto::fdpass::peer_cred(sock).map_err(|source| TrustError::Io {
        path: path.to_owned(),
        source,
    })?;
    let me = me();
    if c.uid != 0 && c.uid != me {
        return Err(TrustError::Peer {
            path: path.to_owned(),
            peer: c.uid,
            pid: c.pid as u32,
            me,
        });
    }
    Ok(())
}

/// Connects to the control socket at `path` in runtime directory `dir`
/// the way every client must: the directory checked first, the daemon's
/// credentials checked before the socket is returned.
pub fn connect_trusted(dir: &Path, path: &Path) -> Result<OwnedFd, TrustError> {
    check_runtime_dir(dir)?;
    let sock = crate::proto::fdpass::connect_seqpacket(path).map_err(|source| TrustError::Io {
        path: path.to_owned(),
        source,
    })?;
    check_daemon_peer(sock.as_fd(), path)?;
    Ok(sock)
}
