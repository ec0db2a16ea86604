//! Timestamped lines on stderr (the rxu tool redirects them to
//! `<name>.log`). The level comes from `RXU_LOG` (error, warn, info,
//! debug; info by default).

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

/// Sets the level from `RXU_LOG`, if set and valid.
pub fn init_from_env() {
    if let Ok(v) = std::env::var("RXU_LOG") {
        let l = match v.to_ascii_lowercase().as_str() {
            "error" => Level::Error,
            "warn" => Level::Warn,
            "info" => Level::Info,
            "debug" | "trace" => Level::Debug,
            _ => return,
        };
        set_level(l);
    }
}

pub fn set_level(l: Level) {
    LEVEL.store(l as u8, Ordering::Relaxed);
}

pub fn enabled(l: Level) -> bool {
    l as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Writes one line: `2026-01-02T03:04:05.678901Z rxud[pid] LEVEL message`.
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
    // One eprintln call per line: stderr is unbuffered and locked per call.
    eprintln!(
        "{} rxud[{}] {tag} {args}",
        timestamp(SystemTime::now()),
        std::process::id()
    );
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
    ($($t:tt)*) => { $crate::daemon::log::write($crate::daemon::log::Level::Warn, format_args!($($t)*)) };
}
macro_rules! info {
    ($($t:tt)*) => { $crate::daemon::log::write($crate::daemon::log::Level::Info, format_args!($($t)*)) };
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
}
