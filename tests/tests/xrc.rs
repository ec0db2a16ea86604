//! XRC through libibverbs on rxu: rdma-core's ibv_xsrq_pingpong between
//! two processes on one device (they share one XRC domain through its
//! file) and across two devices, and tests/c/xrc.c for the object rules
//! and errnos.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{compile_c, Dev};

const LIMIT: Duration = Duration::from_secs(60);

fn check(p: &rxu_testkit::tools::Pair, what: &str) {
    p.expect_ok();
    assert!(
        p.client_stdout().contains("success") && p.server.stdout.contains("success"),
        "{what}: no success line\n{}",
        p.report()
    );
    println!("{what}: {}", p.client_stdout().trim().replace('\n', " | "));
}

#[test]
fn xsrq_pingpong_one_device_and_two() {
    let _g = serial();
    let Some(a) = Dev::up("rxuxa", "127.0.7.1", &["ibv_xsrq_pingpong"]) else {
        return;
    };
    let runs: &[&[&str]] = &[
        &["-g", "0"],
        &["-g", "0", "-e"],
        &["-g", "0", "-n", "50", "-s", "6000"],
    ];
    for (i, args) in runs.iter().enumerate() {
        let p = a.pair("ibv_xsrq_pingpong", 19760 + i as u16, args, LIMIT);
        check(&p, &format!("one device {args:?}"));
    }
    let b = a.up_beside("rxuxb", "127.0.7.2");
    for (i, args) in runs.iter().enumerate() {
        let p = a.pair_across(&b, "ibv_xsrq_pingpong", 19770 + i as u16, args, LIMIT);
        check(&p, &format!("two devices {args:?}"));
    }
}

/// The XRC object rules and errnos: shared and private domains, close
/// EBUSY, SRQ types, XRC_RECV with a PD, post_recv on XRC QPs, and a
/// send naming the wrong SRQ completing as a remote invalid request.
#[test]
fn xrc_objects_and_errnos() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuxc", "127.0.7.3", &[]) else {
        return;
    };
    let Some(exe) = compile_c("xrc", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxuxc", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("xrc: ok"), "{}", r.report());
    println!("{}", r.stdout.trim());
}
