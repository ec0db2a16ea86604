//! What device managers rely on, through unmodified tools and libibverbs:
//! - port 1 follows its netdev: a veth pair in a network namespace made
//!   here; link down/up gives PORT_ERR/PORT_ACTIVE and the served address
//!   removed/added gives GID_CHANGE, as ibv_asyncwatch (ibv_get_async_event)
//!   prints them, with ibv_devinfo -v, the device tree and `rxu status`
//!   agreeing;
//! - killing rxud under a C program blocked in ibv_get_cq_event or busy
//!   polling a CQ: DEVICE_FATAL, flushed work, clean exit;
//! - `rxu stats --json` / `--prometheus` after ib_write_bw: the MR and
//!   transport figures add up.
//!
//! Every program is bounded in time; namespaces and devices are removed
//! whatever happens.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::tools::{compile_c, Dev};
use rxu_testkit::{bins, have, is_root, serial, skip};

const LIMIT: Duration = Duration::from_secs(30);

/// Lines of a child's stdout, as they come.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (at most `limit`) for a line containing `what`; returns the
/// lines seen, panicking with them if it never came.
fn expect_line(rx: &Receiver<String>, what: &str, limit: Duration) -> Vec<String> {
    let end = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) => {
                let hit = l.contains(what);
                seen.push(l);
                if hit {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no line with {what:?} within {limit:?}; saw {seen:?}");
}

fn sh(args: &[&str]) -> std::process::Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace with a veth pair `va`/`vb` (both up, IPv6 off so
/// no link-local addresses come and go) and an rxu device on `va`, whose
/// address is 127.0.66.1/32: nothing leaves the namespace, and the test
/// sends no traffic at all.
struct NsDev {
    ns: String,
    name: String,
    rt: PathBuf,
    bin: PathBuf,
}

impl NsDev {
    fn up(name: &str) -> NsDev {
        Self::up_on(name, "va")
    }

    /// `rxu up --netdev <netdev>` in a new namespace: "va" (the veth, set
    /// up as above) or "lo" (the namespace's own, 127.0.0.1 and ::1).
    fn up_on(name: &str, netdev: &str) -> NsDev {
        let ns = format!("rxu-ev-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        sh(&["ip", "netns", "add", &ns]);
        let rt = scratch_dir(&format!("ev-{name}"));
        let bin = bins::built().to_owned();
        bins::install_provider(&rt).unwrap();
        // From here on, Drop cleans up.
        let d = NsDev {
            ns,
            name: name.into(),
            rt,
            bin,
        };
        if netdev == "lo" {
            d.ip(&["link", "set", "lo", "up"]);
        } else {
            d.ip(&["link", "add", "va", "type", "veth", "peer", "name", "vb"]);
            for s in ["all", "default"] {
                let key = format!("net.ipv6.conf.{s}.disable_ipv6=1");
                sh(&["ip", "netns", "exec", &d.ns, "sysctl", "-qw", &key]);
            }
            d.ip(&["addr", "add", "127.0.66.1/32", "dev", "va"]);
            d.ip(&["link", "set", "va", "up"]);
            d.ip(&["link", "set", "vb", "up"]);
        }
        let out = d
            .cmd(&d.bin.join("rxu"))
            .args(["up", "--netdev", netdev, "--name", name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rxu up in {}: {}",
            d.ns,
            String::from_utf8_lossy(&out.stderr)
        );
        d
    }

    fn ip(&self, args: &[&str]) {
        let mut v = vec!["ip", "-n", &self.ns];
        v.extend_from_slice(args);
        sh(&v);
    }

    /// `prog` inside the namespace with the device's environment.
    fn cmd(&self, prog: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns])
            .arg("env")
            .arg(format!("RXU_RUNTIME_DIR={}", self.rt.display()))
            .arg(format!("SYSFS_PATH={}", self.rt.join("sysfs").display()))
            .arg(format!(
                "RDMAV_DRIVERS={}",
                self.rt.join("librxu").display()
            ))
            .arg(prog);
        c
    }

    /// Runs a program to completion; its stdout.
    fn run(&self, prog: &Path, args: &[&str]) -> String {
        let out = self.cmd(prog).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{} {args:?}: {}{}",
            prog.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn devinfo(&self) -> String {
        self.run(Path::new("ibv_devinfo"), &["-v", "-d", &self.name])
    }

    fn tree(&self, rel: &str) -> String {
        let p = self
            .rt
            .join("sysfs/class/infiniband")
            .join(&self.name)
            .join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({}: {e})", p.display()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.rt.join(format!("{}.log", self.name))).unwrap_or_default()
    }
}

impl Drop for NsDev {
    fn drop(&mut self) {
        let _ = self
            .cmd(&self.bin.join("rxu"))
            .args(["down", "--force", "--name", &self.name])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = std::fs::remove_dir_all(&self.rt);
    }
}

#[test]
fn port_and_gid_events_follow_a_veth_in_a_namespace() {
    let _g = serial();
    if !is_root() {
        skip("needs root (network namespaces, /dev/infiniband)");
        return;
    }
    if let Some(t) = ["ip", "stdbuf", "ibv_asyncwatch", "ibv_devinfo"]
        .iter()
        .find(|t| !have(t))
    {
        skip(&format!("{t} is not installed"));
        return;
    }
    let d = NsDev::up("rxuo1");
    // ibv_asyncwatch as it is; stdbuf so its printf lines arrive as printed.
    // (ip, env and stdbuf exec: the child is ibv_asyncwatch itself, and it
    // exits on the DEVICE_FATAL of the device's removal if left behind.)
    let mut watch = d
        .cmd(Path::new("stdbuf"))
        .args(["-oL", "ibv_asyncwatch", "-d", "rxuo1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut watch);
    expect_line(&rx, "async event FD", Duration::from_secs(10));
    let t = Duration::from_secs(5);
    let show = |d: &NsDev| format!("\ndaemon log:\n{}", d.log());

    // The netdev mapping, as tools read it.
    assert_eq!(d.tree("ports/1/gid_attrs/ndevs/0"), "va\n");
    let link = std::fs::read_link(d.rt.join("sysfs/class/infiniband/rxuo1/device/net/va")).unwrap();
    assert_eq!(link, Path::new("/sys/class/net/va"));
    let status = d.run(&d.bin.join("rxu"), &["status"]);
    assert!(status.contains("rxuo1 port 1 ==> va (Up)"), "{status}");

    // Carrier lost (the peer goes down) and back.
    d.ip(&["link", "set", "vb", "down"]);
    expect_line(&rx, "IBV_EVENT_PORT_ERR", t);
    let info = d.devinfo();
    assert!(info.contains("PORT_DOWN (1)"), "{info}{}", show(&d));
    assert_eq!(d.tree("ports/1/state"), "1: DOWN\n");
    let status = d.run(&d.bin.join("rxu"), &["status"]);
    assert!(status.contains("rxuo1 port 1 ==> va (Down)"), "{status}");
    d.ip(&["link", "set", "vb", "up"]);
    expect_line(&rx, "IBV_EVENT_PORT_ACTIVE", t);
    assert!(d.devinfo().contains("PORT_ACTIVE (4)"));
    assert_eq!(d.tree("ports/1/state"), "4: ACTIVE\n");

    // A second address becomes GID 1 (GID 0 stays the first IPv4).
    d.ip(&["addr", "add", "127.0.66.2/32", "dev", "va"]);
    let seen = expect_line(&rx, "IBV_EVENT_GID_CHANGE", t);
    assert!(!seen.iter().any(|l| l.contains("PORT_")), "{seen:?}");
    let info = d.devinfo();
    assert!(
        info.contains("GID[  0]:\t\t::ffff:127.0.66.1, RoCE v2"),
        "{info}"
    );
    assert!(
        info.contains("GID[  1]:\t\t::ffff:127.0.66.2, RoCE v2"),
        "{info}{}",
        show(&d)
    );
    assert_eq!(
        d.tree("ports/1/gids/1"),
        "0000:0000:0000:0000:0000:ffff:7f00:4202\n"
    );
    // And goes again: GID_CHANGE, the port stays ACTIVE.
    d.ip(&["addr", "del", "127.0.66.2/32", "dev", "va"]);
    let seen = expect_line(&rx, "IBV_EVENT_GID_CHANGE", t);
    assert!(!seen.iter().any(|l| l.contains("PORT_")), "{seen:?}");
    let info = d.devinfo();
    assert!(!info.contains("127.0.66.2"), "{info}");
    assert!(info.contains("PORT_ACTIVE (4)"), "{info}");

    // The last address goes: the port says so, then its GID goes.
    d.ip(&["addr", "del", "127.0.66.1/32", "dev", "va"]);
    let seen = expect_line(&rx, "IBV_EVENT_GID_CHANGE", t);
    assert!(
        seen.iter().any(|l| l.contains("IBV_EVENT_PORT_ERR")),
        "{seen:?}"
    );
    let info = d.devinfo();
    assert!(!info.contains("GID["), "{info}");
    assert!(info.contains("PORT_DOWN (1)"), "{info}");
    assert_eq!(
        d.tree("ports/1/gids/0"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n"
    );

    // And comes back: GID_CHANGE, the GID, then PORT_ACTIVE.
    d.ip(&["addr", "add", "127.0.66.1/32", "dev", "va"]);
    let seen = expect_line(&rx, "IBV_EVENT_PORT_ACTIVE", t);
    assert!(
        seen.iter().any(|l| l.contains("IBV_EVENT_GID_CHANGE")),
        "{seen:?}"
    );
    let info = d.devinfo();
    assert!(
        info.contains("GID[  0]:\t\t::ffff:127.0.66.1, RoCE v2"),
        "{info}"
    );
    assert!(info.contains("PORT_ACTIVE (4)"), "{info}");
    assert_eq!(
        d.tree("ports/1/gids/0"),
        "0000:0000:0000:0000:0000:ffff:7f00:4201\n"
    );

    let json = d.run(&d.bin.join("rxu"), &["stats", "--name", "rxuo1", "--json"]);
    assert!(json.contains("\"port_changes\":4"), "{json}");
    assert!(json.contains("\"gid_changes\":4"), "{json}");
    let _ = watch.kill();
    let _ = watch.wait();
}

/// ibv_rc_pingpong between two processes on one `--netdev lo` device (in
/// a namespace of its own: its lo, its UDP port 4791), over the IPv4 GID 0
/// (127.0.0.1) and the IPv6 GID 1 (::1).
#[test]
fn rc_pingpong_over_each_gid_of_a_netdev_device() {
    let _g = serial();
    if !is_root() {
        skip("needs root (network namespaces, /dev/infiniband)");
        return;
    }
    if let Some(t) = ["ip", "ibv_rc_pingpong", "ibv_devinfo"]
        .iter()
        .find(|t| !have(t))
    {
        skip(&format!("{t} is not installed"));
        return;
    }
    let d = NsDev::up_on("rxuo3", "lo");
    let info = d.devinfo();
    assert!(
        info.contains("GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2"),
        "{info}"
    );
    assert!(info.contains("GID[  1]:\t\t::1, RoCE v2"), "{info}");
    for (gid, port) in [("0", "18601"), ("1", "18602")] {
        let args = [
            "-d", "rxuo3", "-g", gid, "-p", port, "-n", "50", "-s", "4096",
        ];
        let server = d
            .cmd(Path::new("timeout"))
            .arg("20")
            .arg("ibv_rc_pingpong")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The server listens before the client connects (bounded tries).
        let mut client = None;
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            let out = d
                .cmd(Path::new("timeout"))
                .arg("20")
                .arg("ibv_rc_pingpong")
                .args(args)
                .arg("127.0.0.1")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() || !err.contains("Couldn't connect") {
                client = Some(out);
                break;
            }
        }
        let client = client.expect("the server never listened");
        let server = server.wait_with_output().unwrap();
        for (who, o) in [("client", &client), ("server", &server)] {
            assert!(
                o.status.success(),
                "GID {gid}: {who}: {}{}\ndaemon log:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                d.log()
            );
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("50 iters"),
                "GID {gid} {who}"
            );
        }
    }
}

/// How the daemon goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: it says nothing, the client library must.
    Kill,
    /// `rxu down` (refused, naming the program) then `rxu down --force`.
    DownForce,
}

/// Stops rxud under device_fatal.c waiting in `mode`.
fn kill_daemon_under(mode: &str, name: &str, addr: &str, how: Stop) {
    let _g = serial();
    let Some(dev) = Dev::up(name, addr, &[]) else {
        return;
    };
    let Some(exe) = compile_c("device_fatal", dev.runtime_dir()) else {
        return;
    };
    let mut prog = dev
        .cmd(&exe)
        .args([name, mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut prog);
    expect_line(&rx, "READY", Duration::from_secs(10));
    // Let it block (or spin) first.
    std::thread::sleep(Duration::from_millis(200));
    let pid_file = dev.runtime_dir().join(format!("{name}.pid"));
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let rxu = bins::rxu();
    let down = |force: bool| {
        let mut c = dev.cmd(&rxu);
        c.args(["down", "--name", name]);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    if how == Stop::DownForce {
        let out = down(false);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "rxu down without --force: {err}");
        let prog_pid = prog.id().to_string();
        assert!(err.contains(&prog_pid), "{err} should name pid {prog_pid}");
    }
    let t0 = Instant::now();
    match how {
        Stop::Kill => {
            sh(&["kill", "-9", pid.trim()]);
        }
        Stop::DownForce => {
            let out = down(true);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = prog.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > end {
            let _ = prog.kill();
            panic!("device_fatal {mode} still running 10 s after the kill");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    // Until the reader saw EOF (it may lag the exit).
    let mut out = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        out.push(l);
    }
    let mut err = String::new();
    if let Some(mut e) = prog.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(
        status.success(),
        "device_fatal {mode}: {status}\n{out:?}\n{err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let want = if mode == "poll" {
        "flushed 6, then poll_cq -5"
    } else {
        "get_cq_event -1"
    };
    // 8: IBV_EVENT_DEVICE_FATAL ("local catastrophic error").
    for w in [want, "async event 8 (local catastrophic error)", "OK"] {
        assert!(out.iter().any(|l| l == w), "no {w:?} in {out:?}\n{err}");
    }
}

#[test]
fn sigkill_under_a_blocked_get_cq_event() {
    kill_daemon_under("cq_event", "rxuo2", "127.0.6.2", Stop::Kill);
}

#[test]
fn sigkill_under_a_busy_poller() {
    kill_daemon_under("poll", "rxuo3", "127.0.6.3", Stop::Kill);
}

#[test]
fn rxu_down_force_under_a_blocked_get_cq_event() {
    kill_daemon_under("cq_event", "rxuo5", "127.0.6.5", Stop::DownForce);
}

fn counters(json: &str) -> serde_like::Obj {
    serde_like::parse_counters(json)
}

/// Just enough JSON for `rxu stats --json`'s flat counter object (the
/// tests crate has no JSON dependency).
mod serde_like {
    use std::collections::HashMap;

    pub type Obj = HashMap<String, u64>;

    pub fn parse_counters(json: &str) -> Obj {
        let start = json.find("\"counters\":{").expect("counters") + 12;
        let body = &json[start..start + json[start..].find('}').expect("}")];
        body.split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                Some((k.trim_matches('"').to_owned(), v.trim().parse().ok()?))
            })
            .collect()
    }
}

#[test]
fn stats_after_ib_write_bw_add_up() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuo4", "127.0.6.4", &["ib_write_bw"]) else {
        return;
    };
    const SIZE: u64 = 65536;
    const ITERS: u64 = 300;
    let (s, n) = (SIZE.to_string(), ITERS.to_string());
    let p = dev.pair(
        "ib_write_bw",
        19751,
        &["-x", "0", "-s", &s, "-n", &n],
        LIMIT,
    );
    p.expect_ok();
    let rxu = bins::rxu();
    let stats = |fmt: &str| {
        let out = dev
            .cmd(&rxu)
            .args(["stats", "--name", "rxuo4", fmt])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json = stats("--json");
    let c = counters(&json);
    let get = |k: &str| *c.get(k).unwrap_or_else(|| panic!("no {k} in {json}"));

    // Each ib_write_bw process registers one region of 2 x size (its
    // send and receive halves); both ran on this device.
    assert_eq!(get("mr_registrations"), 2, "{json}");
    assert_eq!(get("mr_bytes_registered_total"), 2 * 2 * SIZE, "{json}");
    assert_eq!(get("mr_deregistrations"), 2);
    assert_eq!((get("mrs"), get("mr_bytes"), get("mr_failures")), (0, 0, 0));
    let (p50, p99) = (get("mr_reg_p50_ns"), get("mr_reg_p99_ns"));
    assert!(p50 > 0 && p50 <= p99, "{json}");
    assert_eq!((get("qps"), get("cqs"), get("pds")), (0, 0, 0), "{json}");

    // Transport: every byte sent on loopback was received, every WRITE
    // was one work request and one completion, and the bytes are the
    // payload plus headers: per data packet BTH + ICRC (16), per message
    // a RETH (16), per ACK BTH + AETH + ICRC (20).
    assert_eq!(get("wqes_posted"), ITERS, "{json}");
    assert_eq!(get("sent_bytes"), get("rcvd_bytes"), "{json}");
    let mtu = 4096;
    let data_pkts = ITERS * SIZE.div_ceil(mtu);
    let acks = get("rcvd_pkts") - data_pkts;
    assert!(acks >= 1 && acks <= data_pkts, "{json}");
    let want = ITERS * SIZE + 16 * data_pkts + 16 * ITERS + 20 * acks;
    if get("retransmitted_pkts") == 0 && get("duplicate_request") == 0 {
        assert_eq!(get("rcvd_bytes"), want, "{json}");
    } else {
        assert!(get("rcvd_bytes") >= want, "{json}");
    }

    let prom = stats("--prometheus");
    for l in [
        "# TYPE rxu_mr_registered_bytes_total counter",
        &format!(
            "rxu_mr_registered_bytes_total{{device=\"rxuo4\"}} {}",
            4 * SIZE
        ),
        "rxu_mr_registrations_total{device=\"rxuo4\"} 2",
        "# TYPE rxu_mr_registered_bytes gauge",
        "rxu_mr_registered_bytes{device=\"rxuo4\"} 0",
        "rxu_qps{device=\"rxuo4\"} 0",
        "rxu_port_state{device=\"rxuo4\"} 4",
    ] {
        assert!(prom.lines().any(|x| x == l), "no {l:?} in:\n{prom}");
    }
}
