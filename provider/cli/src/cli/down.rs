//! `rxu down`: ask the daemon to stop (admin Shutdown), wait for it to
//! exit (SIGTERM, then SIGKILL, if it does not), then remove the device
//! node and the runtime files.

use std::fs;
use std::io;
use std::time::{Duration, Instant};

use super::admin::{AdminConn, AdminError};
use super::devices;
use super::lock::RuntimeLock;
use super::status::render_clients;
use super::{CliError, Result};
use rxu_abi::paths;
use rxu_abi::proto::{Request, Response};

/// How long a daemon that agreed to stop gets to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);
const TERM_TIMEOUT: Duration = Duration::from_secs(3);
const KILL_TIMEOUT: Duration = Duration::from_secs(2);
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct DownOpts {
    pub name: String,
    pub force: bool,
    pub all: bool,
}

pub fn run(opts: &DownOpts) -> Result<()> {
    let rt = paths::runtime_dir();
    if !rt.is_dir() {
        return if opts.all {
            Ok(())
        } else {
            Err(CliError::NotUp(opts.name.clone()))
        };
    }
    let _lock = RuntimeLock::acquire(&rt, LOCK_TIMEOUT).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            // Another user's devices (root's serve everyone): using them
            // is allowed, stopping them is not.
            CliError::Usage(format!(
                "the devices in {} belong to another user: only that user \
                 (or root) may take them down",
                rt.display()
            ))
        } else {
            CliError::io(format!("locking {}", rt.display()))(e)
        }
    })?;
    if !opts.all {
        return down_one(&opts.name, opts.force);
    }
    // Every device; the first failure is reported after trying the rest.
    let mut first_err = None;
    for f in devices::list() {
        if let Err(e) = down_one(&f.name, opts.force) {
            eprintln!("rxu down: {e}");
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

fn down_one(name: &str, force: bool) -> Result<()> {
    if !devices::valid_name(name) {
        return Err(CliError::Usage(format!("bad device name {name:?}")));
    }
    let found = devices::find(name).ok_or_else(|| CliError::NotUp(name.to_owned()))?;
    let pid = found.pid.filter(|p| devices::is_rxud(*p));
    // Whether the daemon agreed to stop (then it gets time to exit).
    let asked = match AdminConn::connect(&paths::socket_path(name), Duration::from_secs(5)) {
        Ok(mut c) => {
            ask_to_stop(&mut c, name, force)?;
            true
        }
        Err(AdminError::NotRunning(_)) => false,
        Err(e) if force => {
            eprintln!("rxu down: {name}: {e}; stopping it by signal");
            false
        }
        Err(e) => {
            return Err(CliError::Daemon(format!(
                "{name}'s daemon does not answer ({e}); `rxu down --name {name} --force` kills it"
            )))
        }
    };
    let clean = match pid {
        Some(pid) => stop_process(name, pid, asked)?,
        None => true,
    };
    remove_files(name)?;
    let log = paths::log_path(name);
    if clean {
        let _ = fs::remove_file(&log);
    } else if log.exists() {
        eprintln!("rxu down: {name}'s log is kept in {}", log.display());
    }
    Ok(())
}

/// Sends Shutdown; a refusal because of open clients lists them.
fn ask_to_stop(c: &mut AdminConn, name: &str, force: bool) -> Result<()> {
    match c.call(&Request::Shutdown { force }) {
        Ok(Response::Ok) | Err(AdminError::Closed) => Ok(()),
        Err(AdminError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => Ok(()),
        Ok(Response::Error { errno, msg }) if errno == libc::EBUSY => {
            let clients = match c.call_ok(&Request::Status) {
                Ok(Response::Status { clients, .. }) => render_clients(&clients),
                _ => format!("    {msg}\n"),
            };
            Err(CliError::Busy {
                name: name.to_owned(),
                clients: clients.trim_end().to_owned(),
            })
        }
        Ok(Response::Error { errno, msg }) => Err(CliError::Daemon(format!(
            "{name}'s daemon refused to stop: {msg} (errno {errno})"
        ))),
        Ok(other) => Err(CliError::Daemon(format!(
            "{name}'s daemon sent an unexpected reply to Shutdown: {other:?}"
        ))),
        Err(e) => Err(CliError::admin(name)(e)),
    }
}

/// Waits for `pid` to exit if it was `asked` to; SIGTERM then SIGKILL if
/// it lingers. Returns whether it exited by itself.
fn stop_process(name: &str, pid: u32, asked: bool) -> Result<bool> {
    if wait_gone(pid, if asked { EXIT_TIMEOUT } else { Duration::ZERO }) {
        return Ok(true);
    }
    for (sig, sig_name, wait) in [
        (libc::SIGTERM, "SIGTERM", TERM_TIMEOUT),
        (libc::SIGKILL, "SIGKILL", KILL_TIMEOUT),
    ] {
        // Checked again right before signalling: the pid must still be rxud.
        if !devices::is_rxud(pid) {
            return Ok(false);
        }
        eprintln!("rxu down: {name}'s daemon (pid {pid}) is still running; sending {sig_name}");
        // SAFETY: kill(2) with a pid we verified to be an rxud process.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
        if wait_gone(pid, wait) {
            return Ok(false);
        }
    }
    Err(CliError::Daemon(format!(
        "{name}'s daemon (pid {pid}) survived SIGKILL"
    )))
}

fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let start = Instant::now();
    while devices::alive(pid) {
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Removes the device node and the socket and pid files of `name` (not the
/// log). Returns whether there was anything to remove.
pub fn remove_files(name: &str) -> Result<bool> {
    let mut any = false;
    if let Some(node) = devices::open_devnode(name) {
        node.remove()?;
        any = true;
    }
    // A tree directory no uverbsN points at (an interrupted up).
    let dir = paths::sysfs_root().join("class/infiniband").join(name);
    if devices::valid_name(name) && dir.symlink_metadata().is_ok() {
        fs::remove_dir_all(&dir).map_err(CliError::io(format!("removing {}", dir.display())))?;
        any = true;
    }
    for p in [paths::socket_path(name), paths::pid_path(name)] {
        match fs::remove_file(&p) {
            Ok(()) => any = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CliError::Io {
                    what: format!("removing {}", p.display()),
                    source: e,
                })
            }
        }
    }
    Ok(any)
}
