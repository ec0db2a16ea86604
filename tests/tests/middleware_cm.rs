//! Middleware that opens rdma_cm on rxu (through the ucma emulator the kit
//! preloads, as `rxu up` exports it): libfabric 1.17's verbs provider and
//! UCX 1.13's rdmacm connection manager, Debian's packages unmodified.
//!
//! What runs here and what does not (and why) is in the closing note of
//! issue 10's middleware part:
//! - libfabric's verbs DGRAM endpoints open an rdma_cm event channel in
//!   `fi_eq_open`; `fi_pingpong -p verbs -e dgram -c` checks every byte,
//!   on one device and across two.
//! - fi_pingpong 1.17's MSG and RDM (verbs;ofi_rxm) servers always bind
//!   "localhost" (the verbs provider's default with no address, and 1.17's
//!   fi_pingpong has no source-address option): a kernel's rdma_cm gives
//!   ENODEV for 127.0.0.1 when no RDMA device has it, and so does rxu.
//!   scripts/middleware/libfabric runs them the way a kernel rxe user
//!   must: devices on veths in namespaces whose "localhost" is the veth's
//!   address.
//! - UCX's rdmacm CM listens through the emulator; UCP cannot connect
//!   further until rc_verbs/ud_verbs open (issue 11: the completion
//!   channel fd), since UCP needs a transport on the device rdma_cm
//!   resolved.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{wait_listen, Dev, Run};

const LIMIT: Duration = Duration::from_secs(60);
const A: &str = "127.0.8.1";
const B: &str = "127.0.8.2";

#[test]
fn fi_pingpong_verbs_dgram_one_device_and_two() {
    let _g = serial();
    let Some(a) = Dev::up("rxuf1", A, &["fi_pingpong", "fi_info"]) else {
        return;
    };
    let Some(b) = Dev::up("rxuf2", B, &["fi_pingpong"]) else {
        return;
    };
    // fi_info lists each rxu device's UD domain (a device's environment
    // shows that device).
    for d in [&a, &b] {
        let info = d.run("fi_info", &["-p", "verbs", "-t", "FI_EP_DGRAM"], LIMIT);
        info.expect_ok();
        let dom = format!("domain: {}-dgram", d.name);
        assert!(info.stdout.contains(&dom), "{}", info.report());
    }
    for (i, (sdev, cdev)) in [(&a, &a), (&a, &b)].into_iter().enumerate() {
        let port = 19830 + i as u16;
        let ps = port.to_string();
        let sdom = format!("{}-dgram", sdev.name);
        let cdom = format!("{}-dgram", cdev.name);
        let common = ["-p", "verbs", "-e", "dgram", "-c", "-I", "100"];
        let mut sargs: Vec<&str> = common.to_vec();
        sargs.extend(["-d", &sdom, "-B", &ps]);
        let server = sdev.start("fi_pingpong", &sargs);
        assert!(
            wait_listen(port, Duration::from_secs(10)),
            "fi_pingpong server never listened on {port}"
        );
        let mut cargs: Vec<&str> = common.to_vec();
        cargs.extend(["-d", &cdom, "-P", &ps, "127.0.0.1"]);
        let client = cdev.run("fi_pingpong", &cargs, LIMIT);
        let server = Run::wait(server, LIMIT, &format!("server: fi_pingpong {sargs:?}"));
        assert!(
            client.ok() && server.ok(),
            "{}{}",
            server.report(),
            client.report()
        );
        // Three sizes (64, 256, 1k: the UD MTU bounds "all"), 100 each,
        // every one acknowledged.
        for out in [&client.stdout, &server.stdout] {
            let rows = out.lines().filter(|l| l.contains("=100")).count();
            assert!(rows >= 3, "fewer sizes than expected:\n{out}");
        }
    }
}

#[test]
fn ucx_rdmacm_listener_goes_through_the_emulator() {
    let _g = serial();
    let Some(a) = Dev::up("rxuu1", A, &["ucx_info", "io_demo"]) else {
        return;
    };
    let d = a.run("ucx_info", &["-d"], LIMIT);
    d.expect_ok();
    assert!(
        d.stdout.contains("Connection manager: rdmacm"),
        "{}",
        d.report()
    );
    // UCX_TLS without an RDMA transport keeps ucp_worker_create clear of
    // issue 11; the sockaddr listener is rdmacm's (the only CM allowed).
    let port = 19840u16;
    let mut c = a.cmd("io_demo");
    c.args(["-p", &port.to_string(), "-i", "10"])
        .env("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm")
        .env("UCX_TLS", "tcp,self")
        .env("UCX_NET_DEVICES", "rxuu1:1");
    c.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut server = c.spawn().expect("spawn io_demo");
    let listening = a.wait_cm_listen(port, Duration::from_secs(20));
    let status = a.status();
    let _ = server.kill();
    let run = Run::wait(server, LIMIT, "io_demo server");
    assert!(
        listening,
        "no rdma_cm listener on {port} in rxu status:\n{status}\n{}",
        run.report()
    );
    assert!(
        run.stdout.contains("started listener") || run.stderr.contains("started listener"),
        "{}",
        run.report()
    );
}
