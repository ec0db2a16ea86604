//! XRC through libibverbs on rxu: rdma-core's ibv_xsrq_pingpong between
//! two processes on one device (they share one XRC domain through its
//! file) and across two devices, and tests/c/xrc.c for the object rules
//! and errnos.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{compile_c, wait_listen, Dev, Run};

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

/// One server with two clients (`-c 2`), three processes on one device
/// sharing one XRC domain through its file: the server sends to each
/// client round robin through each of its send QPs, so a message for one
/// client's SRQ arrives through the other client's target QP.
#[test]
fn xsrq_pingpong_server_with_two_clients() {
    let _g = serial();
    let Some(a) = Dev::up("rxuxd", "127.0.7.1", &["ibv_xsrq_pingpong"]) else {
        return;
    };
    let port = "19780";
    let server = a.start(
        "ibv_xsrq_pingpong",
        &["-d", "rxuxd", "-p", port, "-g", "0", "-c", "2", "-n", "20"],
    );
    assert!(
        wait_listen(19780, Duration::from_secs(10)),
        "server never listened"
    );
    let client = |dev: &Dev, name: &str| {
        dev.start(
            "ibv_xsrq_pingpong",
            &["-d", name, "-p", port, "-g", "0", "-n", "20", "127.0.0.1"],
        )
    };
    let c1 = client(&a, "rxuxd");
    let c2 = client(&a, "rxuxd");
    let runs = [
        Run::wait(c1, LIMIT, "first client"),
        Run::wait(c2, LIMIT, "second client"),
        Run::wait(server, LIMIT, "server -c 2"),
    ];
    let all: String = runs.iter().map(Run::report).collect();
    for r in &runs {
        assert!(r.ok() && r.stdout.contains("success"), "{all}");
    }
}

/// perftest over XRC (`-c XRC`): SEND, WRITE, READ and atomics, bandwidth
/// and latency, on one device and across two.
#[test]
fn perftest_over_xrc() {
    let _g = serial();
    let progs = [
        "ib_send_bw",
        "ib_write_bw",
        "ib_read_bw",
        "ib_atomic_bw",
        "ib_send_lat",
        "ib_write_lat",
        "ib_read_lat",
        "ib_atomic_lat",
    ];
    let Some(a) = Dev::up("rxuxf", "127.0.7.1", &progs) else {
        return;
    };
    let b = a.up_beside("rxuxg", "127.0.7.2");
    let args = ["-x", "0", "-c", "XRC", "-n", "200"];
    for (i, prog) in progs.iter().enumerate() {
        for across in [false, true] {
            let port = 19790 + 2 * i as u16 + u16::from(across);
            let p = if across {
                a.pair_across(&b, prog, port, &args, LIMIT)
            } else {
                a.pair(prog, port, &args, LIMIT)
            };
            p.expect_ok();
            assert!(
                p.client_stdout().contains("#bytes"),
                "{prog} across={across}: no result table\n{}",
                p.report()
            );
        }
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
