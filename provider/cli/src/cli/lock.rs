//! The runtime directory's lock (`<runtime dir>/.lock`, flock): one `rxu up`
//! or `rxu down` at a time changes devices, so two ups of one name cannot
//! both start a daemon, and an index is never picked twice.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct RuntimeLock {
    _file: File,
}

impl RuntimeLock {
    /// Takes the lock, waiting at most `timeout` for another rxu.
    pub fn acquire(dir: &Path, timeout: Duration) -> io::Result<RuntimeLock> {
        let path = dir.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        let start = Instant::now();
        loop {
            // SAFETY: flock on a descriptor we own; result checked.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                // Released by close when `file` drops.
                return Ok(RuntimeLock { _file: file });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            if start.elapsed() >= timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("another rxu holds {} (waited {timeout:?})", path.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_waits_then_times_out() {
        let dir = std::env::temp_dir().join(format!("rxu-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = RuntimeLock::acquire(&dir, Duration::from_secs(1)).unwrap();
        let e = RuntimeLock::acquire(&dir, Duration::from_millis(100))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(a);
        let _b = RuntimeLock::acquire(&dir, Duration::from_millis(100)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
