//! A frequency sketch (Pekko's `FrequencySketch`, as its
//! `FastFrequencySketch` computes it): a count-min sketch that estimates
//! how often each entity was accessed, with small counters packed into
//! 64-bit words, and the TinyLFU reset that halves every counter after a
//! number of increments so that old popularity fades. It is the admission
//! filter of the composite strategy (Einziger, Friedman and Manes,
//! "TinyLFU: A Highly Efficient Cache Admission Policy").
//!
//! An entity's hash is Java's `String.hashCode` of its id (as Pekko hashes
//! it), mixed by a low-bias integer hash, then spread over each row with
//! its own 64-bit seed. With the default depth of 4 and 4-bit counters it
//! is Pekko's `FastFrequencySketch` exactly, so the same ids collide as
//! they do there; other depths use further seeds, and other counter
//! sizes pack fewer or more counters per word.

/// The seeds of the rows: Pekko's four (large primes between 2^63 and
/// 2^64), then odd constants of well-known mixers, for deeper sketches.
const SEEDS: [u64; 16] = [
    0xC3A5_C85C_97CB_3127,
    0xB492_B66F_BE98_F273,
    0x9AE1_6A3B_2F90_404F,
    0xCBF2_9CE4_8422_2325,
    0x9E37_79B9_7F4A_7C15,
    0xBF58_476D_1CE4_E5B9,
    0x94D0_49BB_1331_11EB,
    0xFF51_AFD7_ED55_8CCD,
    0xC4CE_B9FE_1A85_EC53,
    0x87C3_7B91_1142_53D5,
    0x4CF5_AD43_2745_937F,
    0x9FB2_1C65_1E98_DF25,
    0xD6E8_FEB8_6659_FD93,
    0xA076_1D64_78BD_642F,
    0xE703_7ED1_A0B4_28DB,
    0x8EBC_6AF0_9C88_C6E3,
];

/// The deepest sketch (one seed per row).
pub(crate) const MAX_DEPTH: usize = SEEDS.len();

/// The widest sketch, in counters per row (Pekko's bound: a width that
/// fits a Java `Int`).
const MAX_WIDTH: u64 = 1 << 30;

#[derive(Debug)]
pub(super) struct FrequencySketch {
    depth: usize,
    /// Words per row.
    row_width: usize,
    index_mask: u32,
    /// log2 of the counters per word.
    slot_shift: u32,
    slot_mask: u32,
    /// log2 of the counter bits.
    counter_shift: u32,
    counter_mask: u64,
    odd_mask: u64,
    reset_mask: u64,
    /// `depth` rows of `row_width` words.
    matrix: Vec<u64>,
    /// Increments per row (those that changed a counter).
    row_sizes: Vec<u64>,
    size: u64,
    reset_size: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of `capacity` entries: `width_multiplier`
    /// times `capacity` rounded up to a power of two counters per row
    /// (the multiplier a power of two), `depth` rows (1 to
    /// [`MAX_DEPTH`]), counters of `counter_bits` bits (2, 4, 8, 16, 32
    /// or 64), halved after `reset_multiplier` times `capacity`
    /// increments.
    pub(super) fn new(
        capacity: usize,
        width_multiplier: u32,
        reset_multiplier: f64,
        depth: usize,
        counter_bits: u32,
    ) -> Self {
        assert!(
            (1..=MAX_DEPTH).contains(&depth),
            "a frequency sketch has 1 to {MAX_DEPTH} rows, not {depth}"
        );
        assert!(
            matches!(counter_bits, 2 | 4 | 8 | 16 | 32 | 64),
            "counters of 2, 4, 8, 16, 32 or 64 bits, not {counter_bits}"
        );
        assert!(
            width_multiplier.is_power_of_two(),
            "the width multiplier is a power of two, not {width_multiplier}"
        );
        let capacity_pow2 = (capacity.max(1) as u64)
            .checked_next_power_of_two()
            .unwrap_or(MAX_WIDTH);
        let width = capacity_pow2
            .saturating_mul(u64::from(width_multiplier))
            .min(MAX_WIDTH);
        let slots = 64 / counter_bits;
        let slot_shift = slots.trailing_zeros();
        let counter_mask = if counter_bits == 64 {
            u64::MAX >> 1
        } else {
            (1u64 << counter_bits) - 1
        };
        let (mut odd_mask, mut reset_mask) = (0u64, 0u64);
        for slot in 0..slots {
            let shift = slot * counter_bits;
            odd_mask |= 1 << shift;
            reset_mask |= (counter_mask >> 1) << shift;
        }
        let row_width = ((width >> slot_shift) as usize).max(1);
        let reset_size = (reset_multiplier * capacity as f64).min(f64::from(i32::MAX)) as u64;
        FrequencySketch {
            depth,
            row_width,
            index_mask: (width - 1) as u32,
            slot_shift,
            slot_mask: slots - 1,
            counter_shift: counter_bits.trailing_zeros(),
            counter_mask,
            odd_mask,
            reset_mask,
            matrix: vec![0; depth * row_width],
            row_sizes: vec![0; depth],
            size: 0,
            reset_size,
        }
    }

    /// Increments (those that changed a counter) since the last reset,
    /// adjusted by the reset.
    #[cfg(test)]
    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// The estimated accesses of `id` (at most the counters' maximum,
    /// halved by each reset).
    pub(super) fn frequency(&self, id: &str) -> u64 {
        let hash = rehash(java_hash(id));
        (0..self.depth)
            .map(|row| self.counter(row, self.index(hash, row)))
            .min()
            .unwrap_or(0)
    }

    /// Counts one access of `id`.
    pub(super) fn increment(&mut self, id: &str) {
        let hash = rehash(java_hash(id));
        let mut updated = false;
        for row in 0..self.depth {
            let index = self.index(hash, row);
            updated |= self.increment_counter(row, index);
        }
        if updated {
            self.size += 1;
            if self.size == self.reset_size {
                self.reset();
            }
        }
    }

    fn index(&self, hash: u32, row: usize) -> u32 {
        let seed = SEEDS[row];
        // As Java computes `(hash + seed) * seed` with an `Int` hash
        // widened to a `Long`.
        let x = (hash as i32 as i64 as u64)
            .wrapping_add(seed)
            .wrapping_mul(seed);
        (x.wrapping_add(x >> 32) as u32) & self.index_mask
    }

    fn position(&self, row: usize, index: u32) -> (usize, u32) {
        let column = (index >> self.slot_shift) as usize;
        let shift = (index & self.slot_mask) << self.counter_shift;
        (row * self.row_width + column, shift)
    }

    fn counter(&self, row: usize, index: u32) -> u64 {
        let (word, shift) = self.position(row, index);
        (self.matrix[word] >> shift) & self.counter_mask
    }

    fn increment_counter(&mut self, row: usize, index: u32) -> bool {
        let (word, shift) = self.position(row, index);
        let mask = self.counter_mask << shift;
        if self.matrix[word] & mask != mask {
            self.matrix[word] += 1 << shift;
            self.row_sizes[row] += 1;
            true
        } else {
            false
        }
    }

    /// Halves every counter. A row's size loses half, less the halves
    /// that integer division drops from its odd counters.
    fn reset(&mut self) {
        for (row, words) in self.matrix.chunks_mut(self.row_width).enumerate() {
            let mut odd = 0u64;
            for word in words {
                odd += u64::from((*word & self.odd_mask).count_ones());
                *word = (*word >> 1) & self.reset_mask;
            }
            self.row_sizes[row] = self.row_sizes[row].saturating_sub(odd) >> 1;
        }
        self.size = self.row_sizes.iter().copied().max().unwrap_or(0);
    }
}

/// Java's `String.hashCode` of `s`: over its UTF-16 code units.
fn java_hash(s: &str) -> u32 {
    let mut h: u32 = 0;
    if s.is_ascii() {
        for b in s.bytes() {
            h = h.wrapping_mul(31).wrapping_add(u32::from(b));
        }
    } else {
        for unit in s.encode_utf16() {
            h = h.wrapping_mul(31).wrapping_add(u32::from(unit));
        }
    }
    h
}

/// A low-bias 32-bit hash (from Hash Function Prospector, public domain),
/// as Pekko's `FastFrequencySketch` mixes the id's hash.
fn rehash(mut x: u32) -> u32 {
    x = ((x >> 15) ^ x).wrapping_mul(0xD168_AAAD);
    x = ((x >> 15) ^ x).wrapping_mul(0xAF72_3597);
    (x >> 15) ^ x
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn sketch(capacity: usize) -> FrequencySketch {
        FrequencySketch::new(capacity, 4, 10.0, 4, 4)
    }

    fn with_bits(capacity: usize, counter_bits: u32, reset_multiplier: f64) -> FrequencySketch {
        FrequencySketch::new(capacity, 4, reset_multiplier, 4, counter_bits)
    }

    #[test]
    fn java_hash_is_string_hash_code() {
        // Values of Java's "...".hashCode().
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("foo") as i32, 101_574);
        assert_eq!(java_hash("hello world") as i32, 1_794_106_052);
        assert_eq!(java_hash("Aa"), 2112);
        assert_eq!(java_hash("BB"), 2112);
        // Outside the BMP: two UTF-16 units (0xD83D, 0xDE00).
        assert_eq!(java_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
        assert_eq!(java_hash("é"), 0xE9);
    }

    /// Pekko's `FrequencySketchSpec` "increment counters" (also for 2, 8,
    /// 16, 32 and 64-bit counters, "allow counter size to be configured").
    #[test]
    fn increments_counters() {
        for bits in [2, 4, 8, 16, 32, 64] {
            let mut s = with_bits(100, bits, 10.0);
            s.increment("foo");
            s.increment("bar");
            s.increment("bar");
            s.increment("baz");
            s.increment("baz");
            s.increment("baz");
            assert_eq!(s.frequency("foo"), 1, "{bits} bits");
            assert_eq!(s.frequency("bar"), 2, "{bits} bits");
            assert_eq!(s.frequency("baz"), 3, "{bits} bits");
            assert_eq!(s.frequency("qux"), 0, "{bits} bits");
            assert_eq!(s.size(), 6, "{bits} bits");
        }
    }

    /// ... "increment counters to max value", and the maximum of 2, 8 and
    /// 16-bit counters.
    #[test]
    fn counters_stop_at_their_maximum() {
        let mut s = sketch(100);
        for _ in 0..20 {
            s.increment("foo");
        }
        assert_eq!(s.frequency("foo"), 15);
        assert_eq!(s.size(), 15);
        let mut s = with_bits(100, 2, 1.0);
        for _ in 0..10 {
            s.increment("foo");
        }
        assert_eq!((s.frequency("foo"), s.size()), (3, 3));
        let mut s = with_bits(100, 8, 10.0);
        for _ in 0..1000 {
            s.increment("foo");
        }
        assert_eq!((s.frequency("foo"), s.size()), (255, 255));
        let mut s = with_bits(100, 16, 1000.0);
        for _ in 0..100_000 {
            s.increment("foo");
        }
        assert_eq!((s.frequency("foo"), s.size()), (65_535, 65_535));
    }

    /// ... the reset of each counter size: at the reset size, the size is
    /// at most halved.
    #[test]
    fn every_counter_size_resets() {
        for (bits, multiplier) in [(2, 1.0), (8, 10.0), (16, 1000.0), (32, 10.0), (64, 10.0)] {
            let mut s = with_bits(100, bits, multiplier);
            let reset = (100.0 * multiplier) as u64;
            let mut i = 0;
            while s.size() < reset - 1 {
                i += 1;
                s.increment(&i.to_string());
            }
            assert_eq!(s.size(), reset - 1, "{bits} bits");
            s.increment("qux");
            assert!(s.size() <= reset / 2, "{bits} bits: {}", s.size());
        }
    }

    /// ... "reset counters when reset size is reached".
    #[test]
    fn reset_halves_counters() {
        let mut s = sketch(100);
        for i in 1..=500 {
            s.increment(&i.to_string());
        }
        for i in 1..=499 {
            s.increment(&i.to_string());
        }
        assert_eq!(s.size(), 999);
        let before: Vec<u64> = (1..=499).map(|i| s.frequency(&i.to_string())).collect();
        s.increment("500"); // the 1000th: the reset
                            // Every counter even (collisions included): a perfect halving.
        assert_eq!(s.size(), 500);
        let halved = (1..=499)
            .filter(|&i| s.frequency(&i.to_string()) == before[i - 1] / 2)
            .count();
        // The increment that triggered the reset may have bumped up to
        // four other counters.
        assert!(halved >= 499 - 4, "{halved}");

        for i in 501..=999 {
            s.increment(&i.to_string());
        }
        assert_eq!(s.size(), 999);
        let before: Vec<u64> = (1..=999).map(|i| s.frequency(&i.to_string())).collect();
        s.increment("1000");
        // Odd counters lose their half.
        assert!(s.size() > 300 && s.size() < 500, "{}", s.size());
        let halved = (1..=999)
            .filter(|&i| s.frequency(&i.to_string()) == before[i - 1] / 2)
            .count();
        assert!(halved >= 999 - 4, "{halved}");
    }

    /// ... "compare frequencies for more popular items with reasonable
    /// accuracy".
    #[test]
    fn popular_items_rank_above_noise() {
        let mut s = sketch(100);
        for i in 1000..=10_000 {
            s.increment(&i.to_string());
        }
        for i in 1..=5 {
            for _ in 0..(6 - i) * 2 {
                s.increment(&i.to_string());
            }
        }
        for i in 1..=5 {
            let (a, b) = (
                s.frequency(&i.to_string()),
                s.frequency(&(i + 1).to_string()),
            );
            assert!(a >= b, "{i}: {a} < {b}");
        }
        for i in 6..=10 {
            assert!(s.frequency("5") >= s.frequency(&i.to_string()), "{i}");
        }
    }

    /// ... "compare frequencies for random zipfian distribution with
    /// reasonable accuracy".
    #[test]
    fn zipfian_accesses_rank_by_popularity() {
        let ids = 1000;
        let most_popular = 100;
        let mut s = sketch(100);
        let mut zipf = Zipf::new(ids, 0.99, 42);
        let mut actual: HashMap<usize, u64> = HashMap::new();
        for _ in 0..100 * ids {
            let id = zipf.next();
            s.increment(&id.to_string());
            *actual.entry(id).or_default() += 1;
        }
        let mut sorted: Vec<(usize, u64)> = actual.into_iter().collect();
        sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let (mut comparisons, mut correct) = (0u64, 0u64);
        for i in 0..most_popular {
            let f = s.frequency(&sorted[i].0.to_string());
            for other in &sorted[i + 1..] {
                if f >= s.frequency(&other.0.to_string()) {
                    correct += 1;
                }
                comparisons += 1;
            }
        }
        let accuracy = correct as f64 / comparisons as f64;
        assert!(accuracy > 0.95, "{accuracy}");
    }

    /// ... "allow depth to be configured": one row of one counter, where
    /// everything collides.
    #[test]
    fn depth_can_be_one() {
        let mut s = FrequencySketch::new(1, 1, 10.0, 1, 64);
        s.increment("foo");
        s.increment("bar");
        assert_eq!(s.frequency("foo"), 2);
        assert_eq!(s.frequency("bar"), 2);
        // Sixteen rows tell them apart.
        let mut s = FrequencySketch::new(100, 4, 10.0, MAX_DEPTH, 4);
        s.increment("foo");
        s.increment("bar");
        s.increment("bar");
        assert_eq!((s.frequency("foo"), s.frequency("bar")), (1, 2));
    }

    /// ... "reject capacity that would cause width to overflow": here the
    /// width is capped at 2^30 counters instead.
    #[test]
    fn width_is_capped() {
        let s = FrequencySketch::new(536_870_913, 4, 10.0, 1, 64);
        assert_eq!(u64::from(s.index_mask) + 1, MAX_WIDTH);
        let s = FrequencySketch::new(100, 1 << 31, 10.0, 1, 64);
        assert_eq!(u64::from(s.index_mask) + 1, MAX_WIDTH);
        let s = FrequencySketch::new(0, 4, 10.0, 4, 4);
        assert_eq!((s.index_mask, s.row_width), (3, 1));
    }

    /// A Zipf distribution over `1..=n` (lower ids more popular), sampled
    /// by inverting its cumulative distribution, with a fixed seed.
    struct Zipf {
        cumulative: Vec<f64>,
        state: u64,
    }

    impl Zipf {
        fn new(n: usize, exponent: f64, seed: u64) -> Self {
            let mut total = 0.0;
            let mut cumulative: Vec<f64> = (1..=n)
                .map(|k| {
                    total += 1.0 / (k as f64).powf(exponent);
                    total
                })
                .collect();
            for c in &mut cumulative {
                *c /= total;
            }
            Zipf {
                cumulative,
                state: seed,
            }
        }

        fn next(&mut self) -> usize {
            // splitmix64
            self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let u = (z >> 11) as f64 / (1u64 << 53) as f64;
            self.cumulative.partition_point(|&c| c < u) + 1
        }
    }
}
