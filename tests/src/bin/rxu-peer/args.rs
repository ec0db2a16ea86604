//! Command line of rxu-peer (parsed by hand: the tests crate keeps its
//! dependencies to the workspace crates).

use std::time::Duration;

pub const USAGE: &str = "\
usage: rxu-peer --device NAME --role server|client
                [--listen ADDR:PORT | --connect ADDR:PORT | --stdio]
                [--workload send|write|read|atomic|mixed|violate|lat]
                [--size BYTES] [--iters N] [--depth N] [--timeout SECS]
                [--qps N] [--qp-timeout EXP] [--retry-cnt N]
                [--expect-peer-death] [--no-verify] [--secs S] [--go-file PATH]

One RC connection between a server and a client, exchanging QP info
(qpn, psn, gid, rkey, addr) over TCP on 127.0.0.1 (server: --listen,
port 0 picks one and prints `LISTEN ADDR:PORT`; client: --connect) or
over stdin/stdout (--stdio: control lines are `CTL ...`, relayed by the
caller). The client drives the workload, both sides verify the bytes,
each prints one `RESULT ok|fail ...` line (on stderr with --stdio);
exit status 0 on success, 1 on failure, 2 on bad arguments.

Workloads: send, write, read, atomic on one QP; mixed: --qps QPs (one
CQ), each running SEND, WRITE, WRITE_WITH_IMM, READ (reading back an
earlier write), CmpSwap and FetchAdd in turn, every wr_id checked to
complete exactly once and in order, every byte checked; violate: remote
accesses the server's MRs must refuse (bad rkey, out of bounds, missing
access right, another PD, deregistered), each on its own QP, which must
complete with IBV_WC_REM_ACCESS_ERR while guard bytes around the MRs stay
untouched; lat: 2-byte (--size) RDMA WRITE ping-pong, half the round
trip reported as lat_us.

--iters counts operations per QP. --no-verify (write only, both sides)
skips filling and checking the bytes (for benchmarks). With
--expect-peer-death (mixed client) the server is expected to die: every
QP must then fail with IBV_WC_RETRY_EXC_ERR (printed at once as
`PEER_LOST ...`), flush the rest, and raise IBV_EVENT_QP_FATAL. The
mixed client prints `STARTED` once every QP has completed work.
--qp-timeout and --retry-cnt set the RC local ACK timeout exponent and
retry count (defaults 14 and 7). A mixed client with --secs stops
posting after S seconds (--iters stays the upper bound) and tells the
server how far each QP got (TCP link only); so does a --no-verify write
client (for benchmarks). A mixed client with --go-file prints `WAITING`
once connected and starts when PATH exists.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Send,
    Write,
    Read,
    Atomic,
    Mixed,
    Violate,
    Lat,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Send => "send",
            Workload::Write => "write",
            Workload::Read => "read",
            Workload::Atomic => "atomic",
            Workload::Mixed => "mixed",
            Workload::Violate => "violate",
            Workload::Lat => "lat",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    Listen(String),
    Connect(String),
    Stdio,
}

#[derive(Clone, Debug)]
pub struct Args {
    pub device: String,
    pub role: Role,
    pub link: Link,
    pub workload: Workload,
    pub size: usize,
    pub iters: u64,
    pub depth: u32,
    pub timeout: Duration,
    pub qps: u32,
    pub qp_timeout: u8,
    pub retry_cnt: u8,
    pub expect_peer_death: bool,
    pub no_verify: bool,
    pub secs: Option<Duration>,
    pub go_file: Option<std::path::PathBuf>,
}

fn value<'a>(it: &mut impl Iterator<Item = &'a String>, flag: &str) -> Result<&'a String, String> {
    it.next().ok_or_else(|| format!("{flag} needs a value"))
}

fn number<T: std::str::FromStr>(s: &str, flag: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{flag}: not a number: {s}"))
}

pub fn parse(argv: &[String]) -> Result<Args, String> {
    let mut device = None;
    let mut role = None;
    let mut link = None;
    let mut workload = Workload::Send;
    let mut size = 4096usize;
    let mut iters = 1000u64;
    let mut depth = 16u32;
    let mut timeout = 60u64;
    let mut qps = 1u32;
    let mut qp_timeout = 14u8;
    let mut retry_cnt = 7u8;
    let mut expect_peer_death = false;
    let mut no_verify = false;
    let mut secs = None;
    let mut go_file = None;
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--device" => device = Some(value(&mut it, flag)?.clone()),
            "--role" => {
                role = Some(match value(&mut it, flag)?.as_str() {
                    "server" => Role::Server,
                    "client" => Role::Client,
                    other => return Err(format!("--role: server or client, not {other}")),
                })
            }
            "--listen" => link = Some(Link::Listen(value(&mut it, flag)?.clone())),
            "--connect" => link = Some(Link::Connect(value(&mut it, flag)?.clone())),
            "--stdio" => link = Some(Link::Stdio),
            "--workload" => {
                workload = match value(&mut it, flag)?.as_str() {
                    "send" => Workload::Send,
                    "write" => Workload::Write,
                    "read" => Workload::Read,
                    "atomic" => Workload::Atomic,
                    "mixed" => Workload::Mixed,
                    "violate" => Workload::Violate,
                    "lat" => Workload::Lat,
                    other => return Err(format!("--workload: unknown {other}")),
                }
            }
            "--size" => size = number(value(&mut it, flag)?, flag)?,
            "--iters" => iters = number(value(&mut it, flag)?, flag)?,
            "--depth" => depth = number(value(&mut it, flag)?, flag)?,
            "--timeout" => timeout = number(value(&mut it, flag)?, flag)?,
            "--qps" => qps = number(value(&mut it, flag)?, flag)?,
            "--qp-timeout" => qp_timeout = number(value(&mut it, flag)?, flag)?,
            "--retry-cnt" => retry_cnt = number(value(&mut it, flag)?, flag)?,
            "--expect-peer-death" => expect_peer_death = true,
            "--no-verify" => no_verify = true,
            "--secs" => {
                let v: f64 = number(value(&mut it, flag)?, flag)?;
                if !(v > 0.0 && v < 3600.0) {
                    return Err("--secs must be in (0, 3600)".into());
                }
                secs = Some(Duration::from_secs_f64(v));
            }
            "--go-file" => go_file = Some(value(&mut it, flag)?.into()),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let device = device.ok_or("--device is required")?;
    let role = role.ok_or("--role is required")?;
    let link = match (link, role) {
        (Some(l), _) => l,
        (None, Role::Server) => Link::Listen("127.0.0.1:0".into()),
        (None, Role::Client) => return Err("--connect ADDR:PORT or --stdio is required".into()),
    };
    if matches!(
        (&link, role),
        (Link::Listen(_), Role::Client) | (Link::Connect(_), Role::Server)
    ) {
        return Err("servers --listen, clients --connect".into());
    }
    if size == 0 || size > 1 << 30 {
        return Err("--size must be 1..=1 GiB".into());
    }
    if workload == Workload::Atomic {
        size = 8;
    }
    if iters == 0 || depth == 0 || depth > 1024 {
        return Err("--iters must be > 0, --depth 1..=1024".into());
    }
    if qps == 0 || qps > 256 {
        return Err("--qps must be 1..=256".into());
    }
    if qps > 1 && workload != Workload::Mixed {
        return Err("--qps needs --workload mixed".into());
    }
    // One CQ takes every QP's sends and receives.
    if u64::from(qps) * 2 * u64::from(depth) + 16 > 65_535 {
        return Err("--qps x --depth too large for one CQ".into());
    }
    if qp_timeout > 31 || retry_cnt > 7 {
        return Err("--qp-timeout must be 0..=31, --retry-cnt 0..=7".into());
    }
    if expect_peer_death && (workload != Workload::Mixed || role != Role::Client) {
        return Err("--expect-peer-death is for a mixed client".into());
    }
    let mixed_client = workload == Workload::Mixed && role == Role::Client;
    // A timed write run tells the server its count in the final
    // immediate, which only a --no-verify server accepts.
    let timed_write = workload == Workload::Write && role == Role::Client && no_verify;
    if go_file.is_some() && !mixed_client {
        return Err("--go-file is for a mixed client".into());
    }
    if secs.is_some() && !mixed_client && !timed_write {
        return Err("--secs is for a mixed client or a --no-verify write client".into());
    }
    if secs.is_some() && mixed_client && !matches!(link, Link::Connect(_)) {
        return Err("mixed --secs needs a TCP link (--connect)".into());
    }
    if no_verify && workload != Workload::Write {
        return Err("--no-verify is for the write workload".into());
    }
    if workload == Workload::Lat && size > 4096 {
        return Err("lat: --size at most 4096".into());
    }
    Ok(Args {
        device,
        role,
        link,
        workload,
        size,
        iters,
        depth,
        timeout: Duration::from_secs(timeout),
        qps,
        qp_timeout,
        retry_cnt,
        expect_peer_death,
        no_verify,
        secs,
        go_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_and_rejects() {
        let a = parse(&argv(
            "--device rxu0 --role client --connect 127.0.0.1:9 --workload read --size 100",
        ))
        .unwrap();
        assert_eq!(
            (a.role, a.workload, a.size),
            (Role::Client, Workload::Read, 100)
        );
        let s = parse(&argv("--device rxu0 --role server")).unwrap();
        assert_eq!(s.link, Link::Listen("127.0.0.1:0".into()));
        assert!(parse(&argv("--device rxu0 --role client")).is_err());
        assert!(parse(&argv("--device rxu0 --role server --connect x:1")).is_err());
        assert!(parse(&argv("--role server")).is_err());
        let at = parse(&argv(
            "--device d --role server --workload atomic --size 64",
        ))
        .unwrap();
        assert_eq!(at.size, 8);
        let m = parse(&argv(
            "--device d --role client --stdio --workload mixed --qps 16 --expect-peer-death",
        ))
        .unwrap();
        assert_eq!((m.qps, m.expect_peer_death), (16, true));
        assert!(parse(&argv("--device d --role server --qps 2")).is_err());
        assert!(parse(&argv(
            "--device d --role server --workload mixed --expect-peer-death"
        ))
        .is_err());
        assert!(parse(&argv("--device d --role server --workload mixed --qps 0")).is_err());
        let t = parse(&argv(
            "--device d --role client --connect a:1 --workload mixed --secs 1.5 --go-file /x",
        ))
        .unwrap();
        assert_eq!(t.secs, Some(Duration::from_millis(1500)));
        assert!(parse(&argv(
            "--device d --role client --stdio --workload mixed --secs 1"
        ))
        .is_err());
        assert!(parse(&argv("--device d --role server --workload mixed --secs 1")).is_err());
        assert!(parse(&argv(
            "--device d --role client --stdio --workload write --no-verify --secs 1"
        ))
        .is_ok());
        assert!(parse(&argv(
            "--device d --role client --stdio --workload write --secs 1"
        ))
        .is_err());
    }
}
