//! The whole C-visible surface of an rxu device against kernel rxe's:
//! `tests/c/verbs_surface` prints every field a verbs program can read
//! (device, port, GIDs, caps handed back by create, ibv_query_qp in each
//! state, every ibv_wc field of RC/UD completions through ibv_poll_cq and
//! ibv_cq_ex, the UD GRH area, error completions, errnos of misuse), and
//! each line must equal the kernel's (`tests/vectors/rxe-verbs-surface.txt`,
//! written by the interop phase "surface") or be named, with its reason,
//! in `tests/vectors/verbs-surface-differences.txt`.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::surface::{parse, parse_table, Comparison};
use rxu_testkit::tools::{compile_c, Dev};

const REFERENCE: &str = include_str!("../vectors/rxe-verbs-surface.txt");
const TABLE: &str = include_str!("../vectors/verbs-surface-differences.txt");
/// What differs because of where this test runs, not because of rxu (in
/// the table's format): the device is on lo, the reference's rxe on a
/// 1500-byte NIC (the interop phase runs rxu on such a link too).
const THIS_MACHINE: &str =
    "port.active_mtu lo's MTU is 65536 (active MTU 4096), the reference NIC's 1500 (1024)\n";

#[test]
fn verbs_surface_equals_kernel_rxe() {
    let _g = serial();
    let Some(dev) = Dev::up("rxusf", "127.0.12.1", &[]) else {
        return;
    };
    let Some(exe) = compile_c("verbs_surface", dev.runtime_dir()) else {
        return;
    };
    let r = dev.run(exe.to_str().unwrap(), &["rxusf"], Duration::from_secs(300));
    r.expect_ok();
    assert!(r.stdout.contains("\nend=ok\n"), "{}", r.report());
    let mut table = parse_table(TABLE);
    table.extend(parse_table(THIS_MACHINE));
    let c = Comparison::new(&parse(REFERENCE), &parse(&r.stdout), &table);
    // The documented differences are listed too: they are the known debt.
    eprint!("{}", c.report());
    assert!(
        c.ok(),
        "verbs surface differs from kernel rxe's:\n{}",
        c.report()
    );
}
