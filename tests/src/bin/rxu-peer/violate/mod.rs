//! The violate workload: the server exposes MRs carved out of one
//! page-aligned arena whose other bytes are guards; the client tries
//! remote accesses that must be refused — each on its own QP, since a
//! refusal takes both QPs to ERR — and a few that must work, before and
//! after. Every refused operation must complete with
//! IBV_WC_REM_ACCESS_ERR and leave the client QP in ERR; the server then
//! checks every byte of the arena: only what the allowed operations wrote
//! has changed.
//!
//! Then the client names the server's MRs as lkeys in its own SGEs
//! (another process's memory): IBV_WC_LOC_PROT_ERR, nothing sent.
//!
//! Client output: one `CASE <name> qpn=<hex> status=<status>` line per
//! remotely refused operation (tests match them with the NAKs on the
//! wire), one `LOCAL ...` line per local misuse.

use std::time::Instant;

use rxu_client::*;

use crate::args::{Args, Role};
use crate::ctl::Ctl;
use crate::flow::{self, Outcome};
use crate::lanes::Lanes;
use crate::mixed::pattern;
use crate::peer::{connect_opts, Res};

mod arena;
mod client;

use arena::{server_after, Exposed};

const PAGE: usize = 4096;
const ARENA: usize = 11 * PAGE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Full remote access, PD of the QPs; 3000 bytes at an unaligned
    /// offset, guards on both sides in the same page.
    A,
    /// REMOTE_READ only.
    Ro,
    /// LOCAL_WRITE | REMOTE_WRITE only (no read, no atomics).
    Wo,
    /// Full access, but in another PD.
    Other,
    /// Full access, deregistered before the client starts.
    Gone,
}

const TARGETS: [Target; 5] = [
    Target::A,
    Target::Ro,
    Target::Wo,
    Target::Other,
    Target::Gone,
];

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::A => "A",
            Target::Ro => "RO",
            Target::Wo => "WO",
            Target::Other => "OTHER",
            Target::Gone => "GONE",
        }
    }

    /// (offset in the arena, length).
    fn range(self) -> (usize, usize) {
        match self {
            Target::A => (PAGE + 104, 3000),
            Target::Ro => (3 * PAGE + 64, 1024),
            Target::Wo => (5 * PAGE + 64, 1024),
            Target::Other => (7 * PAGE + 64, 1024),
            Target::Gone => (9 * PAGE + 64, 1024),
        }
    }

    fn access(self) -> u32 {
        let full = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC;
        match self {
            Target::Ro => access::REMOTE_READ,
            Target::Wo => access::LOCAL_WRITE | access::REMOTE_WRITE,
            _ => full,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Write,
    Read,
    Cas,
    Fadd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    /// The target's own range, with an rkey no MR has.
    BadKey,
    /// The first bytes of the target (16, or the 8 of an atomic).
    Start,
    /// 16 bytes from 8 before the end: half inside, half out.
    EndCross,
    /// 8 bytes before the start (and 8 inside, for WRITE/READ).
    BeforeStart,
    /// The 8 bytes right after the end.
    Past,
    /// 8 KiB from the start: two packets, the whole far past the end.
    Large,
}

struct Case {
    name: &'static str,
    op: Op,
    target: Target,
    at: Where,
}

const fn case(name: &'static str, op: Op, target: Target, at: Where) -> Case {
    Case {
        name,
        op,
        target,
        at,
    }
}

/// What must be refused.
const CASES: [Case; 20] = [
    case("write-bad-rkey", Op::Write, Target::A, Where::BadKey),
    case("read-bad-rkey", Op::Read, Target::A, Where::BadKey),
    case("fadd-bad-rkey", Op::Fadd, Target::A, Where::BadKey),
    case("write-across-end", Op::Write, Target::A, Where::EndCross),
    case(
        "write-before-start",
        Op::Write,
        Target::A,
        Where::BeforeStart,
    ),
    case("write-8k-past-end", Op::Write, Target::A, Where::Large),
    case("read-across-end", Op::Read, Target::A, Where::EndCross),
    case("read-before-start", Op::Read, Target::A, Where::BeforeStart),
    case("cas-past-end", Op::Cas, Target::A, Where::Past),
    case("fadd-before-start", Op::Fadd, Target::A, Where::BeforeStart),
    case("write-no-remote-write", Op::Write, Target::Ro, Where::Start),
    case("fadd-no-remote-atomic", Op::Fadd, Target::Ro, Where::Start),
    case("read-no-remote-read", Op::Read, Target::Wo, Where::Start),
    case("cas-no-remote-atomic", Op::Cas, Target::Wo, Where::Start),
    case("write-other-pd", Op::Write, Target::Other, Where::Start),
    case("read-other-pd", Op::Read, Target::Other, Where::Start),
    case("fadd-other-pd", Op::Fadd, Target::Other, Where::Start),
    case("write-deregistered", Op::Write, Target::Gone, Where::Start),
    case("read-deregistered", Op::Read, Target::Gone, Where::Start),
    case("cas-deregistered", Op::Cas, Target::Gone, Where::Start),
];

/// Local misuse across processes: the client names the server's MRs
/// (their lkey is their rkey) in its own SGEs. The server's memory must
/// stay out of reach — IBV_WC_LOC_PROT_ERR, the server's QP untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Local {
    /// SEND gathering from the server's A.
    SendFrom,
    /// WRITE (to A, allowed) gathering from the server's A.
    WriteFrom,
    /// READ of A (allowed) scattering into the server's WO.
    ReadInto,
    /// FetchAdd of 0 on A (allowed) returning into the server's WO.
    FaddInto,
}

const LOCAL: [(&str, Local); 4] = [
    ("send-gathers-from-foreign-mr", Local::SendFrom),
    ("write-gathers-from-foreign-mr", Local::WriteFrom),
    ("read-scatters-into-foreign-mr", Local::ReadInto),
    ("fadd-result-into-foreign-mr", Local::FaddInto),
];

/// Lane 0 works before the violations, lanes 1..=CASES.len() each take
/// one remote violation, the next LOCAL.len() one local misuse each, the
/// last lane works after them.
const LANES: usize = CASES.len() + LOCAL.len() + 2;
const FIRST_LOCAL: usize = CASES.len() + 1;
const AFTER: usize = LANES - 1;
const ADD: u64 = 5;

/// Byte `off` of the arena as the server fills it.
fn guard_byte(off: usize) -> u8 {
    ((off.wrapping_mul(131) >> 3) as u8) ^ 0x5a
}

/// The allowed writes: A gets P1 (then FetchAdd adds ADD to its first
/// word), WO gets P2.
fn p1() -> Vec<u8> {
    let mut v = vec![0u8; Target::A.range().1];
    pattern(0, 1, &mut v);
    v
}

fn p2() -> Vec<u8> {
    let mut v = vec![0u8; Target::Wo.range().1];
    pattern(0, 2, &mut v);
    v
}

/// The arena after the allowed operations.
fn expected_arena() -> Vec<u8> {
    let mut img: Vec<u8> = (0..ARENA).map(guard_byte).collect();
    let (a, alen) = Target::A.range();
    let mut pa = p1();
    let w = u64::from_ne_bytes(pa[..8].try_into().unwrap_or([0; 8])).wrapping_add(ADD);
    pa[..8].copy_from_slice(&w.to_ne_bytes());
    img[a..a + alen].copy_from_slice(&pa);
    let (wo, wlen) = Target::Wo.range();
    img[wo..wo + wlen].copy_from_slice(&p2());
    img
}

/// A target as the client knows it.
#[derive(Clone, Copy, Debug, Default)]
struct Remote {
    rkey: u32,
    addr: u64,
    len: u64,
    off: usize,
}

fn parse_targets(s: &str) -> Res<Vec<Remote>> {
    let mut out = vec![Remote::default(); TARGETS.len()];
    let mut seen = 0;
    for kv in s.split_whitespace() {
        let bad = || format!("bad TARGETS entry {kv:?}");
        let (k, v) = kv.split_once('=').ok_or_else(bad)?;
        let i = TARGETS.iter().position(|t| t.name() == k).ok_or_else(bad)?;
        let f: Vec<&str> = v.split(':').collect();
        if f.len() != 4 {
            return Err(bad());
        }
        out[i] = Remote {
            rkey: f[0].parse().map_err(|_| bad())?,
            addr: f[1].parse().map_err(|_| bad())?,
            len: f[2].parse().map_err(|_| bad())?,
            off: f[3].parse().map_err(|_| bad())?,
        };
        seen |= 1 << i;
    }
    if seen != (1 << TARGETS.len()) - 1 {
        return Err(format!("TARGETS incomplete: {s:?}"));
    }
    Ok(out)
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 4,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

pub fn run(args: &Args) -> Res<Outcome> {
    let deadline = Instant::now() + args.timeout;
    let mut l = Lanes::new(&args.device, LANES, cap(), 2 * LANES as u32 + 16, 4 * PAGE)?;
    let mut ctl = Ctl::open(&args.link, args.timeout).map_err(flow::io)?;
    let remote = flow::exchange_info(&mut ctl, &l.info()?)?;
    match args.role {
        Role::Server => {
            let mut ex = Exposed::new(&l)?;
            ctl.send(&ex.line()).map_err(flow::io)?;
            ex.deregister_gone()?;
            l.connect(&remote, &connect_opts(args))?;
            flow::ready(&mut ctl)?;
            let start = Instant::now();
            // Nothing to do during the run; the client's DONE comes next.
            let outcome: Res<u64> = Ok(0);
            let secs = start.elapsed().as_secs_f64();
            flow::server_verdict(&mut ctl, outcome, || server_after(&l, &ex))?;
            Ok(Outcome {
                bytes: 0,
                secs,
                extra: format!("cases={}", CASES.len()),
            })
        }
        Role::Client => {
            let targets = parse_targets(&ctl.expect("TARGETS").map_err(flow::io)?)?;
            l.connect(&remote, &connect_opts(args))?;
            flow::ready(&mut ctl)?;
            let start = Instant::now();
            let outcome = client::client(args, &mut l, &targets, deadline);
            let secs = start.elapsed().as_secs_f64();
            flow::client_done(&mut ctl, outcome)?;
            Ok(Outcome {
                bytes: 0,
                secs,
                extra: format!("cases={} local_cases={}", CASES.len(), LOCAL.len()),
            })
        }
    }
}
