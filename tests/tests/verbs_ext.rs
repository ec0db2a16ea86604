//! The extended verbs middleware and the pyverbs suite use, through
//! libibverbs on an rxu device: completion timestamps, parent domains,
//! on-demand paging. Each test brings up its own device on 127.0.12.x and
//! runs a small C program from tests/c, or rdma-core's ibv_rc_pingpong
//! with the options that use them.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{compile_c, Dev};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs tests/c/<prog>.c on a new device and checks its "<prog>: ok" line.
fn run_c(dev_name: &str, addr: &str, prog: &str) {
    let _g = serial();
    let Some(dev) = Dev::up(dev_name, addr, &[]) else {
        return;
    };
    let Some(exe) = compile_c(prog, dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &[dev_name, "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains(&format!("{prog}: ok")), "{}", r.report());
    println!("{}", r.stdout.trim());
}

/// hca_core_clock, ibv_query_rt_values_ex, and completions stamped between
/// clock readings taken before the post and after the poll.
#[test]
fn completion_timestamps() {
    run_c("rxux1", "127.0.12.1", "cq_timestamps");
}

/// ibv_alloc_parent_domain: the rings of a CQ, QPs and an SRQ live in the
/// custom allocator's memory and come back to it zeroed; USE_DEFAULT, a
/// failing allocator, EINVAL and EBUSY.
#[test]
fn parent_domain_allocators() {
    run_c("rxux2", "127.0.12.2", "parent_domain");
}

/// On-demand paging: explicit and implicit ODP regions, odp_caps,
/// ibv_advise_mr's errnos, and accesses to unmapped memory failing as
/// access errors while the device serves on.
#[test]
fn on_demand_paging() {
    run_c("rxux3", "127.0.12.3", "odp");
}

/// ibv_rc_pingpong's options for these verbs: -t (completion timestamps),
/// -o (explicit ODP), -O (implicit ODP), -P (ibv_advise_mr prefetch).
#[test]
fn rc_pingpong_with_timestamps_and_odp() {
    let _g = serial();
    let Some(dev) = Dev::up("rxux4", "127.0.12.4", &["ibv_rc_pingpong"]) else {
        return;
    };
    let runs: &[&[&str]] = &[
        &["-g", "0", "-t", "-c"],
        &["-g", "0", "-o", "-t", "-c"],
        &["-g", "0", "-O", "-c"],
        &["-g", "0", "-O", "-P", "-c"],
    ];
    for (i, args) in runs.iter().enumerate() {
        let p = dev.pair("ibv_rc_pingpong", 19720 + i as u16, args, LIMIT);
        p.expect_ok();
        let out = p.client_stdout();
        assert!(
            out.contains("iters in"),
            "{args:?}: no result\n{}",
            p.report()
        );
        if args.contains(&"-t") {
            assert!(
                out.contains("Max receive completion clock cycles"),
                "{args:?}: no timestamp figures\n{}",
                p.report()
            );
        }
        assert!(!p.report().contains("Couldn't prefetch"), "{}", p.report());
    }
}
