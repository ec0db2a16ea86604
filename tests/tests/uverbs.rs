//! The uverbs device's answers that libibverbs takes without asking the
//! provider, emulated in the process by `librxu-ucma.so` (preloaded, as
//! `rxu up` / `rxu env` set it up):
//! - completion channels are real fds from `ibv_create_comp_channel` on
//!   (tests/c/comp_channel.c: O_NONBLOCK kept, EAGAIN and poll timeouts on
//!   the empty channel, epoll before any CQ, events of two CQs on one
//!   channel, destroy closes the fd and leaves stdin alone), and without
//!   the preload the provider's fallback still delivers events;
//! - `ibv_import_device` of a context's cmd_fd (a dup in the same process,
//!   or passed to another process over SCM_RIGHTS), then `ibv_import_pd` /
//!   `ibv_import_mr` and traffic through them (tests/c/import.c), on one
//!   device and with two devices in one tree (libibverbs hands the
//!   provider the first device whose node numbers match; the import must
//!   land on the device that owns the context).
//!
//! Devices on 127.0.21.x.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{compile_c, Dev};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn completion_channels_are_real_fds_from_the_start() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuv1", "127.0.21.1", &[]) else {
        return;
    };
    let Some(exe) = compile_c("comp_channel", dev.runtime_dir()) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    assert!(
        dev.env.contains_key("LD_PRELOAD"),
        "the device env preloads librxu-ucma.so"
    );
    let r = dev.run(exe, &["rxuv1", "0"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("comp_channel: ok"), "{}", r.report());

    // The strict checks are what the preload makes true: without it the
    // fd before the first CQ is not a channel.
    let r = dev.run_env(exe, &["rxuv1", "0"], &[("LD_PRELOAD", None)], LIMIT);
    assert!(!r.ok() && !r.timed_out, "{}", r.report());
    assert!(r.stderr.contains("channel fd"), "{}", r.report());

    // Without the preload: the channel is adopted at the first CQ, and
    // events still arrive (the checks before the first CQ are skipped);
    // the same with the preload when the fallback is asked for.
    for env in [("LD_PRELOAD", None), ("RXU_COMP_CHANNEL", Some("adopt"))] {
        let r = dev.run_env(exe, &["rxuv1", "0", "adopt"], &[env], LIMIT);
        r.expect_ok();
        assert!(r.stdout.contains("comp_channel: ok"), "{}", r.report());
    }
}

#[test]
fn import_device_pd_and_mr_in_one_process_and_across_processes() {
    let _g = serial();
    let Some(dev) = Dev::up("rxuv2", "127.0.21.2", &[]) else {
        return;
    };
    let Some(exe) = compile_c("import", dev.runtime_dir()) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    for mode in ["same", "cross"] {
        let r = dev.run(exe, &["rxuv2", "0", mode], LIMIT);
        r.expect_ok();
        let want = format!("import: ok {mode} on rxuv2");
        assert!(r.stdout.contains(&want), "{}", r.report());
    }
    let r = dev.run_env(
        exe,
        &["rxuv2", "0", "nopreload"],
        &[("LD_PRELOAD", None)],
        LIMIT,
    );
    r.expect_ok();
    assert!(r.stdout.contains("import: ok nopreload"), "{}", r.report());
}

#[test]
fn import_finds_the_right_one_of_two_devices() {
    let _g = serial();
    let Some(a) = Dev::up("rxuv3", "127.0.21.3", &[]) else {
        return;
    };
    let b = a.up_beside("rxuv4", "127.0.21.4");
    let Some(exe) = compile_c("import", a.runtime_dir()) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    // Whichever of the two libibverbs lists first, the other one's
    // context is found through its daemon.
    for name in [&a.name, &b.name] {
        for mode in ["same", "cross"] {
            let r = a.run(exe, &[name, "0", mode], LIMIT);
            r.expect_ok();
            let want = format!("import: ok {mode} on {name}");
            assert!(r.stdout.contains(&want), "{}", r.report());
        }
    }
    drop(b);
}
