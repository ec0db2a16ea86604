//! The ucma emulator (`librxu-ucma.so`) forgets an rdma_cm channel whose
//! fd number `dup2`, `dup3`, `close_range` or `closefrom` closes, as it
//! does on `close`: the number then names the new file, never the
//! emulated device (tests/c/ucma_fd_reuse.c, a pipe put on the number);
//! and a forked child closing its copies of the parent's rdma_cm fds does
//! not end the parent's ids (tests/c/ucma_fork.c).

use std::process::Command;
use std::time::Duration;

use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::tools::{compile_c_with, Dev};
use rxu_testkit::{bins, serial};

#[test]
fn a_reused_fd_number_is_not_the_rdma_cm_device() {
    let _g = serial();
    let dir = scratch_dir("ucma-fd-reuse");
    let Some(exe) = compile_c_with("ucma_fd_reuse", &dir, &[]) else {
        return;
    };
    let out = Command::new(&exe)
        .env("LD_PRELOAD", bins::ucma_lib())
        .env("RXU_RUNTIME_DIR", &dir)
        .output()
        .expect("run ucma_fd_reuse");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "ucma_fd_reuse: {}\n{text}",
        out.status
    );
    assert!(text.contains("ucma_fd_reuse: ok"), "{text}");
}

/// The child shares the parent's connection to rxud: without the guard
/// (`ffi/ucma/src/owner.rs`) its close of the channel fd detached the
/// parent's channel and destroyed the parent's ids with it.
#[test]
fn a_forked_child_closing_the_parents_rdma_cm_fds_leaves_its_ids_alone() {
    let _g = serial();
    let Some(dev) = Dev::up("rxufk", "127.0.14.11", &[]) else {
        return;
    };
    let Some(exe) = compile_c_with("ucma_fork", dev.runtime_dir(), &["rdmacm"]) else {
        return;
    };
    let r = dev.run(
        exe.to_str().unwrap(),
        &["127.0.14.11"],
        Duration::from_secs(60),
    );
    r.expect_ok();
    assert!(r.stdout.contains("ucma_fork: ok"), "{}", r.report());
}
