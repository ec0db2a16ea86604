//! The daemon's log can neither kill it nor fill a disk: a flood of
//! connections logs a bounded number of lines, a full disk (stderr on
//! /dev/full) costs lines, not the daemon, and a log past its cap is
//! rotated to `<log>.1`.

use std::net::Ipv4Addr;
use std::time::Duration;

use rxu_abi::proto::{Request, Response, PROTO_VERSION};
use rxu_testkit::{runtime, sock, Daemon};

/// Connects, says Hello as an admin client and closes, `n` times; each
/// connect is logged by the daemon ("connected" and "disconnected").
fn connect_flood(d: &Daemon, n: usize) {
    for _ in 0..n {
        let s = sock::connect(&d.socket());
        let hello = Request::Hello {
            version: PROTO_VERSION,
            pid: std::process::id(),
            admin: true,
        };
        assert!(
            matches!(sock::exchange(&s, &hello), Some(Response::Hello { .. })),
            "Hello refused:\n{}",
            d.log_text()
        );
    }
}

#[test]
fn a_full_disk_costs_lines_not_the_daemon() {
    let _g = rxu_testkit::serial();
    let d = Daemon::spawn("rxulogfull", Ipv4Addr::new(127, 0, 31, 1))
        .log_to("/dev/full")
        .start();
    connect_flood(&d, 200);
    std::thread::sleep(Duration::from_millis(50));
    assert!(d.alive(), "rxud died with its stderr on /dev/full");
    let _ctx = d.open();
}

#[test]
fn a_connect_flood_logs_a_bounded_number_of_lines() {
    let _g = rxu_testkit::serial();
    let d = Daemon::start("rxulogflood", Ipv4Addr::new(127, 0, 31, 2));
    connect_flood(&d, 2000);
    std::thread::sleep(Duration::from_millis(50));
    let log = d.log_text();
    let lines = log.lines().filter(|l| l.contains("connected")).count();
    // Two call sites (connected, disconnected), 20 lines each per 10 s
    // window; the flood may straddle one window boundary.
    assert!(
        lines <= 4 * 20 + 2,
        "{lines} connect lines for 2000 connections:\n{log}"
    );
    assert!(lines >= 2, "nothing logged at all:\n{log}");
}

#[test]
fn a_log_past_its_cap_is_rotated() {
    let _g = rxu_testkit::serial();
    let dir = runtime::scratch_dir("rxulogrot");
    let log = dir.join("rxu.log");
    let d = Daemon::spawn("rxulogrot", Ipv4Addr::new(127, 0, 31, 3))
        .log_to(&log)
        .env("RXU_LOG", "debug")
        .env("RXU_LOG_MAX_BYTES", "8192")
        .start();
    // Debug lines are not rate limited: each request is one.
    connect_flood(&d, 500);
    std::thread::sleep(Duration::from_millis(50));
    assert!(d.alive());
    let len = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let old = log.with_extension("log.1");
    assert!(
        len(&old) > 0,
        "no {} after 500 debug-logged requests",
        old.display()
    );
    // A file is rotated as soon as it reaches the cap: at most one line over.
    assert!(len(&log) < 8192 + 1024, "{} bytes", len(&log));
    assert!(len(&old) < 8192 + 1024, "{} bytes", len(&old));
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
