//! The libibverbs layouts this provider knows, one per group of rdma-core
//! releases that share them (docs/provider-abi.md), and the ops table
//! built for each.
//!
//! A group is named by two things the running library's symbols show: its
//! private provider node (`IBVERBS_PRIVATE_<n>`) and its newest public node
//! (`IBVERBS_1.<m>`). The private number alone is not enough: 34 spans three
//! ops tables and 59 two. The facts were read from rdma-core's tagged
//! sources (scripts/rdma-core-layouts, tests/vectors/rdma-core-layouts.txt);
//! the unit test in `super::tests` checks this table against that file.

use std::ops::RangeInclusive;

use crate::abi::VerbsContextOps;

/// One layout of `verbs_context` and `verbs_context_ops`.
pub struct Layout {
    /// The rdma-core releases using it.
    pub releases: RangeInclusive<u32>,
    /// `IBVERBS_PRIVATE_<private>`; the provider file is
    /// `librxu-rdmav<private>.so`.
    pub private: u32,
    /// Newest public node `IBVERBS_1.<public_minor>`.
    pub public_minor: u32,
    /// `offsetof(struct verbs_context, context)`; the struct is 328 bytes
    /// longer (the public `ibv_context` is last).
    pub context_off: usize,
    /// Members of the provider's table (`VerbsContextOps`, the 36..58
    /// table) this release does not have.
    pub absent: &'static [&'static str],
    /// Members this release has beyond the provider's table: left NULL, so
    /// libibverbs keeps its placeholder (EOPNOTSUPP, or for `alloc_buf`,
    /// `free_buf` and `reg_mr_ex` a generic version built on the other ops).
    pub extra: &'static [&'static str],
}

const EXTRA_59: &[&str] = &["alloc_dmah", "dealloc_dmah", "reg_mr_ex"];
const EXTRA_62: &[&str] = &[
    "alloc_dmah",
    "dealloc_dmah",
    "reg_mr_ex",
    "dm_export_dmabuf_fd",
    "query_port_speed",
];
const EXTRA_64: &[&str] = &[
    "alloc_dmah",
    "dealloc_dmah",
    "reg_mr_ex",
    "dm_export_dmabuf_fd",
    "query_port_speed",
    "alloc_buf",
    "free_buf",
];
const EXTRA_65: &[&str] = &[
    "alloc_dmah",
    "dealloc_dmah",
    "reg_mr_ex",
    "dm_export_dmabuf_fd",
    "query_port_speed",
    "alloc_buf",
    "free_buf",
    "create_comp_cntr",
    "destroy_comp_cntr",
    "inc_comp_cntr",
    "inc_err_comp_cntr",
    "qp_attach_comp_cntr",
    "query_comp_cntr_caps",
    "read_comp_cntr",
    "read_err_comp_cntr",
    "set_comp_cntr",
    "set_err_comp_cntr",
];

pub const LAYOUTS: &[Layout] = &[
    Layout {
        releases: 34..=34,
        private: 34,
        public_minor: 12,
        context_off: 320,
        absent: &["import_dm", "query_qp_data_in_order", "unimport_dm"],
        extra: &[],
    },
    Layout {
        releases: 35..=35,
        private: 34,
        public_minor: 13,
        context_off: 320,
        absent: &["query_qp_data_in_order"],
        extra: &[],
    },
    Layout {
        releases: 36..=56,
        private: 34,
        public_minor: 14,
        context_off: 320,
        absent: &[],
        extra: &[],
    },
    Layout {
        releases: 57..=58,
        private: 57,
        public_minor: 14,
        context_off: 320,
        absent: &[],
        extra: &[],
    },
    Layout {
        releases: 59..=61,
        private: 59,
        public_minor: 15,
        context_off: 344,
        absent: &[],
        extra: EXTRA_59,
    },
    Layout {
        releases: 62..=63,
        private: 59,
        public_minor: 16,
        context_off: 352,
        absent: &[],
        extra: EXTRA_62,
    },
    Layout {
        releases: 64..=64,
        private: 64,
        public_minor: 17,
        context_off: 368,
        absent: &[],
        extra: EXTRA_64,
    },
    Layout {
        releases: 65..=65,
        private: 65,
        public_minor: 18,
        context_off: 368,
        absent: &[],
        extra: EXTRA_65,
    },
];

/// The private ABI numbers, hence provider file names, of all layouts.
pub const PRIVATE_ABIS: [u32; 5] = [34, 57, 59, 64, 65];

/// A symbol each public node introduced, to see which nodes a library has.
pub const PUBLIC_NODE_SYMBOLS: &[(u32, &std::ffi::CStr)] = &[
    (12, c"ibv_reg_dmabuf_mr"),
    (13, c"ibv_import_dm"),
    (14, c"ibv_query_qp_data_in_order"),
    (15, c"ibv_alloc_dmah"),
    (16, c"ibv_query_port_speed"),
    (17, c"ibv_alloc_buf"),
    (18, c"ibv_create_comp_cntr"),
];

/// The layout of a library with these nodes, if known.
pub fn find(private: u32, public_minor: u32) -> Option<&'static Layout> {
    LAYOUTS
        .iter()
        .find(|l| l.private == private && l.public_minor == public_minor)
}

/// The layout a release uses, if known.
#[cfg(test)]
pub fn for_release(release: u32) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.releases.contains(&release))
}

impl Layout {
    /// `sizeof(struct verbs_context)`.
    pub fn verbs_context_size(&self) -> usize {
        self.context_off + size_of::<crate::abi::IbvContext>()
    }

    /// The member names of this release's `verbs_context_ops`, in order
    /// (rdma-core keeps them sorted by name).
    pub fn op_names(&self, base: &[(&'static str, usize)]) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = base
            .iter()
            .map(|&(n, _)| n)
            .filter(|n| !self.absent.contains(n))
            .chain(self.extra.iter().copied())
            .collect();
        names.sort_unstable();
        names
    }

    /// This release's `verbs_context_ops` filled from the provider's
    /// table: each member the provider has by name, NULL for the others.
    pub fn build_ops(&self, ops: &VerbsContextOps) -> Box<[usize]> {
        let base = ops.slots();
        self.op_names(&base)
            .iter()
            .map(|name| {
                base.iter()
                    .find(|(n, _)| n == name)
                    .map_or(0, |&(_, addr)| addr)
            })
            .collect()
    }
}

/// A library's identity as its file name and symbols show it.
pub struct Seen {
    pub release: Option<u32>,
    /// Every `IBVERBS_PRIVATE_<n>` node that has `verbs_register_driver_<n>`.
    pub privates: Vec<u32>,
    /// The newest known public node present.
    pub public_minor: Option<u32>,
}

/// The layout `seen` names, or why none fits.
pub fn choose(seen: &Seen) -> Result<&'static Layout, String> {
    let known = || {
        LAYOUTS
            .iter()
            .map(|l| format!("{}..={}", l.releases.start(), l.releases.end()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let private = match seen.privates[..] {
        [p] => p,
        [] => {
            return Err(format!(
                "no verbs_register_driver_<n>@IBVERBS_PRIVATE_<n> for any n in {PRIVATE_ABIS:?}"
            ))
        }
        _ => {
            return Err(format!(
                "several private provider nodes {:?}",
                seen.privates
            ))
        }
    };
    let Some(minor) = seen.public_minor else {
        return Err("none of the public nodes IBVERBS_1.12.. is present".into());
    };
    let Some(layout) = find(private, minor) else {
        return Err(format!(
            "unknown layout: IBVERBS_PRIVATE_{private} with IBVERBS_1.{minor} \
             (this provider knows rdma-core {})",
            known()
        ));
    };
    if let Some(r) = seen.release {
        if !layout.releases.contains(&r) {
            return Err(format!(
                "the file name says rdma-core {r}, but its symbols (IBVERBS_PRIVATE_{private}, \
                 IBVERBS_1.{minor}) are those of {}..={}",
                layout.releases.start(),
                layout.releases.end()
            ));
        }
    }
    Ok(layout)
}
