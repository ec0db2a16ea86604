//! Hostile clients against a live rxud: every fd a client passes is
//! checked for identity, not type.

use std::net::Ipv4Addr;
use std::time::Duration;

use rxu_testkit::hostile::{rss_kib, settle_fds, steady_fd_count, Bystander};
use rxu_testkit::{serial, Daemon};

#[test]
fn bystander_runs_and_fds_settle() {
    let _g = serial();
    let d = Daemon::start("rxuh0", Ipv4Addr::new(127, 0, 15, 1));
    let base = steady_fd_count(d.pid());
    assert!(rss_kib(d.pid()) > 0);
    let by = Bystander::start(&d.name);
    std::thread::sleep(Duration::from_millis(300));
    let r = by.finish();
    r.assert_served(Duration::from_millis(100));
    assert!(r.rounds > 10, "{r:?}");
    let after = settle_fds(d.pid(), base, Duration::from_secs(5));
    assert!(after <= base, "rxud holds {after} fds, {base} before");
}
