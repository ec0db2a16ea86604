//! rxud keeps only the capabilities its loop uses (`daemon/privs.rs`):
//! a device brought up by root with `rxu up` runs a daemon whose
//! effective, permitted and bounding sets are exactly CAP_DAC_OVERRIDE,
//! CAP_NET_ADMIN and CAP_SYS_PTRACE, with nothing inheritable or ambient
//! and no_new_privs set, and its log says so. (That the daemon still
//! serves other users' and privileged clients with these is shown by
//! multi_user.rs and verbs_tools.rs' controlled Q_Key test.)
//!
//! What rxud does for a client carries the client's privilege, not its
//! own: an rdma_cm port below 1024 is the client's CAP_NET_BIND_SERVICE
//! to take, as on the kernel (tests/c/cm_low_port.c).

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{compile_c_with, Dev};

/// CAP_DAC_OVERRIDE (1), CAP_NET_ADMIN (12), CAP_SYS_PTRACE (19).
const KEPT: u64 = 1 << 1 | 1 << 12 | 1 << 19;

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in\n{status}"))
        .trim()
        .to_owned()
}

fn caps(status: &str, key: &str) -> u64 {
    let v = status_field(status, key);
    u64::from_str_radix(&v, 16).unwrap_or_else(|e| panic!("{key} {v}: {e}"))
}

#[test]
fn rxud_keeps_only_the_capabilities_it_uses() {
    let _g = serial();
    let Some(dev) = Dev::up("rxupv", "127.0.14.9", &[]) else {
        return;
    };
    let rt = dev.runtime_dir();
    let pid = std::fs::read_to_string(rt.join("rxupv.pid")).unwrap();
    let pid: u32 = pid.trim().parse().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for key in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(caps(&status, key), KEPT, "{key} of rxud:\n{status}");
    }
    assert_eq!(caps(&status, "CapInh:"), 0, "{status}");
    assert_eq!(caps(&status, "CapAmb:"), 0, "{status}");
    assert_eq!(status_field(&status, "NoNewPrivs:"), "1", "{status}");
    // Capabilities are per thread: the watchdog and the closer, started
    // before the loop's drop, cut their own (the watchdog keeps
    // CAP_SYS_PTRACE and CAP_DAC_OVERRIDE, the closer nothing). Each
    // thread's set is within the loop's; allow their start a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let mut wide = Vec::new();
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            let Ok(st) = std::fs::read_to_string(t.path().join("status")) else {
                continue;
            };
            let name = status_field(&st, "Name:");
            let (eff, bnd) = (caps(&st, "CapEff:"), caps(&st, "CapBnd:"));
            if eff & !KEPT != 0 || bnd & !KEPT != 0 || status_field(&st, "NoNewPrivs:") != "1" {
                wide.push(format!("{name}: CapEff {eff:#x} CapBnd {bnd:#x}"));
            }
        }
        if wide.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "threads of rxud with more than the loop keeps: {wide:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(rt.join("rxupv.log")).unwrap();
    assert!(
        log.contains(
            "privileges: kept cap_dac_override, cap_net_admin, cap_sys_ptrace; \
             bounding set cut to them; no_new_privs set"
        ),
        "{log}"
    );
}

#[test]
fn rdma_cm_ports_below_1024_need_the_clients_cap_net_bind_service() {
    let _g = serial();
    let Some(dev) = Dev::up("rxupw", "127.0.14.10", &["setpriv"]) else {
        return;
    };
    let Some(exe) = compile_c_with("cm_low_port", dev.runtime_dir(), &["rdmacm"]) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let limit = Duration::from_secs(60);
    // Root without CAP_NET_BIND_SERVICE (out of the bounding set, so the
    // exec leaves it out of the effective set): refused, though rxud is
    // root too.
    let r = dev.run(
        "setpriv",
        &[
            "--bounding-set=-net_bind_service",
            "--inh-caps=-net_bind_service",
            exe,
            "127.0.14.10",
            "791",
            "refused",
        ],
        limit,
    );
    r.expect_ok();
    assert!(
        r.stdout.contains("cm_low_port: ok (port 791 refused)"),
        "{}",
        r.report()
    );
    let r = dev.run(exe, &["127.0.14.10", "791", "accepted"], limit);
    r.expect_ok();
    assert!(
        r.stdout.contains("cm_low_port: ok (port 791 accepted)"),
        "{}",
        r.report()
    );
}
