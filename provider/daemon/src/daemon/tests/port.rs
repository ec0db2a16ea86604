//! Port changes reach every context and the device tree.

use crate::daemon::device::Device;
use crate::daemon::session::event;
use rxu_abi::proto::{Request, Response, PROTO_VERSION};

use super::harness::*;

#[test]
fn port_changes_reach_every_context_and_the_device_tree() {
    use crate::daemon::port::{NodeLoc, PortView};
    use crate::devnode::{DevNode, DeviceDesc, Paths};
    const PORT_DOWN: u8 = 1;
    const PORT_ACTIVE: u8 = 4;
    let mut dev = device(40);
    let root = std::env::temp_dir().join(format!("rxu-port-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let paths = Paths::new(root.join("sys")).with_dev_dir(root.join("dev"));
    let mut desc = DeviceDesc::new("rxut", 3, vec![addr(40)]);
    desc.netdev = Some("lo".into());
    DevNode::create(&paths, &desc).unwrap();
    dev.port.set_node(Some(NodeLoc {
        sysfs: paths.sysfs.clone(),
        uverbs: 3,
    }));
    let (a, b) = (hello(&mut dev), hello(&mut dev));
    let admin = dev.connect(std::process::id());
    ok(dev.handle(
        admin,
        Request::Hello {
            version: PROTO_VERSION,
            pid: std::process::id(),
            admin: true,
        },
        Vec::new(),
    ));
    let port = |dev: &mut Device| match ok(call(dev, a.id, Request::QueryPort { port: 1 })).0 {
        Response::Port(p) => p,
        r => panic!("{r:?}"),
    };
    let tree = |rel: &str| {
        std::fs::read_to_string(paths.sysfs.join("class/infiniband/rxut").join(rel)).unwrap()
    };
    assert_eq!(port(&mut dev).state, PORT_ACTIVE);

    // The served address goes: the port says so before its GID goes.
    let gone = PortView {
        up: false,
        addrs: Vec::new(),
        mtu: Some(65536),
    };
    assert!(dev.apply_port(gone.clone(), true));
    let down = vec![(1, event::PORT_ERR), (1, event::GID_CHANGE)];
    assert_eq!(events(&a), down);
    assert_eq!(events(&b), down);
    let p = port(&mut dev);
    assert_eq!(p.state, PORT_DOWN);
    assert!(p.gids.is_empty());
    assert_eq!(tree("ports/1/state"), "1: DOWN\n");
    assert_eq!(
        tree("ports/1/gids/0"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n"
    );
    // Nothing new: nothing said.
    assert!(!dev.apply_port(gone, true));
    assert!(events(&a).is_empty());

    // Back: the GID is listed before the port says it is active.
    let back = PortView {
        up: true,
        addrs: vec![addr(40)],
        mtu: Some(65536),
    };
    assert!(dev.apply_port(back, true));
    assert_eq!(
        events(&a),
        vec![(1, event::GID_CHANGE), (1, event::PORT_ACTIVE)]
    );
    assert_eq!(tree("ports/1/state"), "4: ACTIVE\n");
    assert_eq!(
        tree("ports/1/gids/0"),
        "0000:0000:0000:0000:0000:ffff:7f00:4d28\n"
    );
    assert_eq!(tree("ports/1/gid_attrs/ndevs/0"), "lo\n");
    let p = port(&mut dev);
    assert_eq!((p.state, p.gids.len()), (PORT_ACTIVE, 1));
    // Link flaps keep the GID.
    let flap = PortView {
        up: false,
        addrs: vec![addr(40)],
        mtu: Some(65536),
    };
    assert!(dev.apply_port(flap, true));
    assert_eq!(events(&b)[2..], [(1, event::PORT_ERR)]);
    assert_eq!(
        (dev.counters.port_changes, dev.counters.gid_changes),
        (3, 2)
    );
    let _ = std::fs::remove_dir_all(&root);
}
