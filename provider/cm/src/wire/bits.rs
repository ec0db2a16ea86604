//! Bit fields as the IBA tables give them: `width` bits that start `bit`
//! bits after the most significant bit of byte `byte`, big-endian, at most
//! 32 bits wide (the kernel's `CM_FIELD*_LOC` / `CM_FIELD_BLOC`).
//!
//! Offsets are relative to the buffer handed in (the codec hands in the
//! 232-byte MAD data area, so they are CM offsets). A field that does not
//! fit the buffer reads as 0 and is not written: every layout in this
//! module is a constant inside the data area, which the tests pin.

/// One bit field: (byte, bit from the MSB, width in bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub byte: usize,
    pub bit: u8,
    pub width: u8,
}

impl Field {
    /// A field of `width` bits (1..=32) starting at `bit` (0 = MSB) of `byte`.
    pub const fn new(byte: usize, bit: u8, width: u8) -> Field {
        Field { byte, bit, width }
    }

    /// A field that starts at the MSB of `byte`.
    pub const fn at(byte: usize, width: u8) -> Field {
        Field::new(byte, 0, width)
    }

    /// The largest value the field holds.
    pub const fn max(self) -> u32 {
        if self.width >= 32 {
            u32::MAX
        } else {
            (1u32 << self.width) - 1
        }
    }

    /// Bytes the field touches.
    const fn span(self) -> usize {
        (self.bit as usize + self.width as usize).div_ceil(8)
    }

    /// Bits after the field's LSB in the last byte it touches.
    const fn shift(self) -> usize {
        self.span() * 8 - self.bit as usize - self.width as usize
    }

    /// Reads the field.
    pub fn get(self, buf: &[u8]) -> u32 {
        let Some(bytes) = buf.get(self.byte..self.byte + self.span()) else {
            return 0;
        };
        let acc = bytes.iter().fold(0u64, |a, &b| a << 8 | u64::from(b));
        ((acc >> self.shift()) & u64::from(self.max())) as u32
    }

    /// Writes `value` masked to the field's width; the other bits of the
    /// bytes it shares are kept.
    pub fn set(self, buf: &mut [u8], value: u32) {
        let span = self.span();
        let Some(bytes) = buf.get_mut(self.byte..self.byte + span) else {
            return;
        };
        let mut acc = bytes.iter().fold(0u64, |a, &b| a << 8 | u64::from(b));
        let mask = u64::from(self.max()) << self.shift();
        acc = (acc & !mask) | ((u64::from(value) << self.shift()) & mask);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (acc >> (8 * (span - 1 - i))) as u8;
        }
    }

    /// Reads a one-bit field as a flag.
    pub fn flag(self, buf: &[u8]) -> bool {
        self.get(buf) != 0
    }
}

/// A big-endian u64 at `at` (0 if it does not fit).
pub fn get_u64(buf: &[u8], at: usize) -> u64 {
    buf.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// Writes a big-endian u64 at `at` (nothing if it does not fit).
pub fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    if let Some(b) = buf.get_mut(at..at + 8) {
        b.copy_from_slice(&v.to_be_bytes());
    }
}

/// `N` bytes from `at` (zeros if they do not fit).
pub fn get_bytes<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    buf.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; N])
}

/// Copies `src` to `at` (nothing if it does not fit).
pub fn put_bytes(buf: &mut [u8], at: usize, src: &[u8]) {
    if let Some(b) = buf.get_mut(at..at + src.len()) {
        b.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn positions_from_the_msb() {
        let mut b = [0u8; 8];
        Field::new(1, 5, 2).set(&mut b, 3);
        assert_eq!(b, [0, 0b0000_0110, 0, 0, 0, 0, 0, 0]);
        Field::at(2, 20).set(&mut b, 0xabcde);
        assert_eq!(&b[2..5], &[0xab, 0xcd, 0xe0]);
        Field::new(4, 4, 12).set(&mut b, 0xfff);
        assert_eq!(&b[4..6], &[0xef, 0xff]);
        assert_eq!(Field::at(2, 20).get(&b), 0xabcde);
        assert_eq!(Field::new(1, 5, 2).get(&b), 3);
        // Masked to the width.
        Field::at(7, 3).set(&mut b, 0xff);
        assert_eq!(b[7], 0b1110_0000);
        // Out of the buffer: read 0, write nothing.
        assert_eq!(Field::at(7, 16).get(&b), 0);
        Field::at(7, 16).set(&mut b, 0xffff);
        assert_eq!(b[7], 0b1110_0000);
    }

    proptest! {
        #[test]
        fn set_then_get_touches_only_the_field(
            byte in 0usize..4, bit in 0u8..8, width in 1u8..=32, v: u32, fill: [u8; 8]
        ) {
            prop_assume!(bit as usize + width as usize <= 32);
            let f = Field::new(byte, bit, width);
            let mut b = fill;
            f.set(&mut b, v);
            prop_assert_eq!(f.get(&b), v & f.max());
            // Every other bit is unchanged.
            let before = u64::from_be_bytes(fill);
            let after = u64::from_be_bytes(b);
            let first = byte * 8 + bit as usize;
            let mask = (u64::from(f.max())) << (64 - first - width as usize);
            prop_assert_eq!(before & !mask, after & !mask);
        }
    }
}
