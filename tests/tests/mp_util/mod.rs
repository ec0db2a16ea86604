//! Harness for the multi-process tests: a daemon per device (no root, no
//! device node: `rxud` started directly, as `rxu up` would), rxu-peer
//! processes whose output lines are collected with their arrival time,
//! and admin queries (Status, Stats) through the client library.
//!
//! All daemons of this test process share one runtime directory (the
//! client library finds it through RXU_RUNTIME_DIR, which is process-wide)
//! and have distinct names and 127.0.21.x addresses. Every child is
//! killed when its handle drops; every wait is bounded.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rxu_client::{Context, DeviceStats, DeviceStatus};

/// One test at a time: each runs busy processes on a 2-core machine, and
/// the timing assertions need the CPU.
pub fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

/// target/<profile> of this test executable (target/<profile>/deps/x).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_owned()
}

/// rxud and rxu (another package's binaries: CARGO_BIN_EXE_ does not
/// reach them), built with this test's profile if they are missing or
/// stale. Returns target/<profile>. The same cargo command as the verbs
/// tests' (with ffi), so whichever runs second finds nothing to do.
pub fn provider_bins() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = DIR.get_or_init(|| {
        let dir = profile_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build", "-q", "-p", "rxud", "-p", "rxu-cli", "-p", "ffi", "--bins", "--lib",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let out = cmd.output().map_err(|e| format!("running cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for f in ["rxu", "rxud"] {
            if !dir.join(f).is_file() {
                return Err(format!("{} missing after the build", dir.join(f).display()));
            }
        }
        Ok(dir)
    });
    match r {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    }
}

pub fn peer_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rxu-peer")
}

/// This test process's runtime directory (set once, process-wide).
pub fn runtime_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("rxu-mp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::env::set_var("RXU_RUNTIME_DIR", &d);
        d
    })
}

/// A running rxud; shut down (forced) and reaped on drop.
pub struct Daemon {
    pub name: String,
    pub addr: Ipv4Addr,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    pub fn start(name: &str, addr: Ipv4Addr) -> Daemon {
        let dir = runtime_dir();
        let bin = provider_bins().join("rxud");
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(["--name", name, "--addr", &addr.to_string()])
            .env("RXU_RUNTIME_DIR", dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn rxud");
        let mut d = Daemon {
            name: name.to_owned(),
            addr,
            child,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("rxud {name} exited with {st}:\n{}", d.log_text());
            }
            if Context::open_admin(name).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "rxud {name} did not come up:\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the daemon process is still running (not a zombie) and
    /// answers on its socket.
    pub fn alive(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()));
        // The state follows the parenthesised command name.
        let running = stat.is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        });
        running && Context::open_admin(&self.name).is_ok()
    }

    /// Open fds and memory mappings of the daemon process (resources a
    /// client's rings, doorbells and memory grant take).
    pub fn fds_and_maps(&self) -> (usize, usize) {
        let pid = self.child.id();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        let maps =
            std::fs::read_to_string(format!("/proc/{pid}/maps")).map_or(0, |m| m.lines().count());
        (fds, maps)
    }

    pub fn status(&self) -> DeviceStatus {
        Context::open_admin(&self.name)
            .and_then(|c| c.status())
            .unwrap_or_else(|e| panic!("{}: Status: {e}\n{}", self.name, self.log_text()))
    }

    pub fn stats(&self) -> DeviceStats {
        Context::open_admin(&self.name)
            .and_then(|c| c.stats())
            .unwrap_or_else(|e| panic!("{}: Stats: {e}\n{}", self.name, self.log_text()))
    }

    /// A device-wide counter.
    pub fn counter(&self, name: &str) -> u64 {
        counter(&self.stats(), name)
    }

    /// `rxu <args>` with this test process's runtime directory.
    pub fn rxu(&self, args: &[&str]) -> String {
        let out = Command::new(provider_bins().join("rxu"))
            .args(args)
            .env("RXU_RUNTIME_DIR", runtime_dir())
            .output()
            .expect("run rxu");
        assert!(
            out.status.success(),
            "rxu {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(admin) = Context::open_admin(&self.name) {
            let _ = admin.shutdown(true);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                if !std::thread::panicking() {
                    let _ = std::fs::remove_file(&self.log);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn counter(s: &DeviceStats, name: &str) -> u64 {
    s.device
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no device counter {name}"))
        .value
}

/// Output lines of a child, with when each arrived.
#[derive(Default)]
struct Lines {
    lines: Vec<(Instant, String)>,
    /// Both pipes are at EOF.
    closed: u8,
}

/// A child process (rxu-peer or a tool) whose stdout and stderr are read
/// line by line in the background. Killed on drop.
pub struct Proc {
    pub what: String,
    child: Child,
    out: Arc<(Mutex<Lines>, Condvar)>,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(what: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .env("RXU_RUNTIME_DIR", runtime_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let out = Arc::new((Mutex::new(Lines::default()), Condvar::new()));
        let so: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("stdout"));
        let se: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("stderr"));
        for pipe in [so, se] {
            let out = Arc::clone(&out);
            std::thread::spawn(move || {
                let mut r = BufReader::new(pipe);
                // Bounded by the child's output (EOF when it exits).
                loop {
                    let mut l = String::new();
                    let n = r.read_line(&mut l).unwrap_or(0);
                    let (m, cv) = &*out;
                    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                    if n == 0 {
                        g.closed += 1;
                        cv.notify_all();
                        return;
                    }
                    g.lines.push((Instant::now(), l.trim_end().to_owned()));
                    cv.notify_all();
                }
            });
        }
        Proc {
            what: what.to_owned(),
            child,
            out,
            status: None,
        }
    }

    /// rxu-peer with `args`.
    pub fn peer(what: &str, args: &[String]) -> Proc {
        let mut c = Command::new(peer_bin());
        c.args(args);
        Proc::spawn(what, c)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first line starting with `prefix` (waiting up to `limit`), with
    /// its arrival time.
    pub fn wait_line(&self, prefix: &str, limit: Duration) -> Option<(Instant, String)> {
        let end = Instant::now() + limit;
        let (m, cv) = &*self.out;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(l) = g.lines.iter().find(|(_, l)| l.starts_with(prefix)) {
                return Some(l.clone());
            }
            let now = Instant::now();
            if now >= end || g.closed >= 2 {
                return None;
            }
            g = cv
                .wait_timeout(g, end - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits up to `limit` for the child to exit (killing it after that);
    /// true when it exited by itself with status 0.
    pub fn wait(&mut self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(st)) => self.status = Some(st),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
                _ => {
                    self.kill();
                    return false;
                }
            }
        }
        // The reader threads finish at EOF, right after the exit.
        let _ = self.wait_line("\u{0}never", Duration::from_secs(2));
        self.status.is_some_and(|s| s.success())
    }

    pub fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Sends `sig` (by name, as kill(1) takes it).
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([format!("-{sig}"), self.pid().to_string()])
            .status();
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        let (m, _) = &*self.out;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        g.lines
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn report(&self) -> String {
        format!(
            "--- {} (pid {}, {}):\n{}\n",
            self.what,
            self.pid(),
            match self.status {
                Some(s) => s.to_string(),
                None => "running".into(),
            },
            self.output()
        )
    }

    /// The RESULT line, if any.
    pub fn result(&self) -> Option<String> {
        let (m, _) = &*self.out;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        g.lines
            .iter()
            .find(|(_, l)| l.starts_with("RESULT"))
            .map(|(_, l)| l.clone())
    }

    pub fn result_ok(&self) -> bool {
        self.result().is_some_and(|l| l.starts_with("RESULT ok"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of `key=` in a RESULT-style line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// A server/client pair of rxu-peer over TCP on 127.0.0.1.
pub struct PeerPair {
    pub server: Proc,
    pub client: Proc,
}

impl PeerPair {
    /// Starts the server on `server_dev`, waits for its port, starts the
    /// client on `client_dev`. `args` go to both, `client_extra` to the
    /// client only.
    pub fn start(
        tag: &str,
        server_dev: &str,
        client_dev: &str,
        args: &[&str],
        client_extra: &[&str],
    ) -> PeerPair {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut sa = own(&["--device", server_dev, "--role", "server"]);
        sa.extend(own(args));
        sa.extend(own(&["--listen", "127.0.0.1:0"]));
        let server = Proc::peer(&format!("{tag} server: rxu-peer {}", sa.join(" ")), &sa);
        let Some((_, l)) = server.wait_line("LISTEN ", Duration::from_secs(20)) else {
            panic!("{tag}: the server never listened\n{}", server.report());
        };
        let addr = l["LISTEN ".len()..].to_owned();
        let mut ca = own(&["--device", client_dev, "--role", "client"]);
        ca.extend(own(args));
        ca.extend(own(client_extra));
        ca.extend(["--connect".to_string(), addr]);
        let client = Proc::peer(&format!("{tag} client: rxu-peer {}", ca.join(" ")), &ca);
        PeerPair { server, client }
    }

    /// Waits for both to exit; true when both succeeded.
    pub fn finish(&mut self, limit: Duration) -> bool {
        let c = self.client.wait(limit);
        let s = self.server.wait(Duration::from_secs(10));
        c && s
    }

    pub fn report(&self) -> String {
        format!("{}{}", self.server.report(), self.client.report())
    }
}
