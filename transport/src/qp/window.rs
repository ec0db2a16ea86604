//! Memory windows: the rules for binding, using and invalidating one, in
//! one place for every [`super::Memory`] (the daemon's client memory and
//! the tests' buffers keep the table; the verdicts are made here).
//!
//! As the kernel's rxe: type 1 windows are bound by `ibv_bind_mw` (a
//! BIND_MW work request underneath), may not be zero based, and are
//! "invalidated" only by binding them again with length 0; type 2 windows
//! are type 2B: bound by a BIND_MW work request to the QP that posted it,
//! usable only through that QP, freed by LOCAL_INV or SEND_WITH_INV and
//! then bindable again. A window's rkey keeps its upper 24 bits (its
//! index in the table) for life; a bind takes the low 8 bits of the new
//! key the request carries (`ibv_inc_rkey`).
//!
//! Beyond rxe, the window, the region and the QP must share one PD for
//! every bind and invalidation, type 1 included: PDs are per client here,
//! so that rule is what keeps one client's windows out of another's reach.

use super::mem_error::MemError;
use crate::verbs::access;

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(u8)]
pub enum MwType {
    One = 1,
    Two = 2,
}

impl MwType {
    /// From the `ibv_mw_type` value (None for anything else).
    pub const fn from_ibv(v: u32) -> Option<MwType> {
        match v {
            1 => Some(MwType::One),
            2 => Some(MwType::Two),
            _ => None,
        }
    }
}

/// Access flags a window may be bound with: rxe's MR set plus
/// ZERO_BASED (LOCAL_WRITE and MW_BIND are accepted and mean nothing
/// for a window).
pub const MW_ACCESS: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND
    | access::ZERO_BASED
    | access::FLUSH_GLOBAL
    | access::FLUSH_PERSISTENT;

/// A bind request: `struct ibv_mw_bind_info` plus the keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MwBind {
    /// The window's rkey as the poster knows it (must be the current one).
    pub mw_rkey: u32,
    /// The key after the bind; only its low 8 bits are used.
    pub new_rkey: u32,
    /// lkey of the region the window opens onto (ignored with `len` 0).
    pub mr_lkey: u32,
    /// Start, in the region's iova space (zero based: the offset).
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// What a bind needs to know about the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrView {
    pub pd: u32,
    pub iova: u64,
    pub len: u64,
    pub access: u32,
}

/// Where a bound window opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The region's key.
    pub mr: u32,
    /// First byte, in the region's iova space (zero based too: offset 0
    /// of a zero-based window is this address, as rxe has it).
    pub addr: u64,
    pub len: u64,
    pub access: u32,
    /// Type 2: the QP it was bound through, the only one that may use it.
    pub qpn: Option<u32>,
}

/// A memory window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub pd: u32,
    pub ty: MwType,
    pub rkey: u32,
    /// None: type 1 bound with length 0 (or never bound), type 2 free.
    pub binding: Option<Binding>,
}

impl Window {
    /// A new window: type 1 valid but unbound, type 2 free.
    pub const fn new(pd: u32, ty: MwType, rkey: u32) -> Window {
        Window {
            pd,
            ty,
            rkey,
            binding: None,
        }
    }

    /// The table index of a window key.
    pub const fn index(rkey: u32) -> u32 {
        rkey >> 8
    }

    /// Checks a bind through a QP of `pd`; `mr` is the region `b.mr_lkey`
    /// names (None: no such valid region).
    pub fn check_bind(&self, pd: u32, b: &MwBind, mr: Option<MrView>) -> Result<(), MemError> {
        if b.mw_rkey != self.rkey {
            return Err(MemError::InvalidKey);
        }
        if pd != self.pd {
            return Err(MemError::WrongPd);
        }
        if b.access & !MW_ACCESS != 0 {
            return Err(MemError::AccessDenied);
        }
        let zero_based = b.access & access::ZERO_BASED != 0;
        match self.ty {
            // o10-36.2.2: no zero-based type 1 windows.
            MwType::One if zero_based => return Err(MemError::AccessDenied),
            MwType::One => {}
            // o10-37.2.30 and o10-37.2.40: only a free type 2 window
            // binds, and never to nothing.
            MwType::Two if self.binding.is_some() => return Err(MemError::InvalidKey),
            MwType::Two if b.len == 0 => return Err(MemError::OutOfBounds),
            MwType::Two => {}
        }
        if b.len == 0 {
            return Ok(());
        }
        let mr = mr.ok_or(MemError::InvalidKey)?;
        if mr.pd != self.pd {
            return Err(MemError::WrongPd);
        }
        if mr.access & access::ZERO_BASED != 0 {
            return Err(MemError::AccessDenied);
        }
        // C10-73, C10-74.
        if mr.access & access::MW_BIND == 0 {
            return Err(MemError::AccessDenied);
        }
        let writes = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
        if b.access & writes != 0 && mr.access & access::LOCAL_WRITE == 0 {
            return Err(MemError::AccessDenied);
        }
        // C10-75: inside the region.
        let inside = if zero_based {
            b.len <= mr.len
        } else {
            offset_in(mr.iova, mr.len, b.addr, b.len).is_ok()
        };
        if !inside {
            return Err(MemError::OutOfBounds);
        }
        Ok(())
    }

    /// Applies a bind [`Window::check_bind`] accepted, through QP `qpn`;
    /// returns the binding it replaced (type 1 rebinding), whose region
    /// loses a window.
    pub fn bind(&mut self, qpn: u32, b: &MwBind) -> Option<Binding> {
        self.rkey = (self.rkey & !0xff) | (b.new_rkey & 0xff);
        let old = self.binding.take();
        if b.len > 0 {
            self.binding = Some(Binding {
                mr: b.mr_lkey,
                addr: b.addr,
                len: b.len,
                access: b.access,
                qpn: (self.ty == MwType::Two).then_some(qpn),
            });
        }
        old
    }

    /// A remote access of `n` bytes at `va` needing `need`, through QP
    /// `qpn` of `pd`: the region key and the address in its iova space.
    pub fn resolve(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        n: u64,
        need: u32,
    ) -> Result<(u32, u64), MemError> {
        if rkey != self.rkey {
            return Err(MemError::InvalidKey);
        }
        if pd != self.pd {
            return Err(MemError::WrongPd);
        }
        let b = self.binding.ok_or(MemError::InvalidKey)?;
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(MemError::InvalidKey);
        }
        if b.access & need != need {
            return Err(MemError::AccessDenied);
        }
        let off = if b.access & access::ZERO_BASED != 0 {
            offset_in(0, b.len, va, n)?
        } else {
            offset_in(b.addr, b.len, va, n)?
        };
        let at = b.addr.checked_add(off).ok_or(MemError::OutOfBounds)?;
        Ok((b.mr, at))
    }

    /// LOCAL_INV or SEND_WITH_INV of `rkey` through a QP of `pd`: a bound
    /// type 2 window becomes free; returns the binding it had.
    pub fn invalidate(&mut self, pd: u32, rkey: u32) -> Result<Binding, MemError> {
        if rkey != self.rkey {
            return Err(MemError::InvalidKey);
        }
        if pd != self.pd {
            return Err(MemError::WrongPd);
        }
        // o10-37.2.26: type 1 windows are not invalidated this way.
        if self.ty == MwType::One {
            return Err(MemError::AccessDenied);
        }
        self.binding.take().ok_or(MemError::InvalidKey)
    }
}

/// Offset of `[va, va + n)` inside `[base, base + len)`, overflow-safe.
pub fn offset_in(base: u64, len: u64, va: u64, n: u64) -> Result<u64, MemError> {
    let off = va.checked_sub(base).ok_or(MemError::OutOfBounds)?;
    let end = off.checked_add(n).ok_or(MemError::OutOfBounds)?;
    if end > len {
        return Err(MemError::OutOfBounds);
    }
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::*;

    const PD: u32 = 3;
    const MR: MrView = MrView {
        pd: PD,
        iova: 0x1000,
        len: 0x1000,
        access: LOCAL_WRITE | MW_BIND,
    };

    fn bind(rkey: u32, addr: u64, len: u64, acc: u32) -> MwBind {
        MwBind {
            mw_rkey: rkey,
            new_rkey: rkey.wrapping_add(1),
            mr_lkey: 77,
            addr,
            len,
            access: acc,
        }
    }

    #[test]
    fn type2_bind_use_invalidate_rebind() {
        let mut w = Window::new(PD, MwType::Two, 0xabcd_ef00);
        let b = bind(0xabcd_ef00, 0x1100, 0x100, REMOTE_WRITE | REMOTE_READ);
        assert_eq!(w.check_bind(PD, &b, Some(MR)), Ok(()));
        assert_eq!(w.bind(9, &b), None);
        assert_eq!(w.rkey, 0xabcd_ef01, "low byte from the new key");
        let k = w.rkey;
        assert_eq!(
            w.resolve(PD, 9, k, 0x1100, 0x100, REMOTE_WRITE),
            Ok((77, 0x1100))
        );
        assert_eq!(
            w.resolve(PD, 9, k, 0x1180, 8, REMOTE_READ),
            Ok((77, 0x1180))
        );
        // The window's range, not the region's.
        assert_eq!(
            w.resolve(PD, 9, k, 0x10ff, 8, REMOTE_WRITE),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            w.resolve(PD, 9, k, 0x11f9, 8, REMOTE_WRITE),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            w.resolve(PD, 9, k, 0x1100, 8, REMOTE_ATOMIC),
            Err(MemError::AccessDenied)
        );
        // Type 2B: only through the QP that bound it, with its key.
        assert_eq!(
            w.resolve(PD, 10, k, 0x1100, 8, REMOTE_WRITE),
            Err(MemError::InvalidKey)
        );
        assert_eq!(
            w.resolve(PD, 9, 0xabcd_ef00, 0x1100, 8, REMOTE_WRITE),
            Err(MemError::InvalidKey)
        );
        assert_eq!(
            w.resolve(PD + 1, 9, k, 0x1100, 8, REMOTE_WRITE),
            Err(MemError::WrongPd)
        );
        // Bound: no second bind until invalidated.
        let again = bind(k, 0x1000, 8, REMOTE_READ);
        assert_eq!(
            w.check_bind(PD, &again, Some(MR)),
            Err(MemError::InvalidKey)
        );
        assert_eq!(w.invalidate(PD, 0xabcd_ef00), Err(MemError::InvalidKey));
        assert_eq!(w.invalidate(PD + 1, k), Err(MemError::WrongPd));
        assert!(w.invalidate(PD, k).is_ok());
        assert_eq!(
            w.resolve(PD, 9, k, 0x1100, 8, REMOTE_WRITE),
            Err(MemError::InvalidKey)
        );
        assert_eq!(
            w.invalidate(PD, k),
            Err(MemError::InvalidKey),
            "already free"
        );
        assert_eq!(w.check_bind(PD, &again, Some(MR)), Ok(()));
    }

    #[test]
    fn bind_rules() {
        let w2 = Window::new(PD, MwType::Two, 0x100);
        let w1 = Window::new(PD, MwType::One, 0x200);
        let ok = bind(0x100, 0x1000, 0x1000, REMOTE_WRITE);
        assert_eq!(w2.check_bind(PD, &ok, Some(MR)), Ok(()));
        let cases = [
            (
                bind(0x101, 0x1000, 8, 0),
                MR,
                "stale key",
                MemError::InvalidKey,
            ),
            (
                bind(0x100, 0x1000, 0, 0),
                MR,
                "type 2 to nothing",
                MemError::OutOfBounds,
            ),
            (
                bind(0x100, 0xfff, 8, 0),
                MR,
                "below the region",
                MemError::OutOfBounds,
            ),
            (
                bind(0x100, 0x1ff9, 8, 0),
                MR,
                "past the region",
                MemError::OutOfBounds,
            ),
            (
                bind(0x100, u64::MAX, 8, 0),
                MR,
                "wrapping",
                MemError::OutOfBounds,
            ),
            (
                bind(0x100, 0x1000, 8, 1 << 12),
                MR,
                "unknown access",
                MemError::AccessDenied,
            ),
            (
                bind(0x100, 0x1000, 8, REMOTE_READ),
                MrView {
                    access: LOCAL_WRITE,
                    ..MR
                },
                "region without MW_BIND",
                MemError::AccessDenied,
            ),
            (
                bind(0x100, 0x1000, 8, REMOTE_WRITE),
                MrView {
                    access: MW_BIND,
                    ..MR
                },
                "writable window on a read-only region",
                MemError::AccessDenied,
            ),
            (
                bind(0x100, 0x1000, 8, REMOTE_READ),
                MrView {
                    access: MW_BIND | ZERO_BASED,
                    ..MR
                },
                "zero-based region",
                MemError::AccessDenied,
            ),
            (
                bind(0x100, 0x1000, 8, REMOTE_READ),
                MrView { pd: PD + 1, ..MR },
                "region of another PD",
                MemError::WrongPd,
            ),
        ];
        for (b, mr, what, want) in cases {
            assert_eq!(w2.check_bind(PD, &b, Some(mr)), Err(want), "{what}");
        }
        assert_eq!(w2.check_bind(PD + 1, &ok, Some(MR)), Err(MemError::WrongPd));
        assert_eq!(w2.check_bind(PD, &ok, None), Err(MemError::InvalidKey));
        // Zero based: the length must fit the region, the address is free.
        let zb = bind(0x100, 0, 0x1000, REMOTE_READ | ZERO_BASED);
        assert_eq!(w2.check_bind(PD, &zb, Some(MR)), Ok(()));
        let zb_long = bind(0x100, 0, 0x1001, REMOTE_READ | ZERO_BASED);
        assert_eq!(
            w2.check_bind(PD, &zb_long, Some(MR)),
            Err(MemError::OutOfBounds)
        );
        // Type 1: never zero based; length 0 unbinds, with no region.
        let zb1 = bind(0x200, 0, 8, REMOTE_READ | ZERO_BASED);
        assert_eq!(
            w1.check_bind(PD, &zb1, Some(MR)),
            Err(MemError::AccessDenied)
        );
        assert_eq!(w1.check_bind(PD, &bind(0x200, 0, 0, 0), None), Ok(()));
    }

    #[test]
    fn type1_rebinds_and_is_not_invalidated() {
        let mut w = Window::new(PD, MwType::One, 0x5500);
        let b = bind(0x5500, 0x1000, 0x10, REMOTE_READ);
        assert_eq!(w.bind(1, &b), None);
        let k = w.rkey;
        // Any QP of the PD may use a type 1 window.
        assert!(w.resolve(PD, 1, k, 0x1000, 8, REMOTE_READ).is_ok());
        assert!(w.resolve(PD, 2, k, 0x1000, 8, REMOTE_READ).is_ok());
        assert_eq!(w.invalidate(PD, k), Err(MemError::AccessDenied));
        // Rebinding replaces the old binding; length 0 leaves none.
        let unbind = bind(k, 0, 0, 0);
        assert_eq!(w.check_bind(PD, &unbind, None), Ok(()));
        assert!(w.bind(1, &unbind).is_some());
        assert_eq!(
            w.resolve(PD, 1, w.rkey, 0x1000, 8, REMOTE_READ),
            Err(MemError::InvalidKey)
        );
    }

    #[test]
    fn zero_based_windows_translate_offsets() {
        let mut w = Window::new(PD, MwType::Two, 0x700);
        let b = MwBind {
            addr: 0x1400,
            ..bind(0x700, 0, 0x100, REMOTE_READ | ZERO_BASED)
        };
        w.bind(4, &b);
        // The requester sends offsets into the window.
        assert_eq!(
            w.resolve(PD, 4, w.rkey, 0x10, 8, REMOTE_READ),
            Ok((77, 0x1410))
        );
        assert_eq!(
            w.resolve(PD, 4, w.rkey, 0xf9, 8, REMOTE_READ),
            Err(MemError::OutOfBounds)
        );
    }
}
