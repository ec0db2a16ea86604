//! rxu-peer: one side of an RC connection over rxu, for multi-process
//! tests (see `args::USAGE`).

mod args;
mod ctl;
mod peer;
mod work;

use std::process::ExitCode;
use std::time::Instant;

use args::{Args, Role};
use ctl::{Ctl, PeerInfo};
use peer::{Peer, Res};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match args::parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("rxu-peer: {e}");
            }
            eprintln!("{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let role = match args.role {
        Role::Server => "server",
        Role::Client => "client",
    };
    let head = format!(
        "role={role} workload={} size={} iters={} depth={}",
        args.workload.name(),
        args.size,
        args.iters,
        args.depth
    );
    let (line, code) = match run(&args) {
        Ok((bytes, secs)) => {
            let mbps = if secs > 0.0 {
                bytes as f64 / secs / 1e6
            } else {
                0.0
            };
            let line = format!("RESULT ok {head} bytes={bytes} secs={secs:.6} MBps={mbps:.1}");
            (line, ExitCode::SUCCESS)
        }
        Err(e) => (format!("RESULT fail {head} reason={e}"), ExitCode::from(1)),
    };
    report(&args, &line);
    code
}

/// With --stdio, stdout is the control channel, which the relay may have
/// closed by now: the result goes to stderr instead.
fn report(args: &Args, line: &str) {
    use std::io::Write;
    let _ = if args.link == args::Link::Stdio {
        writeln!(std::io::stderr(), "{line}")
    } else {
        writeln!(std::io::stdout(), "{line}")
    };
}

/// Returns (bytes moved, seconds of the workload phase).
fn run(args: &Args) -> Res<(u64, f64)> {
    let deadline = Instant::now() + args.timeout;
    let mut p = Peer::new(args)?;
    let mut ctl =
        Ctl::open(&args.link, args.timeout).map_err(|e| format!("control channel: {e}"))?;
    let io = |e: std::io::Error| format!("control channel: {e}");
    ctl.send(&p.info()?.line()).map_err(io)?;
    let remote = PeerInfo::parse(&ctl.expect("INFO").map_err(io)?)?;
    p.connect(&remote)?;
    if args.role == Role::Server {
        peer::server_prepare(&mut p, args.workload)?;
    }
    ctl.send("READY").map_err(io)?;
    ctl.expect("READY").map_err(io)?;
    let start = Instant::now();
    match args.role {
        Role::Client => {
            let outcome = work::client(&mut p, args, &remote, deadline);
            let secs = start.elapsed().as_secs_f64();
            match &outcome {
                Ok(_) => ctl.send("DONE ok"),
                Err(e) => ctl.send(&format!("DONE fail {e}")),
            }
            .map_err(io)?;
            let bytes = outcome?;
            let verdict = ctl.expect("VERDICT").map_err(io)?;
            if verdict != "ok" {
                return Err(format!("server: {verdict}"));
            }
            Ok((bytes, secs))
        }
        Role::Server => {
            let outcome = work::server(&mut p, args, deadline);
            let secs = start.elapsed().as_secs_f64();
            if let Err(e) = &outcome {
                let _ = ctl.send(&format!("VERDICT fail {e}"));
                return Err(e.clone());
            }
            let done = ctl.expect("DONE").map_err(io)?;
            if done != "ok" {
                let _ = ctl.send("VERDICT fail client failed");
                return Err(format!("client: {done}"));
            }
            let checked = work::server_after(&p, args);
            match &checked {
                Ok(()) => ctl.send("VERDICT ok"),
                Err(e) => ctl.send(&format!("VERDICT fail {e}")),
            }
            .map_err(io)?;
            checked?;
            Ok((outcome?, secs))
        }
    }
}
