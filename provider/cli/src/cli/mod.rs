//! The `rxu` tool's device management: `up`, `down`, `env`, `status`,
//! `stats`, and `exec`/`shell` (a /sys view with rxu's devices). Each subcommand is a function returning a [`CliError`] whose
//! message tells the user what went wrong and what to do; `bin/rxu.rs`
//! only parses arguments and prints.
//!
//! A device is: its daemon `rxud` (socket, pid file and log in
//! `paths::runtime_dir()`), the device tree under `paths::sysfs_root()`
//! and `/dev/infiniband/uverbsN`. `rxu up` makes all three, `rxu down`
//! removes all three; both hold the runtime directory's lock so that
//! concurrent ups and downs do not interleave.

pub mod admin;
pub mod devices;
pub mod down;
pub mod env;
pub mod exec;
mod lock;
pub mod metrics;
pub mod netif;
pub mod spawn;
pub mod stats;
pub mod status;
pub mod up;

use std::net::IpAddr;

use admin::AdminError;
use rxud::devnode::DevNodeError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error(
        "{cmd} needs root: it creates {what}. Run it as root, e.g.\n    eval \"$(sudo {hint})\""
    )]
    NotRoot {
        cmd: &'static str,
        what: String,
        hint: String,
    },
    #[error("no network interface named {0:?} (see `ip link`)")]
    NoSuchNetdev(String),
    #[error("netdev {0} has no IP address (add one with `ip addr add ... dev {0}`)")]
    NoAddress(String),
    #[error("address {0} is not assigned to any interface of this host (see `ip addr`)")]
    AddrNotLocal(IpAddr),
    #[error("address {addr} is not on netdev {netdev}")]
    AddrNotOnNetdev { addr: IpAddr, netdev: String },
    #[error("UDP port {port} on {addr} is already in use{hint}")]
    PortInUse {
        addr: IpAddr,
        port: u16,
        hint: String,
    },
    #[error("netdev {netdev}'s MTU {mtu} is too small for RoCE (at least 348 bytes)")]
    MtuTooSmall { netdev: String, mtu: u32 },
    #[error("{0} is already up{1}; `rxu down --name {0}` first")]
    AlreadyUp(String, String),
    #[error("{0} is not up")]
    NotUp(String),
    #[error("no free uverbs index in {0} (0..{1} are taken)")]
    NoFreeIndex(String, u32),
    #[error(
        "cannot find the daemon `rxud` next to {0} or on PATH (build it: cargo build -p rxud)"
    )]
    NoDaemon(String),
    #[error("{0}")]
    Daemon(String),
    #[error("{name} has clients open:\n{clients}\nstop them, or `rxu down --name {name} --force`")]
    Busy { name: String, clients: String },
    #[error("talking to {name}'s daemon: {source}")]
    Admin { name: String, source: AdminError },
    #[error("device tree: {0}")]
    DevNode(#[from] DevNodeError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl CliError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let what = what.into();
        move |source| CliError::Io { what, source }
    }

    pub fn admin(name: &str) -> impl FnOnce(AdminError) -> CliError + '_ {
        move |source| CliError::Admin {
            name: name.to_owned(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

/// Whether this process is root (needed for /dev/infiniband and /run/rxu).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The command line as typed, for "run it with sudo" hints.
fn command_line() -> String {
    let mut args = std::env::args();
    let _ = args.next();
    std::iter::once("rxu".to_owned())
        .chain(args.map(|a| env::shell_quote(&a)))
        .collect::<Vec<_>>()
        .join(" ")
}
