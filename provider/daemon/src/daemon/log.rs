//! Timestamped lines on stderr (the rxu tool redirects them to
//! `<name>.log`). The level comes from `RXU_LOG` (error, warn, info,
//! debug; info by default).
//!
//! Logging must never take the daemon down or fill a disk, whatever a
//! client does (a flood of connects, a client that trips a warning per
//! packet):
//! - a line that cannot be written (disk full, stderr closed) is dropped,
//!   never a panic (`eprintln!` panics on a write error);
//! - every call site of `warning!`/`info!` has its own [`Limiter`]: at
//!   most [`LINES_PER_WINDOW`] lines per [`WINDOW_SECS`], then a count of
//!   what was left out on the next line that passes (`debug!`, opt-in,
//!   is not limited);
//! - when stderr is a regular file, it is rotated once it holds
//!   `RXU_LOG_MAX_BYTES` (16 MiB by default): renamed to `<file>.1`
//!   (replacing the previous one) and reopened empty, so the log takes at
//!   most twice that.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Lines one call site may write per window.
pub const LINES_PER_WINDOW: u32 = 20;
/// The window of a [`Limiter`], in seconds.
pub const WINDOW_SECS: u64 = 10;
/// Where stderr is rotated, unless `RXU_LOG_MAX_BYTES` says otherwise.
const DEFAULT_MAX_BYTES: u64 = 16 << 20;
/// The smallest cap accepted (tests use small ones).
const MIN_MAX_BYTES: u64 = 4096;

static MAX_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_BYTES);
/// Bytes written to the current file since start or the last rotation.
static WRITTEN: AtomicU64 = AtomicU64::new(0);
/// Lines dropped by limiters and by failed writes (for `rxu stats`).
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
static ROTATIONS: AtomicU64 = AtomicU64::new(0);

/// Sets the level from `RXU_LOG` and the rotation size from
/// `RXU_LOG_MAX_BYTES`, if set and valid.
pub fn init_from_env() {
    if let Ok(v) = std::env::var("RXU_LOG") {
        let l = match v.to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" | "trace" => Some(Level::Debug),
            _ => None,
        };
        if let Some(l) = l {
            set_level(l);
        }
    }
    if let Some(n) = std::env::var("RXU_LOG_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        MAX_BYTES.store(n.max(MIN_MAX_BYTES), Ordering::Relaxed);
    }
    // What stderr already holds counts (rxu up truncates it; a test may not).
    WRITTEN.store(stderr_file_len().unwrap_or(0), Ordering::Relaxed);
}

pub fn set_level(l: Level) {
    LEVEL.store(l as u8, Ordering::Relaxed);
}

pub fn enabled(l: Level) -> bool {
    l as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Lines left out so far (rate limits and failed writes) and rotations.
pub fn suppressed_and_rotations() -> (u64, u64) {
    (
        SUPPRESSED.load(Ordering::Relaxed),
        ROTATIONS.load(Ordering::Relaxed),
    )
}

/// One call site's rate limit: [`LINES_PER_WINDOW`] lines per window of
/// [`WINDOW_SECS`] seconds. Atomics only so that it can be a `static`;
/// the daemon has one thread.
pub struct Limiter {
    window: AtomicU64,
    count: AtomicU32,
    dropped: AtomicU64,
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Limiter {
    pub const fn new() -> Limiter {
        Limiter {
            window: AtomicU64::new(u64::MAX),
            count: AtomicU32::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written at `now_secs` (seconds on a
    /// monotonic clock): `Some(n)` with the lines left out before it
    /// since the last one written, or `None` to leave this one out.
    pub fn admit(&self, now_secs: u64) -> Option<u64> {
        let w = now_secs / WINDOW_SECS;
        if self.window.load(Ordering::Relaxed) != w {
            self.window.store(w, Ordering::Relaxed);
            self.count.store(0, Ordering::Relaxed);
        }
        let c = self.count.load(Ordering::Relaxed);
        if c >= LINES_PER_WINDOW {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            SUPPRESSED.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.count.store(c + 1, Ordering::Relaxed);
        Some(self.dropped.swap(0, Ordering::Relaxed))
    }
}

/// Seconds since the first call (monotonic).
fn mono_secs() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs()
}

/// Writes one line through call site `limit`'s rate limit.
pub fn write_limited(limit: &Limiter, l: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(l) {
        return;
    }
    match limit.admit(mono_secs()) {
        None => {}
        Some(0) => write(l, args),
        Some(n) => write(
            l,
            format_args!("{args} ({n} more like this left out before)"),
        ),
    }
}

/// Writes one line: `2026-01-02T03:04:05.678901Z rxud[pid] LEVEL message`.
/// A line that cannot be written is dropped.
pub fn write(l: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(l) {
        return;
    }
    let tag = match l {
        Level::Error => "ERROR",
        Level::Warn => "WARN",
        Level::Info => "INFO",
        Level::Debug => "DEBUG",
    };
    let line = format!(
        "{} rxud[{}] {tag} {args}\n",
        timestamp(SystemTime::now()),
        std::process::id()
    );
    // One write per line: stderr is unbuffered.
    if std::io::stderr().lock().write_all(line.as_bytes()).is_err() {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let total = WRITTEN.fetch_add(line.len() as u64, Ordering::Relaxed) + line.len() as u64;
    if total >= MAX_BYTES.load(Ordering::Relaxed) {
        rotate();
    }
}

/// The length of the regular file stderr writes to, if it is one.
fn stderr_file_len() -> Option<u64> {
    let m = std::fs::metadata(stderr_path()?).ok()?;
    m.is_file().then_some(m.len())
}

/// The path of the regular file stderr is open on, if it still names
/// that same file.
fn stderr_path() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let p = std::fs::read_link("/proc/self/fd/2").ok()?;
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd 2 is open for the whole process (or fstat says EBADF).
    if unsafe { libc::fstat(2, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let m = std::fs::symlink_metadata(&p).ok()?;
    (m.dev() == st.st_dev && m.ino() == st.st_ino).then_some(p)
}

/// Moves the full log aside as `<file>.1` and continues in a new empty
/// file with the old one's mode; if that cannot be done, empties the
/// file in place, so the log never grows past the cap either way.
fn rotate() {
    WRITTEN.store(0, Ordering::Relaxed);
    ROTATIONS.fetch_add(1, Ordering::Relaxed);
    let Some(path) = stderr_path() else {
        // Not a file we can name (a pipe, a tty, a deleted file): a file
        // is emptied, anything else left alone.
        // SAFETY: ftruncate on fd 2 has no memory preconditions; it fails
        // harmlessly on what is not a regular file.
        unsafe { libc::ftruncate(2, 0) };
        return;
    };
    if rotate_to(&path).is_err() {
        // SAFETY: as above.
        unsafe { libc::ftruncate(2, 0) };
    }
}

fn rotate_to(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let meta = std::fs::metadata(path)?;
    let mode = meta.permissions().mode() & 0o777;
    // stdout follows along only if it is the same file (rxu up gives both).
    let stdout_too = fd_is(1, meta.dev(), meta.ino());
    let mut old = path.as_os_str().to_owned();
    old.push(".1");
    std::fs::rename(path, &old)?;
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let new: OwnedFd = f.into();
    let targets: &[i32] = if stdout_too { &[2, 1] } else { &[2] };
    for &target in targets {
        // SAFETY: dup2 onto stdout/stderr, which this process owns: the
        // old file closes there; `new` stays open until it drops.
        if unsafe { libc::dup2(new.as_raw_fd(), target) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether fd `fd` is open on the file with device `dev` and inode `ino`.
fn fd_is(fd: i32, dev: u64, ino: u64) -> bool {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a small fd number: EBADF if it is not open.
    unsafe { libc::fstat(fd, &mut st) == 0 && st.st_dev == dev && st.st_ino == ino }
}

/// RFC 3339 UTC with microseconds.
pub fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's
/// proleptic Gregorian algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

macro_rules! warning {
    ($($t:tt)*) => {{
        static LIMIT: $crate::daemon::log::Limiter = $crate::daemon::log::Limiter::new();
        $crate::daemon::log::write_limited(&LIMIT, $crate::daemon::log::Level::Warn, format_args!($($t)*))
    }};
}
macro_rules! info {
    ($($t:tt)*) => {{
        static LIMIT: $crate::daemon::log::Limiter = $crate::daemon::log::Limiter::new();
        $crate::daemon::log::write_limited(&LIMIT, $crate::daemon::log::Level::Info, format_args!($($t)*))
    }};
}
macro_rules! debug {
    ($($t:tt)*) => {
        if $crate::daemon::log::enabled($crate::daemon::log::Level::Debug) {
            $crate::daemon::log::write($crate::daemon::log::Level::Debug, format_args!($($t)*))
        }
    };
}
pub(crate) use {debug, info, warning};

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + Duration::from_micros(1_709_251_199_123_456);
        assert_eq!(timestamp(t), "2024-02-29T23:59:59.123456Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(timestamp(t), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn limiter_passes_a_window_then_counts_what_it_left_out() {
        let l = Limiter::new();
        for _ in 0..LINES_PER_WINDOW {
            assert_eq!(l.admit(5), Some(0));
        }
        for _ in 0..7 {
            assert_eq!(l.admit(WINDOW_SECS - 1), None);
        }
        // The next window passes again and reports the 7 left out, once.
        assert_eq!(l.admit(WINDOW_SECS), Some(7));
        assert_eq!(l.admit(WINDOW_SECS + 1), Some(0));
    }

    #[test]
    fn limiters_are_per_call_site() {
        let (a, b) = (Limiter::new(), Limiter::new());
        for _ in 0..LINES_PER_WINDOW {
            a.admit(0);
        }
        assert_eq!(a.admit(0), None);
        assert_eq!(b.admit(0), Some(0));
    }
}
