//! The extended verbs middleware and the pyverbs suite use, through
//! libibverbs on an rxu device: completion timestamps, parent domains.
//! Each test brings up its own device on 127.0.12.x and runs a small C
//! program from tests/c.

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
