//! Unmodified librdmacm programs on rxu: the system's librdmacm (through
//! the ucma emulator `librxu-ucma.so`, preloaded as `rxu up` exports it)
//! and rxud's connection manager, on one device and between two devices
//! (127.0.7.1 and 127.0.7.2, every MAD and packet over UDP between two
//! daemons). Each program checks its data itself (rping -v compares every
//! ping, ucmatose / udaddy / rstream count their messages) and must exit 0.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{Dev, Pair};

const LIMIT: Duration = Duration::from_secs(60);
const A: &str = "127.0.7.1";
const B: &str = "127.0.7.2";

fn devices(tools: &[&str]) -> Option<(Dev, Dev)> {
    let a = Dev::up("rxuc1", A, tools)?;
    let b = Dev::up("rxuc2", B, tools)?;
    Some((a, b))
}

fn lines_with(out: &str, what: &str) -> usize {
    out.lines().filter(|l| l.contains(what)).count()
}

fn expect(p: &Pair, what: &str) {
    assert!(p.ok(), "{what}:\n{}", p.report());
}

#[test]
fn rping_both_roles_one_device_and_two() {
    let _g = serial();
    let Some((a, b)) = devices(&["rping"]) else {
        return;
    };
    // (server device, its address, client device, client address)
    let cases = [(&a, A, &a, A), (&b, B, &a, A), (&a, A, &b, B)];
    for (i, (sdev, saddr, cdev, caddr)) in cases.into_iter().enumerate() {
        let port = (19700 + i).to_string();
        let p = sdev.cm_pair(
            cdev,
            "rping",
            &["-s", "-a", saddr, "-p", &port, "-C", "100", "-v"],
            &[
                "-c", "-a", saddr, "-I", caddr, "-p", &port, "-C", "100", "-v",
            ],
            19700 + i as u16,
            LIMIT,
        );
        expect(&p, &format!("rping {caddr} -> {saddr}"));
        assert_eq!(lines_with(p.client_stdout(), "ping data: rdma-ping-"), 100);
        assert_eq!(lines_with(&p.server.stdout, "ping data: rdma-ping-"), 100);
    }
    // Every connection was torn down and every id freed.
    for d in [&a, &b] {
        let s = d.status();
        assert!(!s.contains("cm "), "ids left behind:\n{s}");
    }
}

#[test]
fn ucmatose_ten_rc_connections() {
    let _g = serial();
    let Some((a, b)) = devices(&["ucmatose"]) else {
        return;
    };
    for (i, (sdev, saddr, cdev, caddr)) in [(&a, A, &a, A), (&b, B, &a, A)].into_iter().enumerate()
    {
        let port = (19710 + i).to_string();
        let p = sdev.cm_pair(
            cdev,
            "ucmatose",
            &["-b", saddr, "-p", &port, "-c", "10", "-C", "20"],
            &[
                "-s", saddr, "-b", caddr, "-p", &port, "-c", "10", "-C", "20",
            ],
            19710 + i as u16,
            LIMIT,
        );
        expect(&p, &format!("ucmatose {caddr} -> {saddr}"));
        assert!(
            p.client_stdout().contains("test complete"),
            "{}",
            p.report()
        );
    }
}

#[test]
fn udaddy_ud_over_sidr() {
    let _g = serial();
    let Some((a, b)) = devices(&["udaddy"]) else {
        return;
    };
    // udaddy's -p is the port space; it always uses port 7174.
    for (sdev, saddr, cdev, caddr) in [(&a, A, &a, A), (&b, B, &a, A)] {
        let p = sdev.cm_pair(
            cdev,
            "udaddy",
            &["-b", saddr, "-c", "4", "-C", "10"],
            &["-s", saddr, "-b", caddr, "-c", "4", "-C", "10"],
            7174,
            LIMIT,
        );
        expect(&p, &format!("udaddy {caddr} -> {saddr}"));
        assert!(
            p.client_stdout().contains("test complete"),
            "{}",
            p.report()
        );
    }
}

#[test]
fn rdma_server_and_client_sync_mode() {
    let _g = serial();
    let Some((a, b)) = devices(&["rdma_server", "rdma_client"]) else {
        return;
    };
    for (i, (sdev, saddr, cdev)) in [(&a, A, &a), (&b, B, &a)].into_iter().enumerate() {
        let port = (19730 + i).to_string();
        let p = sdev.cm_pair_programs(
            cdev,
            ("rdma_server", &["-s", saddr, "-p", &port]),
            ("rdma_client", &["-s", saddr, "-p", &port]),
            19730 + i as u16,
            LIMIT,
        );
        expect(&p, &format!("rdma_client -> {saddr}"));
        assert!(
            p.client_stdout().contains("rdma_client: end 0"),
            "{}",
            p.report()
        );
        assert!(
            p.server.stdout.contains("rdma_server: end 0"),
            "{}",
            p.report()
        );
    }
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_rejected_with_reason_8() {
    let _g = serial();
    let Some((a, _b)) = devices(&["rping"]) else {
        return;
    };
    let r = a.run(
        "rping",
        &["-c", "-a", B, "-I", A, "-p", "19740", "-C", "1", "-v"],
        LIMIT,
    );
    assert!(!r.ok() && !r.timed_out, "{}", r.report());
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(
        out.contains("RDMA_CM_EVENT_REJECTED, error 8"),
        "{}",
        r.report()
    );
}
