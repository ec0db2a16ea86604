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
//! A client finds a device's socket from the ibdev name alone.

use std::path::PathBuf;

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
