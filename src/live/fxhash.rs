//! A fast non-cryptographic hash (the Fx hash of rustc and Firefox) for
//! the live view's maps, which hash thousands of stacks every second: std's
//! SipHash took a quarter of the live view's CPU time. Keys come from the
//! profiled machine's own stacks, not from the network.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Builds [`FxHasher`]s.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxBuild;

impl BuildHasher for FxBuild {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

/// A hash map with [`FxHasher`].
pub type FxMap<K, V> = HashMap<K, V, FxBuild>;

/// One word at a time: rotate, mix in, multiply.
#[derive(Clone, Copy, Debug)]
pub struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_maps_work() {
        let h = |s: &str| FxBuild.hash_one(s);
        assert_eq!(h("func_a"), h("func_a"));
        assert_ne!(h("func_a"), h("func_b"));
        let mut m: FxMap<(u32, u32), u32> = FxMap::default();
        for i in 0..1000 {
            m.insert((i, i * 7), i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m[&(10, 70)], 10);
    }
}
