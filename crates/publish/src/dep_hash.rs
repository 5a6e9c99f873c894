//! The stable hash of dependency object names (`docs/publications.md` §2):
//! FNV-1a 64 followed by splitmix64's finalizer. Written out here rather
//! than taken from `std`, whose hasher may change between Rust releases;
//! the values are part of the log format (`txn_deps` records) and of the
//! wire (slots), so they must never change.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// splitmix64's finalizer: spreads FNV's weak low bits over the whole word,
/// which the multiply-shift slot mapping needs (it keeps the high bits).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The dependency hash of a name: `mix64(fnv1a64(bytes))`.
pub fn dep_hash(bytes: &[u8]) -> u64 {
    mix64(fnv1a64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned values: a change here breaks every log and every stream.
    #[test]
    fn stable_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(mix64(0), 0);
        // Computed independently of this code.
        let pinned: [(&[u8], u64); 6] = [
            (b"", 0xf52a_15e9_a9b5_e89b),
            (b"a", 0x02c0_bdbf_4814_20f8),
            (b"foobar", 0x404d_a9e3_b740_78c2),
            (b"u1", 0x715f_dd7b_59a9_a19f),
            (b"t\0\0\0\0\0\0\0\x07", 0x98f4_950f_fd31_b506),
            (b"s\0\0\0\0\0\0\0\x2a", 0x16cf_214c_62d0_5630),
        ];
        for (input, value) in pinned {
            assert_eq!(dep_hash(input), value, "{input:?}");
        }
    }
}
