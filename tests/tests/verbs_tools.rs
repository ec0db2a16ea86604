//! Unmodified verbs programs on an rxu device: rdma-core's ibv_devices,
//! ibv_devinfo and the four pingpongs, perftest, and small C programs for
//! what those do not reach (ibv_create_ah_from_wc, the extended CQ,
//! unsupported verbs, completion-channel refusal). Each test brings up its
//! own device on 127.0.5.x and runs one server/client pair at a time.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{compile_c, Dev};

const PINGPONGS: [&str; 4] = [
    "ibv_rc_pingpong",
    "ibv_uc_pingpong",
    "ibv_ud_pingpong",
    "ibv_srq_pingpong",
];
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn devices_and_devinfo() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut1", "127.0.5.1", &["ibv_devices", "ibv_devinfo"]) else {
        return;
    };
    let r = dev.run("ibv_devices", &[], LIMIT);
    r.expect_ok();
    let line = r
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("rxut1"))
        .unwrap_or_else(|| panic!("ibv_devices does not list rxut1:\n{}", r.report()));
    let guid = line
        .split_whitespace()
        .nth(1)
        .expect("a node GUID")
        .to_owned();

    let r = dev.run("ibv_devinfo", &["-v", "-d", "rxut1"], LIMIT);
    r.expect_ok();
    let out = &r.stdout;
    let has = |s: &str| assert!(out.contains(s), "ibv_devinfo -v lacks {s:?}:\n{out}");
    has("hca_id:\trxut1");
    has("vendor_id:\t\t\t0xffffff");
    has("phys_port_cnt:\t\t\t1");
    has("state:\t\t\tPORT_ACTIVE (4)");
    has("link_layer:\t\tEthernet");
    has("phys_state:\t\tLINK_UP (5)");
    has("num_comp_vectors:\t\t1");
    has("GID[  0]:\t\t::ffff:127.0.5.1, RoCE v2");
    // The GUID from query_device matches the sysfs one ibv_devices shows.
    let g = &guid;
    let dotted = format!("{}:{}:{}:{}", &g[0..4], &g[4..8], &g[8..12], &g[12..16]);
    has(&format!("node_guid:\t\t\t{dotted}"));
    assert!(r.stderr.is_empty(), "ibv_devinfo warned:\n{}", r.stderr);
}

#[test]
fn pingpongs() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut2", "127.0.5.2", &PINGPONGS) else {
        return;
    };
    let runs: &[(&str, &[&str])] = &[
        ("ibv_rc_pingpong", &["-g", "0"]),
        ("ibv_rc_pingpong", &["-g", "0", "-e"]),
        ("ibv_rc_pingpong", &["-g", "0", "-N"]),
        ("ibv_rc_pingpong", &["-g", "0", "-c"]),
        // 64 bytes fit max_inline_data: every send is IBV_SEND_INLINE.
        ("ibv_rc_pingpong", &["-g", "0", "-s", "64", "-c"]),
        (
            "ibv_rc_pingpong",
            &["-g", "0", "-N", "-e", "-c", "-s", "100"],
        ),
        ("ibv_rc_pingpong", &["-g", "0", "-o", "-P", "-c"]),
        ("ibv_uc_pingpong", &["-g", "0", "-c"]),
        ("ibv_uc_pingpong", &["-g", "0", "-e"]),
        ("ibv_ud_pingpong", &["-g", "0", "-c"]),
        ("ibv_ud_pingpong", &["-g", "0", "-e"]),
        ("ibv_srq_pingpong", &["-g", "0", "-c"]),
        ("ibv_srq_pingpong", &["-g", "0", "-e"]),
    ];
    for (i, (tool, args)) in runs.iter().enumerate() {
        let p = dev.pair(tool, 19610 + i as u16, args, LIMIT);
        p.expect_ok();
        assert!(
            p.client_stdout().contains("iters in"),
            "{tool} {args:?}: no result line\n{}",
            p.report()
        );
    }
}

#[test]
fn pingpong_options_the_device_lacks_fail_cleanly() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut3", "127.0.5.3", &["ibv_rc_pingpong"]) else {
        return;
    };
    // Device memory: refused before any traffic. (Timestamps and implicit
    // ODP work: tests/verbs_ext.rs.)
    let r = dev.run(
        "ibv_rc_pingpong",
        &["-d", "rxut3", "-g", "0", "-p", "19640", "-j", "127.0.0.1"],
        LIMIT,
    );
    assert!(!r.ok() && !r.timed_out, "-j should fail:\n{}", r.report());
    assert!(r.stderr.contains("dm"), "-j: {}", r.report());
    // The contract's option A on request: no completion channels at all.
    let mut c = dev.cmd("ibv_rc_pingpong");
    c.args(["-d", "rxut3", "-g", "0", "-p", "19641", "-e", "127.0.0.1"])
        .env("RXU_COMP_CHANNEL", "refuse");
    let out = c.output().expect("run ibv_rc_pingpong");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Couldn't create completion channel"), "{err}");
}

#[test]
fn perftest() {
    let _g = serial();
    let tools = [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_atomic_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ];
    let Some(dev) = Dev::up("rxut4", "127.0.5.4", &tools) else {
        return;
    };
    let runs: &[(&str, &[&str])] = &[
        ("ib_write_bw", &["-x", "0", "-n", "2000"]),
        // No -x: perftest picks the IPv4-mapped RoCE v2 GID itself.
        ("ib_write_bw", &["-n", "1000", "-s", "4096"]),
        (
            "ib_write_bw",
            &["-x", "0", "-q", "4", "-l", "8", "-n", "2000"],
        ),
        ("ib_write_bw", &["-x", "0", "-c", "UC", "-n", "1000"]),
        ("ib_write_bw", &["-x", "0", "--odp", "-n", "1000"]),
        ("ib_read_bw", &["-x", "0", "-n", "1000"]),
        (
            "ib_read_bw",
            &["-x", "0", "-o", "4", "-s", "1000000", "-n", "100"],
        ),
        ("ib_send_bw", &["-x", "0", "-n", "1000"]),
        ("ib_send_bw", &["-x", "0", "-e", "-n", "1000"]),
        ("ib_send_bw", &["-x", "0", "-b", "-n", "1000"]),
        ("ib_send_bw", &["-x", "0", "--use-srq", "-n", "1000"]),
        ("ib_send_bw", &["-x", "0", "-c", "UD", "-n", "1000"]),
        (
            "ib_send_bw",
            &["-x", "0", "-c", "UD", "-e", "-q", "2", "-n", "1000"],
        ),
        ("ib_atomic_bw", &["-x", "0", "-n", "1000"]),
        ("ib_write_lat", &["-x", "0", "-n", "1000"]),
        ("ib_read_lat", &["-x", "0", "-n", "1000"]),
        ("ib_send_lat", &["-x", "0", "-n", "1000"]),
        ("ib_send_lat", &["-x", "0", "-e", "-n", "1000"]),
        ("ib_send_lat", &["-x", "0", "-c", "UD", "-n", "1000"]),
        ("ib_send_lat", &["-x", "0", "-c", "UC", "-n", "1000"]),
        ("ib_atomic_lat", &["-x", "0", "-n", "1000"]),
    ];
    for (i, (tool, args)) in runs.iter().enumerate() {
        let p = dev.pair(tool, 19650 + i as u16, args, LIMIT);
        if !p.ok() {
            panic!("{}\ndaemon counters:\n{}", p.report(), dev.stats());
        }
        assert!(
            p.client_stdout().contains("#bytes"),
            "{tool} {args:?}: no result table\n{}",
            p.report()
        );
    }
}

#[test]
fn ah_from_wc_and_extended_cq() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut5", "127.0.5.5", &[]) else {
        return;
    };
    let Some(exe) = compile_c("ah_from_wc", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut5", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("ah_from_wc: ok"), "{}", r.report());
}

#[test]
fn unsupported_verbs_fail_with_a_log_line() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut6", "127.0.5.6", &[]) else {
        return;
    };
    let Some(exe) = compile_c("unsupported", dev.runtime_dir()) else {
        return;
    };
    // Quiet by default (as libibverbs); VERBS_LOG_LEVEL=2 names each verb.
    let r = dev.run(exe.to_str().unwrap(), &["rxut6"], LIMIT);
    r.expect_ok();
    assert!(!r.stderr.contains("rxu:"), "{}", r.report());
    let out = dev
        .cmd(&exe)
        .arg("rxut6")
        .env("VERBS_LOG_LEVEL", "2")
        .output()
        .expect("run the unsupported program");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for v in [
        "alloc_dm",
        "create_cq_ex wc_flags",
        "create_cq_ex flags",
        "attach_mcast",
    ] {
        assert!(
            err.contains(&format!("rxu: {v}")),
            "no log line for {v}:\n{err}"
        );
    }
}

#[test]
fn async_and_completion_events() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut7", "127.0.5.7", &["ibv_asyncwatch"]) else {
        return;
    };
    // Opens the device and blocks on its async fd (nothing to report).
    let r = dev.run("ibv_asyncwatch", &["-d", "rxut7"], Duration::from_secs(1));
    assert!(r.timed_out, "ibv_asyncwatch should block:\n{}", r.report());
    assert!(r.stdout.contains("rxut7: async event FD"), "{}", r.report());
    let Some(exe) = compile_c("async_events", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut7", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("async_events: ok"), "{}", r.report());
}

#[test]
fn wr_api() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut8", "127.0.5.8", &[]) else {
        return;
    };
    let Some(exe) = compile_c("wr_api", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut8", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("wr_api: ok"), "{}", r.report());
}

/// Every WR opcode on RC, UC and UD through ibv_post_send: the ones rxu
/// executes return 0, the others EINVAL with *bad_wr at the WR (among
/// them SEND_WITH_INV on UC).
#[test]
fn post_send_opcodes_per_qp_type() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut9", "127.0.5.9", &[]) else {
        return;
    };
    let Some(exe) = compile_c("post_opcodes", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut9", "0"], LIMIT);
    r.expect_ok();
    assert!(
        r.stdout.contains("post_opcodes: ok (54 cases)"),
        "{}",
        r.report()
    );
}

/// Memory windows through libibverbs (tests/c/mw.c): type 1 and type 2
/// binds, range and access checks, SEND_WITH_INV and LOCAL_INV, a WRITE
/// through an invalidated window failing with REM_ACCESS_ERR, the errnos
/// of freeing what a window holds.
#[test]
fn memory_windows() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut10", "127.0.5.10", &[]) else {
        return;
    };
    let Some(exe) = compile_c("mw", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut10", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("mw: ok"), "{}", r.report());
}

/// ibv_rereg_mr (tests/c/rereg.c): access, PD and translation changes take
/// effect for the next access and keep the keys; misuse gets EINVAL.
#[test]
fn rereg_mr() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut11", "127.0.5.11", &[]) else {
        return;
    };
    let Some(exe) = compile_c("rereg", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut11", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("rereg: ok"), "{}", r.report());
}

/// A UD receive as an application sees it, against what kernel rxe fills
/// in (but sl, which says IPv4 or IPv6 as ConnectX's does): every field of the receive and send completions (ibv_poll_cq and
/// ibv_wc_read_*), the network header bytes in front of the payload, over
/// an IPv4 GID and an IPv6 one; an AH flow label of 0xFFFFFFFF; and the
/// receive queue full at cap.max_recv_wr (tests/c/ud_wc_grh.c).
#[test]
fn ud_completion_fields_and_grh_bytes_ipv4_and_ipv6() {
    let _g = serial();
    for (name, addr) in [("rxut10", "127.0.5.10"), ("rxut11", "::1")] {
        let Some(dev) = Dev::up(name, addr, &[]) else {
            return;
        };
        let Some(exe) = compile_c("ud_wc_grh", dev.runtime_dir()) else {
            return;
        };
        let r = dev.run(exe.to_str().unwrap(), &[name, "0"], LIMIT);
        r.expect_ok();
        let gid = if addr.contains(':') {
            addr.to_owned()
        } else {
            format!("::ffff:{addr}")
        };
        assert!(
            r.stdout
                .contains(&format!("ud_wc_grh: ok (GID {gid}, max_recv_wr 3)")),
            "{}",
            r.report()
        );
    }
}

/// ibv_modify_srq (tests/c/srq_resize.c): IBV_SRQ_MAX_WR grows the SRQ
/// with receives posted and sends arriving, and every receive completes
/// in posting order with its data; shrinking below what is posted, below
/// an armed limit, to 0 or above max_srq_wr is EINVAL; IBV_SRQ_LIMIT alone
/// and with MAX_WR; ibv_query_srq shows each change.
#[test]
fn srq_resize() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut20", "127.0.5.20", &[]) else {
        return;
    };
    let Some(exe) = compile_c("srq_resize", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxut20", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("srq_resize: ok"), "{}", r.report());
}

/// Controlled Q_Keys (bit 31) are privileged (tests/c/qkey_priv.c): a
/// process without CAP_NET_RAW (root with it dropped from the bounding
/// set by setpriv, so exec leaves it out of the effective set) gets EPERM
/// setting one on a UD QP, at RESET->INIT and INIT->INIT, and keeps its
/// ordinary Q_Key; with CAP_NET_RAW the same calls succeed, as on Linux
/// 6.4 and later.
#[test]
fn controlled_qkeys_need_cap_net_raw() {
    let _g = serial();
    let Some(dev) = Dev::up("rxut21", "127.0.5.21", &[]) else {
        return;
    };
    let Some(exe) = compile_c("qkey_priv", dev.runtime_dir()) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let r = dev.run(
        "setpriv",
        &[
            "--bounding-set=-net_raw",
            "--inh-caps=-net_raw",
            exe,
            "rxut21",
            "refused",
        ],
        LIMIT,
    );
    r.expect_ok();
    assert!(
        r.stdout
            .contains("qkey_priv: ok (controlled Q_Keys refused"),
        "{}",
        r.report()
    );
    let r = dev.run(exe, &["rxut21", "accepted"], LIMIT);
    r.expect_ok();
    assert!(
        r.stdout
            .contains("qkey_priv: ok (controlled Q_Keys accepted"),
        "{}",
        r.report()
    );
}
