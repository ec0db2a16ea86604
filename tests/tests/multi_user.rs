//! A device root brings up serves every user, as the kernel's uverbs nodes
//! (0666) do: an unprivileged user's ibv_rc_pingpong runs over it, but
//! that user cannot stop the daemon; `rxu up --owner-only` keeps other
//! users out with a clear error.

use std::process::Command;
use std::time::Duration;

use rxu_testkit::tools::Dev;
use rxu_testkit::{bins, serial};

const LIMIT: Duration = Duration::from_secs(60);
const NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/// A script that runs `prog` as nobody (for Dev::pair, which appends the
/// program's arguments).
fn as_nobody(dev: &Dev, prog: &str) -> String {
    let path = dev.runtime_dir().join(format!("nobody-{prog}"));
    let script = format!(
        "#!/bin/sh\nexec setpriv {} {prog} \"$@\"\n",
        NOBODY.join(" ")
    );
    std::fs::write(&path, script).unwrap();
    let ok = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dev.runtime_dir())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    path.display().to_string()
}

#[test]
fn other_users_run_verbs_but_cannot_stop_the_daemon() {
    let _g = serial();
    let Some(dev) = Dev::up("rxumu", "127.0.14.1", &["ibv_rc_pingpong", "setpriv"]) else {
        return;
    };
    let pingpong = as_nobody(&dev, "ibv_rc_pingpong");
    let p = dev.pair(&pingpong, 18521, &["-g", "0", "-n", "50", "-c"], LIMIT);
    p.expect_ok();
    assert!(p.client_stdout().contains("50 iters"), "{}", p.report());
    // rxu down as nobody: refused by the daemon, the device stays up.
    let rxu = dev.runtime_dir().join("rxu");
    std::fs::copy(bins::rxu(), &rxu).unwrap();
    let r = dev.run(
        "setpriv",
        &[
            NOBODY[0],
            NOBODY[1],
            NOBODY[2],
            rxu.to_str().unwrap(),
            "down",
            "--name",
            &dev.name,
        ],
        LIMIT,
    );
    assert!(!r.ok(), "nobody stopped the daemon: {}", r.report());
    assert!(
        r.stderr.contains("belong to another user"),
        "{}",
        r.report()
    );
    assert!(dev.status().contains(&dev.name), "{}", dev.status());
    // The daemon's own refusal of another user's Shutdown: rxud's
    // control tests (shutdown_from_another_user_is_refused).
    assert!(dev.status().contains(&dev.name), "{}", dev.status());
}

#[test]
fn owner_only_devices_refuse_other_users() {
    let _g = serial();
    let Some(dev) = Dev::up("rxumv", "127.0.14.2", &["ibv_devinfo", "setpriv"]) else {
        return;
    };
    let out = Command::new(bins::rxu())
        .args([
            "up",
            "--addr",
            "127.0.14.3",
            "--name",
            "rxumw",
            "--owner-only",
        ])
        .env("RXU_RUNTIME_DIR", dev.runtime_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let devinfo = as_nobody(&dev, "ibv_devinfo");
    // The device everyone may use answers; the owner-only one does not.
    let r = dev.run(&devinfo, &["-d", "rxumv"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("PORT_ACTIVE"), "{}", r.report());
    let r = dev.run(&devinfo, &["-d", "rxumw"], LIMIT);
    assert!(!r.ok(), "{}", r.report());
    // Root still uses it.
    let r = dev.run("ibv_devinfo", &["-d", "rxumw"], LIMIT);
    r.expect_ok();
    let down = Command::new(bins::rxu())
        .args(["down", "--name", "rxumw"])
        .env("RXU_RUNTIME_DIR", dev.runtime_dir())
        .status()
        .unwrap();
    assert!(down.success());
}
