//! Least privilege: once start-up has bound its sockets and written its
//! runtime files, rxud keeps only the capabilities its loop uses and
//! gives up every other one for good (effective, permitted, inheritable,
//! ambient and bounding sets), then sets no_new_privs so nothing it could
//! ever exec gains one back.
//!
//! What the loop uses, and why (each only when the daemon started with it):
//! - CAP_SYS_PTRACE: `/proc/<pid>/maps` and `/proc/<pid>/ns/user` of a
//!   client are readable only with ptrace access to it (another user's
//!   process, or a root process with more capabilities than rxud keeps):
//!   the mapping check of a registration and the client's user namespace
//!   for the CAP_NET_RAW rule of controlled Q_Keys. Client memory itself
//!   goes through the `/proc/self/mem` fd the client opened (no right
//!   needed).
//! - CAP_DAC_OVERRIDE: aborting a FUSE connection that blocks a client's
//!   memory access (`/sys/fs/fuse/connections/N/abort` belongs to the
//!   user who mounted it).
//! - CAP_NET_ADMIN: SO_RCVBUFFORCE/SO_SNDBUFFORCE on the UDP sockets made
//!   after start-up (multicast groups, addresses an `--all-addrs` device
//!   gains); without it their buffers stop at net.core.rmem_max/wmem_max.
//! - CAP_NET_BIND_SERVICE: only for a UDP port below 1024, which those
//!   later sockets bind too.
//!
//! Not kept: CAP_SYS_ADMIN (nothing is mounted after start-up), CAP_MKNOD
//! and CAP_CHOWN (`rxu up` makes the device nodes), CAP_SETUID/SETGID,
//! CAP_KILL, CAP_NET_RAW (a client's CAP_NET_RAW is read from /proc, not
//! used) and all the rest.

use std::io;

/// Capability numbers (linux/capability.h).
pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_SETPCAP: u32 = 8;
pub const CAP_NET_BIND_SERVICE: u32 = 10;
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_SYS_PTRACE: u32 = 19;

/// The names of the capabilities this module speaks of, for the log.
const NAMES: [(u32, &str); 5] = [
    (CAP_DAC_OVERRIDE, "cap_dac_override"),
    (CAP_SETPCAP, "cap_setpcap"),
    (CAP_NET_BIND_SERVICE, "cap_net_bind_service"),
    (CAP_NET_ADMIN, "cap_net_admin"),
    (CAP_SYS_PTRACE, "cap_sys_ptrace"),
];

const fn bit(cap: u32) -> u64 {
    1 << cap
}

/// The capabilities the daemon's loop uses (see the module doc).
pub fn needed(port: u16) -> u64 {
    let mut set = bit(CAP_SYS_PTRACE) | bit(CAP_DAC_OVERRIDE) | bit(CAP_NET_ADMIN);
    if port < 1024 {
        set |= bit(CAP_NET_BIND_SERVICE);
    }
    set
}

/// What the watchdog thread keeps: reading a client's maps and /proc
/// entry (CAP_SYS_PTRACE), writing another uid's fusectl `abort`
/// (CAP_DAC_OVERRIDE).
pub fn watchdog_needs() -> u64 {
    bit(CAP_SYS_PTRACE) | bit(CAP_DAC_OVERRIDE)
}

/// The names of the capabilities in `set` (`cap_...`, or the number).
pub fn names(set: u64) -> Vec<String> {
    (0..64)
        .filter(|c| set & bit(*c) != 0)
        .map(|c| {
            NAMES
                .iter()
                .find(|(n, _)| *n == c)
                .map_or_else(|| format!("cap_{c}"), |(_, s)| (*s).to_owned())
        })
        .collect()
}

/// What [`drop_to`] left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The effective and permitted set now.
    pub caps: u64,
    /// Whether the bounding set could be cut to `caps` (needs CAP_SETPCAP,
    /// which an unprivileged daemon does not have, nor need).
    pub bounding_cut: bool,
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`; version 3 takes two of them (low and
/// high 32 capability bits).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn cvt(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// This thread's (effective, permitted) sets.
fn current() -> io::Result<(u64, u64)> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget reads the header and fills two CapData (version 3),
    // both valid for the call.
    cvt(unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) })?;
    let join = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
    ))
}

/// Sets effective = permitted = `set`, inheritable empty.
fn set_caps(set: u64) -> io::Result<()> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let half = |s: u64| CapData {
        effective: s as u32,
        permitted: s as u32,
        inheritable: 0,
    };
    let data = [half(set), half(set >> 32)];
    // SAFETY: capset reads the header and two CapData (version 3), valid
    // for the call; it changes only this thread's sets (the daemon has one).
    cvt(unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) })
}

fn prctl(op: libc::c_int, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the prctl operations used here take integer arguments only.
    let r = unsafe { libc::prctl(op, arg, 0 as libc::c_ulong, 0 as libc::c_ulong, 0) };
    cvt(libc::c_long::from(r))
}

/// The highest capability number this kernel knows.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n: &u32| n < 64)
        .unwrap_or(40)
}

/// Gives up every capability outside `keep` (and whatever of `keep` the
/// process does not have), in every set, and sets no_new_privs, for the
/// calling thread: capabilities are per thread, so the watchdog and the
/// closer (started before the loop's drop) call it themselves with
/// [`watchdog_needs`] and 0.
pub fn drop_to(keep: u64) -> io::Result<Kept> {
    let (eff, permitted) = current()?;
    let keep = keep & permitted;
    // The bounding set first: cutting it needs CAP_SETPCAP, dropped below.
    let bounding_cut = eff & bit(CAP_SETPCAP) != 0;
    if bounding_cut {
        for cap in (0..=last_cap()).filter(|c| keep & bit(*c) == 0) {
            match prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap)) {
                Ok(()) => {}
                // A number this kernel does not have: nothing to drop.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
    }
    match prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    ) {
        Ok(()) => {}
        // Before Linux 4.3 there is no ambient set to clear.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        Err(e) => return Err(e),
    }
    set_caps(keep)?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
    let (eff, permitted) = current()?;
    if eff != keep || permitted != keep {
        return Err(io::Error::other(format!(
            "capabilities after the drop are {eff:#x}/{permitted:#x}, not {keep:#x}"
        )));
    }
    Ok(Kept {
        caps: keep,
        bounding_cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_needs_ptrace_dac_and_net_admin_and_a_low_port_bind() {
        assert_eq!(
            names(needed(4791)),
            ["cap_dac_override", "cap_net_admin", "cap_sys_ptrace"]
        );
        assert!(names(needed(791)).contains(&"cap_net_bind_service".to_owned()));
        assert_eq!(names(bit(33)), ["cap_33"]);
    }
}
