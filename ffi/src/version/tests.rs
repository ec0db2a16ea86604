//! The provider's layout knowledge against the facts read from every
//! rdma-core release's sources (tests/vectors/rdma-core-layouts.txt,
//! written by scripts/rdma-core-layouts), and the detection helpers.

use std::collections::BTreeMap;
use std::mem::size_of;

use super::layouts::{self, Seen, LAYOUTS, PUBLIC_NODE_SYMBOLS};
use super::*;
use crate::abi::*;
use crate::context::state::MAX_CONTEXT_OFFSET;
use crate::ops::OPS;

const FACTS: &str = include_str!("../../../tests/vectors/rdma-core-layouts.txt");

/// One release's facts: key -> rest of the line.
type Row = BTreeMap<String, String>;

fn releases() -> BTreeMap<u32, Row> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(u32, Row)> = None;
    for line in FACTS.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        if key == "release" {
            if let Some((r, row)) = cur.take() {
                out.insert(r, row);
            }
            cur = Some((rest.parse().expect("release number"), Row::new()));
        } else {
            let (_, row) = cur.as_mut().expect("a key before the first release");
            row.insert(key.to_string(), rest.to_string());
        }
    }
    if let Some((r, row)) = cur {
        out.insert(r, row);
    }
    out
}

fn num(row: &Row, key: &str) -> usize {
    row[key]
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key}: {}", row[key]))
}

#[test]
fn facts_cover_34_to_the_newest_release() {
    let rows = releases();
    let first = *rows.keys().next().unwrap();
    let last = *rows.keys().last().unwrap();
    assert_eq!(first, 34);
    assert!(last >= 64, "facts end at {last}");
    assert_eq!(rows.len() as u32, last - first + 1, "a release is missing");
    // Every release in the file has a layout, and no layout claims more.
    for r in first..=last {
        assert!(layouts::for_release(r).is_some(), "no layout for {r}");
    }
    for l in LAYOUTS {
        assert!(rows.contains_key(l.releases.start()) && rows.contains_key(l.releases.end()));
    }
}

#[test]
fn layouts_match_every_release() {
    for (r, row) in releases() {
        let l = layouts::for_release(r).unwrap();
        assert_eq!(num(&row, "private"), l.private as usize, "{r} private node");
        let public = &row["public"];
        assert_eq!(public, &format!("1.{}", l.public_minor), "{r} public node");
        let vc: Vec<usize> = row["verbs_context"]
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(
            vc,
            [l.verbs_context_size(), l.context_off],
            "{r} verbs_context"
        );
        assert!(
            l.context_off <= MAX_CONTEXT_OFFSET,
            "{r} does not fit RxuContext"
        );
        assert_eq!(
            expected_layout(r),
            Some((num(&row, "qp_ex"), num(&row, "port_attr"))),
            "{r} ibv_qp_ex / ibv_port_attr"
        );
        assert!(check_layout(Some(r), num(&row, "qp_ex"), num(&row, "port_attr")).is_ok());
        assert_eq!(parse_release(&row["library"]), Some(r), "{r} file name");
        // The symbol detection uses is one the newest node introduced.
        let (_, sym) = PUBLIC_NODE_SYMBOLS
            .iter()
            .find(|(m, _)| *m == l.public_minor)
            .unwrap();
        let syms: Vec<&str> = row["public_symbols"].split_whitespace().collect();
        assert!(
            syms.contains(&sym.to_str().unwrap()),
            "{r}: {sym:?} not in {syms:?}"
        );
        // What the library's symbols show picks this layout.
        let seen = Seen {
            release: Some(r),
            privates: vec![l.private],
            public_minor: Some(l.public_minor),
        };
        assert!(std::ptr::eq(layouts::choose(&seen).unwrap(), l), "{r}");
    }
}

#[test]
fn ops_table_builder_matches_every_release() {
    let base = OPS.slots();
    for (r, row) in releases() {
        let l = layouts::for_release(r).unwrap();
        let mut words = row["ops"].split_whitespace();
        let count: usize = words.next().unwrap().parse().unwrap();
        let names: Vec<&str> = words.collect();
        assert_eq!(names.len(), count, "{r}");
        assert_eq!(l.op_names(&base), names, "{r}: member names and order");
        let table = l.build_ops(&OPS);
        assert_eq!(table.len(), count, "{r}: table size");
        for (i, name) in names.iter().enumerate() {
            let ours = base.iter().find(|(n, _)| n == name).map_or(0, |&(_, a)| a);
            assert_eq!(table[i], ours, "{r}: slot {i} ({name})");
            // The provider fills every member it knows; only members newer
            // than its table stay NULL (libibverbs' placeholders).
            assert_eq!(ours == 0, l.extra.contains(name), "{r}: {name}");
        }
    }
    // The provider's own table is the 36..58 one, whole.
    assert_eq!(size_of::<VerbsContextOps>(), base.len() * 8);
    let row = &releases()[&44];
    let names44: Vec<&str> = row["ops"].split_whitespace().skip(1).collect();
    let base_names: Vec<&str> = base.iter().map(|&(n, _)| n).collect();
    assert_eq!(base_names, names44);
}

#[test]
fn other_public_structs_unchanged() {
    let ours: BTreeMap<&str, usize> = [
        ("ibv_device", size_of::<IbvDevice>()),
        ("ibv_context", size_of::<IbvContext>()),
        ("ibv_pd", size_of::<IbvPd>()),
        ("ibv_mr", size_of::<IbvMr>()),
        ("ibv_mw", size_of::<IbvMw>()),
        ("ibv_mw_bind", size_of::<IbvMwBind>()),
        ("ibv_comp_channel", size_of::<IbvCompChannel>()),
        ("ibv_cq", size_of::<IbvCq>()),
        ("ibv_cq_ex", size_of::<IbvCqEx>()),
        ("ibv_cq_init_attr_ex", size_of::<IbvCqInitAttrEx>()),
        ("ibv_srq", size_of::<IbvSrq>()),
        ("ibv_srq_attr", size_of::<IbvSrqAttr>()),
        ("ibv_srq_init_attr", size_of::<IbvSrqInitAttr>()),
        ("ibv_srq_init_attr_ex", size_of::<IbvSrqInitAttrEx>()),
        ("ibv_qp", size_of::<IbvQp>()),
        ("ibv_qp_attr", size_of::<IbvQpAttr>()),
        ("ibv_qp_cap", size_of::<IbvQpCap>()),
        ("ibv_qp_init_attr", size_of::<IbvQpInitAttr>()),
        ("ibv_qp_init_attr_ex", size_of::<IbvQpInitAttrEx>()),
        ("ibv_ah", size_of::<IbvAh>()),
        ("ibv_ah_attr", size_of::<IbvAhAttr>()),
        ("ibv_async_event", size_of::<IbvAsyncEvent>()),
        ("ibv_device_attr", size_of::<IbvDeviceAttr>()),
        ("ibv_device_attr_ex", size_of::<IbvDeviceAttrEx>()),
        (
            "ibv_query_device_ex_input",
            size_of::<IbvQueryDeviceExInput>(),
        ),
        ("ibv_values_ex", size_of::<IbvValuesEx>()),
        (
            "ibv_parent_domain_init_attr",
            size_of::<IbvParentDomainInitAttr>(),
        ),
        ("ibv_send_wr", size_of::<IbvSendWr>()),
        ("ibv_recv_wr", size_of::<IbvRecvWr>()),
        ("ibv_wc", size_of::<IbvWc>()),
        ("ibv_poll_cq_attr", size_of::<IbvPollCqAttr>()),
    ]
    .into_iter()
    .collect();
    for (r, row) in releases() {
        let theirs: BTreeMap<&str, usize> = row["sizes"]
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.parse().unwrap()))
            .collect();
        for (name, size) in &ours {
            assert_eq!(theirs.get(name), Some(size), "{r}: {name}");
        }
    }
}

#[test]
fn driver_structs_unchanged_but_for_34() {
    let rows = releases();
    let newest = &rows.values().last().unwrap()["driver_structs"];
    for (r, row) in &rows {
        // rdma-core 34's verbs_sysfs_dev lacks num_ports (added in 35),
        // which moves abi_ver and time_created; the provider reads only
        // ibdev_path (offset 176), which precedes it.
        if *r == 34 {
            assert_ne!(&row["driver_structs"], newest);
            continue;
        }
        assert_eq!(&row["driver_structs"], newest, "{r}");
    }
    assert!(
        std::mem::offset_of!(VerbsSysfsDev, ibdev_path)
            < std::mem::offset_of!(VerbsSysfsDev, num_ports)
    );
}

#[test]
fn every_layout_fits_the_context_block() {
    use crate::context::state::RxuContext;
    for l in LAYOUTS {
        let off = RxuContext::vctx_offset(l.context_off);
        // After the provider's own field, and ending exactly where the
        // public context (the library's last member) ends.
        assert!(off >= size_of::<usize>(), "{:?}", l.releases);
        assert_eq!(
            off + l.verbs_context_size(),
            size_of::<RxuContext>(),
            "{:?}",
            l.releases
        );
    }
}

#[test]
fn provider_file_names_cover_every_private_abi() {
    // scripts/build-provider, install-provider and package-deb name the
    // provider after each number in ffi/provider-abis.
    let listed: Vec<u32> = include_str!("../../provider-abis")
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(listed, layouts::PRIVATE_ABIS);
    let mut used: Vec<u32> = LAYOUTS.iter().map(|l| l.private).collect();
    used.dedup();
    assert_eq!(used, layouts::PRIVATE_ABIS);
}

#[test]
fn unknown_libraries_are_refused() {
    let seen = |release, privates: Vec<u32>, public_minor| Seen {
        release,
        privates,
        public_minor,
    };
    assert!(layouts::choose(&seen(None, vec![], Some(14))).is_err());
    assert!(layouts::choose(&seen(None, vec![34, 57], Some(14))).is_err());
    assert!(layouts::choose(&seen(None, vec![34], None)).is_err());
    // Node 59 with 1.14 never existed.
    assert!(layouts::choose(&seen(None, vec![59], Some(14))).is_err());
    // The file name must agree with the symbols.
    assert!(layouts::choose(&seen(Some(61), vec![59], Some(16))).is_err());
    assert!(layouts::choose(&seen(Some(66), vec![65], Some(18))).is_err());
    let l = layouts::choose(&seen(None, vec![59], Some(16))).unwrap();
    assert_eq!(l.releases, 62..=63);
}

#[test]
fn release_from_file_name() {
    assert_eq!(parse_release("libibverbs.so.1.14.44.0"), Some(44));
    assert_eq!(parse_release("libibverbs.so.1.14.39.0"), Some(39));
    assert_eq!(parse_release("libibverbs.so.1.15.59.1"), Some(59));
    assert_eq!(parse_release("libibverbs.so.1"), None);
    assert_eq!(parse_release("libibverbs.so.1.14"), None);
    assert_eq!(parse_release("libfoo.so.1.14.44.0"), None);
}

#[test]
fn comp_mask_and_port_attr_per_release() {
    assert!(check_layout(Some(44), 352, 52).is_ok());
    assert!(check_layout(Some(39), 344, 52).is_ok());
    assert!(check_layout(Some(50), 360, 56).is_ok());
    assert!(check_layout(Some(64), 360, 56).is_ok());
    assert!(check_layout(None, 360, 52).is_ok());
    assert!(check_layout(Some(44), 360, 52).is_err());
    assert!(check_layout(Some(50), 360, 52).is_err());
    assert!(check_layout(Some(66), 360, 56).is_err());
    assert!(check_layout(None, 348, 52).is_err());
}

#[test]
fn probe_finds_the_offset() {
    unsafe extern "C" fn at_352(qp: *mut IbvQp) -> *mut IbvQpEx {
        // SAFETY: the probe passes a 384-byte buffer.
        let m = unsafe { qp.cast::<u8>().add(352).cast::<u32>().read() };
        if m & VERBS_QP_EX != 0 {
            qp.cast()
        } else {
            std::ptr::null_mut()
        }
    }
    assert_eq!(dl::probe_qp_comp_mask(at_352), Ok(352));
    unsafe extern "C" fn never(_: *mut IbvQp) -> *mut IbvQpEx {
        std::ptr::null_mut()
    }
    assert!(dl::probe_qp_comp_mask(never).is_err());
}
