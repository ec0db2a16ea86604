//! `rxu exec`: tools that read /sys directly see rxu's device there, in a
//! private mount namespace, beside what the kernel exports; outside it
//! nothing changes. Also as an unprivileged user (a user namespace), and
//! the errors of misuse.

use std::time::Duration;

use rxu_testkit::tools::Dev;
use rxu_testkit::{bins, have, serial};

const LIMIT: Duration = Duration::from_secs(30);

/// What a /sys-reading tool would look at, printed from inside.
const PROBE: &str = "set -e
cat /sys/class/infiniband/$DEV/ports/1/gids/0
ls /sys/class/infiniband/$DEV/device/net
cat /sys/class/infiniband_verbs/abi_version
cat /sys/class/misc/rdma_cm/abi_version
readlink -f /sys/class/net/lo
test -e /sys/class/misc/tun
echo sysfs_path=${SYSFS_PATH:-unset}";

#[test]
fn exec_shows_the_device_in_sys_and_nothing_leaks_out() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuex", "127.0.13.1", &["ibv_devices"]) else {
        return;
    };
    let outside_before = std::fs::read_dir("/sys/class").unwrap().count();
    let rxu = bins::rxu();
    let rxu = rxu.to_str().unwrap();
    let r = dev.run_env(
        rxu,
        &["exec", "--", "sh", "-c", PROBE],
        &[("DEV", Some(&dev.name))],
        LIMIT,
    );
    r.expect_ok();
    let want = [
        "0000:0000:0000:0000:0000:ffff:7f00:0d01",
        "\nlo\n",
        "\n6\n4\n",
        "/sys/devices/virtual/net/lo",
        "sysfs_path=unset",
    ];
    for w in want {
        assert!(r.stdout.contains(w), "missing {w:?}: {}", r.report());
    }
    // libibverbs finds the device through /sys alone (no SYSFS_PATH).
    let r = dev.run(rxu, &["exec", "--", "ibv_devices"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains(&dev.name), "{}", r.report());
    // Outside, /sys is as it was.
    assert_eq!(
        std::fs::read_dir("/sys/class").unwrap().count(),
        outside_before
    );
    let ours = std::path::Path::new("/sys/class/infiniband").join(&dev.name);
    assert!(
        !ours.exists(),
        "{} leaked out of the namespace",
        ours.display()
    );
}

#[test]
fn exec_as_an_unprivileged_user_through_a_user_namespace() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuey", "127.0.13.2", &["setpriv"]) else {
        return;
    };
    // nobody must be able to read the runtime dir's tree and run rxu.
    let copy = dev.runtime_dir().join("rxu");
    std::fs::copy(bins::rxu(), &copy).unwrap();
    let chmod = std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dev.runtime_dir())
        .status()
        .unwrap();
    assert!(chmod.success());
    let script = "id -u; cat /sys/class/infiniband/$DEV/ports/1/gids/0";
    let r = dev.run_env(
        "setpriv",
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            copy.to_str().unwrap(),
            "exec",
            "--",
            "sh",
            "-c",
            script,
        ],
        &[("DEV", Some(&dev.name))],
        LIMIT,
    );
    if r.stderr.contains("cannot make a user namespace") {
        // Said clearly, as the kernel's policy is not ours to change.
        eprintln!("unprivileged user namespaces are off here: {}", r.stderr);
        return;
    }
    r.expect_ok();
    assert!(r.stdout.starts_with("65534\n"), "{}", r.report());
    assert!(
        r.stdout.contains("0000:0000:0000:0000:0000:ffff:7f00:0d02"),
        "{}",
        r.report()
    );
}

#[test]
fn exec_misuse_is_a_clear_error() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuez", "127.0.13.3", &[]) else {
        return;
    };
    let rxu = bins::rxu();
    let rxu = rxu.to_str().unwrap();
    let r = dev.run(rxu, &["exec", "--", "no-such-program-rxu"], LIMIT);
    assert_eq!(r.status.and_then(|s| s.code()), Some(127), "{}", r.report());
    assert!(r.stderr.contains("no-such-program-rxu"), "{}", r.report());
    // With no device up in the runtime dir: refused before any namespace.
    let empty = dev.runtime_dir().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let r = dev.run_env(
        rxu,
        &["exec", "--", "true"],
        &[("RXU_RUNTIME_DIR", Some(empty.to_str().unwrap()))],
        LIMIT,
    );
    assert_eq!(r.status.and_then(|s| s.code()), Some(126), "{}", r.report());
    assert!(r.stderr.contains("no rxu device is up"), "{}", r.report());
    if have("true") {
        let r = dev.run(rxu, &["exec"], LIMIT);
        assert!(!r.ok(), "{}", r.report());
    }
}
