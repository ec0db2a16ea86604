//! The provider's log, following libibverbs' variables: `VERBS_LOG_LEVEL`
//! (0 none, 1 errors — the default here: a device that cannot be opened or
//! a library layout refused says why —, 2 warnings such as an unsupported
//! verb being called, 3 info such as why rxud refused a request, 4 debug)
//! and `VERBS_LOG_FILE` (append there instead of stderr). Lines start
//! "rxu: ".

use std::collections::HashSet;
use std::fmt;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Err = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

fn threshold() -> u32 {
    static T: OnceLock<u32> = OnceLock::new();
    *T.get_or_init(|| {
        std::env::var("VERBS_LOG_LEVEL")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(Level::Err as u32)
    })
}

pub fn enabled(level: Level) -> bool {
    level as u32 <= threshold()
}

pub fn log(level: Level, args: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let line = format!("rxu: {args}\n");
    if let Some(path) = std::env::var_os("VERBS_LOG_FILE") {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut f) = f {
            let _ = f.write_all(line.as_bytes());
            return;
        }
    }
    let _ = std::io::stderr().write_all(line.as_bytes());
}

#[macro_export]
macro_rules! log_err {
    ($($a:tt)*) => { $crate::log::log($crate::log::Level::Err, format_args!($($a)*)) };
}
#[macro_export]
macro_rules! log_warn {
    ($($a:tt)*) => { $crate::log::log($crate::log::Level::Warn, format_args!($($a)*)) };
}
#[macro_export]
macro_rules! log_info {
    ($($a:tt)*) => { $crate::log::log($crate::log::Level::Info, format_args!($($a)*)) };
}
#[macro_export]
macro_rules! log_debug {
    ($($a:tt)*) => { $crate::log::log($crate::log::Level::Debug, format_args!($($a)*)) };
}

/// Logs, once per process and `what`, that an unsupported verb was called.
pub fn unsupported(what: &'static str) {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.get_or_insert_with(HashSet::new).insert(what) {
        log(
            Level::Warn,
            format_args!("{what}: not supported by the rxu provider (EOPNOTSUPP)"),
        );
    }
}
