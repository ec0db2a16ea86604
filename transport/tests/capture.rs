//! Our own packets, captured on `lo` with tcpdump, checked by an
//! independent ICRC implementation: scapy's RoCE layer
//! (`scapy.contrib.roce.BTH.compute_icrc`), and `rxu decode` when that
//! binary has been built. Also checks what the design relies on: IPv4 ID 0
//! with DF set, IPv6 with a zero UDP checksum.
//!
//! Skipped (with a message) only when tcpdump is not installed or may not
//! capture; CI installs it and runs as root, so there it runs.
//!
//! On `lo` the kernel never splits a UDP GSO send, so a capture there shows
//! whole GSO datagrams. The second test therefore runs the benchmark binary
//! (RC WRITE, GSO on) in a private network namespace whose `lo` has UDP
//! segmentation offload switched off: the kernel segments in software,
//! tcpdump sees every segment with its real IP ID, and scapy checks that
//! each ICRC was computed with exactly that ID.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use transport::qp::{
    access, send_flags, Mtu, Payload, QpType, RecvWqe, SendOp, SendWqe, Sge, UdDest, WcStatus,
};

const VA: u64 = 0x4000_0000;
const MEM: usize = 1 << 20;

/// Started tcpdump, or why not.
enum Capture {
    Running(Child),
    Unavailable(String),
}

fn start_tcpdump(file: &Path, filter: &str) -> Capture {
    let child = Command::new("tcpdump")
        .args([
            "-i",
            "lo",
            "-n",
            "-U",
            "--immediate-mode",
            // Room for thousands of packets in the capture ring: with the
            // default 256 KiB snap length a 2 MiB ring holds 8, and a
            // burst while tcpdump waits for a core is lost.
            "-s",
            "8192",
            "-B",
            "65536",
            "-c",
            "100000",
            "-w",
        ])
        .arg(file)
        .arg(filter)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Capture::Unavailable("tcpdump is not installed".into())
        }
        Err(e) => panic!("starting tcpdump: {e}"),
    };
    // Wait for "listening on lo" (or its refusal) on stderr.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut said = String::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.contains("listening on") => return Capture::Running(child),
            Ok(line) => {
                said.push_str(&line);
                said.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Ok(Some(st)) = child.try_wait() {
            let l = said.to_lowercase();
            if l.contains("permission") || l.contains("not permitted") {
                return Capture::Unavailable(format!(
                    "tcpdump may not capture here ({st}): {said}"
                ));
            }
            panic!("tcpdump exited ({st}): {said}");
        }
    }
    let _ = child.kill();
    panic!("tcpdump did not start listening: {said}");
}

fn stop_tcpdump(mut child: Child) {
    // Give the last packets time to be written, then ask it to finish.
    std::thread::sleep(Duration::from_millis(300));
    // SIGTERM to the tcpdump we started (by its pid): it writes out what
    // it has and exits.
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn sg(off: usize, len: usize, key: u32) -> Vec<Sge> {
    vec![Sge {
        addr: VA + off as u64,
        length: len as u32,
        lkey: key,
    }]
}

fn wqe(wr_id: u64, op: SendOp, sges: Vec<Sge>, ud: Option<UdDest>) -> SendWqe {
    SendWqe {
        wr_id,
        op,
        flags: send_flags::SIGNALED,
        payload: Payload::Sges(sges),
        ud,
        xrc_srqn: None,
    }
}

/// Every opcode family over IPv4 (RC, UC, UD; multi-packet messages at
/// MTU 1024; odd lengths for pad bytes). Returns the packets both engines
/// sent.
fn traffic_v4(a_ip: &str, b_ip: &str) -> u64 {
    let conn = Conn {
        mtu: Mtu::M1024,
        ..Conn::default()
    };
    let offload_off = |c: &mut transport::engine::EngineConfig| {
        // One RoCE packet per datagram, so the capture shows each one.
        c.gso = false;
        c.gro = false;
    };
    let types = [QpType::Rc, QpType::Uc, QpType::Ud];
    let (a, b) = pair(
        |link| {
            let mut e = engine(a_ip, offload_off);
            let all = access::LOCAL_WRITE;
            let key = e.memory_mut().register(PD, VA, Rng(1).bytes(MEM), all);
            let qpns: Vec<u32> = types
                .iter()
                .map(|&t| e.create_qp(spec(t)).unwrap())
                .collect();
            for &q in &qpns {
                link.send(u64::from(q));
            }
            let peers: Vec<u32> = (0..3).map(|_| link.recv() as u32).collect();
            let rkey = link.recv() as u32;
            for i in 0..3 {
                let p = (types[i] != QpType::Ud).then_some((peers[i], ip(b_ip)));
                connect(&mut e, qpns[i], types[i], p, &conn);
            }
            let remote = |off: u64| VA + off;
            let ud = Some(UdDest {
                addr: ip(b_ip),
                qpn: peers[2],
                qkey: QKEY,
            });
            let rc = [
                wqe(0, SendOp::Send, sg(0, 3000, key), None),
                wqe(
                    1,
                    SendOp::SendImm { imm: 0x0102_0304 },
                    sg(100, 5, key),
                    None,
                ),
                wqe(
                    2,
                    SendOp::Write {
                        remote_addr: remote(0x10000),
                        rkey,
                    },
                    sg(0, 2500, key),
                    None,
                ),
                wqe(
                    3,
                    SendOp::WriteImm {
                        remote_addr: remote(0x20000),
                        rkey,
                        imm: 9,
                    },
                    sg(7, 1, key),
                    None,
                ),
                wqe(
                    4,
                    SendOp::Write {
                        remote_addr: remote(0x30000),
                        rkey,
                    },
                    vec![],
                    None,
                ),
                wqe(
                    5,
                    SendOp::Read {
                        remote_addr: remote(0x40000),
                        rkey,
                    },
                    sg(0x8000, 3000, key),
                    None,
                ),
                wqe(
                    6,
                    SendOp::Read {
                        remote_addr: remote(0x40000),
                        rkey,
                    },
                    sg(0x9000, 101, key),
                    None,
                ),
                wqe(
                    7,
                    SendOp::CmpSwap {
                        remote_addr: remote(0x50000),
                        rkey,
                        compare: 0,
                        swap: 5,
                    },
                    sg(0xa000, 8, key),
                    None,
                ),
                wqe(
                    8,
                    SendOp::FetchAdd {
                        remote_addr: remote(0x50008),
                        rkey,
                        add: 3,
                    },
                    sg(0xa008, 8, key),
                    None,
                ),
            ];
            let uc = [
                wqe(0, SendOp::Send, sg(0, 2000, key), None),
                wqe(
                    1,
                    SendOp::WriteImm {
                        remote_addr: remote(0x60000),
                        rkey,
                        imm: 1,
                    },
                    sg(0, 10, key),
                    None,
                ),
            ];
            let udw = [
                wqe(0, SendOp::Send, sg(0, 100, key), ud),
                wqe(1, SendOp::SendImm { imm: 77 }, sg(0, 7, key), ud),
            ];
            let mut want = 0;
            for (i, list) in [&rc[..], &uc[..], &udw[..]].into_iter().enumerate() {
                for w in list {
                    e.post_send(qpns[i], w.clone()).expect("post_send");
                    want += 1;
                }
            }
            let d = Deadline::after(Duration::from_secs(20));
            let mut got = 0;
            while got < want {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                for c in e.poll_cq(SEND_CQ, 64) {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    got += 1;
                }
                d.check(|| format!("{got}/{want} completions"));
            }
            // UC and UD completions say nothing about arrival: wait for
            // the receiver to have everything.
            while link.shared[0].load(std::sync::atomic::Ordering::Relaxed) < 4 {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                d.check(|| "receiver did not get everything".into());
            }
            e.counters().sent_pkts
        },
        |link| {
            let mut e = engine(b_ip, offload_off);
            let all = access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC;
            let key = e.memory_mut().register(PD, VA, vec![0; MEM], all);
            let qpns: Vec<u32> = types
                .iter()
                .map(|&t| e.create_qp(spec(t)).unwrap())
                .collect();
            let peers: Vec<u32> = (0..3).map(|_| link.recv() as u32).collect();
            for &q in &qpns {
                link.send(u64::from(q));
            }
            link.send(u64::from(key));
            for i in 0..3 {
                let p = (types[i] != QpType::Ud).then_some((peers[i], ip(a_ip)));
                connect(&mut e, qpns[i], types[i], p, &conn);
            }
            // RC: SEND, SEND_IMM, WRITE_IMM; UC: SEND, WRITE_IMM; UD: 2 SENDs.
            let recvs = [3, 2, 2];
            for (i, &n) in recvs.iter().enumerate() {
                for k in 0..n {
                    let r = RecvWqe {
                        wr_id: k,
                        sges: sg(0x80000 + 0x4000 * (i * 4 + k as usize), 0x4000, key),
                    };
                    e.post_recv(qpns[i], r).expect("post_recv");
                }
            }
            let mut got = 0u64;
            while !link.stopped() {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                for c in e.poll_cq(RECV_CQ, 64) {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    got += 1;
                    if c.qp_num != qpns[0] {
                        link.shared[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            assert_eq!(got, 7, "receive completions");
            e.counters().sent_pkts
        },
    );
    a + b
}

/// RC over IPv6 on ::1 (the two engines told apart by port).
fn traffic_v6(port_a: u16, port_b: u16) -> u64 {
    let conn = Conn::default();
    let (a, b) = pair(
        |link| {
            let mut e = engine("::1", |c| {
                c.port = port_a;
                c.peer_port = port_b;
            });
            let key = e
                .memory_mut()
                .register(PD, VA, Rng(2).bytes(MEM), access::LOCAL_WRITE);
            let qpn = e.create_qp(spec(QpType::Rc)).unwrap();
            link.send(u64::from(qpn));
            let peer = link.recv() as u32;
            let rkey = link.recv() as u32;
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip("::1"))), &conn);
            let list = [
                wqe(0, SendOp::Send, sg(0, 9000, key), None),
                wqe(
                    1,
                    SendOp::Write {
                        remote_addr: VA + 0x10000,
                        rkey,
                    },
                    sg(0, 333, key),
                    None,
                ),
                wqe(
                    2,
                    SendOp::Read {
                        remote_addr: VA + 0x20000,
                        rkey,
                    },
                    sg(0x40000, 5000, key),
                    None,
                ),
            ];
            for w in list {
                e.post_send(qpn, w).unwrap();
            }
            let d = Deadline::after(Duration::from_secs(20));
            let mut got = 0;
            while got < 3 {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
                for c in e.poll_cq(SEND_CQ, 8) {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    got += 1;
                }
                d.check(|| format!("{got}/3 completions"));
            }
            e.counters().sent_pkts
        },
        |link| {
            let mut e = engine("::1", |c| {
                c.port = port_b;
                c.peer_port = port_a;
            });
            let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
            let key = e.memory_mut().register(PD, VA, vec![0; MEM], all);
            let qpn = e.create_qp(spec(QpType::Rc)).unwrap();
            let peer = link.recv() as u32;
            link.send(u64::from(qpn));
            link.send(u64::from(key));
            connect(&mut e, qpn, QpType::Rc, Some((peer, ip("::1"))), &conn);
            e.post_recv(
                qpn,
                RecvWqe {
                    wr_id: 1,
                    sges: sg(0x80000, 0x4000, key),
                },
            )
            .unwrap();
            while !link.stopped() {
                e.run_once(Some(Duration::from_millis(5))).unwrap();
            }
            e.counters().sent_pkts
        },
    );
    a + b
}

const CHECKER: &str = r#"
import struct, sys, collections
from scapy.all import rdpcap
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import bind_layers
from scapy.contrib.roce import BTH
for port in sys.argv[2:]:
    bind_layers(UDP, BTH, dport=int(port))
total = ok = bad = id_nonzero = no_df = csum6 = v6 = 0
ops = collections.Counter()
for p in rdpcap(sys.argv[1]):
    if BTH not in p:
        continue
    total += 1
    b = p[BTH]
    want = b.compute_icrc(None)
    have = struct.pack("!I", b.icrc)
    if want == have:
        ok += 1
    else:
        bad += 1
        print("BAD ICRC", p.summary(), have.hex(), want.hex())
    ops[b.opcode] += 1
    if IP in p:
        if p[IP].id != 0:
            id_nonzero += 1
        if not p[IP].flags.DF:
            no_df += 1
    if IPv6 in p:
        v6 += 1
        if p[UDP].chksum != 0:
            csum6 += 1
print(f"total={total} ok={ok} bad={bad} ipv6={v6} ipv4_id_nonzero={id_nonzero} ipv4_no_df={no_df} ipv6_udp_csum_nonzero={csum6} opcodes={sorted(ops.items())}")
sys.exit(0 if total > 0 and bad == 0 and id_nonzero == 0 and no_df == 0 and csum6 == 0 else 1)
"#;

/// `target/<profile>/rxu`, next to this test's `deps` directory.
fn rxu_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("rxu");
    p.is_file().then_some(p)
}

#[test]
fn captured_packets_have_good_icrcs_per_scapy() {
    let _g = heavy_lock();
    let (a_ip, b_ip) = ("127.0.0.31", "127.0.0.32");
    let (pa, pb) = (4795u16, 4796u16);
    let dir = std::env::temp_dir().join(format!("rxu-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("rxu.pcap");
    let filter = format!(
        "(udp port 4791 and host {a_ip} and host {b_ip}) or (ip6 and udp port {pa} and udp port {pb})"
    );
    let child = match start_tcpdump(&file, &filter) {
        Capture::Running(c) => c,
        Capture::Unavailable(why) => {
            eprintln!("SKIPPED captured_packets_have_good_icrcs_per_scapy: {why}");
            return;
        }
    };
    let sent = std::panic::catch_unwind(|| traffic_v4(a_ip, b_ip) + traffic_v6(pa, pb));
    stop_tcpdump(child);
    let sent = sent.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let out = Command::new("python3")
        .arg("-c")
        .arg(CHECKER)
        .arg(&file)
        .arg(pa.to_string())
        .arg(pb.to_string())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("scapy: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "scapy checker failed: {text}");
    let total: u64 = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("total="))
        .and_then(|v| v.parse().ok())
        .expect("total");
    assert_eq!(
        total, sent,
        "captured {total} RoCE packets, the engines sent {sent}"
    );
    assert!(
        text.contains("ipv6=") && !text.contains("ipv6=0 "),
        "no IPv6 packets checked"
    );
    if let Some(rxu) = rxu_binary() {
        let out = Command::new(&rxu)
            .arg("decode")
            .arg(&file)
            .output()
            .expect("rxu decode");
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or("");
        eprintln!("rxu decode: {last}");
        assert!(out.status.success(), "rxu decode found bad packets: {last}");
    } else {
        eprintln!("rxu decode: binary not built, not run");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const GSO_SCRIPT: &str = r#"
set -e
ip link set lo up
ethtool -K lo tx-udp-segmentation off >/dev/null 2>&1 || exit 77
tcpdump -i lo -n -U --immediate-mode -s 8192 -B 65536 -c 2000 -w "$1" 'udp port 4791' 2>/dev/null &
TP=$!
for i in $(seq 50); do [ -s "$1" ] && break; sleep 0.1; done
sleep 0.5
"$2" --only rc --secs 0.3 --rounds 1 --no-raw-offload >/dev/null 2>&1
sleep 0.5
kill -TERM $TP 2>/dev/null || true
wait $TP 2>/dev/null || true
"#;

const GSO_CHECKER: &str = r#"
import struct, sys
from scapy.all import rdpcap
from scapy.layers.inet import IP, UDP
from scapy.contrib.roce import BTH
total = ok = bad = unsplit = 0
ids = set()
for p in rdpcap(sys.argv[1]):
    if UDP not in p:
        continue
    if len(p[UDP].payload) > 4200:
        unsplit += 1
        continue
    if BTH not in p:
        continue
    total += 1
    b = p[BTH]
    if b.compute_icrc(None) == struct.pack("!I", b.icrc):
        ok += 1
    else:
        bad += 1
    ids.add(p[IP].id)
print(f"total={total} ok={ok} bad={bad} unsplit={unsplit} distinct_ip_ids={len(ids)} max_ip_id={max(ids) if ids else -1}")
sys.exit(0 if total > 0 and bad == 0 and unsplit == 0 and len(ids) > 1 else 1)
"#;

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd} >/dev/null 2>&1"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn gso_segments_carry_their_ip_id_in_the_icrc() {
    let _g = heavy_lock();
    for cmd in ["tcpdump", "unshare", "ip", "ethtool"] {
        if !have(cmd) {
            eprintln!("SKIPPED gso_segments_carry_their_ip_id_in_the_icrc: {cmd} is not installed");
            return;
        }
    }
    let probe = Command::new("unshare").args(["-n", "true"]).status();
    if !matches!(probe, Ok(s) if s.success()) {
        eprintln!("SKIPPED gso_segments_carry_their_ip_id_in_the_icrc: may not create a network namespace");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rxu-gso-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("gso.pcap");
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", GSO_SCRIPT, "sh"])
        .arg(&file)
        .arg(env!("CARGO_BIN_EXE_rxu-bench-transport"))
        .output()
        .expect("unshare");
    if out.status.code() == Some(77) {
        eprintln!("SKIPPED gso_segments_carry_their_ip_id_in_the_icrc: cannot turn off UDP segmentation offload on lo in a namespace");
        return;
    }
    assert!(
        out.status.success(),
        "namespace script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(GSO_CHECKER)
        .arg(&file)
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "scapy (GSO segments): {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "GSO segments failed the ICRC check: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
