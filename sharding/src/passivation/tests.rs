//! Pekko's passivation specs (`cluster-sharding`'s `passivation/*Spec`)
//! on these strategies: the same scripted messages, the same expected
//! passivations and active entities. A region is simulated as Pekko's
//! shares its limit: each active shard gets `limit / shards`, and every
//! shard is told when a shard starts or the limit changes.
//!
//! Where a spec checks only some of the passivations of a step (it
//! expects messages at some entities' probes and not the absence of
//! others), the port checks all of them: the missing ones are those its
//! final state implies.
//!
//! Not ported: the `*WithIdleSpec`s (idle passivation is the shard's
//! timer, not these structures) and `DisabledEntityPassivationSpec`
//! beyond the absence of a strategy.

use super::*;
use crate::settings::{
    AdmissionWindowSettings, FrequencySketchSettings, HillClimbingSettings, ReplacementPolicy,
};
use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::time::Duration;

struct Shard {
    id: u32,
    strategy: Box<dyn EntityLimit>,
    active: BTreeSet<u32>,
}

impl Shard {
    /// Stops the passivated entities (they were active), and tells the
    /// strategy of their termination, as the shard does (ignored: it
    /// forgot them already).
    fn stop(&mut self, passivated: Vec<EntityId>) -> Vec<u32> {
        passivated
            .into_iter()
            .map(|id| {
                let n: u32 = id.parse().unwrap();
                assert!(self.active.remove(&n), "{n} passivated but not active");
                self.strategy.entity_terminated(&id);
                n
            })
            .collect()
    }
}

struct Region {
    settings: PassivationSettings,
    limit: usize,
    shards: Vec<Shard>,
}

impl Region {
    fn new(settings: PassivationSettings) -> Self {
        let limit = settings.active_entity_limit().expect("a limit");
        Region {
            settings,
            limit,
            shards: Vec::new(),
        }
    }

    /// A message for entity `id` of shard `shard` (started on demand, as
    /// the shard is): the entities passivated, in order.
    fn send(&mut self, shard: u32, id: u32) -> Vec<u32> {
        let mut passivated = Vec::new();
        if !self.shards.iter().any(|s| s.id == shard) {
            let strategy = new_entity_limit(&self.settings, self.limit).unwrap();
            self.shards.push(Shard {
                id: shard,
                strategy,
                active: BTreeSet::new(),
            });
            passivated = self.share_limit();
        }
        let s = self.shards.iter_mut().find(|s| s.id == shard).unwrap();
        let entity = EntityId::from(id.to_string());
        if s.active.contains(&id) {
            s.strategy.entity_touched(&entity);
        } else {
            s.active.insert(id);
            let victims = created(&mut *s.strategy, &entity);
            passivated.extend(s.stop(victims));
        }
        passivated.sort_unstable();
        passivated
    }

    /// `accesses` messages for one entity: the entities passivated.
    fn send_n(&mut self, shard: u32, id: u32, accesses: u32) -> Vec<u32> {
        let mut passivated: Vec<u32> = (0..accesses).flat_map(|_| self.send(shard, id)).collect();
        passivated.sort_unstable();
        passivated
    }

    /// Pekko's `SetActiveEntityLimit`.
    fn set_limit(&mut self, limit: usize) -> Vec<u32> {
        self.limit = limit;
        let mut passivated = self.share_limit();
        passivated.sort_unstable();
        passivated
    }

    fn share_limit(&mut self) -> Vec<u32> {
        let per_shard = self.limit / self.shards.len();
        let mut passivated = Vec::new();
        for s in &mut self.shards {
            let victims = s.strategy.set_limit(per_shard);
            passivated.extend(s.stop(victims));
        }
        passivated
    }

    /// The entity receives a message, then stops by itself.
    fn manually_passivate(&mut self, shard: u32, id: u32) {
        assert_eq!(self.send(shard, id), [] as [u32; 0]);
        let s = self.shards.iter_mut().find(|s| s.id == shard).unwrap();
        assert!(s.active.remove(&id));
        s.strategy
            .entity_terminated(&EntityId::from(id.to_string()));
    }

    #[track_caller]
    fn check(&self, expected: &[(u32, &[u32])]) {
        assert_eq!(self.shards.len(), expected.len());
        for (shard, ids) in expected {
            let s = self.shards.iter().find(|s| s.id == *shard).unwrap();
            let ids: BTreeSet<u32> = ids.iter().copied().collect();
            assert_eq!(s.active, ids, "shard {shard}");
            assert_eq!(s.strategy.active(), ids.len(), "shard {shard}");
        }
    }
}

fn ids(range: RangeInclusive<u32>) -> Vec<u32> {
    range.collect()
}

fn cat(parts: &[&[u32]]) -> Vec<u32> {
    parts.concat()
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

fn none() -> Vec<u32> {
    Vec::new()
}

fn segmented(proportions: &[f64]) -> ReplacementPolicy {
    ReplacementPolicy::LeastRecentlyUsed {
        segmented: proportions.to_vec(),
    }
}

/// `DisabledEntityPassivationSpec`, and the other strategies without a
/// limit: no strategy.
#[test]
fn no_strategy_without_a_limit() {
    for settings in [
        PassivationSettings::none(),
        PassivationSettings::default(),
        PassivationSettings::idle(Duration::from_secs(1)),
        PassivationSettings::none().with_idle_timeout(Duration::from_secs(1)),
        PassivationSettings::none().with_replacement(ReplacementPolicy::MostRecentlyUsed),
    ] {
        assert!(new_entity_limit(&settings, 10).is_none(), "{settings}");
    }
    for settings in [
        PassivationSettings::default_strategy(),
        PassivationSettings::least_recently_used(10),
    ] {
        assert!(new_entity_limit(&settings, 10).is_some(), "{settings}");
    }
}

/// `LeastRecentlyUsedSpec`.
#[test]
fn least_recently_used() {
    let mut r = Region::new(PassivationSettings::least_recently_used(10));
    // One shard: the least recently used are passivated at the limit.
    for id in 1..=20 {
        let expected = if id > 10 { vec![id - 10] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(11..=20))]);
    // A second shard halves the first one's limit.
    assert_eq!(r.send(2, 21), ids(11..=15));
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
    for id in 1..=20 {
        let passivated = if id <= 5 { id + 15 } else { id - 5 };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
    for id in 21..=24 {
        assert_eq!(r.send(2, id), none(), "{id}");
    }
    r.check(&[(1, &ids(16..=20)), (2, &ids(21..=24))]);
    // A third: limits of 3.
    assert_eq!(r.send(3, 31), [16, 17, 21]);
    r.check(&[(1, &[18, 19, 20]), (2, &[22, 23, 24]), (3, &[31])]);
    for id in 25..=30 {
        assert_eq!(r.send(2, id), [id - 3], "{id}");
    }
    r.check(&[(1, &[18, 19, 20]), (2, &[28, 29, 30]), (3, &[31])]);
    for id in 31..=40 {
        let expected = if id > 33 { vec![id - 3] } else { none() };
        assert_eq!(r.send(3, id), expected, "{id}");
    }
    r.check(&[(1, &[18, 19, 20]), (2, &[28, 29, 30]), (3, &[38, 39, 40])]);
    // Entities that stop by themselves.
    r.manually_passivate(1, 19);
    r.manually_passivate(2, 29);
    r.manually_passivate(3, 39);
    r.check(&[(1, &[18, 20]), (2, &[28, 30]), (3, &[38, 40])]);
    for i in 1..=3 {
        for shard in 1..=3 {
            let base = shard * 10;
            let expected = match i {
                2 => vec![base + 8],
                3 => vec![base + 10],
                _ => none(),
            };
            assert_eq!(r.send(shard, base + i), expected, "{i} {shard}");
        }
    }
    r.check(&[(1, &[11, 12, 13]), (2, &[21, 22, 23]), (3, &[31, 32, 33])]);
}

/// `SegmentedLeastRecentlyUsedSpec`.
#[test]
fn segmented_least_recently_used() {
    let mut r = Region::new(
        PassivationSettings::least_recently_used(10).with_replacement(segmented(&[0.2, 0.8])),
    );
    // Accessed once: all in the lowest level.
    for id in 1..=20 {
        let expected = if id > 10 { vec![id - 10] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(11..=20))]);
    // A second access promotes to the protected level, which demotes its
    // excess: level 0 11-12, level 1 13-20.
    for id in 11..=20 {
        assert_eq!(r.send(1, id), none(), "{id}");
    }
    r.check(&[(1, &ids(11..=20))]);
    // New entities cycle through the lowest level.
    for id in 1..=5 {
        let passivated = if id < 3 { id + 10 } else { id - 2 };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &cat(&[&[4, 5], &ids(13..=20)]))]);
    // A second shard: level 0 16, level 1 17-20.
    assert_eq!(r.send(2, 21), [4, 5, 13, 14, 15]);
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
    // Protected entities accessed again stay; probationary ones are
    // promoted; the lowest level has room for one.
    for id in (11..=20).rev() {
        let expected = match id {
            15 => vec![20],
            _ if id < 15 => vec![id + 1],
            _ => none(),
        };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &[11, 16, 17, 18, 19]), (2, &[21])]);
}

/// `LeastRecentlyUsedLimitAdjustmentSpec`.
#[test]
fn least_recently_used_limit_adjustment() {
    let mut r = Region::new(PassivationSettings::least_recently_used(10));
    for id in 1..=20 {
        let expected = if id > 10 { vec![id - 10] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(11..=20))]);
    assert_eq!(r.send(2, 21), ids(11..=15));
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
    // 10 to 6: shards of 3.
    assert_eq!(r.set_limit(6), [16, 17]);
    r.check(&[(1, &ids(18..=20)), (2, &[21])]);
    for id in 1..=10 {
        let passivated = if id < 4 { id + 17 } else { id - 3 };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &ids(8..=10)), (2, &[21])]);
    // 6 to 12: shards of 6.
    assert_eq!(r.set_limit(12), none());
    for id in 11..=20 {
        let expected = if id > 13 { vec![id - 6] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(15..=20)), (2, &[21])]);
}

/// `SegmentedLeastRecentlyUsedLimitAdjustmentSpec`.
#[test]
fn segmented_least_recently_used_limit_adjustment() {
    let mut r = Region::new(
        PassivationSettings::least_recently_used(20).with_replacement(segmented(&[0.2, 0.8])),
    );
    for id in 1..=30 {
        let expected = if id > 20 { vec![id - 20] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(11..=30))]);
    assert_eq!(r.send(2, 31), ids(11..=20));
    r.check(&[(1, &ids(21..=30)), (2, &[31])]);
    // 20 to 10: shards of 5.
    assert_eq!(r.set_limit(10), ids(21..=25));
    r.check(&[(1, &ids(26..=30)), (2, &[31])]);
    for id in 1..=10 {
        let passivated = if id < 6 { id + 25 } else { id - 5 };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &ids(6..=10)), (2, &[31])]);
    // 10 to 30: shards of 15.
    assert_eq!(r.set_limit(30), none());
    for id in 11..=30 {
        let expected = if id > 20 { vec![id - 15] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(16..=30)), (2, &[31])]);
}

/// `MostRecentlyUsedSpec`.
#[test]
fn most_recently_used() {
    let mut r = Region::new(PassivationSettings::most_recently_used(10));
    for id in 1..=20 {
        let expected = if id > 10 { vec![id - 1] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &cat(&[&ids(1..=9), &[20]]))]);
    assert_eq!(r.send(2, 21), [6, 7, 8, 9, 20]);
    r.check(&[(1, &ids(1..=5)), (2, &[21])]);
    for id in 1..=20 {
        let expected = if id > 5 { vec![id - 1] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &[1, 2, 3, 4, 20]), (2, &[21])]);
    for id in 21..=24 {
        assert_eq!(r.send(2, id), none(), "{id}");
    }
    r.check(&[(1, &[1, 2, 3, 4, 20]), (2, &ids(21..=24))]);
    assert_eq!(r.send(3, 31), [4, 20, 24]);
    r.check(&[(1, &[1, 2, 3]), (2, &[21, 22, 23]), (3, &[31])]);
    for id in 24..=30 {
        assert_eq!(r.send(2, id), [id - 1], "{id}");
    }
    r.check(&[(1, &[1, 2, 3]), (2, &[21, 22, 30]), (3, &[31])]);
    for id in 31..=40 {
        let expected = if id > 33 { vec![id - 1] } else { none() };
        assert_eq!(r.send(3, id), expected, "{id}");
    }
    r.check(&[(1, &[1, 2, 3]), (2, &[21, 22, 30]), (3, &[31, 32, 40])]);
    r.manually_passivate(1, 2);
    r.manually_passivate(2, 22);
    r.manually_passivate(3, 32);
    r.check(&[(1, &[1, 3]), (2, &[21, 30]), (3, &[31, 40])]);
    for i in 1..=3 {
        for (shard, base) in [(1, 11), (2, 22), (3, 33)] {
            let expected = match i {
                2 => vec![base + 1],
                3 => vec![base + 2],
                _ => none(),
            };
            assert_eq!(r.send(shard, base + i), expected, "{i} {shard}");
        }
    }
    r.check(&[(1, &[1, 3, 14]), (2, &[21, 25, 30]), (3, &[31, 36, 40])]);
}

/// `MostRecentlyUsedLimitAdjustmentSpec`.
#[test]
fn most_recently_used_limit_adjustment() {
    let mut r = Region::new(PassivationSettings::most_recently_used(10));
    for id in 1..=20 {
        let expected = if id > 10 { vec![id - 1] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &cat(&[&ids(1..=9), &[20]]))]);
    assert_eq!(r.send(2, 21), [6, 7, 8, 9, 20]);
    r.check(&[(1, &ids(1..=5)), (2, &[21])]);
    // 10 to 6: shards of 3.
    assert_eq!(r.set_limit(6), [4, 5]);
    r.check(&[(1, &[1, 2, 3]), (2, &[21])]);
    // (The spec checks the passivations from 6 on; 3 and 4 go first.)
    for id in 1..=10 {
        let expected = if id > 3 { vec![id - 1] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &[1, 2, 10]), (2, &[21])]);
    // 6 to 12: shards of 6.
    assert_eq!(r.set_limit(12), none());
    for id in 11..=20 {
        let expected = if id > 13 { vec![id - 1] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &[1, 2, 10, 11, 12, 20]), (2, &[21])]);
}

/// `LeastFrequentlyUsedSpec`.
#[test]
fn least_frequently_used() {
    let mut r = Region::new(PassivationSettings::least_frequently_used(10));
    let accesses = |id: u32| (id - 1) % 4 + 1;
    for id in 1..=20 {
        let expected = match id {
            11 => vec![1],
            12 => vec![5],
            13 => vec![9],
            14 => vec![13],
            15 => vec![2],
            16 => vec![6],
            17 => vec![10],
            18 => vec![17],
            19 => vec![14],
            20 => vec![18],
            _ => none(),
        };
        assert_eq!(r.send_n(1, id, accesses(id)), expected, "{id}");
    }
    // Frequency 3: 3, 7, 11, 15, 19; 4: 4, 8, 12, 16, 20.
    r.check(&[(1, &[3, 4, 7, 8, 11, 12, 15, 16, 19, 20])]);
    assert_eq!(r.send(2, 21), [3, 7, 11, 15, 19]);
    r.check(&[(1, &[4, 8, 12, 16, 20]), (2, &[21])]);
    // A new entity is not the least frequent one to passivate.
    for id in 1..=20 {
        let passivated = if accesses(id) == 1 { id + 3 } else { id - 1 };
        assert_eq!(r.send_n(1, id, accesses(id)), [passivated], "{id}");
    }
    r.check(&[(1, &[4, 8, 12, 16, 20]), (2, &[21])]);
    for id in 21..=24 {
        assert_eq!(r.send(2, id), none(), "{id}");
    }
    r.check(&[(1, &[4, 8, 12, 16, 20]), (2, &[21, 22, 23, 24])]);
    assert_eq!(r.send(3, 31), [4, 8, 22]);
    r.check(&[(1, &[12, 16, 20]), (2, &[21, 23, 24]), (3, &[31])]);
    for id in 21..=30 {
        let expected = match id {
            22 => vec![23],
            23 => vec![24],
            24 => vec![22],
            25 => vec![21],
            26 => vec![25],
            27 => vec![26],
            28 => vec![23],
            29 => vec![27],
            30 => vec![29],
            _ => none(),
        };
        assert_eq!(r.send_n(2, id, accesses(id)), expected, "{id}");
    }
    r.check(&[(1, &[12, 16, 20]), (2, &[24, 28, 30]), (3, &[31])]);
    for id in 31..=40 {
        let expected = match id {
            34 => vec![32],
            35 => vec![31],
            36 => vec![35],
            37 => vec![36],
            38 => vec![34],
            39 => vec![38],
            40 => vec![39],
            _ => none(),
        };
        assert_eq!(r.send_n(3, id, 4 - (id - 1) % 4), expected, "{id}");
    }
    r.check(&[(1, &[12, 16, 20]), (2, &[24, 28, 30]), (3, &[33, 37, 40])]);
    r.manually_passivate(1, 16);
    r.manually_passivate(2, 24);
    r.manually_passivate(3, 33);
    r.check(&[(1, &[12, 20]), (2, &[28, 30]), (3, &[37, 40])]);
    for i in 1..=3 {
        let mut passivated = Vec::new();
        for _ in 1..=i {
            for shard in 1..=3 {
                passivated.extend(r.send(shard, shard * 10 + i));
            }
        }
        let expected = match i {
            2 => vec![21, 40],
            3 => vec![11, 30, 31],
            _ => none(),
        };
        assert_eq!(sorted(passivated), expected, "{i}");
    }
    r.check(&[(1, &[12, 13, 20]), (2, &[22, 23, 28]), (3, &[32, 33, 37])]);
}

/// `LeastFrequentlyUsedWithDynamicAgingSpec`.
#[test]
fn least_frequently_used_with_dynamic_aging() {
    let mut r = Region::new(
        PassivationSettings::least_frequently_used(10).with_replacement(
            ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true,
            },
        ),
    );
    // 1 and 2 quite popular, 3 to 5 very.
    for id in 1..=2 {
        assert_eq!(r.send_n(1, id, 5), none());
    }
    for id in 3..=5 {
        assert_eq!(r.send_n(1, id, 10), none());
    }
    r.check(&[(1, &ids(1..=5))]);
    for id in 6..=20 {
        let expected = if id > 10 { vec![id - 5] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    // Age 2: @3 16-20, @5 1-2, @10 3-5.
    r.check(&[(1, &cat(&[&ids(1..=5), &ids(16..=20)]))]);
    assert_eq!(r.send(2, 21), ids(16..=20));
    r.check(&[(1, &ids(1..=5)), (2, &[21])]);
    // (The spec checks the states; these are the passivations between.)
    let mut passivated = Vec::new();
    for id in 6..=10 {
        passivated.extend(r.send(1, id));
    }
    assert_eq!(sorted(passivated), [1, 2, 6, 7, 8]);
    // Age 7: @7 9, @8 10, @10 3-5.
    r.check(&[(1, &[3, 4, 5, 9, 10]), (2, &[21])]);
    let mut passivated = Vec::new();
    for id in 11..=15 {
        passivated.extend(r.send(1, id));
    }
    assert_eq!(sorted(passivated), [9, 10, 11, 12, 13]);
    // Age 9: @10 3-5 and 14-15.
    r.check(&[(1, &[3, 4, 5, 14, 15]), (2, &[21])]);
    let mut passivated = Vec::new();
    for id in 16..=20 {
        passivated.extend(r.send(1, id));
    }
    assert_eq!(sorted(passivated), [3, 4, 5, 14, 15]);
    // Age 10: @11 16-20.
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
}

/// `LeastFrequentlyUsedLimitAdjustmentSpec`.
#[test]
fn least_frequently_used_limit_adjustment() {
    let mut r = Region::new(PassivationSettings::least_frequently_used(10));
    for id in 1..=20 {
        let expected = if id > 10 { vec![id - 10] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(11..=20))]);
    assert_eq!(r.send(2, 21), ids(11..=15));
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
    assert_eq!(r.set_limit(6), [16, 17]);
    r.check(&[(1, &ids(18..=20)), (2, &[21])]);
    for id in 1..=10 {
        let passivated = if id < 4 { id + 17 } else { id - 3 };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &ids(8..=10)), (2, &[21])]);
    assert_eq!(r.set_limit(12), none());
    for id in 11..=20 {
        let expected = if id > 13 { vec![id - 6] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(15..=20)), (2, &[21])]);
}

/// The `lru-fs-slru` strategy of `CompositeSpec`: a least recently used
/// window of 20%, not optimized, a frequency sketch, a segmented main
/// area of 25%/75%.
fn window_and_filter() -> PassivationSettings {
    PassivationSettings::least_recently_used(20)
        .with_replacement(segmented(&[0.25, 0.75]))
        .with_admission_window(Some(AdmissionWindowSettings {
            proportion: 0.2,
            optimizer: None,
            ..AdmissionWindowSettings::default()
        }))
        .with_admission_filter(Some(FrequencySketchSettings::default()))
}

/// `AdmissionWindowAndFilterSpec`.
#[test]
fn admission_window_and_filter() {
    let mut r = Region::new(window_and_filter());
    // Through the window to main; then candidates from the window lose to
    // main's (equal frequencies).
    for id in 1..=40 {
        let expected = if id > 20 { vec![id - 4] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    // Window 37-40, main level 0 1-16.
    r.check(&[(1, &cat(&[&ids(1..=16), &ids(37..=40)]))]);
    // Main's entities are used again (promoted); new ones push the
    // window's candidates out.
    for id in 1..=20 {
        let expected = if id > 16 { vec![id + 20] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    // Window 17-20, main level 0 1-4, level 1 5-16.
    r.check(&[(1, &ids(1..=20))]);
    // The window's entities become more frequent.
    for id in 17..=20 {
        assert_eq!(r.send_n(1, id, 5), none(), "{id}");
    }
    r.check(&[(1, &ids(1..=20))]);
    // Now they are admitted to main.
    for id in 21..=24 {
        assert_eq!(r.send(1, id), [id - 20], "{id}");
    }
    // Window 21-24, main level 0 17-20, level 1 5-16.
    r.check(&[(1, &ids(5..=24))]);
    // New ones lose to main's.
    for id in 25..=28 {
        assert_eq!(r.send(1, id), [id - 4], "{id}");
    }
    r.check(&[(1, &cat(&[&ids(5..=20), &ids(25..=28)]))]);
    // A second shard halves the limit.
    assert_eq!(r.send(2, 41), [5, 6, 7, 8, 17, 18, 19, 20, 25, 26]);
    // Window 27-28, main level 0 9-10, level 1 11-16.
    r.check(&[(1, &cat(&[&ids(9..=16), &[27, 28]])), (2, &[41])]);
    // 17 and 18 are still more frequent: through the window to main.
    for (id, passivated) in [(17, 27), (18, 28), (19, 9), (20, 10)] {
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &ids(11..=20)), (2, &[41])]);
}

/// `AdmissionFilterNoWindowSpec`.
#[test]
fn admission_filter_without_window() {
    let mut r = Region::new(
        PassivationSettings::least_recently_used(10)
            .with_admission_filter(Some(FrequencySketchSettings::default())),
    );
    // Equal frequencies: the candidates are not admitted.
    for id in 1..=20 {
        let expected = if id > 10 { vec![id] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &ids(1..=10))]);
    // On their second access 11-20 are admitted.
    for id in 11..=20 {
        for i in 1..=5 {
            let expected = if i == 1 { vec![id - 10] } else { none() };
            assert_eq!(r.send(1, id), expected, "{id} {i}");
        }
    }
    r.check(&[(1, &ids(11..=20))]);
    // 1-10, less frequent, are not.
    for id in 1..=10 {
        for _ in 1..=2 {
            assert_eq!(r.send(1, id), [id], "{id}");
        }
    }
    assert_eq!(r.send(2, 21), ids(11..=15));
    r.check(&[(1, &ids(16..=20)), (2, &[21])]);
    // A new limit, a new sketch: the first candidates replace the old
    // entities, then keep their places.
    for id in 1..=10 {
        let passivated = if id <= 5 { id + 15 } else { id };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &ids(1..=5)), (2, &[21])]);
}

/// `AdaptiveAdmissionWindowSpec`.
#[test]
fn adaptive_admission_window() {
    let mut r = Region::new(
        PassivationSettings::least_recently_used(10)
            .with_admission_window(Some(AdmissionWindowSettings {
                policy: ReplacementPolicy::LeastRecentlyUsed {
                    segmented: Vec::new(),
                },
                proportion: 0.1,
                minimum_proportion: 0.1,
                maximum_proportion: 1.0,
                optimizer: Some(HillClimbingSettings {
                    adjust_multiplier: 2.0,
                    initial_step: 0.4,
                    restart_threshold: 0.8,
                    step_decay: 0.5,
                }),
            }))
            .with_admission_filter(Some(FrequencySketchSettings {
                reset_multiplier: 100.0,
                ..FrequencySketchSettings::default()
            })),
    );
    for id in 1..=10 {
        assert_eq!(r.send_n(1, id, 10), none(), "{id}");
    }
    r.check(&[(1, &ids(1..=10))]);
    // Window [10], main [1-9]; window limit 1. Less frequent entities are
    // passivated; the drop in the active rate turns the climb upwards.
    for i in 1..=4 {
        for id in 11..=20 {
            let passivated = if id == 11 && i > 1 { 20 } else { id - 1 };
            assert_eq!(r.send(1, id), [passivated], "{i} {id}");
        }
    }
    r.check(&[(1, &cat(&[&ids(1..=9), &[20]]))]);
    // Window [20, 1, 2, 3, 4], main [5-9]: proportion 0.5, rising.
    for id in 21..=30 {
        for i in 1..=2 {
            let expected = match (i, id) {
                (2, _) => none(),
                (_, 21) => vec![20],
                (_, x) if x <= 25 => vec![x - 21],
                (_, x) => vec![x - 5],
            };
            assert_eq!(r.send(1, id), expected, "{id} {i}");
        }
    }
    r.check(&[(1, &cat(&[&ids(5..=9), &ids(26..=30)]))]);
    // Window [26-30, 5, 6], main [7-9]: 0.7, rising.
    for id in 21..=24 {
        for i in 1..=5 {
            let expected = if i == 1 { vec![id + 5] } else { none() };
            assert_eq!(r.send(1, id), expected, "{id} {i}");
        }
    }
    r.check(&[(1, &cat(&[&ids(5..=9), &ids(21..=24), &[30]]))]);
    // Window [30, 5, 6, 21-24, 7], main [8, 9]: 0.8. The active rate
    // drops to zero: down a step, then a restart.
    let previous_window = [30, 5, 6, 21, 22, 23, 24, 7];
    for i in 1..=2 {
        for id in 31..=40 {
            let passivated = if i == 1 && id <= 38 {
                previous_window[(id - 31) as usize]
            } else if id <= 38 {
                id + 2
            } else {
                id - 8
            };
            assert_eq!(r.send(1, id), [passivated], "{i} {id}");
        }
    }
    r.check(&[(1, &cat(&[&[8, 9], &ids(33..=40)]))]);
    // Window [34-40], main [8, 9, 33]: 0.7, falling by 0.4.
    for id in 41..=50 {
        for i in 1..=2 {
            let expected = if i == 1 { vec![id - 7] } else { none() };
            assert_eq!(r.send(1, id), expected, "{id} {i}");
        }
    }
    r.check(&[(1, &cat(&[&[8, 9, 33], &ids(44..=50)]))]);
    // Window [48-50], main [8, 9, 33, 44-47]: 0.3, falling by 0.2.
    for id in 51..=60 {
        for i in 1..=2 {
            let expected = if i == 1 { vec![id - 3] } else { none() };
            assert_eq!(r.send(1, id), expected, "{id} {i}");
        }
    }
    r.check(&[(1, &[8, 9, 33, 44, 45, 46, 47, 58, 59, 60])]);
    // Window [60], main [8, 9, 33, 44-47, 58, 59]: 0.1.
    for id in 61..=70 {
        assert_eq!(r.send(1, id), [id - 1], "{id}");
    }
    r.check(&[(1, &[8, 9, 33, 44, 45, 46, 47, 58, 59, 70])]);
}

/// `CompositeLimitAdjustmentSpec`.
#[test]
fn composite_limit_adjustment() {
    let mut r = Region::new(window_and_filter());
    for id in 1..=40 {
        let expected = if id > 20 { vec![id - 4] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &cat(&[&ids(1..=16), &ids(37..=40)]))]);
    assert_eq!(r.send(2, 41), cat(&[&ids(1..=8), &[37, 38]]));
    r.check(&[(1, &cat(&[&ids(9..=16), &[39, 40]])), (2, &[41])]);
    // 20 to 10: shards of 5.
    assert_eq!(r.set_limit(10), [9, 10, 11, 12, 39]);
    r.check(&[(1, &cat(&[&ids(13..=16), &[40]])), (2, &[41])]);
    // A new limit, a new sketch.
    for id in 1..=10 {
        let passivated = match id {
            1 => 40,
            _ if id <= 5 => id + 11,
            _ => id - 1,
        };
        assert_eq!(r.send(1, id), [passivated], "{id}");
    }
    r.check(&[(1, &[1, 2, 3, 4, 10]), (2, &[41])]);
    // 10 to 30: shards of 15, a window of 3.
    assert_eq!(r.set_limit(30), none());
    for id in 1..=20 {
        let expected = if id > 15 { vec![id - 3] } else { none() };
        assert_eq!(r.send(1, id), expected, "{id}");
    }
    r.check(&[(1, &cat(&[&ids(1..=12), &ids(18..=20)])), (2, &[41])]);
}

/// Not in Pekko: each operation on a tracked or untracked entity, under
/// every strategy, keeps the count right, passivates only tracked
/// entities, and keeps them within the limit.
#[test]
fn random_operations_keep_the_books() {
    let strategies = [
        PassivationSettings::least_recently_used(40),
        PassivationSettings::least_recently_used(40).with_replacement(segmented(&[0.2, 0.3, 0.5])),
        PassivationSettings::most_recently_used(40),
        PassivationSettings::least_frequently_used(40),
        PassivationSettings::least_frequently_used(40).with_replacement(
            ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true,
            },
        ),
        PassivationSettings::default_strategy().with_active_entity_limit(40),
        window_and_filter(),
        PassivationSettings::least_recently_used(40).with_admission_window(Some(
            AdmissionWindowSettings {
                policy: ReplacementPolicy::MostRecentlyUsed,
                proportion: 0.3,
                minimum_proportion: 0.0,
                maximum_proportion: 1.0,
                optimizer: Some(HillClimbingSettings {
                    adjust_multiplier: 0.5,
                    initial_step: 0.3,
                    ..HillClimbingSettings::default()
                }),
            },
        )),
        PassivationSettings::least_frequently_used(40).with_admission_window(Some(
            AdmissionWindowSettings {
                policy: ReplacementPolicy::LeastFrequentlyUsed {
                    dynamic_aging: true,
                },
                proportion: 0.5,
                minimum_proportion: 0.0,
                maximum_proportion: 1.0,
                optimizer: Some(HillClimbingSettings {
                    adjust_multiplier: 0.5,
                    initial_step: 0.5,
                    ..HillClimbingSettings::default()
                }),
            },
        )),
    ];
    for settings in strategies {
        let mut rng = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut limit = 40;
        let mut s = new_entity_limit(&settings, limit).unwrap();
        let mut active: BTreeSet<u64> = BTreeSet::new();
        for step in 0..20_000 {
            let id = next(120);
            let entity = EntityId::from(id.to_string());
            let passivated = match next(100) {
                0 => {
                    limit = next(60) as usize;
                    s.set_limit(limit)
                }
                1..=5 => {
                    active.remove(&id);
                    s.entity_terminated(&entity);
                    Vec::new()
                }
                _ if active.contains(&id) => {
                    s.entity_touched(&entity);
                    Vec::new()
                }
                _ => {
                    active.insert(id);
                    created(&mut *s, &entity)
                }
            };
            for p in passivated {
                let p: u64 = p.parse().unwrap();
                assert!(
                    active.remove(&p),
                    "{settings}: step {step}: {p} is not active"
                );
                if next(2) == 0 {
                    s.entity_terminated(&EntityId::from(p.to_string()));
                }
            }
            assert_eq!(s.active(), active.len(), "{settings}: step {step}");
            assert!(active.len() <= limit.max(1), "{settings}: step {step}");
        }
    }
}

/// Not in Pekko: a repeated `entity_created` is an access; a share of 0
/// keeps one entity.
#[test]
fn edge_cases() {
    for settings in [
        PassivationSettings::least_recently_used(2),
        PassivationSettings::most_recently_used(2),
        PassivationSettings::least_frequently_used(2),
        PassivationSettings::default_strategy().with_active_entity_limit(2),
    ] {
        let mut s = new_entity_limit(&settings, 2).unwrap();
        let (a, b, c) = (
            EntityId::from("a"),
            EntityId::from("b"),
            EntityId::from("c"),
        );
        assert!(created(&mut *s, &a).is_empty());
        assert!(created(&mut *s, &a).is_empty(), "{settings}");
        assert_eq!(s.active(), 1);
        s.entity_touched(&b);
        s.entity_terminated(&c);
        assert_eq!(s.active(), 1, "{settings}");
        assert!(created(&mut *s, &b).is_empty());
        assert_eq!(s.set_limit(0).len(), 1, "{settings}");
        assert_eq!(s.active(), 1, "{settings}");
        let passivated = created(&mut *s, &c);
        assert_eq!(passivated.len(), 1, "{settings}");
        assert_eq!(s.active(), 1, "{settings}");
        assert!(s.set_limit(1).is_empty());
    }
}

/// Not a test: `cargo test --release -p troupe-sharding --lib
/// passivation::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    let ids: Vec<EntityId> = (0..1_000_000)
        .map(|i| EntityId::from(format!("entity-{i}")))
        .collect();
    for settings in [
        PassivationSettings::least_recently_used(100_000),
        PassivationSettings::least_recently_used(100_000).with_replacement(segmented(&[0.2, 0.8])),
        PassivationSettings::most_recently_used(100_000),
        PassivationSettings::least_frequently_used(100_000),
        PassivationSettings::default_strategy(),
    ] {
        let mut s = new_entity_limit(&settings, 100_000).unwrap();
        let start = std::time::Instant::now();
        let mut passivated = 0;
        for id in &ids {
            passivated += created(&mut *s, id).len();
            s.entity_touched(id);
        }
        let elapsed = start.elapsed();
        eprintln!(
            "{settings}: {:.0} entity_created + entity_touched per second ({passivated} passivated)",
            ids.len() as f64 / elapsed.as_secs_f64()
        );
    }
}

/// `entity_created` with the victims as a fresh vector.
fn created(s: &mut dyn EntityLimit, id: &EntityId) -> Vec<EntityId> {
    let mut victims = Vec::new();
    s.entity_created(id, &mut victims);
    victims
}
