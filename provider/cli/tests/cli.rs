//! `rxu up / status / stats / env / down` against the real `rxud`, each
//! test in its own runtime directory (RXU_RUNTIME_DIR) and on its own
//! 127.0.3.x address. Creating /dev/infiniband/uverbsN needs root: the
//! tests skip, saying why, when not root. `rxu up` starts the `rxud`
//! beside it: the test kit builds both.
//! No packet leaves loopback: the only non-local address is merely looked
//! up.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rxu_abi::proto::{self, fdpass, Request, Response};
use rxu_cli::cli::admin::connect_seqpacket;
use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::{bins, is_root, seqpacket_pair, skip};

/// A private runtime directory; on drop, every device in it is forced
/// down and the directory removed. One at a time: every test brings
/// devices up on 127.0.3.x:4791, and `rxu up`s running side by side have
/// been seen to fail with "already in use" (a fresh-clone run).
struct Rt {
    dir: PathBuf,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Rt {
    /// None (after [`skip`]) when the test cannot run here.
    fn new(tag: &str) -> Option<Rt> {
        if !is_root() {
            skip("needs root (rxu up creates /dev/infiniband/uverbsN)");
            return None;
        }
        Some(Rt {
            _serial: rxu_testkit::serial(),
            dir: scratch_dir(&format!("cli-{tag}")),
        })
    }

    fn rxu(&self, args: &[&str]) -> Output {
        Command::new(bins::rxu())
            .args(args)
            .env("RXU_RUNTIME_DIR", &self.dir)
            .env_remove("SUDO_UID")
            .output()
            .expect("run rxu")
    }

    /// Runs rxu, expecting success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.rxu(args);
        assert!(
            out.status.success(),
            "rxu {args:?} failed: {}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs rxu, expecting exit status 1; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.rxu(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(1),
            "rxu {args:?}: stdout {:?} stderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(out.stdout.is_empty(), "errors print nothing on stdout");
        stderr
    }

    fn sysfs(&self) -> PathBuf {
        self.dir.join("sysfs")
    }

    fn pid(&self, name: &str) -> u32 {
        std::fs::read_to_string(self.dir.join(format!("{name}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// The uverbs index the tree gives `name`.
    fn uverbs_of(&self, name: &str) -> Option<u32> {
        let class = self.sysfs().join("class/infiniband_verbs");
        std::fs::read_dir(class).ok()?.flatten().find_map(|e| {
            let ibdev = std::fs::read_to_string(e.path().join("ibdev")).ok()?;
            (ibdev.trim_end() == name)
                .then(|| e.file_name().to_str()?.strip_prefix("uverbs")?.parse().ok())
                .flatten()
        })
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        let _ = self.rxu(&["down", "--all", "--force"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `export K=V` lines into a map; anything else on stdout fails the test.
fn parse_exports(stdout: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for line in stdout.lines() {
        let kv = line
            .strip_prefix("export ")
            .unwrap_or_else(|| panic!("not an export line: {line:?}"));
        let (k, v) = kv.split_once('=').expect("K=V");
        let v = v
            .strip_prefix('\'')
            .and_then(|v| v.strip_suffix('\''))
            .unwrap_or(v);
        m.insert(k.to_owned(), v.to_owned());
    }
    m
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .is_some_and(|st| st != "Z" && st != "X")
        })
        .unwrap_or(false)
}

#[test]
fn up_status_stats_down_on_a_loopback_address() {
    let Some(rt) = Rt::new("basic") else {
        return;
    };
    let out = rt.ok(&["up", "--addr", "127.0.3.1", "--name", "rxu0"]);
    let env = parse_exports(&out);
    assert_eq!(Path::new(&env["SYSFS_PATH"]), rt.sysfs());
    assert_eq!(Path::new(&env["RXU_RUNTIME_DIR"]), rt.dir);
    if let Some(d) = env.get("RDMAV_DRIVERS") {
        assert!(Path::new(&format!("{d}-rdmav34.so")).is_file());
    }

    // The tree libibverbs reads, and the device node.
    let idx = rt.uverbs_of("rxu0").expect("uverbsN for rxu0");
    let ibdev = rt.sysfs().join("class/infiniband/rxu0");
    assert_eq!(
        std::fs::read_to_string(ibdev.join("ports/1/gids/0")).unwrap(),
        "0000:0000:0000:0000:0000:ffff:7f00:0301\n"
    );
    assert_eq!(
        std::fs::read_to_string(ibdev.join("ports/1/gid_attrs/ndevs/0")).unwrap(),
        "lo\n"
    );
    assert_eq!(
        std::fs::read_to_string(rt.sysfs().join("class/infiniband_verbs/abi_version")).unwrap(),
        "6\n"
    );
    let cdev = PathBuf::from(format!("/dev/infiniband/uverbs{idx}"));
    assert!(cdev.symlink_metadata().is_ok());
    let pid = rt.pid("rxu0");
    assert!(alive(pid));

    let status = rt.ok(&["status"]);
    assert!(
        status.contains(&format!("rxu0: uverbs{idx}, daemon pid {pid}")),
        "{status}"
    );
    assert!(status.contains("127.0.3.1"), "{status}");
    assert!(status.contains("rxu0 port 1 ==> lo (Up)"), "{status}");

    let json = rt.ok(&["stats", "--name", "rxu0", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("stats --json is JSON");
    assert_eq!(v["device"], "rxu0");
    assert!(v["counters"].is_object());
    assert!(v["counters"]["sent_pkts"].is_u64(), "{v}");
    assert!(v["qps"].is_array());
    let text = rt.ok(&["stats", "--name", "rxu0"]);
    assert!(
        text.starts_with("rxu0\n") && text.contains("sent_pkts"),
        "{text}"
    );

    assert_eq!(parse_exports(&rt.ok(&["env"])), env);

    rt.ok(&["down", "--name", "rxu0"]);
    assert!(!alive(pid), "daemon {pid} still running after down");
    assert!(cdev.symlink_metadata().is_err(), "{} left", cdev.display());
    assert!(!ibdev.exists());
    assert!(!rt
        .sysfs()
        .join(format!("class/infiniband_verbs/uverbs{idx}"))
        .exists());
    for f in ["rxu0.sock", "rxu0.pid"] {
        assert!(!rt.dir.join(f).exists(), "{f} left");
    }
    assert!(rt
        .fails(&["down", "--name", "rxu0"])
        .contains("rxu0 is not up"));
    assert!(rt.fails(&["env"]).contains("no rxu device is up"));
}

#[test]
fn two_devices_on_lo() {
    let Some(rt) = Rt::new("two") else {
        return;
    };
    let a = parse_exports(&rt.ok(&["up", "--addr", "127.0.3.2", "--name", "rxu0"]));
    let b = parse_exports(&rt.ok(&["up", "--addr", "127.0.3.3", "--name", "rxu1"]));
    assert_eq!(a, b, "one SYSFS_PATH serves every device");
    let (i0, i1) = (rt.uverbs_of("rxu0").unwrap(), rt.uverbs_of("rxu1").unwrap());
    assert_ne!(i0, i1);
    let status = rt.ok(&["status"]);
    assert!(status.contains("rxu0 port 1 ==> lo"), "{status}");
    assert!(status.contains("rxu1 port 1 ==> lo"), "{status}");
    assert!(status.contains("127.0.3.3"), "{status}");
    let (p0, p1) = (rt.pid("rxu0"), rt.pid("rxu1"));
    rt.ok(&["down", "--all"]);
    assert!(!alive(p0) && !alive(p1));
    assert!(rt.uverbs_of("rxu0").is_none() && rt.uverbs_of("rxu1").is_none());
}

#[test]
fn the_same_name_twice_is_refused() {
    let Some(rt) = Rt::new("twice") else {
        return;
    };
    rt.ok(&["up", "--addr", "127.0.3.4", "--name", "rxu0"]);
    let pid = rt.pid("rxu0");
    let err = rt.fails(&["up", "--addr", "127.0.3.5", "--name", "rxu0"]);
    assert!(err.contains("rxu0 is already up"), "{err}");
    assert!(err.contains("rxu down --name rxu0"), "{err}");
    // The first is untouched.
    assert!(alive(pid));
    assert_eq!(rt.pid("rxu0"), pid);
    assert!(rt.ok(&["status"]).contains("127.0.3.4"));
}

#[test]
fn a_dead_daemon_is_cleaned_up_by_the_next_up() {
    let Some(rt) = Rt::new("stale") else {
        return;
    };
    rt.ok(&["up", "--addr", "127.0.3.8", "--name", "rxu0"]);
    let pid = rt.pid("rxu0");
    // SAFETY: kill(2) on the daemon this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = rt.ok(&["status"]);
    assert!(status.contains("daemon not answering"), "{status}");
    rt.ok(&["up", "--addr", "127.0.3.8", "--name", "rxu0"]);
    assert_ne!(rt.pid("rxu0"), pid);
    rt.ok(&["down"]);
}

#[test]
fn down_is_refused_while_a_client_is_open() {
    let Some(rt) = Rt::new("busy") else {
        return;
    };
    rt.ok(&["up", "--addr", "127.0.3.9", "--name", "rxu0"]);
    let client = connect_client(&rt.dir.join("rxu0.sock"));
    let me = std::process::id().to_string();

    let status = rt.ok(&["status"]);
    assert!(status.contains(&format!("pid {me}:")), "{status}");
    let err = rt.fails(&["down", "--name", "rxu0"]);
    assert!(
        err.contains("has clients open") && err.contains(&me),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    let pid = rt.pid("rxu0");
    assert!(alive(pid));

    rt.ok(&["down", "--name", "rxu0", "--force"]);
    assert!(!alive(pid));
    drop(client);
}

/// An application connection, as the client library makes it: Hello with
/// [/proc/self/mem, async socket write end, doorbell eventfd].
fn connect_client(sock: &Path) -> (OwnedFd, Vec<OwnedFd>) {
    let s = connect_seqpacket(sock, Duration::from_secs(5)).unwrap();
    let mem: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .unwrap()
        .into();
    let seq = seqpacket_pair();
    // SAFETY: eventfd(2) with valid flags; result checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(efd >= 0);
    // SAFETY: a fresh descriptor we own.
    let efd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
    let hello = proto::encode(&Request::Hello {
        version: proto::PROTO_VERSION,
        pid: std::process::id(),
        admin: false,
    })
    .unwrap();
    fdpass::send_msg(
        s.as_fd(),
        &hello,
        &[mem.as_fd(), seq.1.as_fd(), efd.as_fd()],
    )
    .unwrap();
    let mut buf = vec![0u8; proto::MAX_MSG];
    let (n, _) = fdpass::recv_msg(s.as_fd(), &mut buf, 0).unwrap();
    let resp: Response = proto::decode(&buf[..n]).unwrap();
    assert!(matches!(resp, Response::Hello { .. }), "{resp:?}");
    (s, vec![mem, seq.0, seq.1, efd])
}

#[test]
fn an_address_not_on_this_host_is_refused() {
    let Some(rt) = Rt::new("notlocal") else {
        return;
    };
    let err = rt.fails(&["up", "--addr", "192.0.2.123"]);
    assert!(err.contains("192.0.2.123 is not assigned"), "{err}");
    let err = rt.fails(&["up", "--netdev", "rxu-no-such-if"]);
    assert!(err.contains("no network interface named"), "{err}");
    assert!(!rt.sysfs().join("class/infiniband/rxu0").exists());
}

#[test]
fn a_taken_udp_port_is_refused_and_leaves_nothing() {
    let Some(rt) = Rt::new("port") else {
        return;
    };
    let _held = UdpSocket::bind("127.0.3.6:4791").unwrap();
    let err = rt.fails(&["up", "--addr", "127.0.3.6"]);
    assert!(
        err.contains("UDP port 4791 on 127.0.3.6 is already in use"),
        "{err}"
    );
    assert!(err.contains("rdma_rxe"), "{err}");
    assert!(rt.uverbs_of("rxu0").is_none());
    assert!(!rt.dir.join("rxu0.sock").exists());
    assert!(!rt.dir.join("rxu0.pid").exists());
}

#[test]
fn a_bad_name_is_refused() {
    let Some(rt) = Rt::new("badname") else {
        return;
    };
    assert!(rt
        .fails(&["up", "--addr", "127.0.3.7", "--name", "rxe0"])
        .contains("rxe"));
    assert!(rt
        .fails(&["up", "--addr", "127.0.3.7", "--name", "../x"])
        .contains("device name"));
}

#[test]
fn without_root_up_says_so() {
    if !is_root() {
        skip("needs root to switch to an unprivileged uid");
        return;
    }
    use std::os::unix::process::CommandExt;
    let out = Command::new(bins::rxu())
        .args(["up", "--addr", "127.0.3.7"])
        .env(
            "RXU_RUNTIME_DIR",
            std::env::temp_dir().join("rxu-cli-noroot"),
        )
        .uid(65534)
        .gid(65534)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("cannot run rxu as uid 65534: {e}"));
            return;
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs root"), "{err}");
    assert!(
        err.contains("eval \"$(sudo rxu up --addr 127.0.3.7)\""),
        "{err}"
    );
}

/// `rxu up` refuses a runtime directory another user could have planted or
/// may write (issue 19 finding 5), and makes a missing one itself with no
/// write right for anyone else.
#[test]
fn up_refuses_a_runtime_dir_others_may_write_or_own() {
    use std::os::unix::fs::PermissionsExt;
    let Some(rt) = Rt::new("rtdir") else {
        return;
    };
    let perm = |m| std::fs::Permissions::from_mode(m);
    std::fs::set_permissions(&rt.dir, perm(0o777)).unwrap();
    let err = rt.fails(&["up", "--addr", "127.0.3.8"]);
    assert!(err.contains("is writable by others (mode 777)"), "{err}");
    std::fs::set_permissions(&rt.dir, perm(0o755)).unwrap();
    std::os::unix::fs::chown(&rt.dir, Some(65534), Some(65534)).unwrap();
    let err = rt.fails(&["up", "--addr", "127.0.3.8"]);
    assert!(err.contains("is owned by uid 65534"), "{err}");
    std::os::unix::fs::chown(&rt.dir, Some(0), Some(0)).unwrap();
    assert!(!rt.dir.join("rxu0.sock").exists());
    // A symlink to a sound directory is refused too.
    let real = rt.dir.join("real");
    std::fs::create_dir(&real).unwrap();
    let link = rt.dir.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = Command::new(bins::rxu())
        .args(["up", "--addr", "127.0.3.8"])
        .env("RXU_RUNTIME_DIR", &link)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    assert!(!real.join("rxu0.sock").exists());
}
