//! Hostile clients against rxud's quotas (issue 19, finding 4; and the
//! related parts of 3 and 10): for every kind of object a client makes
//! the daemon hold, an attacker that creates them until refused gets the
//! documented errno at its per-client limit, a second client of the same
//! uid stops at the per-uid limit, a bystander ping-pong on the same
//! device keeps completing throughout, and once the attackers are gone
//! the uid's use, rxud's fds and its RSS are back where they were.
//! Also: connections that never say Hello are closed after the timeout
//! and capped per uid; a client that never polls its CQ while its QPs
//! receive loses completions (CQ_ERR, QPs in error) instead of growing
//! the daemon; `rxu stats` / `rxu status` work with 1000 QPs; rxud out
//! of descriptors rests its listener and logs it once.
//!
//! The limits are set small on the daemon's command line (`--limit`), so
//! each attack is quick; the defaults and their reasons are in
//! `provider/daemon/src/daemon/quota.rs`.

use std::any::Any;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rxu_abi::proto::cm::{CmRequest, CmResponse};
use rxu_abi::proto::{self, fdpass, Request, Response, PROTO_VERSION};
use rxu_client::*;
use rxu_testkit::hostile::{rss_kib, settle_fds, steady_fd_count, Bystander};
use rxu_testkit::verbs::ALL_ACCESS;
use rxu_testkit::{seqpacket_pair, serial, Daemon};

/// The largest pause the bystander may see while attacks run.
const GAP: Duration = Duration::from_millis(100);
/// Most objects an attack makes before it must have been refused.
const MAX_TRIES: usize = 5000;
/// RSS rxud may keep above its baseline after the attackers are gone
/// (allocator caches; the objects themselves are freed).
const RSS_SLACK_KIB: u64 = 8 * 1024;

type Obj = Box<dyn Any>;

/// Makes objects with `make` until it fails; returns them and the error.
fn flood(mut make: impl FnMut(usize) -> Result<Obj>) -> (Vec<Obj>, Error) {
    let mut held = Vec::new();
    for i in 0..MAX_TRIES {
        match make(i) {
            Ok(o) => held.push(o),
            Err(e) => return (held, e),
        }
    }
    panic!("{MAX_TRIES} objects and never refused");
}

/// What uid `uid` holds of `kind`, per the daemon's status.
fn uid_use(d: &Daemon, uid: u32, kind: &str) -> u64 {
    let st = d.status();
    let i = st
        .limits
        .iter()
        .position(|l| l.name == kind)
        .unwrap_or_else(|| panic!("no quota kind {kind}"));
    st.uids
        .iter()
        .find(|u| u.uid == uid)
        .map_or(0, |u| u.used[i])
}

fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// One kind's attack: its name, the limits the daemon runs with (per
/// client, per uid), how much of it one object takes, and how an
/// attacker (with its own context) makes one.
struct Attack {
    kind: &'static str,
    per_session: u64,
    per_uid: u64,
    unit: u64,
    make: fn(&Attacker, usize) -> Result<Obj>,
}

/// A client with what the attacks need besides the object itself.
struct Attacker {
    ctx: Context,
    pd: Pd,
    cq: Cq,
}

impl Attacker {
    fn new(d: &Daemon) -> Attacker {
        let ctx = d.open();
        let pd = Pd::alloc(&ctx).unwrap();
        let cq = Cq::create(&ctx, 1, 0, None, 0).unwrap();
        Attacker { ctx, pd, cq }
    }
}

fn small_qp(a: &Attacker, send: u32) -> Result<Qp> {
    let cap = QpCap {
        max_send_wr: send,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    Qp::create(&a.pd, &QpInit::new(QpType::Rc, &a.cq, &a.cq, cap))
}

fn attacks() -> Vec<Attack> {
    vec![
        Attack {
            kind: "pds",
            per_session: 6,
            per_uid: 10,
            unit: 1,
            make: |a, _| Ok(Box::new(Pd::alloc(&a.ctx)?)),
        },
        Attack {
            kind: "cqs",
            per_session: 6,
            per_uid: 12,
            unit: 1,
            make: |a, _| Ok(Box::new(Cq::create(&a.ctx, 1, 0, None, 0)?)),
        },
        Attack {
            kind: "cq_depth",
            per_session: 4 * 1023 + 1,
            per_uid: 6650,
            unit: 1023,
            make: |a, _| Ok(Box::new(Cq::create(&a.ctx, 1000, 0, None, 0)?)),
        },
        Attack {
            kind: "srqs",
            per_session: 6,
            per_uid: 10,
            unit: 1,
            make: |a, _| Ok(Box::new(Srq::create(&a.pd, 1, 1, 0, 0)?)),
        },
        Attack {
            kind: "mrs",
            per_session: 6,
            per_uid: 10,
            unit: 1,
            make: |a, _| Ok(Box::new(MrBuf::new(&a.pd, 64, ALL_ACCESS)?)),
        },
        Attack {
            kind: "mr_bytes",
            per_session: 4 << 20,
            per_uid: (6 << 20) + 4096,
            unit: 1 << 20,
            make: |a, _| Ok(Box::new(MrBuf::new(&a.pd, 1 << 20, ALL_ACCESS)?)),
        },
        Attack {
            kind: "qps",
            per_session: 6,
            per_uid: 10,
            unit: 1,
            make: |a, _| Ok(Box::new(small_qp(a, 1)?)),
        },
        Attack {
            kind: "wqes",
            per_session: 4 * 1001 + 10,
            per_uid: 6300,
            unit: 1001,
            make: |a, _| Ok(Box::new(small_qp(a, 1000)?)),
        },
        Attack {
            // Completion channel sockets (after the 3 fds of Hello).
            kind: "fds",
            per_session: 3 + 4,
            per_uid: 15,
            unit: 1,
            make: |a, _| {
                let ch = CompChannel::new()?;
                let cq = Cq::create(&a.ctx, 1, 0, Some(&ch), 0)?;
                Ok(Box::new((cq, ch)))
            },
        },
        Attack {
            kind: "xrcds",
            per_session: 4,
            per_uid: 6,
            unit: 1,
            make: |a, _| Ok(Box::new(Xrcd::open(&a.ctx, None, 0)?)),
        },
    ]
}

/// Every verbs kind: client A stops at the per-client limit with ENOMEM,
/// client B of the same uid at what the uid has left, the bystander is
/// served throughout, and everything goes back when they close.
#[test]
fn every_kind_is_limited_per_client_and_per_uid() {
    let _g = serial();
    let attacks = attacks();
    let spec: Vec<String> = attacks
        .iter()
        .flat_map(|a| {
            [
                format!("session.{}={}", a.kind, a.per_session),
                format!("uid.{}={}", a.kind, a.per_uid),
            ]
        })
        .collect();
    let d = Daemon::spawn("rxuq0", Ipv4Addr::new(127, 0, 16, 1))
        .args(&["--limit", &spec.join(",")])
        .start();
    let uid = my_uid();
    let by = Bystander::start(&d.name);
    let fds0 = steady_fd_count(d.pid());
    let rss0 = rss_kib(d.pid());
    for at in &attacks {
        let before = uid_use(&d, uid, at.kind);
        let a = Attacker::new(&d);
        let own = uid_use(&d, uid, at.kind) - before;
        let (held_a, err) = flood(|i| (at.make)(&a, i));
        let want_a = (at.per_session - own) / at.unit;
        assert_eq!(
            (held_a.len() as u64, err.errno()),
            (want_a, libc::ENOMEM),
            "{}: client A: {err}",
            at.kind
        );
        assert!(err.to_string().contains("this client's"), "{err}");
        // B: what the uid has left, less B's own setup.
        let b = Attacker::new(&d);
        let used = uid_use(&d, uid, at.kind);
        let (held_b, err) = flood(|i| (at.make)(&b, i));
        let want_b = at.per_uid.saturating_sub(used) / at.unit;
        assert!(want_b < want_a, "{}: the test's limits", at.kind);
        assert_eq!(
            (held_b.len() as u64, err.errno()),
            (want_b, libc::ENOMEM),
            "{}: client B: {err}",
            at.kind
        );
        assert!(err.to_string().contains(&format!("uid {uid}")), "{err}");
        drop((held_a, held_b, a, b));
        // Teardown gave everything back.
        assert_eq!(uid_use(&d, uid, at.kind), before, "{}", at.kind);
    }
    let fds = settle_fds(d.pid(), fds0, Duration::from_secs(5));
    assert!(fds <= fds0, "rxud holds {fds} fds, {fds0} before");
    let rss = rss_kib(d.pid());
    assert!(
        rss <= rss0 + RSS_SLACK_KIB,
        "rxud RSS {rss} KiB, {rss0} KiB before"
    );
    by.finish().assert_served(GAP);
}

/// Connections of one uid past `uid.sessions`: refused with EDQUOT
/// (before Hello, in place of its reply); a closed one makes room again.
#[test]
fn sessions_past_the_uid_limit_are_refused_with_edquot() {
    let _g = serial();
    let d = Daemon::spawn("rxuq1", Ipv4Addr::new(127, 0, 16, 2))
        .args(&["--limit", "uid.sessions=6"])
        .start();
    let uid = my_uid();
    let by = Bystander::start(&d.name);
    let fds0 = steady_fd_count(d.pid());
    // The bystander's context and the status query's own connection.
    let open = uid_use(&d, uid, "sessions") - 1;
    let (held, err) = flood(|_| Ok(Box::new(Context::open(&d.name)?)));
    assert_eq!(held.len() as u64, 6 - open);
    assert_eq!(err.errno(), libc::EDQUOT, "{err}");
    assert!(err.to_string().contains("uid.sessions"), "{err}");
    drop(held);
    // Room again once they are gone.
    let end = Instant::now() + Duration::from_secs(5);
    let ctx = loop {
        match Context::open(&d.name) {
            Ok(c) => break c,
            Err(e) if Instant::now() < end => {
                assert_eq!(e.errno(), libc::EDQUOT);
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("no room after the attacker closed: {e}"),
        }
    };
    drop(ctx);
    assert!(settle_fds(d.pid(), fds0, Duration::from_secs(5)) <= fds0);
    by.finish().assert_served(GAP);
}

/// A raw control connection.
struct Conn(OwnedFd);

impl Conn {
    fn open(d: &Daemon) -> Conn {
        Conn(rxu_testkit::sock::connect(&d.socket()))
    }

    fn call(&self, req: &Request, fds: &[std::os::fd::BorrowedFd<'_>]) -> Option<Response> {
        fdpass::send_msg(self.0.as_fd(), &proto::encode(req).unwrap(), fds).ok()?;
        self.recv(Duration::from_secs(10))
    }

    /// The next message, None on end of file (or nothing within `t`).
    fn recv(&self, t: Duration) -> Option<Response> {
        if !fdpass::wait_readable(self.0.as_fd(), Some(t)).ok()? {
            return None;
        }
        let mut buf = vec![0u8; proto::MAX_MSG];
        let (n, _) = fdpass::recv_msg(self.0.as_fd(), &mut buf, 0).ok()?;
        (n > 0).then(|| proto::decode(&buf[..n]).unwrap())
    }

    /// Whether the daemon closed it within `t`.
    fn closed_within(&self, t: Duration) -> bool {
        if !matches!(fdpass::wait_readable(self.0.as_fd(), Some(t)), Ok(true)) {
            return false;
        }
        let mut buf = vec![0u8; proto::MAX_MSG];
        loop {
            match fdpass::recv_msg(self.0.as_fd(), &mut buf, 0) {
                Ok((0, _)) => return true,
                // The refusal message, then end of file.
                Ok(_) => continue,
                Err(_) => return true,
            }
        }
    }
}

/// Connections that never say Hello: closed after the timeout; past
/// `uid.unhello` of them, a new one is refused with EDQUOT at once.
#[test]
fn silent_connections_are_closed_and_capped() {
    let _g = serial();
    let d = Daemon::spawn("rxuq2", Ipv4Addr::new(127, 0, 16, 3))
        .args(&["--limit", "uid.unhello=4,hello_timeout_ms=300"])
        .start();
    let by = Bystander::start(&d.name);
    let fds0 = steady_fd_count(d.pid());
    let t0 = Instant::now();
    let silent: Vec<Conn> = (0..4).map(|_| Conn::open(&d)).collect();
    let fifth = Conn::open(&d);
    match fifth.recv(Duration::from_secs(5)) {
        Some(Response::Error { errno, msg }) => {
            assert_eq!(errno, libc::EDQUOT, "{msg}");
            assert!(msg.contains("not said Hello"), "{msg}");
        }
        other => panic!("the fifth silent connection: {other:?}"),
    }
    for c in &silent {
        assert!(c.closed_within(Duration::from_secs(5)), "not closed");
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "closed after {took:?}, the timeout is 300 ms"
    );
    drop(silent);
    // A client that says Hello in time is served as before.
    let ctx = d.open();
    drop(ctx);
    assert!(settle_fds(d.pid(), fds0, Duration::from_secs(5)) <= fds0);
    by.finish().assert_served(GAP);
}

const RDMA_PS_TCP: u16 = 0x0106;
const RDMA_PS_UDP: u16 = 0x0111;

/// An rdma_cm connection with one event channel attached.
fn cm_conn(d: &Daemon) -> (Conn, OwnedFd) {
    let c = Conn::open(d);
    let hello = Request::CmHello {
        version: PROTO_VERSION,
        pid: std::process::id(),
    };
    assert!(matches!(c.call(&hello, &[]), Some(Response::Hello { .. })));
    let (rd, wr) = seqpacket_pair();
    let attach = Request::Cm(CmRequest::AttachChannel { channel: 1, tag: 1 });
    let r = c.call(&attach, &[wr.as_fd()]);
    assert!(matches!(r, Some(Response::Cm(CmResponse::Ok))), "{r:?}");
    (c, rd)
}

fn bind(c: &Conn, addr: IpAddr, ps: u16, reuse: bool) -> Result<u32, (i32, String)> {
    let qp_type = if ps == RDMA_PS_UDP {
        QpType::Ud
    } else {
        QpType::Rc
    };
    let req = Request::Cm(CmRequest::Bind {
        channel: 1,
        ps,
        qp_type,
        addr: SocketAddr::new(addr, if reuse { 7471 } else { 0 }),
        reuseaddr: reuse,
        afonly: false,
        tos: None,
    });
    match c.call(&req, &[]) {
        Some(Response::Cm(CmResponse::Bound { id, .. })) => Ok(id),
        Some(Response::Error { errno, msg }) => Err((errno, msg)),
        other => panic!("Bind: {other:?}"),
    }
}

/// rdma_cm ids (Bind with reuseaddr on one port, as the attack)
/// and multicast joins: ENOMEM past the per-client limit, the uid's limit
/// for a second client; everything back when they close.
#[test]
fn cm_ids_and_joins_are_limited() {
    let _g = serial();
    let addr = Ipv4Addr::new(127, 0, 16, 4);
    let d = Daemon::spawn("rxuq3", addr)
        .args(&[
            "--limit",
            "session.cm_ids=8,uid.cm_ids=12,session.mcast_joins=5,uid.mcast_joins=8",
        ])
        .start();
    let uid = my_uid();
    let by = Bystander::start(&d.name);
    let fds0 = steady_fd_count(d.pid());
    let ip = IpAddr::V4(addr);
    let (a, _a_ch) = cm_conn(&d);
    let ids: Vec<_> = (0..8)
        .map(|_| bind(&a, ip, RDMA_PS_TCP, true).expect("bind"))
        .collect();
    let (errno, msg) = bind(&a, ip, RDMA_PS_TCP, true).unwrap_err();
    assert_eq!(errno, libc::ENOMEM, "{msg}");
    assert!(msg.contains("cm_ids"), "{msg}");
    let (b, _b_ch) = cm_conn(&d);
    for _ in 0..4 {
        bind(&b, ip, RDMA_PS_TCP, true).expect("bind within the uid's limit");
    }
    let (errno, msg) = bind(&b, ip, RDMA_PS_TCP, true).unwrap_err();
    assert_eq!(errno, libc::ENOMEM, "{msg}");
    assert!(msg.contains(&format!("uid {uid}")), "{msg}");
    assert_eq!(uid_use(&d, uid, "cm_ids"), 12);
    drop((a, b));
    drop(ids);
    // Joins: one UD id joining group after group.
    let (c, _c_ch) = cm_conn(&d);
    let end = Instant::now() + Duration::from_secs(5);
    while uid_use(&d, uid, "cm_ids") > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let id = bind(&c, ip, RDMA_PS_UDP, false).expect("bind UD");
    let join = |n: u8| {
        let req = Request::Cm(CmRequest::JoinMcast {
            id,
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 7, 0, n)), 0),
            send_only: true,
        });
        c.call(&req, &[])
    };
    for n in 0..5 {
        let r = join(n);
        assert!(matches!(r, Some(Response::Cm(CmResponse::Ok))), "{r:?}");
    }
    match join(5) {
        Some(Response::Error { errno, msg }) => {
            assert_eq!(errno, libc::ENOMEM, "{msg}");
            assert!(msg.contains("mcast_joins"), "{msg}");
        }
        other => panic!("join past the limit: {other:?}"),
    }
    drop(c);
    let end = Instant::now() + Duration::from_secs(5);
    while uid_use(&d, uid, "cm_ids") + uid_use(&d, uid, "mcast_joins") > 0 {
        assert!(Instant::now() < end, "rdma_cm quota not given back");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(settle_fds(d.pid(), fds0, Duration::from_secs(5)) <= fds0);
    by.finish().assert_served(GAP);
}

/// A client that never polls its CQ while its QPs receive: the daemon
/// keeps at most the CQ's depth behind its ring, the owner hears
/// IBV_EVENT_CQ_ERR, the QPs on that CQ go to the error state, and the
/// rest of the completions are lost (counted), as on a device whose CQ
/// overflowed. The sender and the bystander are unaffected.
#[test]
fn a_cq_that_is_never_polled_overruns_instead_of_growing() {
    let _g = serial();
    let d = Daemon::start("rxuq4", Ipv4Addr::new(127, 0, 16, 5));
    let by = Bystander::start(&d.name);
    let rss0 = rss_kib(d.pid());
    let ctx = d.open();
    let pd = Pd::alloc(&ctx).unwrap();
    let mut src = MrBuf::new(&pd, 4096, ALL_ACCESS).unwrap();
    src.fill(7);
    let dst = MrBuf::new(&pd, 4096, ALL_ACCESS).unwrap();
    // The victim: 8 QPs receiving into one CQ of 8 entries it never polls.
    let vcq = Cq::create(&ctx, 8, 0, None, 0x5eed).unwrap();
    let scq = Cq::create(&ctx, 1024, 0, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let gid = ctx.query_gid(0).unwrap();
    let mut pairs = Vec::new();
    for i in 0..8u32 {
        let s = Qp::create(&pd, &QpInit::new(QpType::Rc, &scq, &scq, cap)).unwrap();
        let r = Qp::create(&pd, &QpInit::new(QpType::Rc, &vcq, &vcq, cap)).unwrap();
        let es = QpEndpoint {
            qpn: s.qpn(),
            psn: 100 + i,
            gid,
        };
        let er = QpEndpoint {
            qpn: r.qpn(),
            psn: 200 + i,
            gid,
        };
        let opts = ConnectOpts {
            retry_cnt: 0,
            rnr_retry: 0,
            ..Default::default()
        };
        s.connect(es.psn, &er, &opts).unwrap();
        r.connect(er.psn, &es, &opts).unwrap();
        let sge = [dst.sge(0, 64)];
        let wrs: Vec<RecvWr> = (0..64).map(|n| RecvWr::new(n, &sge)).collect();
        r.post_recv(&wrs).unwrap();
        pairs.push((s, r));
    }
    // 8 x 64 sends: 512 receive completions for a CQ of 8 (+ 8 behind).
    let sge = [src.sge(0, 64)];
    for (s, _) in &pairs {
        let wrs: Vec<SendWr> = (0..64).map(|n| SendWr::send(n, &sge).signaled()).collect();
        s.post_send(&wrs).unwrap();
    }
    // The sender polls its own CQ: every send completes (its peer
    // received, or went to error and NAKs/drops, which ends in an error
    // completion after the retries, 0 here).
    let mut done = 0;
    let end = Instant::now() + Duration::from_secs(20);
    let mut wc = [Wc::default(); 64];
    while done < 8 * 64 && Instant::now() < end {
        done += scq.poll(&mut wc).unwrap();
    }
    assert_eq!(done, 8 * 64, "the sender's completions");
    let ev = ctx
        .get_async_event_timeout(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("an async event");
    assert_eq!(
        (ev.element, ev.event_type),
        (0x5eed, event_type::CQ_ERR),
        "{ev:?}"
    );
    for (_, r) in &pairs {
        let (attr, _) = r.query(qp_attr_mask::STATE).unwrap();
        assert_eq!(attr.qp_state, QpState::Err as u8, "qp {}", r.qpn());
    }
    let st = d.stats();
    let dropped = rxu_testkit::daemon::counter(&st, "cqes_dropped");
    assert!(dropped > 0, "no completion was lost");
    assert_eq!(rxu_testkit::daemon::counter(&st, "cq_overruns"), 1);
    // What the CQ holds: its ring and at most its depth behind it.
    let rss = rss_kib(d.pid());
    assert!(
        rss <= rss0 + RSS_SLACK_KIB,
        "rxud RSS {rss} KiB, {rss0} before"
    );
    drop((pairs, vcq, scq, src, dst, pd, ctx));
    by.finish().assert_served(GAP);
}

/// `rxu stats` and `rxu status` (and the client library's) with 1000
/// QPs: the replies are far over one control message (16 KiB) and come
/// in pieces.
#[test]
fn stats_and_status_work_with_1000_qps() {
    let _g = serial();
    let d = Daemon::start("rxuq5", Ipv4Addr::new(127, 0, 16, 6));
    let ctx = d.open();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 16, 0, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qps: Vec<Qp> = (0..1000)
        .map(|_| Qp::create(&pd, &QpInit::new(QpType::Rc, &cq, &cq, cap)).unwrap())
        .collect();
    let st = d.stats();
    assert_eq!(st.qps.len(), 1000);
    let status = d.status();
    let mine: usize = status.clients.iter().map(|c| c.qps.len()).sum();
    assert_eq!(mine, 1000);
    let out = d.rxu(&["stats", "--name", &d.name]);
    assert!(
        out.lines().count() > 1000,
        "rxu stats: {} lines",
        out.lines().count()
    );
    let out = d.rxu(&["status"]);
    let qp_lines = out
        .lines()
        .filter(|l| l.trim_start().starts_with("qp "))
        .count();
    assert_eq!(qp_lines, 1000, "{out}");
    assert!(out.contains("limits (per client / per uid)"), "{out}");
    drop(qps);
}

/// Sets process `pid`'s soft RLIMIT_NOFILE (keeping the hard one);
/// returns the old soft limit.
fn set_nofile(pid: u32, soft: u64) -> u64 {
    // SAFETY: rlimit is plain data; prlimit reads `new` and writes `old`.
    unsafe {
        let mut old: libc::rlimit = std::mem::zeroed();
        assert_eq!(
            libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old),
            0
        );
        let new = libc::rlimit {
            rlim_cur: soft,
            rlim_max: old.rlim_max,
        };
        assert_eq!(
            libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()),
            0,
            "prlimit: {}",
            std::io::Error::last_os_error()
        );
        old.rlim_cur
    }
}

/// rxud out of descriptors: accept fails with EMFILE; the daemon rests
/// its listener (one log line, not one every 20 us), keeps serving the
/// clients it has, and accepts again once descriptors are free.
#[test]
fn accept_out_of_fds_backs_off_and_logs_once() {
    let _g = serial();
    let d = Daemon::spawn("rxuq6", Ipv4Addr::new(127, 0, 16, 7))
        .args(&["--limit", "hello_timeout_ms=60000"])
        .start();
    let by = Bystander::start(&d.name);
    let base = steady_fd_count(d.pid());
    let old = set_nofile(d.pid(), base as u64 + 2);
    // Connections queue in the listener's backlog; rxud takes two.
    let conns: Vec<Conn> = (0..8).map(|_| Conn::open(&d)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let log = d.log_text();
    let failures = log.lines().filter(|l| l.contains("accept:")).count();
    assert_eq!(failures, 1, "accept failures logged:\n{log}");
    set_nofile(d.pid(), old);
    drop(conns);
    // Served again (the listener is retried every 100 ms).
    let ctx = d.open();
    drop(ctx);
    assert!(
        d.log_text().contains("accept works again"),
        "{}",
        d.log_text()
    );
    by.finish().assert_served(GAP);
}
