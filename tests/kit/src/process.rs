//! Child processes (rxu-peer, tcpdump, tools) whose stdout and stderr are
//! read line by line in the background, each line with its arrival time,
//! so a test can wait for a line and print everything on failure. Every
//! child runs with this test process's runtime directory, every wait is
//! bounded, and a child is killed when its handle drops.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::runtime_dir;

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

    /// `bin` (rxu-peer) with `args`.
    pub fn peer(bin: &Path, what: &str, args: &[String]) -> Proc {
        let mut c = Command::new(bin);
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
    /// client only. `bin` is rxu-peer (a binary of the rxu-tests package:
    /// its tests have it as `CARGO_BIN_EXE_rxu-peer`).
    pub fn start(
        bin: &Path,
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
        let server = Proc::peer(
            bin,
            &format!("{tag} server: rxu-peer {}", sa.join(" ")),
            &sa,
        );
        let Some((_, l)) = server.wait_line("LISTEN ", Duration::from_secs(20)) else {
            panic!("{tag}: the server never listened\n{}", server.report());
        };
        let addr = l["LISTEN ".len()..].to_owned();
        let mut ca = own(&["--device", client_dev, "--role", "client"]);
        ca.extend(own(args));
        ca.extend(own(client_extra));
        ca.extend(["--connect".to_string(), addr]);
        let client = Proc::peer(
            bin,
            &format!("{tag} client: rxu-peer {}", ca.join(" ")),
            &ca,
        );
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
