//! Command line of rxu-peer (parsed by hand: the tests crate keeps its
//! dependencies to the workspace crates).

use std::time::Duration;

pub const USAGE: &str = "\
usage: rxu-peer --device NAME --role server|client
                [--listen ADDR:PORT | --connect ADDR:PORT | --stdio]
                [--workload send|write|read|atomic] [--size BYTES]
                [--iters N] [--depth N] [--timeout SECS]

One RC connection between a server and a client, exchanging QP info
(qpn, psn, gid, rkey, addr) over TCP on 127.0.0.1 (server: --listen,
port 0 picks one and prints `LISTEN ADDR:PORT`; client: --connect) or
over stdin/stdout (--stdio: control lines are `CTL ...`, relayed by the
caller). The client drives the workload, both sides verify the bytes,
each prints one `RESULT ok|fail ...` line (on stderr with --stdio);
exit status 0 on success, 1 on failure, 2 on bad arguments.";

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
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Send => "send",
            Workload::Write => "write",
            Workload::Read => "read",
            Workload::Atomic => "atomic",
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
                    other => return Err(format!("--workload: unknown {other}")),
                }
            }
            "--size" => size = number(value(&mut it, flag)?, flag)?,
            "--iters" => iters = number(value(&mut it, flag)?, flag)?,
            "--depth" => depth = number(value(&mut it, flag)?, flag)?,
            "--timeout" => timeout = number(value(&mut it, flag)?, flag)?,
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
    Ok(Args {
        device,
        role,
        link,
        workload,
        size,
        iters,
        depth,
        timeout: Duration::from_secs(timeout),
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
    }
}
