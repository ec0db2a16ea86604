//! `ibv_reg_mr` access flags: which ones rxu accepts and what they need.

pub use transport::verbs::access::*;

/// Flags rxu honours. ON_DEMAND marks an on-demand-paging region: rxud
/// reaches every region on demand anyway (nothing is pinned), so it only
/// skips the check that the range is mapped at registration
/// (`crate::mem`).
const KNOWN: u32 = ON_DEMAND
    | LOCAL_WRITE
    | REMOTE_WRITE
    | REMOTE_READ
    | REMOTE_ATOMIC
    | MW_BIND
    | ZERO_BASED
    | HUGETLB
    | FLUSH_GLOBAL
    | FLUSH_PERSISTENT;

/// Flags whose memory must be writable (as the kernel pins it for write).
pub const WRITABLE: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_ATOMIC | MW_BIND;

/// Validates registration flags; returns them without the optional hints.
pub fn check(access: u32) -> Result<u32, &'static str> {
    let access = access & !OPTIONAL_RANGE;
    if access & !KNOWN != 0 {
        return Err("unknown access flags");
    }
    // IBA: remote write and atomics need local write (verbs returns EINVAL).
    if access & (REMOTE_WRITE | REMOTE_ATOMIC) != 0 && access & LOCAL_WRITE == 0 {
        return Err("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE");
    }
    Ok(access)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert_eq!(check(0), Ok(0));
        assert_eq!(check(REMOTE_READ), Ok(REMOTE_READ));
        assert!(check(REMOTE_WRITE).is_err());
        assert!(check(REMOTE_ATOMIC | REMOTE_READ).is_err());
        let all = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
        assert_eq!(check(all), Ok(all));
        assert_eq!(
            check(all | (1 << 20)),
            Ok(all),
            "relaxed ordering is a hint"
        );
        assert_eq!(check(ON_DEMAND | LOCAL_WRITE), Ok(ON_DEMAND | LOCAL_WRITE));
        assert!(check(1 << 12).is_err());
        assert!(check(1 << 31).is_err());
    }
}
