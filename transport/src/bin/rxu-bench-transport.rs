//! Transport benchmark: RC RDMA WRITE goodput between two engines on
//! loopback against raw UDP loopback with the same packet size and the same
//! batching (sendmmsg/recvmmsg of the same batch size, one sender and one
//! receiver thread), measured side by side in one run.
//!
//! Prints `rc_write_64k_gbps=<x>`, `udp_raw_4k_gbps=<y>`, `ratio=<x/y>`.
//! Goodput counts message bytes: for raw UDP 4096 bytes per datagram
//! received (each datagram is as long as a RoCE packet with 4096 bytes of
//! payload), for RC the bytes of completed WRITEs.
//!
//! Memory: as perftest, each side registers one message-sized buffer and
//! every WRITE goes from and to it, so the data is as hot in cache as raw
//! UDP's one send buffer. A second RC figure gives every WQE in flight a
//! buffer of its own (`rc_write_64k_buffer_per_wqe_gbps`, context).
//!
//! Options: `--secs S` (per measurement, default 3), `--rounds N` (raw and
//! RC alternate N times, best of each is reported; default 2), `--batch B`
//! (default 32), `--msg BYTES` (default 65536), `--inflight N` (WQEs
//! outstanding, default 64), `--no-offload` (engine without UDP GSO/GRO),
//! `--no-raw-offload` (skip the raw GSO+GRO measurement), `--spin-us US`,
//! `--window PSNS`, `--region BYTES` (only this RC layout), `--only raw|rc`,
//! `--a ADDR --b ADDR`, `--port P`, `--pkt BYTES` and `--payload BYTES`
//! (raw UDP datagram size and the message bytes each one stands for;
//! default 4112 and 4096, a full RoCE packet).
//!
//! With `--only raw` it also prints the datagram rates
//! (`udp_raw_mpps=`, `udp_raw_plain_mpps=`) and `udp_raw_pkt=`: the
//! reference `scripts/bench-perftest` puts next to each perftest figure,
//! with the datagram size of that test's packets.
//!
//! The baseline of `ratio` uses the same batching as the engine: when the
//! engine runs with UDP GSO+GRO (the default), raw UDP runs with GSO+GRO
//! too. The other raw figure follows as context (`udp_raw_plain_4k_gbps`,
//! `ratio_vs_plain`, or the `_gso_gro_` pair with `--no-offload`), then
//! which offloads the engine used. `--no-raw-offload` skips the raw
//! GSO+GRO run (then `ratio` is missing when the engine uses offloads),
//! `--no-raw-plain` the raw run without offloads.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use transport::engine::sys::{self, RecvBufs, SendBufs};
use transport::engine::{Engine, EngineConfig, QpSpec, GRO_BATCH};
use transport::qp::{
    access, send_flags, BufferMemory, Memory, Mtu, Payload, QpAttr, QpState, QpType, SendOp,
    SendWqe, Sge, WcStatus,
};
use transport::Psn;

/// A RoCE packet carrying 4096 bytes: BTH (12) + 4096 + ICRC (4).
const PKT: usize = 12 + 4096 + 4;
const PAYLOAD: u64 = 4096;

#[derive(Clone, Debug)]
struct Opts {
    secs: f64,
    rounds: usize,
    batch: usize,
    msg: usize,
    inflight: usize,
    /// Engine uses UDP GSO/GRO.
    offload: bool,
    /// Also measure raw UDP with GSO+GRO.
    raw_offload: bool,
    /// Also measure raw UDP without offloads.
    raw_plain: bool,
    only: Option<String>,
    /// Engine spin limit (default: the engine's).
    spin_us: Option<u64>,
    /// RC window in PSNs (default: the QP's).
    window: Option<u32>,
    /// Bytes registered on each side for the WRITEs (None: one message
    /// each, as perftest; and one per WQE in flight as context).
    region: Option<usize>,
    a: IpAddr,
    b: IpAddr,
    port: u16,
    /// Raw UDP datagram size (UDP payload: BTH to ICRC).
    pkt: usize,
    /// Message bytes one raw datagram stands for (for Gbit/s).
    payload: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        secs: 3.0,
        rounds: 2,
        batch: 32,
        msg: 65536,
        inflight: 64,
        offload: true,
        raw_offload: true,
        raw_plain: true,
        only: None,
        spin_us: None,
        window: None,
        region: None,
        a: "127.0.0.1".parse().unwrap(),
        b: "127.0.0.2".parse().unwrap(),
        port: 4791,
        pkt: PKT,
        payload: PAYLOAD,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut val = || -> Result<String, String> {
            i += 1;
            args.get(i).cloned().ok_or(format!("{flag} needs a value"))
        };
        let num = |s: String| s.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag {
            "--secs" => o.secs = num(val()?)?,
            "--rounds" => o.rounds = num(val()?)? as usize,
            "--batch" => o.batch = num(val()?)? as usize,
            "--msg" => o.msg = num(val()?)? as usize,
            "--inflight" => o.inflight = num(val()?)? as usize,
            "--port" => o.port = num(val()?)? as u16,
            "--no-offload" => o.offload = false,
            "--no-raw-offload" => o.raw_offload = false,
            "--no-raw-plain" => o.raw_plain = false,
            "--only" => o.only = Some(val()?),
            "--spin-us" => o.spin_us = Some(num(val()?)? as u64),
            "--window" => o.window = Some(num(val()?)? as u32),
            "--region" => o.region = Some(num(val()?)? as usize),
            "--pkt" => o.pkt = num(val()?)? as usize,
            "--payload" => o.payload = num(val()?)? as u64,
            "--a" => o.a = val()?.parse().map_err(|e| format!("--a: {e}"))?,
            "--b" => o.b = val()?.parse().map_err(|e| format!("--b: {e}"))?,
            "-h" | "--help" => {
                return Err("usage: rxu-bench-transport [--secs S] [--rounds N] [--batch B] [--msg BYTES] \
                     [--inflight N] [--no-offload] [--no-raw-offload] [--no-raw-plain] [--only raw|rc] [--spin-us US] [--window PSNS] [--region BYTES] [--a ADDR] [--b ADDR] [--port P] [--pkt BYTES] [--payload BYTES]"
                    .into())
            }
            _ => return Err(format!("unknown option {flag}")),
        }
        i += 1;
    }
    for ip in [o.a, o.b] {
        if !ip.is_loopback() {
            return Err(format!(
                "{ip}: this benchmark only talks to loopback addresses"
            ));
        }
    }
    if o.batch == 0 || o.batch > sys::MAX_BATCH {
        return Err("--batch must be 1..=64".into());
    }
    // 16 segments of a GSO datagram must fit in one UDP datagram.
    if !(16..=4096 + 64).contains(&o.pkt) {
        return Err("--pkt must be 16..=4160".into());
    }
    Ok(o)
}

fn udp_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let s = Socket::new(
        if addr.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        },
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    s.set_nonblocking(true)?;
    sys::set_pmtudisc_do(s.as_raw_fd(), addr.is_ipv6())?;
    sys::set_buffers(s.as_raw_fd(), EngineConfig::new(addr.ip()).socket_buffer);
    s.bind(&SockAddr::from(addr))?;
    Ok(s)
}

/// Raw UDP: one thread sends datagrams of `o.pkt` bytes in batches with
/// sendmmsg, another receives them in batches with recvmmsg. Returns
/// datagrams received per second.
fn raw_udp(o: &Opts, offload: bool) -> Result<f64, String> {
    let pkt = o.pkt;
    let src = SocketAddr::new(o.a, o.port);
    let dst = SocketAddr::new(o.b, o.port);
    let rx = udp_socket(dst).map_err(|e| format!("bind {dst}: {e}"))?;
    let tx = udp_socket(src).map_err(|e| format!("bind {src}: {e}"))?;
    if offload {
        sys::set_udp_gro(rx.as_raw_fd(), true).map_err(|e| format!("UDP_GRO: {e}"))?;
    }
    let segs = if offload { 16 } else { 1 };
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let batch = o.batch;
    let gro = offload;
    let receiver = {
        let stop = stop.clone();
        let got = got.clone();
        std::thread::spawn(move || {
            let slot = if gro { 65536 } else { pkt + 64 };
            // As the engine: at most 8 GRO datagrams (512 KiB) per call.
            let mut bufs = RecvBufs::new(if gro { batch.min(GRO_BATCH) } else { batch }, slot);
            let fd = rx.as_raw_fd();
            let mut n_pkts = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match bufs.recv(fd) {
                    Ok(0) => {
                        let _ = sys::wait(&[(fd, false)], Some(Duration::from_millis(5)));
                    }
                    Ok(n) => {
                        for info in &bufs.info[..n] {
                            let seg = info.gro_size.map_or(pkt, usize::from).max(1);
                            n_pkts += info.len.div_ceil(seg) as u64;
                        }
                        got.store(n_pkts, Ordering::Relaxed);
                    }
                    Err(_) => break,
                }
            }
        })
    };
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // The engine's layout: one slot per packet; with GSO, runs of
            // slots go as one datagram.
            // As the engine: at most GRO_BATCH GSO datagrams per call.
            let n = if segs > 1 {
                batch.min(GRO_BATCH)
            } else {
                batch
            };
            let mut bufs = SendBufs::new(n * segs, pkt + 64, n);
            for (i, b) in bufs.data.iter_mut().enumerate() {
                *b = i as u8;
            }
            let fd = tx.as_raw_fd();
            while !stop.load(Ordering::Relaxed) {
                bufs.reset_if_done();
                while bufs.free_slot().is_some() {
                    bufs.place(pkt, dst, None, segs > 1);
                }
                match bufs.send(fd) {
                    Ok(0) => {
                        let _ = sys::wait(&[(fd, true)], Some(Duration::from_millis(5)));
                    }
                    Ok(_) => {}
                    Err((_, e)) => {
                        eprintln!("raw udp send: {e}");
                        break;
                    }
                }
            }
        })
    };
    // Warm up, then measure.
    std::thread::sleep(Duration::from_millis(200));
    let c0 = got.load(Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(o.secs));
    let c1 = got.load(Ordering::Relaxed);
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = sender.join();
    let _ = receiver.join();
    Ok((c1 - c0) as f64 / dt)
}

struct PeerInfo {
    qpn: u32,
    addr: IpAddr,
    rkey: u32,
    va: u64,
}

/// RC RDMA WRITE of `o.msg`-byte messages from an engine on `o.a` to one on
/// `o.b`, keeping `o.inflight` WQEs outstanding. Returns goodput in Gbit/s.
/// `region`: bytes registered on each side; WQE `i` writes from and to
/// offset `(i * msg) % region`. `msg` is perftest's convention (one buffer
/// each side, as hot in cache as raw UDP's); `inflight * msg` gives every
/// WQE in flight a buffer of its own.
fn rc_write(o: &Opts, region: usize) -> Result<f64, String> {
    let region = region.clamp(o.msg, 64 << 20);
    const VA: u64 = 0x1000_0000;
    let (to_a, from_b) = mpsc::channel::<PeerInfo>();
    let (to_b, from_a) = mpsc::channel::<PeerInfo>();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = |addr: IpAddr| {
        let mut c = EngineConfig::new(addr);
        c.port = o.port;
        c.peer_port = o.port;
        c.batch = o.batch;
        if let Some(us) = o.spin_us {
            c.spin = Duration::from_micros(us);
        }
        c.gso = o.offload;
        c.gro = o.offload;
        c
    };
    let attr_rts = |peer: &PeerInfo| {
        [
            QpAttr {
                state: Some(QpState::Init),
                access_flags: Some(access::REMOTE_WRITE | access::LOCAL_WRITE),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                path_mtu: Some(Mtu::M4096),
                dest_qpn: Some(peer.qpn),
                dest_addr: Some(peer.addr),
                rq_psn: Some(Psn::new(0)),
                max_dest_rd_atomic: Some(16),
                min_rnr_timer: Some(12),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(0)),
                timeout: Some(14),
                retry_cnt: Some(7),
                rnr_retry: Some(7),
                max_rd_atomic: Some(16),
                ..QpAttr::default()
            },
        ]
    };
    let spec = QpSpec {
        qp_type: QpType::Rc,
        pd: 1,
        send_cq: 1,
        recv_cq: 2,
        srq: None,
        sq_sig_all: false,
        max_send_wr: 4096,
        max_recv_wr: 4096,
    };
    // Responder.
    let responder = {
        let cfg = cfg(o.b);
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<(), String> {
            let mut mem = BufferMemory::new();
            let rkey = mem.register(
                1,
                VA,
                vec![0; region],
                access::LOCAL_WRITE | access::REMOTE_WRITE,
            );
            let mut e =
                Engine::new(cfg.clone(), mem).map_err(|e| format!("engine {}: {e}", cfg.addr))?;
            let qpn = e.create_qp(spec).map_err(|e| e.to_string())?;
            to_a.send(PeerInfo {
                qpn,
                addr: cfg.addr,
                rkey,
                va: VA,
            })
            .map_err(|e| e.to_string())?;
            let peer = from_a.recv().map_err(|e| e.to_string())?;
            for a in attr_rts(&peer) {
                e.modify_qp(qpn, &a).map_err(|e| e.to_string())?;
            }
            while !stop.load(Ordering::Relaxed) {
                e.run_once(Some(Duration::from_millis(5)))
                    .map_err(|e| e.to_string())?;
            }
            let c = e.counters();
            eprintln!(
                "rc responder: rcvd_pkts={} sent_pkts={} rx_syscalls={} tx_syscalls={} sleeps={} icrc_errors={}",
                c.rcvd_pkts, c.sent_pkts, c.rx_syscalls, c.tx_syscalls, c.sleeps, c.icrc_errors
            );
            Ok(())
        })
    };
    // Requester (this thread).
    let mut mem = BufferMemory::new();
    let lkey = mem.register(
        1,
        VA,
        (0..region).map(|i| (i * 7) as u8).collect(),
        access::LOCAL_WRITE,
    );
    let mut e = Engine::new(cfg(o.a), mem).map_err(|e| format!("engine {}: {e}", o.a))?;
    let qpn = e.create_qp(spec).map_err(|e| e.to_string())?;
    if let Some(w) = o.window {
        let t = transport::qp::QpTuning {
            max_unacked_psns: w,
            ..Default::default()
        };
        e.set_qp_tuning(qpn, t).map_err(|e| e.to_string())?;
    }
    let peer = from_b.recv().map_err(|e| format!("responder: {e}"))?;
    to_b.send(PeerInfo {
        qpn,
        addr: o.a,
        rkey: 0,
        va: 0,
    })
    .map_err(|e| e.to_string())?;
    for a in attr_rts(&peer) {
        e.modify_qp(qpn, &a).map_err(|e| e.to_string())?;
    }
    let msg = o.msg.min(region);
    let slots = (region / msg).max(1);
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut outstanding = 0usize;
    let mut measure: Option<(Instant, u64)> = None;
    let start = Instant::now();
    let warmup = Duration::from_millis(300);
    let total = warmup + Duration::from_secs_f64(o.secs);
    let mut result = Err("no measurement".to_string());
    let mut comps = Vec::with_capacity(256);
    while start.elapsed() < total {
        while outstanding < o.inflight {
            let off = (posted as usize % slots) * msg;
            let wqe = SendWqe {
                wr_id: posted,
                op: SendOp::Write {
                    remote_addr: peer.va + off as u64,
                    rkey: peer.rkey,
                },
                flags: send_flags::SIGNALED,
                payload: Payload::Sges(vec![Sge {
                    addr: VA + off as u64,
                    length: msg as u32,
                    lkey,
                }]),
                ud: None,
            };
            e.post_send(qpn, wqe).map_err(|e| e.to_string())?;
            posted += 1;
            outstanding += 1;
        }
        e.run_once(Some(Duration::from_millis(5)))
            .map_err(|e| e.to_string())?;
        comps.clear();
        // The requester's only completions are its WRITEs' (CQ 1).
        while comps.len() < 256 {
            let Some((_, c)) = e.poll_completion() else {
                break;
            };
            comps.push(c);
        }
        for c in &comps {
            if c.status != WcStatus::Success {
                stop.store(true, Ordering::Relaxed);
                let _ = responder.join();
                return Err(format!("completion {}: {}", c.wr_id, c.status.verbs_name()));
            }
            done += 1;
            outstanding -= 1;
        }
        if measure.is_none() && start.elapsed() >= warmup {
            measure = Some((Instant::now(), done));
        }
    }
    if let Some((t0, d0)) = measure {
        let dt = t0.elapsed().as_secs_f64();
        result = Ok((done - d0) as f64 * msg as f64 * 8.0 / dt / 1e9);
    }
    let c = e.counters();
    stop.store(true, Ordering::Relaxed);
    match responder.join() {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(err),
        Err(_) => return Err("responder panicked".into()),
    }
    eprintln!(
        "rc: sent_pkts={} rcvd_pkts={} tx_syscalls={} rx_syscalls={} tx_full={} sleeps={} retransmitted={}",
        c.sent_pkts,
        c.rcvd_pkts,
        c.tx_syscalls,
        c.rx_syscalls,
        c.tx_full,
        c.sleeps,
        e.qp(qpn).map_or(0, |q| q.counters().retransmitted_pkts)
    );
    let _ = e.memory_mut().read_local(1, lkey, VA, &mut [0u8; 8]);
    result
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // Raw UDP in datagrams per second; Gbit/s counts o.payload bytes each.
    let mut best_raw: Option<f64> = None;
    let mut best_raw_off: Option<f64> = None;
    let gbps = |pps: f64| pps * o.payload as f64 * 8.0 / 1e9;
    let mut best_rc: Option<f64> = None;
    let mut best_rc_spread: Option<f64> = None;
    let best = |b: &mut Option<f64>, g: f64| *b = Some(b.map_or(g, |x: f64| x.max(g)));
    let fail = |what: &str, e: String| -> ! {
        eprintln!("{what}: {e}");
        std::process::exit(1)
    };
    for round in 0..o.rounds.max(1) {
        if o.only.as_deref() != Some("rc") {
            if o.raw_plain {
                let r = raw_udp(&o, false).unwrap_or_else(|e| fail("raw udp", e));
                eprintln!(
                    "round {round}: udp_raw_4k_gbps={:.3} (pkt {} B, {:.3} Mpps)",
                    gbps(r),
                    o.pkt,
                    r / 1e6
                );
                best(&mut best_raw, r);
            }
            if o.raw_offload {
                let r = raw_udp(&o, true).unwrap_or_else(|e| fail("raw udp gso/gro", e));
                eprintln!(
                    "round {round}: udp_raw_gso_gro_4k_gbps={:.3} (pkt {} B, {:.3} Mpps)",
                    gbps(r),
                    o.pkt,
                    r / 1e6
                );
                best(&mut best_raw_off, r);
            }
        }
        if o.only.as_deref() != Some("raw") {
            let g = rc_write(&o, o.region.unwrap_or(o.msg)).unwrap_or_else(|e| fail("rc write", e));
            eprintln!("round {round}: rc_write_64k_gbps={g:.3}");
            best(&mut best_rc, g);
            if o.region.is_none() {
                let g = rc_write(&o, o.inflight * o.msg)
                    .unwrap_or_else(|e| fail("rc write (buffer per WQE)", e));
                eprintln!("round {round}: rc_write_64k_buffer_per_wqe_gbps={g:.3}");
                best(&mut best_rc_spread, g);
            }
        }
    }
    // The three lines scripts/bench-transport promises, then context. The
    // baseline of `ratio` is raw UDP with the same batching the engine used:
    // with GSO+GRO on in the engine, raw UDP with GSO+GRO too.
    let (same_pps, other_pps, other_name) = if o.offload {
        (best_raw_off, best_raw, "plain")
    } else {
        (best_raw, best_raw_off, "gso_gro")
    };
    let (same, other) = (same_pps.map(gbps), other_pps.map(gbps));
    if let Some(x) = best_rc {
        println!("rc_write_64k_gbps={x:.3}");
    }
    if let Some(y) = same {
        println!("udp_raw_4k_gbps={y:.3}");
    }
    if let (Some(x), Some(y)) = (best_rc, same) {
        println!("ratio={:.3}", if y > 0.0 { x / y } else { 0.0 });
    }
    if let Some(z) = other {
        println!("udp_raw_{other_name}_4k_gbps={z:.3}");
        if let Some(x) = best_rc {
            println!(
                "ratio_vs_{other_name}={:.3}",
                if z > 0.0 { x / z } else { 0.0 }
            );
        }
    }
    if let Some(x) = best_rc_spread {
        // Each WQE in flight with a buffer of its own (64 x 64 KiB): the
        // requester reads and the responder writes memory that is no
        // longer in cache, which raw UDP never does.
        println!("rc_write_64k_buffer_per_wqe_gbps={x:.3}");
        if let Some(y) = same {
            println!(
                "ratio_buffer_per_wqe={:.3}",
                if y > 0.0 { x / y } else { 0.0 }
            );
        }
    }
    if o.only.as_deref() == Some("raw") {
        println!("udp_raw_pkt={}", o.pkt);
        if let Some(r) = same_pps {
            println!("udp_raw_mpps={:.4}", r / 1e6);
        }
        if let Some(r) = other_pps {
            println!("udp_raw_{other_name}_mpps={:.4}", r / 1e6);
        }
    }
    println!(
        "engine_offload={}",
        if o.offload { "gso+gro" } else { "none" }
    );
}
