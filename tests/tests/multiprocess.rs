//! Many processes on rxu devices through the client library (rxu-peer):
//! every RC opcode byte-exact between two processes on one device and
//! across two devices over UDP; 8 processes x 16 QPs at once with every
//! completion accounted for; SIGKILL of a process mid-transfer; remote
//! access violations refused with the right NAK and status, guard bytes
//! untouched. Each test runs its own rxud on 127.0.21.x (no root needed),
//! one test at a time, every child bounded and killed on failure, its
//! output printed.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use rxu_client::QpState;
use rxu_testkit::daemon::counter;
use rxu_testkit::process::{field, PeerPair, Proc};
use rxu_testkit::{bins, have, runtime_dir, serial, skip, Daemon};

/// This package's rxu-peer.
fn peer() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_rxu-peer"))
}

/// Longest a pair may run.
const LIMIT: Duration = Duration::from_secs(45);

fn addr(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 21, n)
}

fn reports(pairs: &[&PeerPair], d: &[&Daemon]) -> String {
    let mut s: String = pairs.iter().map(|p| p.report()).collect();
    for d in d {
        s += &format!("--- rxud {} log:\n{}", d.name, d.log_text());
    }
    s
}

/// Runs one pair to the end and checks both RESULT lines.
fn run_pair(tag: &str, sdev: &Daemon, cdev: &Daemon, args: &[&str]) -> PeerPair {
    let t = Instant::now();
    let mut p = PeerPair::start(peer(), tag, &sdev.name, &cdev.name, args, &[]);
    let ok = p.finish(LIMIT);
    assert!(
        ok && p.server.result_ok() && p.client.result_ok(),
        "{tag} failed\n{}",
        reports(&[&p], &[sdev, cdev])
    );
    eprintln!("{tag}: {:.2} s", t.elapsed().as_secs_f64());
    p
}

fn mixed(size: &str, iters: &str, qps: &str, depth: &str) -> Vec<&'static str> {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    vec![
        "--workload",
        "mixed",
        "--size",
        leak(size),
        "--iters",
        leak(iters),
        "--qps",
        leak(qps),
        "--depth",
        leak(depth),
        "--timeout",
        "40",
    ]
}

/// The health counters every test ends with.
fn assert_clean(d: &Daemon) {
    let s = d.stats();
    for c in [
        "bad_wqes",
        "cq_overruns",
        "cqes_dropped",
        "icrc_errors",
        "parse_errors",
    ] {
        assert_eq!(counter(&s, c), 0, "{}: {c}\n{}", d.name, d.log_text());
    }
}

/// SEND, WRITE, WRITE_WITH_IMM, READ, CmpSwap and FetchAdd between two
/// processes on one device: one byte, a non-MTU size, multi-packet. The
/// packets take the intra-device shortcut (rxud's default).
#[test]
fn every_rc_opcode_between_two_processes() {
    let _g = serial();
    let d = Daemon::start("rxmp1", addr(10));
    // RXU_FORCE_UDP=1 runs the suite on the UDP path.
    let forced = std::env::var("RXU_FORCE_UDP").is_ok_and(|v| !v.is_empty() && v != "0");
    assert_eq!(d.counter("loopback"), u64::from(!forced));
    let (sent0, lo0) = (d.counter("sent_pkts"), d.counter("loopback_sent_pkts"));
    let tx0 = d.counter("tx_syscalls");
    let runs = [
        ("1", "1200", "8"),
        ("3000", "3000", "16"),
        ("10000", "600", "4"),
        ("65536", "120", "8"),
    ];
    rc_opcodes_on(&d, &runs);
    let sent = d.counter("sent_pkts") - sent0;
    assert!(sent > 1000, "{sent}");
    if forced {
        assert!(d.counter("tx_syscalls") > tx0);
    } else {
        // Every packet between the two processes went by the shortcut,
        // and counts as sent and received like a UDP one.
        assert_eq!(d.counter("loopback_sent_pkts") - lo0, sent);
        assert_eq!(
            d.counter("loopback_rcvd_pkts"),
            d.counter("loopback_sent_pkts")
        );
        assert_eq!(
            d.counter("tx_syscalls"),
            tx0,
            "no packet went to the socket"
        );
    }
    assert_clean(&d);
}

/// The same with `--force-udp`: the device talks to itself through its
/// UDP socket, and the shortcut's counters stay at 0.
#[test]
fn every_rc_opcode_between_two_processes_forced_udp() {
    let _g = serial();
    let d = Daemon::spawn("rxmp1u", addr(11))
        .args(&["--force-udp"])
        .start();
    assert_eq!(d.counter("loopback"), 0, "--force-udp");
    let (sent0, tx0) = (d.counter("sent_pkts"), d.counter("tx_syscalls"));
    rc_opcodes_on(&d, &[("3000", "3000", "16"), ("65536", "120", "8")]);
    assert!(d.counter("sent_pkts") > sent0 + 1000);
    assert!(d.counter("tx_syscalls") > tx0 && d.counter("rx_syscalls") > 0);
    assert_eq!(
        d.counter("loopback_sent_pkts") + d.counter("loopback_rcvd_pkts"),
        0
    );
    assert_clean(&d);
}

/// [`mixed`] runs of (size, iterations, depth) between two processes on
/// device `d`, each op count checked.
fn rc_opcodes_on(d: &Daemon, runs: &[(&str, &str, &str)]) {
    for &(size, iters, depth) in runs {
        let p = run_pair(
            &format!("size {size}"),
            d,
            d,
            &mixed(size, iters, "2", depth),
        );
        let r = p.client.result().unwrap_or_default();
        assert_eq!(
            field(&r, "ops"),
            Some(&*(2 * iters.parse::<u64>().unwrap()).to_string()),
            "{r}"
        );
    }
}

/// The same between two devices (two daemons), over UDP between
/// 127.0.21.1 and 127.0.21.2; `rxu stats --json` shows both ends moved
/// the packets.
#[test]
fn every_rc_opcode_between_two_devices_over_udp() {
    let _g = serial();
    let d0 = Daemon::start("rxu0", addr(1));
    let d1 = Daemon::start("rxu1", addr(2));
    let json = |d: &Daemon| -> serde_json::Value {
        let out = d.rxu(&["stats", "--name", &d.name, "--json"]);
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("rxu stats --json: {e}\n{out}"))
    };
    let get = |v: &serde_json::Value, k: &str| {
        v["counters"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {v}"))
    };
    let (b0, b1) = (json(&d0), json(&d1));
    let (iters, size) = (600u64, 4000u64);
    let p = run_pair("rxu0 <- rxu1", &d0, &d1, &mixed("4000", "600", "2", "8"));
    let (a0, a1) = (json(&d0), json(&d1));
    let delta = |a: &serde_json::Value, b: &serde_json::Value, k: &str| get(a, k) - get(b, k);
    let ops = 2 * iters;
    // The payload went both ways through the kernel's UDP: SEND, WRITE
    // and WRITE_IMM from rxu1 to rxu0, READ responses back. (Datagram
    // counts can be lower than packet counts: GSO hands several packets
    // over as one.)
    let one_way = (ops / 6) * 3 * size;
    let back = (ops / 6) * size;
    assert!(delta(&a1, &b1, "sent_bytes") >= one_way, "rxu1: {a1}");
    assert!(delta(&a0, &b0, "rcvd_bytes") >= one_way, "rxu0: {a0}");
    assert!(delta(&a0, &b0, "sent_bytes") >= back, "rxu0: {a0}");
    assert!(delta(&a1, &b1, "rcvd_bytes") >= back, "rxu1: {a1}");
    for (a, b) in [(&a0, &b0), (&a1, &b1)] {
        assert!(delta(a, b, "sent_pkts") > 0 && delta(a, b, "rcvd_pkts") > 0);
        assert!(delta(a, b, "tx_syscalls") > 0 && delta(a, b, "rx_syscalls") > 0);
    }
    for v in [&a0, &a1] {
        assert_eq!(get(v, "icrc_errors"), 0, "{v}");
    }
    assert!(p.client.result_ok());
    assert_clean(&d0);
    assert_clean(&d1);
}

/// 8 processes x 16 QPs on one device, all started at once: every wr_id
/// completes exactly once on both sides, every byte checked.
#[test]
fn eight_processes_sixteen_qps_each() {
    let _g = serial();
    let d = Daemon::start("rxmp8", addr(20));
    let go = runtime_dir().join("go-8x16");
    let _ = std::fs::remove_file(&go);
    let go_s = go.display().to_string();
    let args = mixed("2048", "1200", "16", "8");
    let mut pairs: Vec<PeerPair> = (0..4)
        .map(|i| {
            PeerPair::start(
                peer(),
                &format!("pair {i}"),
                &d.name,
                &d.name,
                &args,
                &["--go-file", &go_s],
            )
        })
        .collect();
    let all = |pairs: &[PeerPair]| reports(&pairs.iter().collect::<Vec<_>>(), &[&d]);
    for p in &pairs {
        assert!(
            p.client
                .wait_line("WAITING", Duration::from_secs(30))
                .is_some(),
            "a client never connected\n{}",
            all(&pairs)
        );
    }
    // All 128 QPs exist and are connected before anyone starts.
    let st = d.status();
    let apps: Vec<_> = st.clients.iter().filter(|c| !c.admin).collect();
    assert_eq!(apps.len(), 8, "{st:?}");
    for c in &apps {
        assert_eq!(c.qps.len(), 16, "pid {}: {:?}", c.pid, c.qps);
        assert!(
            c.qps.iter().all(|q| q.state == QpState::Rts as u8),
            "{:?}",
            c.qps
        );
    }
    let t = Instant::now();
    std::fs::write(&go, b"go").unwrap();
    let mut ok = true;
    for p in &mut pairs {
        ok &= p.finish(LIMIT);
    }
    let secs = t.elapsed().as_secs_f64();
    assert!(
        ok && pairs
            .iter()
            .all(|p| p.client.result_ok() && p.server.result_ok()),
        "{}",
        all(&pairs)
    );
    for p in &pairs {
        let r = p.client.result().unwrap_or_default();
        assert_eq!(field(&r, "ops"), Some("19200"), "{r}");
    }
    eprintln!("8 processes x 16 QPs x 1200 ops: {secs:.2} s");
    assert_clean(&d);
}

/// SIGKILL of one process mid-transfer: its peer's QPs fail with
/// RETRY_EXC_ERR after the retry budget, raise QP_FATAL and flush; the
/// daemon stays up and forgets the dead process's objects; two other
/// pairs transferring at the same time finish correctly.
#[test]
fn sigkill_mid_transfer() {
    let _g = serial();
    let d = Daemon::start("rxmpk", addr(30));
    // (After the readiness check's admin connection is closed.)
    std::thread::sleep(Duration::from_millis(100));
    let baseline = d.fds_and_maps();
    let go = runtime_dir().join("go-kill");
    let _ = std::fs::remove_file(&go);
    let go_s = go.display().to_string();
    let (exp, retry) = (14u32, 6u32);
    let t_ack = Duration::from_nanos(4096 << exp);
    let budget = t_ack * (retry + 1);
    let (exp_s, retry_s) = (exp.to_string(), retry.to_string());
    let mut victim = PeerPair::start(
        peer(),
        "victim",
        &d.name,
        &d.name,
        &[
            "--workload",
            "mixed",
            "--qps",
            "4",
            "--depth",
            "8",
            "--iters",
            "1000000000",
            "--qp-timeout",
            &exp_s,
            "--retry-cnt",
            &retry_s,
            "--timeout",
            "40",
        ],
        &["--expect-peer-death", "--go-file", &go_s],
    );
    let mut others: Vec<PeerPair> = (0..2)
        .map(|i| {
            PeerPair::start(
                peer(),
                &format!("bystander {i}"),
                &d.name,
                &d.name,
                &[
                    "--workload",
                    "mixed",
                    "--qps",
                    "2",
                    "--depth",
                    "8",
                    "--iters",
                    "1000000000",
                    "--timeout",
                    "40",
                ],
                &["--secs", "4", "--go-file", &go_s],
            )
        })
        .collect();
    let all = |v: &PeerPair, o: &[PeerPair]| {
        let mut p = vec![v];
        p.extend(o.iter());
        reports(&p, &[&d])
    };
    for p in std::iter::once(&victim).chain(&others) {
        assert!(
            p.client
                .wait_line("WAITING", Duration::from_secs(30))
                .is_some(),
            "a client never connected\n{}",
            all(&victim, &others)
        );
    }
    std::fs::write(&go, b"go").unwrap();
    assert!(
        victim
            .client
            .wait_line("STARTED", Duration::from_secs(20))
            .is_some(),
        "{}",
        all(&victim, &others)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        others.iter().all(|p| p.client.result().is_none()),
        "the bystanders finished before the kill\n{}",
        all(&victim, &others)
    );
    let dead_pid = victim.server.pid();
    let dead_qpns: Vec<u32> = d
        .status()
        .clients
        .iter()
        .filter(|c| c.pid == dead_pid)
        .flat_map(|c| c.qps.iter().map(|q| q.qpn))
        .collect();
    assert_eq!(dead_qpns.len(), 4, "{:?}", d.status());
    let t_kill = Instant::now();
    victim.server.kill(); // SIGKILL, then reaped: its memory and fds are gone
    let t_dead = Instant::now();
    let lost = victim
        .client
        .wait_line("PEER_LOST", budget * 4 + Duration::from_secs(5));
    let Some((t_lost, line)) = lost else {
        panic!("no PEER_LOST\n{}", all(&victim, &others));
    };
    let (elapsed, since_dead) = (t_lost - t_kill, t_lost.saturating_duration_since(t_dead));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "kill -> RETRY_EXC_ERR: {:.1} ms ({:.1} ms after the process was reaped; budget (retry_cnt+1) x 4.096us x 2^timeout = {:.1} ms); {line}",
        ms(elapsed),
        ms(since_dead),
        ms(budget)
    );
    // The budget counts from the last progress. The daemon answers for the
    // process until its memory is gone (during its exit, which a loaded
    // machine may drag out: so the upper bound counts from the reaping),
    // then drops requests as a destroyed QP would. One retry may be spent
    // on a PSN-sequence NAK right then, and a resend after an RNR wait may
    // precede the kill slightly: so at least retry_cnt timeouts from the
    // kill, less a little; at most the budget plus scheduling slack.
    assert!(
        elapsed + Duration::from_millis(20) >= t_ack * retry,
        "failed too early: {elapsed:?}\n{line}"
    );
    assert!(
        since_dead <= budget * 3 / 2 + Duration::from_millis(300),
        "failed too late: {since_dead:?} after the process was reaped\n{}",
        all(&victim, &others)
    );
    assert!(
        victim.client.wait(Duration::from_secs(15)) && victim.client.result_ok(),
        "{}",
        all(&victim, &others)
    );
    let r = victim.client.result().unwrap_or_default();
    assert_eq!(field(&r, "retry_exc"), Some("4"), "{r}");
    assert_eq!(field(&r, "fatal_events"), Some("4"), "{r}");

    // The daemon is up and has forgotten the dead process.
    assert!(d.alive(), "rxud died\n{}", d.log_text());
    let end = Instant::now() + Duration::from_secs(5);
    while d.status().clients.iter().any(|c| c.pid == dead_pid) {
        assert!(
            Instant::now() < end,
            "pid {dead_pid} still listed: {:?}",
            d.status()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = d.log_text();
    assert!(
        log.contains(&format!(
            "(pid {dead_pid}) gone: destroyed 4 QPs, 0 SRQs, 1 CQs, 1 MRs, 1 PDs"
        )),
        "{log}"
    );
    let st = d.status();
    let listed: Vec<u32> = st
        .clients
        .iter()
        .flat_map(|c| c.qps.iter().map(|q| q.qpn))
        .collect();
    let stats = d.stats();
    for q in &dead_qpns {
        assert!(!listed.contains(q), "QP {q:#x} of the dead process: {st:?}");
        assert!(stats.qps.iter().all(|(n, _)| n != q), "QP {q:#x} in Stats");
    }

    // The bystanders ran through all of it and finished correctly.
    let mut ok = true;
    for p in &mut others {
        ok &= p.finish(LIMIT);
    }
    assert!(
        ok && others
            .iter()
            .all(|p| p.client.result_ok() && p.server.result_ok()),
        "{}",
        all(&victim, &others)
    );
    for p in &others {
        let (t_done, _) = p.client.wait_line("RESULT", Duration::ZERO).unwrap();
        assert!(
            t_done > t_lost,
            "bystander finished before the failure was over"
        );
    }
    // Everyone is gone: the daemon holds no fd or mapping of any of them.
    let end = Instant::now() + Duration::from_secs(5);
    let within = |(f, m): (usize, usize)| f <= baseline.0 && m <= baseline.1;
    while !within(d.fds_and_maps()) {
        assert!(
            Instant::now() < end,
            "daemon fds/maps {:?}, {baseline:?} before the clients\n{}",
            d.fds_and_maps(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_clean(&d);
}

/// A tcpdump of the device's address on lo, when tcpdump can run here.
struct Capture {
    proc: Proc,
    file: std::path::PathBuf,
}

impl Capture {
    fn start(a: std::net::IpAddr, tag: &str) -> Option<Capture> {
        if !have("tcpdump") {
            skip("no tcpdump: NAKs not checked on the wire (the rest runs)");
            return None;
        }
        let file = runtime_dir().join(format!("{tag}.pcap"));
        let mut c = std::process::Command::new("tcpdump");
        c.args([
            "-i",
            "lo",
            "-n",
            "-U",
            "--immediate-mode",
            // Whole frames (a GSO batch on lo is up to 64 KiB), and a ring
            // with room for them: with the default 2 MiB buffer and 256 KiB
            // snap length the ring holds 8 frames, and a burst while
            // tcpdump waits for a core was lost (a CI run missed a NAK).
            "-s",
            "65600",
            "-B",
            "131072",
            "-w",
        ])
        .arg(&file)
        .arg(format!("udp port 4791 and host {a}"));
        let proc = Proc::spawn("tcpdump", c);
        if proc
            .wait_line("tcpdump: listening", Duration::from_secs(10))
            .is_none()
        {
            skip(&format!(
                "tcpdump cannot capture here: NAKs not checked on the wire (the rest runs)\n{}",
                proc.report()
            ));
            return None;
        }
        Some(Capture { proc, file })
    }

    /// `rxu decode`'s lines for what the capture holds so far.
    fn decode(&self) -> Vec<String> {
        let out = std::process::Command::new(bins::rxu())
            .arg("decode")
            .arg(&self.file)
            .output()
            .expect("run rxu decode");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Stops the capture once `caught_up` holds for what it has written
    /// (or after 5 s: on a loaded machine tcpdump may be off the CPU when
    /// the last packets pass); returns `rxu decode`'s lines, having checked
    /// every ICRC. Frames lo captured as UDP GSO batches (several RoCE
    /// packets in one IP datagram) are split by decode into their packets,
    /// so nothing may be malformed.
    fn stop_when(mut self, caught_up: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !caught_up(&self.decode()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(100));
        self.proc.signal("INT");
        self.proc.wait(Duration::from_secs(5));
        let lines = self.decode();
        // tcpdump's own count of what the kernel dropped: a capture that
        // lost frames cannot show the NAKs, and must say so.
        let report = self.proc.report();
        assert!(
            report
                .lines()
                .any(|l| l.trim() == "0 packets dropped by kernel"),
            "the capture lost frames:\n{report}"
        );
        let _ = std::fs::remove_file(&self.file);
        let summary = lines.last().cloned().unwrap_or_default();
        assert!(
            summary.contains(" 0 bad ICRC, 0 malformed"),
            "{}",
            lines.join("\n")
        );
        lines
    }
}

/// Bad rkey, out of bounds, missing access right, another PD's MR, a
/// deregistered MR: each refused with NAK remote-access-error and
/// IBV_WC_REM_ACCESS_ERR; the target's guard bytes (same mapping, around
/// and between the MRs) unchanged; allowed accesses still work. And the
/// server's keys used as lkeys in the client's SGEs: IBV_WC_LOC_PROT_ERR,
/// nothing on the wire, the server's memory untouched. The device runs
/// with RXU_FORCE_UDP=1 (as --force-udp): the NAKs are checked in a
/// capture on lo, which sees nothing of the intra-device shortcut.
#[test]
fn remote_access_violations_refused() {
    let _g = serial();
    let d = Daemon::spawn("rxmpv", addr(40))
        .env("RXU_FORCE_UDP", "1")
        .start();
    assert_eq!(d.counter("loopback"), 0, "RXU_FORCE_UDP=1");
    let cap = Capture::start(d.addr, "violate");
    let p = run_pair(
        "violate",
        &d,
        &d,
        &["--workload", "violate", "--timeout", "30"],
    );
    let out = p.client.output();
    let cases: Vec<(String, u32)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("CASE "))
        .map(|l| {
            let name = l.split_whitespace().next().unwrap_or("").to_owned();
            let qpn = field(l, "qpn")
                .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok());
            assert!(l.contains("status=IBV_WC_REM_ACCESS_ERR"), "{l}");
            (name, qpn.unwrap_or_else(|| panic!("no qpn in {l}")))
        })
        .collect();
    assert_eq!(cases.len(), 20, "{out}");
    // The server's keys in the client's own SGEs: refused locally.
    let local: Vec<&str> = out.lines().filter(|l| l.starts_with("LOCAL ")).collect();
    assert_eq!(local.len(), 4, "{out}");
    assert!(
        local
            .iter()
            .all(|l| l.contains("status=IBV_WC_LOC_PROT_ERR")),
        "{out}"
    );
    let Some(cap) = cap else { return };
    let nak_count = |lines: &[String]| lines.iter().filter(|l| l.contains("aeth(nak ")).count();
    let lines = cap.stop_when(|lines| nak_count(lines) >= cases.len());
    let naks: Vec<&String> = lines.iter().filter(|l| l.contains("aeth(nak ")).collect();
    for (name, qpn) in &cases {
        let want = format!("qpn={qpn:#08x}");
        let mine: Vec<&&String> = naks.iter().filter(|l| l.contains(&want)).collect();
        assert!(
            mine.len() == 1 && mine[0].contains("nak remote-access-error"),
            "{name} (QP {qpn:#x}): NAKs {mine:?}\n{}",
            lines.join("\n")
        );
    }
    assert_eq!(
        naks.len(),
        cases.len(),
        "NAKs on the wire:\n{}",
        lines.join("\n")
    );
}

/// A process that stops (SIGSTOP) mid-transfer stalls only its own
/// connection: a bystander pair keeps moving meanwhile, and the stopped
/// pair resumes after SIGCONT and completes, every byte checked.
#[test]
fn stopped_process_stalls_only_itself() {
    let _g = serial();
    let d = Daemon::start("rxmps", addr(50));
    let go = runtime_dir().join("go-stop");
    let _ = std::fs::remove_file(&go);
    let go_s = go.display().to_string();
    let args = [
        "--workload",
        "mixed",
        "--qps",
        "4",
        "--depth",
        "8",
        "--iters",
        "1000000000",
        "--timeout",
        "40",
    ];
    let extra = ["--secs", "2", "--go-file", go_s.as_str()];
    let longer = ["--secs", "5", "--go-file", go_s.as_str()];
    let mut stopped = PeerPair::start(peer(), "stopped", &d.name, &d.name, &args, &extra);
    let mut other = PeerPair::start(peer(), "bystander", &d.name, &d.name, &args, &longer);
    let all = |a: &PeerPair, b: &PeerPair| reports(&[a, b], &[&d]);
    for p in [&stopped, &other] {
        assert!(
            p.client
                .wait_line("WAITING", Duration::from_secs(30))
                .is_some(),
            "{}",
            all(&stopped, &other)
        );
    }
    // The bystander's QPs, by its client's pid.
    let qpns: Vec<u32> = d
        .status()
        .clients
        .iter()
        .filter(|c| c.pid == other.client.pid())
        .flat_map(|c| c.qps.iter().map(|q| q.qpn))
        .collect();
    assert_eq!(qpns.len(), 4);
    let sent = |d: &Daemon| -> u64 {
        d.stats()
            .qps
            .iter()
            .filter(|(q, _)| qpns.contains(q))
            .flat_map(|(_, c)| c.iter().filter(|c| c.name == "sent_pkts"))
            .map(|c| c.value)
            .sum()
    };
    std::fs::write(&go, b"go").unwrap();
    assert!(
        stopped
            .client
            .wait_line("STARTED", Duration::from_secs(20))
            .is_some(),
        "{}",
        all(&stopped, &other)
    );
    stopped.server.signal("STOP");
    std::thread::sleep(Duration::from_millis(100));
    // Progress, not a rate: a loaded machine may starve everyone a while.
    let (before, t) = (sent(&d), Instant::now());
    let mut during = 0;
    let min = Duration::from_millis(500);
    while (during < 1000 || t.elapsed() < min) && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
        during = sent(&d) - before;
    }
    let ms = t.elapsed().as_millis();
    stopped.server.signal("CONT");
    eprintln!("bystander: {during} packets in {ms} ms while the other server was stopped");
    assert!(
        during >= 1000,
        "the bystander stalled too\n{}",
        all(&stopped, &other)
    );
    let ok = stopped.finish(LIMIT) & other.finish(LIMIT);
    assert!(
        ok && [&stopped, &other]
            .iter()
            .all(|p| p.client.result_ok() && p.server.result_ok()),
        "{}",
        all(&stopped, &other)
    );
    assert_clean(&d);
}
