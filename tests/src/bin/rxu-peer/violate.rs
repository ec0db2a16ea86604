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

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::time::{Duration, Instant};

use provider::client::*;

use crate::args::{Args, Role};
use crate::ctl::Ctl;
use crate::flow::{self, Outcome};
use crate::lanes::Lanes;
use crate::mixed::pattern;
use crate::peer::{connect_opts, e, Idle, Res};

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

/// Page-aligned memory of this process that is not an MrBuf: only the
/// sub-ranges registered below are reachable by the daemon.
struct Arena {
    ptr: *mut u8,
}

impl Arena {
    fn layout() -> Layout {
        Layout::from_size_align(ARENA, PAGE).expect("constant layout")
    }

    fn new() -> Res<Arena> {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(Self::layout()) };
        if ptr.is_null() {
            return Err("arena allocation failed".into());
        }
        let a = Arena { ptr };
        let img: Vec<u8> = (0..ARENA).map(guard_byte).collect();
        // SAFETY: `ptr` holds ARENA bytes, nothing is registered yet.
        unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), a.ptr, ARENA) };
        Ok(a)
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; ARENA];
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: `ptr` holds ARENA bytes for the arena's life; the daemon
        // may write registered parts concurrently (as DMA would), which
        // gives some mix of old and new plain bytes, never UB for u8 copies
        // through raw pointers.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, v.as_mut_ptr(), ARENA) };
        v
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with the same layout.
        unsafe { dealloc(self.ptr, Self::layout()) };
    }
}

/// The server's MRs; dropped (deregistered) before the arena.
struct Exposed {
    mrs: Vec<Mr>,
    _other_pd: Pd,
    arena: Arena,
}

impl Exposed {
    fn new(l: &Lanes) -> Res<Exposed> {
        let arena = Arena::new()?;
        let other_pd = Pd::alloc(&l.ctx).map_err(e("alloc_pd"))?;
        let mut mrs = Vec::new();
        for t in TARGETS {
            let (off, len) = t.range();
            let pd = if t == Target::Other { &other_pd } else { &l.pd };
            // SAFETY: the range lies in the arena, which outlives the MR
            // (field order); the arena is read only through raw pointers.
            let mr =
                unsafe { reg_mr(pd, arena.ptr.add(off), len, t.access()) }.map_err(e("reg_mr"))?;
            mrs.push(mr);
        }
        Ok(Exposed {
            mrs,
            _other_pd: other_pd,
            arena,
        })
    }

    /// `TARGETS NAME=rkey:addr:len:arena_offset ...`
    fn line(&self) -> String {
        let mut s = String::from("TARGETS");
        for (t, mr) in TARGETS.iter().zip(&self.mrs) {
            s += &format!(
                " {}={}:{}:{}:{}",
                t.name(),
                mr.rkey(),
                mr.addr(),
                mr.len(),
                t.range().0
            );
        }
        s
    }

    fn deregister_gone(&mut self) -> Res<()> {
        let i = TARGETS.iter().position(|t| *t == Target::Gone).unwrap_or(0);
        let mr = self.mrs.remove(i);
        mr.dereg().map_err(|(_, err)| format!("dereg_mr: {err}"))
    }
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
            let outcome = client(args, &mut l, &targets, deadline);
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

fn server_after(l: &Lanes, ex: &Exposed) -> Res<()> {
    let got = ex.arena.snapshot();
    let want = expected_arena();
    if let Some(j) = got.iter().zip(&want).position(|(a, b)| a != b) {
        let what = TARGETS
            .iter()
            .find(|t| {
                let (o, n) = t.range();
                (o..o + n).contains(&j)
            })
            .map_or("a guard byte".to_string(), |t| format!("MR {}", t.name()));
        return Err(format!(
            "arena byte {j} ({what}) is {:#04x}, expected {:#04x}",
            got[j], want[j]
        ));
    }
    // Refusing a request takes the responder QP to ERR too (IBA: RC
    // responder, remote access error); the working lanes and those whose
    // requests were fine (the local misuse is the requester's) stay in RTS.
    for (q, qp) in l.qps.iter().enumerate() {
        let (attr, _) = qp.query(qp_attr_mask::STATE).map_err(e("query_qp"))?;
        let want = if (1..FIRST_LOCAL).contains(&q) {
            QpState::Err
        } else {
            QpState::Rts
        };
        if attr.qp_state != want as u8 {
            return Err(format!(
                "server lane {q}: QP state {}, expected {want:?}",
                attr.qp_state
            ));
        }
    }
    Ok(())
}

fn wait_one(cq: &Cq, deadline: Instant) -> Res<Wc> {
    let mut wc = [Wc::default()];
    let mut idle = Idle::default();
    // Bounded by the deadline.
    loop {
        if cq.poll(&mut wc).map_err(e("poll_cq"))? == 1 {
            return Ok(wc[0]);
        }
        if Instant::now() >= deadline {
            return Err("timed out waiting for a completion".into());
        }
        idle.wait();
    }
}

/// Posts one WR on lane `q` and returns its completion.
fn one(l: &Lanes, q: usize, wr: SendWr<'_>, deadline: Instant) -> Res<Wc> {
    l.qps[q]
        .post_send(&[wr.signaled()])
        .map_err(|err| format!("lane {q}: post_send: {err}"))?;
    let wc = wait_one(&l.cq, deadline)?;
    if wc.wr_id != wr.wr_id || wc.qp_num != l.qps[q].qpn() {
        return Err(format!("lane {q}: unexpected completion {wc:?}"));
    }
    Ok(wc)
}

fn ok(wc: Wc, what: &str) -> Res<()> {
    if wc.is_success() {
        Ok(())
    } else {
        Err(format!("{what}: {} (must work)", wc.status_str()))
    }
}

fn client(args: &Args, l: &mut Lanes, t: &[Remote], deadline: Instant) -> Res<()> {
    let a = t[0];
    let (pa, pw) = (p1(), p2());
    // Before: what the MRs allow works.
    l.buf.write(0, &pa).map_err(e("write buffer"))?;
    ok(
        one(
            l,
            0,
            SendWr::write(1, &[l.buf.sge(0, pa.len() as u32)], a.addr, a.rkey),
            deadline,
        )?,
        "WRITE A",
    )?;
    ok(
        one(
            l,
            0,
            SendWr::read(2, &[l.buf.sge(PAGE, pa.len() as u32)], a.addr, a.rkey),
            deadline,
        )?,
        "READ A",
    )?;
    expect(l, PAGE, &pa, "READ A")?;
    ok(
        one(
            l,
            0,
            SendWr::fetch_add(3, &[l.buf.sge(2 * PAGE, 8)], a.addr, a.rkey, ADD),
            deadline,
        )?,
        "FETCH_ADD A",
    )?;
    expect(l, 2 * PAGE, &pa[..8], "FETCH_ADD A result")?;
    let ro = t[1];
    ok(
        one(
            l,
            0,
            SendWr::read(4, &[l.buf.sge(PAGE, ro.len as u32)], ro.addr, ro.rkey),
            deadline,
        )?,
        "READ RO",
    )?;
    let want: Vec<u8> = (ro.off..ro.off + ro.len as usize).map(guard_byte).collect();
    expect(l, PAGE, &want, "READ RO")?;
    let wo = t[2];
    l.buf.write(0, &pw).map_err(e("write buffer"))?;
    ok(
        one(
            l,
            0,
            SendWr::write(5, &[l.buf.sge(0, pw.len() as u32)], wo.addr, wo.rkey),
            deadline,
        )?,
        "WRITE WO",
    )?;

    // The violations, one lane each.
    let valid: Vec<u32> = t.iter().map(|r| r.rkey).chain([l.buf.rkey()]).collect();
    for (c, cs) in CASES.iter().enumerate() {
        let q = c + 1;
        let r = t[TARGETS.iter().position(|x| *x == cs.target).unwrap_or(0)];
        let end = r.addr + r.len;
        let atomic = matches!(cs.op, Op::Cas | Op::Fadd);
        let (mut addr, mut len, mut rkey) = (r.addr, if atomic { 8 } else { 16 }, r.rkey);
        match cs.at {
            Where::BadKey => {
                rkey = r.rkey ^ 0x00a5_5a00;
                if valid.contains(&rkey) {
                    rkey ^= 0x0100_0001;
                }
            }
            Where::Start => {}
            Where::EndCross => addr = end - 8,
            Where::BeforeStart => addr = r.addr - 8,
            Where::Past => addr = end,
            Where::Large => len = 8192,
        }
        let wr_id = 100 + c as u64;
        let sge = [l.buf.sge(PAGE, len)];
        let wr = match cs.op {
            Op::Write => SendWr::write(wr_id, &sge, addr, rkey),
            Op::Read => SendWr::read(wr_id, &sge, addr, rkey),
            Op::Cas => SendWr::cmp_swap(wr_id, &sge, addr, rkey, 0, 0xdead),
            Op::Fadd => SendWr::fetch_add(wr_id, &sge, addr, rkey, 0xdead),
        };
        let wc = one(l, q, wr, deadline)?;
        let qpn = l.qps[q].qpn();
        crate::note(
            args,
            &format!("CASE {} qpn={qpn:#x} status={}", cs.name, wc.status_str()),
        );
        if wc.wc_status() != Some(WcStatus::RemAccessErr) {
            return Err(format!(
                "{}: completed with {}, expected IBV_WC_REM_ACCESS_ERR",
                cs.name,
                wc.status_str()
            ));
        }
        let (attr, _) = l.qps[q].query(qp_attr_mask::STATE).map_err(e("query_qp"))?;
        if attr.qp_state != QpState::Err as u8 {
            return Err(format!(
                "{}: requester QP in state {} after the refusal, expected ERR",
                cs.name, attr.qp_state
            ));
        }
    }

    // Local misuse: the server's keys in our SGEs.
    for (c, (name, how)) in LOCAL.iter().enumerate() {
        let q = FIRST_LOCAL + c;
        let wr_id = 200 + c as u64;
        let from_a = [Sge {
            addr: a.addr,
            length: 16,
            lkey: a.rkey,
        }];
        let into_wo = [Sge {
            addr: wo.addr,
            length: if *how == Local::FaddInto { 8 } else { 16 },
            lkey: wo.rkey,
        }];
        let wr = match how {
            Local::SendFrom => SendWr::send(wr_id, &from_a),
            Local::WriteFrom => SendWr::write(wr_id, &from_a, a.addr, a.rkey),
            Local::ReadInto => SendWr::read(wr_id, &into_wo, a.addr, a.rkey),
            Local::FaddInto => SendWr::fetch_add(wr_id, &into_wo, a.addr, a.rkey, 0),
        };
        let wc = one(l, q, wr, deadline)?;
        let qpn = l.qps[q].qpn();
        crate::note(
            args,
            &format!("LOCAL {name} qpn={qpn:#x} status={}", wc.status_str()),
        );
        if wc.wc_status() != Some(WcStatus::LocProtErr) {
            return Err(format!(
                "{name}: completed with {}, expected IBV_WC_LOC_PROT_ERR",
                wc.status_str()
            ));
        }
    }

    // After: A still reads back what the allowed operations left.
    let img = expected_arena();
    ok(
        one(
            l,
            AFTER,
            SendWr::read(6, &[l.buf.sge(PAGE, a.len as u32)], a.addr, a.rkey),
            deadline,
        )?,
        "READ A after the violations",
    )?;
    expect(l, PAGE, &img[a.off..a.off + a.len as usize], "READ A after")?;
    // Nothing else completes anywhere (no late, duplicate completions).
    let quiet = Instant::now() + Duration::from_millis(50);
    let mut wc = [Wc::default()];
    while Instant::now() < quiet {
        if l.cq.poll(&mut wc).map_err(e("poll_cq"))? > 0 {
            return Err(format!("stray completion {:?}", wc[0]));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn expect(l: &Lanes, off: usize, want: &[u8], what: &str) -> Res<()> {
    let mut got = vec![0u8; want.len()];
    l.buf.read(off, &mut got).map_err(e("read buffer"))?;
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(j) => Err(format!(
            "{what}: byte {j} is {:#04x}, expected {:#04x}",
            got[j], want[j]
        )),
    }
}
