//! The built `rxud` end to end, spoken to with raw protocol messages (no
//! client library): two RC QPs of one client move a SEND and an RDMA
//! WRITE through the daemon, byte-exact; a client that goes away leaves
//! nothing behind; start-up errors and shutdown paths.
//!
//! Each test uses its own 127.0.78.x address, port and runtime directory,
//! so they may run concurrently.

use std::fs::OpenOptions;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use rxu_abi::proto::abi::{Cqe, RecvSlot, SendSlot, CQE_SIZE};
use rxu_abi::proto::fdpass::{recv_msg, send_msg};
use rxu_abi::proto::{self, AhAttr, QpAttr, QpCap, QpType, Request, Response, MAX_MSG};
use rxu_abi::ring::{Consumer, Doorbell, Producer, Ring};
use rxu_client::Wc;
use rxu_testkit::bins;
use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::sock::connect;
use rxu_testkit::{seqpacket_pair, Daemon};
use rxud::verbs::{self, mask};
use transport::verbs::{Sge, WrOpcode};

const LOCAL_WRITE: u32 = 1;
const REMOTE_WRITE: u32 = 2;
const SIGNALED: u32 = 2;

/// rxud `rxut<tag>` on `addr`:`port`, in a runtime directory of its own.
fn start(tag: &str, addr: IpAddr, port: u16) -> Daemon {
    Daemon::spawn(&format!("rxut{tag}"), addr)
        .args(&["--port", &port.to_string(), "--mtu", "65536"])
        .own_dir(scratch_dir(&format!("rxud-test-{tag}")))
        .start()
}

fn call(sock: &OwnedFd, req: &Request, fds: &[BorrowedFd<'_>]) -> (Response, Vec<OwnedFd>) {
    send_msg(sock.as_fd(), &proto::encode(req).unwrap(), fds).unwrap();
    let mut buf = vec![0u8; MAX_MSG];
    let (n, fds) = recv_msg(sock.as_fd(), &mut buf, 0).unwrap();
    assert!(n > 0, "daemon closed the connection");
    (proto::decode(&buf[..n]).unwrap(), fds)
}

fn ok(sock: &OwnedFd, req: Request) -> (Response, Vec<OwnedFd>) {
    let r = call(sock, &req, &[]);
    assert!(
        !matches!(r.0, Response::Error { .. }),
        "{req:?} -> {:?}",
        r.0
    );
    r
}

/// An application connection: control socket, async read end, doorbell.
struct App {
    sock: OwnedFd,
    _async_rd: OwnedFd,
    bell: Doorbell,
}

fn app(d: &Daemon) -> App {
    let sock = connect(&d.socket());
    let mem: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/proc/self/mem")
        .unwrap()
        .into();
    let (async_rd, async_wr) = seqpacket_pair();
    let bell = Doorbell::new().unwrap();
    let hello = Request::Hello {
        version: proto::PROTO_VERSION,
        pid: std::process::id(),
        admin: false,
    };
    let (r, _) = call(
        &sock,
        &hello,
        &[mem.as_fd(), async_wr.as_fd(), bell.as_fd()],
    );
    assert!(matches!(r, Response::Hello { .. }), "{r:?}");
    App {
        sock,
        _async_rd: async_rd,
        bell,
    }
}

fn admin(d: &Daemon) -> OwnedFd {
    let sock = connect(&d.socket());
    let hello = Request::Hello {
        version: proto::PROTO_VERSION,
        pid: std::process::id(),
        admin: true,
    };
    let (r, _) = call(&sock, &hello, &[]);
    assert!(matches!(r, Response::Hello { .. }), "{r:?}");
    sock
}

struct Qp {
    qpn: u32,
    sq: Producer,
    rq: Producer,
}

fn create_qp(a: &App, pd: u32, cq: u32) -> Qp {
    let req = Request::CreateQp {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
        user_handle: 1,
    };
    match ok(&a.sock, req) {
        (Response::Qp { qpn, .. }, fds) => Qp {
            qpn,
            sq: Ring::attach(&fds[0]).unwrap().into_producer(),
            rq: Ring::attach(&fds[1]).unwrap().into_producer(),
        },
        r => panic!("{:?}", r.0),
    }
}

fn to_rts(a: &App, qpn: u32, peer: u32, addr: IpAddr) {
    let steps = [
        (
            mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
            QpAttr {
                qp_state: 1,
                port_num: 1,
                qp_access_flags: LOCAL_WRITE | REMOTE_WRITE,
                ..QpAttr::default()
            },
        ),
        (
            mask::STATE
                | mask::AV
                | mask::PATH_MTU
                | mask::DEST_QPN
                | mask::RQ_PSN
                | mask::MAX_DEST_RD_ATOMIC
                | mask::MIN_RNR_TIMER,
            QpAttr {
                qp_state: 2,
                path_mtu: 5,
                dest_qp_num: peer,
                rq_psn: 0x1234,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 1,
                ah: AhAttr {
                    dgid: verbs::gid_of(addr),
                    is_global: true,
                    hop_limit: 64,
                    port_num: 1,
                    ..AhAttr::default()
                },
                ..QpAttr::default()
            },
        ),
        (
            mask::STATE
                | mask::TIMEOUT
                | mask::RETRY_CNT
                | mask::RNR_RETRY
                | mask::SQ_PSN
                | mask::MAX_QP_RD_ATOMIC,
            QpAttr {
                qp_state: 3,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                sq_psn: 0x1234,
                max_rd_atomic: 1,
                ..QpAttr::default()
            },
        ),
    ];
    for (m, attr) in steps {
        ok(
            &a.sock,
            Request::ModifyQp {
                qp: qpn,
                mask: m,
                attr,
            },
        );
    }
}

fn push(p: &mut Producer, bell: &Doorbell, bytes: &[u8]) {
    assert!(p.try_push(bytes).unwrap());
    p.notify(bell).unwrap();
}

/// A signaled send slot of `size` bytes, written with the slot view.
fn send_slot(size: usize, wr_id: u64, op: WrOpcode, remote: (u64, u32), sges: &[Sge]) -> Vec<u8> {
    let mut b = vec![0u8; size];
    let mut s = SendSlot::new_unchecked(&mut b[..]);
    s.set_wr_id(wr_id);
    s.set_opcode(op);
    s.set_send_flags(SIGNALED);
    s.set_remote_addr(remote.0);
    s.set_rkey(remote.1);
    s.set_sges(sges).unwrap();
    b
}

/// A receive slot of `size` bytes, written with the slot view.
fn recv_slot(size: usize, wr_id: u64, sges: &[Sge]) -> Vec<u8> {
    let mut b = vec![0u8; size];
    let mut r = RecvSlot::new_unchecked(&mut b[..]);
    r.set_wr_id(wr_id);
    r.set_sges(sges).unwrap();
    b
}

fn pop_cqes(cq: &mut Consumer, want: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    let mut b = [0u8; CQE_SIZE];
    while got.len() < want && Instant::now() < end {
        if cq.try_pop(&mut b).unwrap() {
            got.push(Wc::from_cqe(&Cqe::new_unchecked(&b)));
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

fn app_clients(admin: &OwnedFd) -> Vec<rxu_abi::proto::ClientStatus> {
    match ok(admin, Request::Status).0 {
        Response::Status { clients, .. } => clients.into_iter().filter(|c| !c.admin).collect(),
        r => panic!("{r:?}"),
    }
}

#[test]
fn send_and_write_between_two_rc_qps_then_cleanup() {
    let addr: IpAddr = "127.0.78.1".parse().unwrap();
    let mut d = start("1", addr, 24801);
    let a = app(&d);
    let pd = match ok(&a.sock, Request::AllocPd).0 {
        Response::Pd { pd } => pd,
        r => panic!("{r:?}"),
    };
    let src: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut dst = vec![0u8; 65536];
    let reg = |buf: &[u8]| match ok(
        &a.sock,
        Request::RegMr {
            pd,
            addr: buf.as_ptr() as u64,
            len: buf.len() as u64,
            iova: buf.as_ptr() as u64,
            access: LOCAL_WRITE | REMOTE_WRITE,
        },
    )
    .0
    {
        Response::Mr { lkey, rkey, .. } => (lkey, rkey),
        r => panic!("{r:?}"),
    };
    let (slkey, _) = reg(&src);
    let (dlkey, drkey) = reg(&dst);
    let (cq, mut cq_ring) = match ok(
        &a.sock,
        Request::CreateCq {
            cqe: 16,
            comp_vector: 0,
            user_handle: 7,
            channel: false,
            timestamps: false,
        },
    ) {
        (Response::Cq { cq, .. }, fds) => (cq, Ring::attach(&fds[0]).unwrap().into_consumer()),
        r => panic!("{:?}", r.0),
    };
    let mut qa = create_qp(&a, pd, cq);
    let mut qb = create_qp(&a, pd, cq);
    to_rts(&a, qa.qpn, qb.qpn, addr);
    to_rts(&a, qb.qpn, qa.qpn, addr);

    let sge = |addr: u64, length: u32, lkey: u32| [Sge { addr, length, lkey }];
    let slot = recv_slot(
        qb.rq.slot_size(),
        0xb0,
        &sge(dst.as_mut_ptr() as u64, 32768, dlkey),
    );
    push(&mut qb.rq, &a.bell, &slot);
    let size = qa.sq.slot_size();
    let slot = send_slot(
        size,
        0xa0,
        WrOpcode::SEND,
        (0, 0),
        &sge(src.as_ptr() as u64, 20000, slkey),
    );
    push(&mut qa.sq, &a.bell, &slot);
    let slot = send_slot(
        size,
        0xa1,
        WrOpcode::RDMA_WRITE,
        (dst.as_ptr() as u64 + 32768, drkey),
        &sge(src.as_ptr() as u64 + 32768, 32768, slkey),
    );
    push(&mut qa.sq, &a.bell, &slot);

    let mut got = pop_cqes(&mut cq_ring, 3);
    assert_eq!(got.len(), 3, "completions {got:?}; log:\n{}", d.log_text());
    got.sort_by_key(|c| c.wr_id);
    for c in &got {
        assert_eq!(c.status, 0, "{c:?}");
    }
    assert_eq!(
        (got[0].wr_id, got[0].opcode, got[0].qp_num),
        (0xa0, 0, qa.qpn)
    );
    assert_eq!((got[1].wr_id, got[1].opcode), (0xa1, 1));
    let recv = got[2];
    assert_eq!(
        (recv.wr_id, recv.opcode, recv.byte_len, recv.qp_num),
        (0xb0, 128, 20000, qb.qpn)
    );
    assert_eq!(&dst[..20000], &src[..20000]);
    assert!(
        dst[20000..32768].iter().all(|&b| b == 0),
        "nothing past the SEND"
    );
    assert_eq!(&dst[32768..], &src[32768..]);

    // Everything of the client shows in Status, and is gone once its
    // connection closes.
    let adm = admin(&d);
    let clients = app_clients(&adm);
    assert_eq!(clients.len(), 1);
    let c = &clients[0];
    assert_eq!(
        (c.pid, c.pds, c.mrs, c.cqs, c.qps.len()),
        (std::process::id(), 1, 2, 1, 2)
    );
    assert!(c
        .qps
        .iter()
        .all(|q| q.state == 3 && q.dest == addr.to_string()));
    drop(a);
    let end = Instant::now() + Duration::from_secs(10);
    while !app_clients(&adm).is_empty() {
        assert!(Instant::now() < end, "client objects not cleaned up");
        std::thread::sleep(Duration::from_millis(5));
    }
    match ok(&adm, Request::Stats).0 {
        Response::Stats { device, qps } => {
            assert!(qps.is_empty());
            let get = |n: &str| device.iter().find(|c| c.name == n).map(|c| c.value);
            assert_eq!(get("mrs"), Some(0));
            assert!(get("sent_pkts").unwrap() > 0);
        }
        r => panic!("{r:?}"),
    }
    // No applications: a plain shutdown is accepted and the daemon leaves
    // no files behind.
    ok(&adm, Request::Shutdown { force: false });
    assert_eq!(d.wait_exit(), Some(0), "log:\n{}", d.log_text());
    assert!(!d.socket().exists());
    assert!(!d.dir().join(format!("{}.pid", d.name)).exists());
}

#[test]
fn garbage_disconnects_only_its_sender_and_sigterm_is_clean() {
    let addr: IpAddr = "127.0.78.2".parse().unwrap();
    let mut d = start("2", addr, 24802);
    let good = app(&d);
    let bad = connect(&d.socket());
    // Refused requests get errors and the connection stays...
    let (r, _) = call(&bad, &Request::AllocPd, &[]);
    assert!(matches!(r, Response::Error { .. }));
    // ...a first request that is not Hello closes it.
    let mut buf = [0u8; 64];
    let (n, _) = recv_msg(bad.as_fd(), &mut buf, 0).unwrap();
    assert_eq!(n, 0);
    let bad = connect(&d.socket());
    send_msg(bad.as_fd(), &[0xff; 40], &[]).unwrap();
    let (n, _) = recv_msg(bad.as_fd(), &mut buf, 0).unwrap();
    assert_eq!(n, 0, "undecodable request: disconnected");
    // The good client is still served, and its bad handles are errors.
    assert!(matches!(
        ok(&good.sock, Request::AllocPd).0,
        Response::Pd { .. }
    ));
    let (r, _) = call(&good.sock, &Request::DestroyQp { qp: 12345 }, &[]);
    assert!(matches!(r, Response::Error { errno, .. } if errno == libc::ENOENT));
    // A shutdown without force is refused while the application is open.
    let adm = admin(&d);
    let (r, _) = call(&adm, &Request::Shutdown { force: false }, &[]);
    match r {
        Response::Error { errno, msg } => {
            assert_eq!(errno, libc::EBUSY);
            assert!(msg.contains(&std::process::id().to_string()));
        }
        r => panic!("{r:?}"),
    }
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "log:\n{}", d.log_text());
    // The application hears IBV_EVENT_DEVICE_FATAL, then EOF.
    let mut ev = [0u8; 16];
    let (n, _) = recv_msg(good._async_rd.as_fd(), &mut ev, 0).unwrap();
    assert_eq!(n, 16);
    assert_eq!(u32::from_ne_bytes(ev[8..12].try_into().unwrap()), 8);
    assert!(!d.socket().exists());
}

#[test]
fn start_up_errors_are_clear() {
    // Port in use.
    let addr: IpAddr = "127.0.78.3".parse().unwrap();
    let _holder = UdpSocket::bind((addr, 24803)).unwrap();
    let dir = scratch_dir("rxud-test-3");
    let run = |args: &[&str]| {
        Command::new(bins::rxud())
            .args(args)
            .env("RXU_RUNTIME_DIR", &dir)
            .output()
            .unwrap()
    };
    let out = run(&["--name", "rxut3", "--addr", "127.0.78.3", "--port", "24803"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("already in use") && err.contains("rdma_rxe"),
        "{err}"
    );
    // An address no interface has (TEST-NET-1).
    let out = run(&["--name", "rxut3", "--addr", "192.0.2.1", "--port", "24803"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("not assigned to any local interface"), "{err}");
    let out = run(&["--name", "rxe3", "--addr", "127.0.78.3", "--port", "24803"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid device name"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stale_socket_replaced_live_one_refused() {
    let addr: IpAddr = "127.0.78.4".parse().unwrap();
    let dir = scratch_dir("rxud-test-4");
    // A socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(dir.join("rxut4.sock")).unwrap());
    let mut d = Daemon::spawn("rxut4", addr)
        .args(&["--port", "24804"])
        .own_dir(dir.clone())
        .start();
    assert!(
        d.log_text().contains("control socket"),
        "log:\n{}",
        d.log_text()
    );
    let _adm = admin(&d);
    let meta = std::fs::metadata(d.socket()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // A second daemon for the same device refuses to start.
    let out = Command::new(bins::rxud())
        .args(["--name", "rxut4", "--addr", "127.0.78.5", "--port", "24804"])
        .env("RXU_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already running"), "{err}");
    d.signal(libc::SIGINT);
    assert_eq!(d.wait_exit(), Some(0));
}

/// Figures for the report, not a check: SEND ping-pong round trip and
/// RDMA WRITE goodput through the daemon, client and daemon on the same
/// (shared) two cores. `cargo test --release -p rxud --test
/// daemon_basic -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_pingpong_and_write_goodput() {
    let addr: IpAddr = "127.0.78.6".parse().unwrap();
    let d = start("6", addr, 24806);
    let a = app(&d);
    let pd = match ok(&a.sock, Request::AllocPd).0 {
        Response::Pd { pd } => pd,
        r => panic!("{r:?}"),
    };
    let len = 64 << 20;
    let src = vec![0x5au8; len];
    let dst = vec![0u8; len];
    let reg = |buf: &[u8]| match ok(
        &a.sock,
        Request::RegMr {
            pd,
            addr: buf.as_ptr() as u64,
            len: buf.len() as u64,
            iova: buf.as_ptr() as u64,
            access: LOCAL_WRITE | REMOTE_WRITE,
        },
    )
    .0
    {
        Response::Mr { lkey, rkey, .. } => (lkey, rkey),
        r => panic!("{r:?}"),
    };
    let (slkey, _) = reg(&src);
    let (dlkey, drkey) = reg(&dst);
    let mk_cq = || match ok(
        &a.sock,
        Request::CreateCq {
            cqe: 1024,
            comp_vector: 0,
            user_handle: 0,
            channel: false,
            timestamps: false,
        },
    ) {
        (Response::Cq { cq, .. }, fds) => (cq, Ring::attach(&fds[0]).unwrap().into_consumer()),
        r => panic!("{:?}", r.0),
    };
    let (cqa, mut ra) = mk_cq();
    let (cqb, mut rb) = mk_cq();
    let mut qa = create_qp(&a, pd, cqa);
    let mut qb = create_qp(&a, pd, cqb);
    to_rts(&a, qa.qpn, qb.qpn, addr);
    to_rts(&a, qb.qpn, qa.qpn, addr);
    let recv = |rq: &mut Producer, buf: &[u8], key: u32| {
        let sge = [Sge {
            addr: buf.as_ptr() as u64,
            length: 64,
            lkey: key,
        }];
        let slot = recv_slot(rq.slot_size(), 1, &sge);
        push(rq, &a.bell, &slot);
    };
    let send = |sq: &mut Producer, slot: &[u8]| {
        // Bounded: the daemon drains the ring while it runs.
        for _ in 0..10_000_000 {
            if sq.try_push(slot).unwrap() {
                sq.notify(&a.bell).unwrap();
                return;
            }
            std::hint::spin_loop();
        }
        panic!("SQ stays full");
    };
    // Completions seen per (CQ, opcode) and not yet waited for.
    let mut seen = std::collections::HashMap::<(u32, u32), usize>::new();
    let mut wait = |cq: &mut Consumer, id: u32, opcode: u32| {
        let mut b = [0u8; CQE_SIZE];
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(n) = seen.get_mut(&(id, opcode)).filter(|n| **n > 0) {
                *n -= 1;
                return;
            }
            if cq.try_pop(&mut b).unwrap() {
                let c = Wc::from_cqe(&Cqe::new_unchecked(&b));
                assert_eq!(c.status, 0, "{c:?}");
                *seen.entry((id, c.opcode)).or_default() += 1;
                continue;
            }
            assert!(Instant::now() < end, "no completion");
            std::hint::spin_loop();
        }
    };
    let ping = send_slot(
        qa.sq.slot_size(),
        2,
        WrOpcode::SEND,
        (0, 0),
        &[Sge {
            addr: src.as_ptr() as u64,
            length: 8,
            lkey: slkey,
        }],
    );
    let iters = 5000;
    recv(&mut qb.rq, &dst, dlkey);
    recv(&mut qa.rq, &dst, dlkey);
    let t = Instant::now();
    for _ in 0..iters {
        send(&mut qa.sq, &ping);
        wait(&mut rb, 1, 128);
        recv(&mut qb.rq, &dst, dlkey);
        send(&mut qb.sq, &ping);
        wait(&mut ra, 0, 128);
        recv(&mut qa.rq, &dst, dlkey);
        // Reap the send completions as they come.
        wait(&mut ra, 0, 0);
        wait(&mut rb, 1, 0);
    }
    let rtt = t.elapsed() / iters;
    println!(
        "SEND 8 B ping-pong round trip: {:.1} us",
        rtt.as_secs_f64() * 1e6
    );

    let msg = 64 << 10;
    let total: usize = 2 << 30;
    let depth = 8;
    let t = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    let n = total / msg;
    let mut b = [0u8; CQE_SIZE];
    let end = Instant::now() + Duration::from_secs(60);
    while done < n {
        while posted < n && posted - done < depth {
            let off = (posted * msg) % len;
            let slot = send_slot(
                qa.sq.slot_size(),
                posted as u64,
                WrOpcode::RDMA_WRITE,
                (dst.as_ptr() as u64 + off as u64, drkey),
                &[Sge {
                    addr: src.as_ptr() as u64 + off as u64,
                    length: msg as u32,
                    lkey: slkey,
                }],
            );
            send(&mut qa.sq, &slot);
            posted += 1;
        }
        if ra.try_pop(&mut b).unwrap() {
            assert_eq!(Cqe::new_unchecked(&b).status(), 0);
            done += 1;
        } else {
            std::hint::spin_loop();
        }
        assert!(Instant::now() < end, "WRITE stream stalled at {done}/{n}");
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "RDMA WRITE {} KiB x {depth} outstanding: {:.2} Gbit/s",
        msg >> 10,
        (total as f64 * 8.0) / secs / 1e9
    );
    assert_eq!(dst[len - 1], 0x5a);
    drop(dst);
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are
    // fields 14 and 15 of the line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn idle_daemon_with_connected_qps_sleeps() {
    let addr: IpAddr = "127.0.78.7".parse().unwrap();
    let d = start("7", addr, 24807);
    let a = app(&d);
    let pd = match ok(&a.sock, Request::AllocPd).0 {
        Response::Pd { pd } => pd,
        r => panic!("{r:?}"),
    };
    let cq = match ok(
        &a.sock,
        Request::CreateCq {
            cqe: 4,
            comp_vector: 0,
            user_handle: 0,
            channel: false,
            timestamps: false,
        },
    )
    .0
    {
        Response::Cq { cq, .. } => cq,
        r => panic!("{r:?}"),
    };
    let qa = create_qp(&a, pd, cq);
    let qb = create_qp(&a, pd, cq);
    to_rts(&a, qa.qpn, qb.qpn, addr);
    to_rts(&a, qb.qpn, qa.qpn, addr);
    std::thread::sleep(Duration::from_millis(50));
    let before = cpu_ticks(d.pid());
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu_ticks(d.pid()) - before;
    // 100 ticks a second: a spinning daemon would show ~50.
    assert!(used <= 5, "idle daemon used {used} ticks in 0.5 s");
}

/// A restarted daemon does not hand out the QP numbers of its previous
/// incarnation in the same order (they started at 0x11 every time): a
/// peer still sending to a QP of the dead daemon must not reach whatever
/// QP got that number next.
#[test]
fn a_restarted_daemon_numbers_its_qps_afresh() {
    let first_qpn = || {
        let d = Daemon::start("rxuqpn", std::net::Ipv4Addr::new(127, 0, 31, 9));
        let ctx = d.open();
        let p = rxu_testkit::verbs::Pair::new(&ctx, QpType::Rc);
        p.a.qpn()
    };
    let seen: Vec<u32> = (0..3).map(|_| first_qpn()).collect();
    assert!(
        seen.windows(2).any(|w| w[0] != w[1]),
        "three incarnations numbered their first QP alike: {seen:x?}"
    );
}
