//! rxu-soak: the processes `scripts/soak` runs against live daemons.
//!
//! ```text
//! rxu-soak traffic --dev-a D [--dev-b D2] [--lanes M] [--max BYTES] [--secs S] [--linger-ms MS] [--stall-ms MS] [--corrupt-every N]
//! rxu-soak idle --dev D --qps N [--secs S]
//! rxu-soak ping --dev D [--secs S]
//! ```
//!
//! Each runs until its stdin closes (or `--secs` pass) and prints its
//! figures on stdout, one `WORD key=value ...` line at a time.
//! `--corrupt-every N` tests the checker itself: one byte of every N-th
//! operation's landing area is flipped before the check, which must then
//! report a VIOLATION and exit 1 (scripts/soak's self-check).

mod idle;
mod lane;
mod pattern;
mod ping;
mod traffic;
mod ud;

use std::collections::HashMap;
use std::io::Read;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const USAGE: &str = "usage: rxu-soak traffic --dev-a D [--dev-b D2] [--lanes M] [--max BYTES] \
[--secs S] [--linger-ms MS] [--stall-ms MS] [--corrupt-every N] | idle --dev D --qps N [--secs S] | ping --dev D [--secs S]";

/// Set when stdin reaches its end: whoever started us wants us to stop.
static STOP: AtomicBool = AtomicBool::new(false);

fn watch_stdin() {
    std::thread::spawn(|| {
        let mut buf = [0u8; 64];
        while matches!(std::io::stdin().read(&mut buf), Ok(n) if n > 0) {}
        STOP.store(true, Ordering::Relaxed);
    });
}

fn parse(argv: &[String]) -> Result<(String, HashMap<String, String>), String> {
    let (mode, rest) = argv.split_first().ok_or("no mode")?;
    let mut kv = HashMap::new();
    for pair in rest.chunks(2) {
        match pair {
            [k, v] if k.starts_with("--") => {
                kv.insert(k[2..].to_owned(), v.clone());
            }
            _ => return Err(format!("bad arguments near {pair:?}")),
        }
    }
    Ok((mode.clone(), kv))
}

fn num(kv: &HashMap<String, String>, key: &str, default: u64) -> Result<u64, String> {
    kv.get(key).map_or(Ok(default), |v| {
        v.parse().map_err(|_| format!("--{key}: not a number: {v}"))
    })
}

fn run(argv: &[String]) -> Result<i32, String> {
    let (mode, kv) = parse(argv)?;
    let need = |k: &str| kv.get(k).cloned().ok_or(format!("--{k} is needed"));
    let secs = num(&kv, "secs", 3600)?;
    watch_stdin();
    Ok(match mode.as_str() {
        "traffic" => {
            let dev_a = need("dev-a")?;
            let o = traffic::Opts {
                dev_b: kv.get("dev-b").cloned().unwrap_or_else(|| dev_a.clone()),
                dev_a,
                lanes: num(&kv, "lanes", 8)? as usize,
                max: num(&kv, "max", 4 << 20)? as usize,
                secs,
                linger: Duration::from_millis(num(&kv, "linger-ms", 3000)?),
                stall: Duration::from_millis(num(&kv, "stall-ms", 30_000)?),
                corrupt_every: num(&kv, "corrupt-every", 0)?,
            };
            traffic::run(&o, &STOP)
        }
        "idle" => idle::run(&need("dev")?, num(&kv, "qps", 1000)? as usize, secs, &STOP),
        "ping" => ping::run(&need("dev")?, secs, &STOP),
        other => return Err(format!("unknown mode {other}")),
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match run(&argv) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("rxu-soak: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
