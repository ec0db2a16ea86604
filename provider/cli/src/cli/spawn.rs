//! Starting `rxud` in the background and waiting until it serves.
//!
//! The daemon is detached (own session, stdin /dev/null, stdout and stderr
//! to its log) so that it outlives `rxu up` and, above all, does not hold
//! the pipe of `eval "$(rxu up ...)"` open.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::admin::{AdminConn, AdminError};

pub const DAEMON: &str = "rxud";

/// `rxud` next to the running executable (installed together, or a cargo
/// target directory), else on PATH.
pub fn find_daemon() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let next = exe.parent()?.join(DAEMON);
    if next.is_file() {
        return Some(next);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(DAEMON))
            .find(|c| c.is_file())
    })
}

/// Starts `daemon args...` detached, its output appended to `log`.
pub fn start(daemon: &Path, args: &[String], log: &Path) -> io::Result<Child> {
    // Readable by its owner only: the log names every client's pid, QPNs
    // and peers. Never through a symlink planted in the runtime dir.
    let out = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)?;
    // An existing log keeps its mode on open: narrow it too.
    out.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(daemon);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls setsid(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Why the daemon did not come up.
#[derive(Debug)]
pub enum NotReady {
    /// It exited, with this status.
    Died(std::process::ExitStatus),
    /// It did not answer within the time.
    Timeout(Option<AdminError>),
}

/// Waits until `socket` answers an admin Hello, or the child exits, or
/// `timeout` passes. Polls every 20 ms.
pub fn wait_ready(
    child: &mut Child,
    socket: &Path,
    timeout: Duration,
) -> Result<AdminConn, NotReady> {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NotReady::Died(status));
        }
        if socket.exists() {
            match AdminConn::connect(socket, Duration::from_secs(2)) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        if start.elapsed() >= timeout {
            return Err(NotReady::Timeout(last));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `lines` lines of a log file (at most its last 64 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    tail_of(&String::from_utf8_lossy(&buf), lines)
}

/// The last `lines` lines, but starting at the last panic message when
/// that falls before them (a backtrace would push it out).
fn tail_of(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let mut start = all.len().saturating_sub(lines);
    if let Some(p) = all.iter().rposition(|l| l.contains("panicked at")) {
        start = start.min(p);
    }
    let end = all.len().min(start + lines);
    all[start..end].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        assert_eq!(tail_of("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_of("a\n", 5), "a");
        assert_eq!(tail_of("", 5), "");
        let bt = "x\nthread 'main' panicked at a.rs:1:1:\nboom\n0: f\n1: g\n2: h\n";
        assert_eq!(
            tail_of(bt, 3),
            "thread 'main' panicked at a.rs:1:1:\nboom\n0: f"
        );
    }

    #[test]
    fn a_child_that_dies_is_reported_with_its_log() {
        let dir = std::env::temp_dir().join(format!("rxu-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("x.log");
        let mut child = start(
            Path::new("/bin/sh"),
            &["-c".into(), "echo bad address >&2; exit 3".into()],
            &log,
        )
        .unwrap();
        match wait_ready(&mut child, &dir.join("x.sock"), Duration::from_secs(10)) {
            Err(NotReady::Died(s)) => assert_eq!(s.code(), Some(3)),
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert_eq!(log_tail(&log, 5), "bad address");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_silent_child_times_out() {
        let dir = std::env::temp_dir().join(format!("rxu-spawn-t-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("x.log");
        let mut child = start(Path::new("/bin/sleep"), &["5".into()], &log).unwrap();
        let r = wait_ready(&mut child, &dir.join("x.sock"), Duration::from_millis(200));
        assert!(matches!(r, Err(NotReady::Timeout(None))));
        let _ = child.kill();
        let _ = child.wait();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
