//! rxu-peer: one side of RC connections over rxu, for multi-process
//! tests and benchmarks (see `args::USAGE`).

mod args;
mod ctl;
mod flow;
mod lanes;
mod lat;
mod mixed;
mod peer;
mod violate;
mod work;

use std::process::ExitCode;
use std::time::Instant;

use args::{Args, Role, Workload};
use ctl::Ctl;
use flow::Outcome;
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
        "role={role} workload={} size={} iters={} depth={} qps={}",
        args.workload.name(),
        args.size,
        args.iters,
        args.depth,
        args.qps
    );
    let (line, code) = match run(&args) {
        Ok(o) => {
            let (bytes, secs) = (o.bytes, o.secs);
            let mbps = if secs > 0.0 {
                bytes as f64 / secs / 1e6
            } else {
                0.0
            };
            let mut line = format!("RESULT ok {head} bytes={bytes} secs={secs:.6} MBps={mbps:.1}");
            if !o.extra.is_empty() {
                line = format!("{line} {}", o.extra);
            }
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

/// A progress line for whoever runs us (stdout, or stderr with --stdio).
pub fn note(args: &Args, line: &str) {
    report(args, line);
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

fn run(args: &Args) -> Res<Outcome> {
    match args.workload {
        Workload::Mixed => mixed::run(args),
        Workload::Violate => violate::run(args),
        Workload::Lat => lat::run(args),
        Workload::Send | Workload::Write | Workload::Read | Workload::Atomic => run_one_qp(args),
    }
}

/// The one-QP workloads.
fn run_one_qp(args: &Args) -> Res<Outcome> {
    let deadline = Instant::now() + args.timeout;
    let mut p = Peer::new(args)?;
    let mut ctl =
        Ctl::open(&args.link, args.timeout).map_err(|e| format!("control channel: {e}"))?;
    let remote = flow::exchange_info(&mut ctl, &p.info()?)?;
    p.connect(&remote, &peer::connect_opts(args))?;
    if args.role == Role::Server {
        peer::server_prepare(&mut p, args.workload)?;
    }
    flow::ready(&mut ctl)?;
    let start = Instant::now();
    let bytes = match args.role {
        Role::Client => {
            let outcome = work::client(&mut p, args, &remote, deadline);
            let secs = start.elapsed().as_secs_f64();
            (flow::client_done(&mut ctl, outcome)?, secs)
        }
        Role::Server => {
            let outcome = work::server(&mut p, args, deadline);
            let secs = start.elapsed().as_secs_f64();
            let p = &p;
            (
                flow::server_verdict(&mut ctl, outcome, || work::server_after(p, args))?,
                secs,
            )
        }
    };
    Ok(Outcome {
        bytes: bytes.0,
        secs: bytes.1,
        extra: String::new(),
    })
}
