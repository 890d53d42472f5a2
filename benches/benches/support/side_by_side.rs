//! Two ways of doing the same work, timed side by side on a noisy host.
//!
//! A run is made of rounds; each round of chunks, and in every chunk both
//! sides do their part, one after the other. The side that goes first
//! alternates from chunk to chunk and from round to round. On the 2-core
//! hosts these benchmarks run on, the host's speed drifts between runs
//! seconds apart by more than the two sides differ (one build's ratios
//! went from 0.55 to 1.9 when each side ran once, in a row); chunks a
//! fraction of a second apart meet the same host.
//!
//! Each round gives each side a rate (its messages over its time); the
//! figure is the median of the rounds' ratios, printed with every round's
//! ratio and with the ratio of all rounds together.

#![allow(dead_code)]

/// Messages of one side and the seconds they took, over a round.
#[derive(Default, Clone, Copy)]
pub struct Tally {
    pub messages: u64,
    pub seconds: f64,
}

impl Tally {
    /// Adds a chunk of `messages` that took `seconds`.
    pub fn add(&mut self, messages: u64, seconds: f64) {
        self.messages += messages;
        self.seconds += seconds;
    }

    fn rate(&self) -> f64 {
        self.messages as f64 / self.seconds
    }
}

/// The sides in the order they go in chunk `chunk` of round `round`
/// (`true` for side A): A goes first in every other chunk, and each round
/// starts with the side that went second in the round before.
pub fn order(round: usize, chunk: u64) -> [bool; 2] {
    let a_first = (round as u64 + chunk).is_multiple_of(2);
    [a_first, !a_first]
}

/// The per-round rates of sides A (the baseline) and B.
#[derive(Default)]
pub struct SideBySide {
    a: Vec<f64>,
    b: Vec<f64>,
    /// All rounds together, each side.
    all: (Tally, Tally),
}

impl SideBySide {
    /// Records a round's tallies (a side that did not run has none).
    pub fn push(&mut self, a: &Tally, b: &Tally) {
        let sides = [
            (a, &mut self.a, &mut self.all.0),
            (b, &mut self.b, &mut self.all.1),
        ];
        for (tally, rates, all) in sides {
            if tally.messages > 0 {
                rates.push(tally.rate());
                all.add(tally.messages, tally.seconds);
            }
        }
    }

    /// The rounds' ratios, B over A.
    pub fn ratios(&self) -> Vec<f64> {
        self.a.iter().zip(&self.b).map(|(a, b)| b / a).collect()
    }

    /// Prints the median rate of each side (named `a` and `b`) and the
    /// median of the rounds' ratios (B / A), with every round's ratio and
    /// the ratio of all rounds together (each side's messages over its
    /// time).
    pub fn print(&self, what: &str, a: &str, b: &str) {
        if self.a.is_empty() && self.b.is_empty() {
            return;
        }
        let ratios = self.ratios();
        let rounds: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "  {what}: {a} {:>10.0} msg/s, {b} {:>10.0} msg/s ({:.2}x; medians of {} rounds, whose ratios were {}; all rounds together {:.2}x)",
            median(&self.a),
            median(&self.b),
            median(&ratios),
            self.a.len().max(self.b.len()),
            rounds.join(" "),
            self.all.1.rate() / self.all.0.rate()
        );
    }
}

/// The median (NaN for none).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A positive count from the environment variable `name`, or `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}
