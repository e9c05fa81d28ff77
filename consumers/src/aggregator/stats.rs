//! Streaming statistics of one numeric field: count, mean and standard deviation (Welford),
//! minimum, maximum, last value, and quantiles. Quantiles are exact while a window holds at
//! most [`EXACT_QUANTILES_UP_TO`] values, while every value is the same, and always for bools
//! (their quantiles follow from the count of ones); otherwise they come from a DDSketch. All of
//! it merges, so the experiment-level statistics are the merge of the closed windows'.

use sketches_ddsketch::{Config, DDSketch};

/// Relative accuracy of the quantiles: a reported p-quantile is within 1 % of the value at
/// rank ⌊p·(n−1)⌋ of the sorted values (DDSketch's guarantee).
pub const QUANTILE_RELATIVE_ACCURACY: f64 = 0.01;

/// Up to this many values, quantiles are exact (the values are kept and sorted when asked).
pub const EXACT_QUANTILES_UP_TO: usize = 256;

/// The quantiles every summary reports.
pub(crate) const QUANTILES: [(&str, f64); 3] = [("p50", 0.50), ("p95", 0.95), ("p99", 0.99)];

fn sketch_config() -> Config {
    // 2048 bins cover values over 17 orders of magnitude at 1 %; |v| ≤ 1e-9 counts as zero.
    Config::new(QUANTILE_RELATIVE_ACCURACY, 2048, 1e-9)
}

/// What a field's quantiles are computed from.
#[derive(Clone)]
enum Dist {
    /// The values themselves (at most [`EXACT_QUANTILES_UP_TO`]).
    Exact(Vec<f64>),
    /// More values than that, all equal to `min` (no storage, no sketch).
    Same,
    /// A bool: the number of ones is all there is to know.
    Binary { ones: u64 },
    /// A sketch of every value.
    Sketch(Box<DDSketch>),
}

/// One field's statistics.
#[derive(Clone)]
pub(crate) struct Stat {
    pub(crate) count: u64,
    mean: f64,
    m2: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) last: f64,
    dist: Dist,
}

impl Default for Stat {
    fn default() -> Stat {
        Stat {
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            last: f64::NAN,
            dist: Dist::Exact(Vec::new()),
        }
    }
}

impl std::fmt::Debug for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stat")
            .field("count", &self.count)
            .field("mean", &self.mean)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Stat {
    /// Statistics of a bool field (values 0 and 1).
    pub(crate) fn binary() -> Stat {
        Stat {
            dist: Dist::Binary { ones: 0 },
            ..Stat::default()
        }
    }

    /// Adds one value (NaN is ignored: it has no place in an order or a mean).
    #[inline]
    pub(crate) fn add(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        self.count += 1;
        let delta = v - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (v - self.mean);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.last = v;
        match &mut self.dist {
            Dist::Sketch(s) => s.add(v),
            Dist::Binary { ones } => *ones += u64::from(v != 0.0),
            Dist::Same if v == self.min && v == self.max => {}
            Dist::Same => {
                // The first value that differs: all earlier ones were `v_old`.
                let old = if v == self.max { self.min } else { self.max };
                let mut s = new_sketch();
                s.add_with_count(old, self.count - 1);
                s.add(v);
                self.dist = Dist::Sketch(s);
            }
            Dist::Exact(values) => {
                values.push(v);
                if values.len() > EXACT_QUANTILES_UP_TO {
                    self.dist = self.spilled();
                }
            }
        }
    }

    /// What too many exact values become: `Same` if they are all equal, else a sketch.
    fn spilled(&self) -> Dist {
        if self.min == self.max {
            return Dist::Same;
        }
        Dist::Sketch(self.to_sketch())
    }

    /// A sketch of every value so far.
    fn to_sketch(&self) -> Box<DDSketch> {
        match &self.dist {
            Dist::Sketch(s) => s.clone(),
            Dist::Exact(values) => {
                let mut s = new_sketch();
                values.iter().for_each(|v| s.add(*v));
                s
            }
            Dist::Same => {
                let mut s = new_sketch();
                if self.count > 0 {
                    s.add_with_count(self.min, self.count);
                }
                s
            }
            Dist::Binary { ones } => {
                let mut s = new_sketch();
                s.add_with_count(0.0, self.count - ones);
                s.add_with_count(1.0, *ones);
                s
            }
        }
    }

    /// Folds `later` (statistics of values that came after these) into `self` (Chan et al.'s
    /// parallel update for the moments; distributions merge exactly where they can).
    pub(crate) fn merge(&mut self, later: &Stat) {
        if later.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = later.clone();
            return;
        }
        let dist = match (&mut self.dist, &later.dist) {
            (Dist::Binary { ones }, Dist::Binary { ones: theirs }) => Dist::Binary {
                ones: *ones + theirs,
            },
            (Dist::Exact(mine), Dist::Exact(theirs))
                if mine.len() + theirs.len() <= EXACT_QUANTILES_UP_TO =>
            {
                mine.extend_from_slice(theirs);
                Dist::Exact(std::mem::take(mine))
            }
            (mine, theirs)
                if self.min == self.max
                    && later.min == later.max
                    && self.min == later.min
                    && !matches!(mine, Dist::Binary { .. })
                    && !matches!(theirs, Dist::Binary { .. }) =>
            {
                // One value throughout.
                let total = self.count + later.count;
                if total as usize <= EXACT_QUANTILES_UP_TO {
                    Dist::Exact(vec![self.min; total as usize])
                } else {
                    Dist::Same
                }
            }
            _ => {
                let mut s = self.to_sketch();
                // Same configuration on both sides, so the merge cannot fail.
                let _ = s.merge(&later.to_sketch());
                Dist::Sketch(s)
            }
        };
        let n = (self.count + later.count) as f64;
        let delta = later.mean - self.mean;
        self.mean += delta * later.count as f64 / n;
        self.m2 += later.m2 + delta * delta * self.count as f64 * later.count as f64 / n;
        self.count += later.count;
        self.min = self.min.min(later.min);
        self.max = self.max.max(later.max);
        self.last = later.last;
        self.dist = dist;
    }

    /// The mean (NaN when empty).
    pub(crate) fn mean(&self) -> f64 {
        if self.count == 0 { f64::NAN } else { self.mean }
    }

    /// The population standard deviation (NaN when empty, 0 for one value).
    pub(crate) fn std(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            (self.m2 / self.count as f64).max(0.0).sqrt()
        }
    }

    /// The minimum (NaN when empty).
    pub(crate) fn min(&self) -> f64 {
        if self.count == 0 { f64::NAN } else { self.min }
    }

    /// The maximum (NaN when empty).
    pub(crate) fn max(&self) -> f64 {
        if self.count == 0 { f64::NAN } else { self.max }
    }

    /// The [`QUANTILES`]: each the value at rank ⌊q·(n−1)⌋ of the sorted values (numpy's
    /// `method="lower"`), exactly or within [`QUANTILE_RELATIVE_ACCURACY`]; NaN when empty.
    pub(crate) fn quantiles(&self) -> [f64; 3] {
        let rank = |q: f64| (q * (self.count - 1) as f64) as u64;
        if self.count == 0 {
            return [f64::NAN; 3];
        }
        match &self.dist {
            Dist::Exact(values) => {
                let mut sorted = values.clone();
                sorted.sort_unstable_by(f64::total_cmp);
                QUANTILES.map(|(_, q)| sorted[(rank(q) as usize).min(sorted.len() - 1)])
            }
            Dist::Same => [self.min; 3],
            Dist::Binary { ones } => QUANTILES.map(|(_, q)| {
                if rank(q) < self.count - ones {
                    0.0
                } else {
                    1.0
                }
            }),
            Dist::Sketch(s) => QUANTILES.map(|(_, q)| {
                s.quantile(q)
                    .ok()
                    .flatten()
                    .map_or(f64::NAN, |v| v.clamp(self.min, self.max))
            }),
        }
    }

    /// One quantile (see [`Stat::quantiles`]).
    #[cfg(test)]
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        let i = QUANTILES
            .iter()
            .position(|(_, x)| *x == q)
            .expect("one of QUANTILES");
        self.quantiles()[i]
    }
}

fn new_sketch() -> Box<DDSketch> {
    Box::new(DDSketch::new(sketch_config()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(values: &[f64]) -> (f64, f64) {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    /// `s` with every value of `v` added.
    fn stat_of(mut s: Stat, v: &[f64]) -> Stat {
        v.iter().for_each(|x| s.add(*x));
        s
    }

    /// `v`, sorted.
    fn sorted_copy(v: &[f64]) -> Vec<f64> {
        let mut sorted = v.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted
    }

    /// The quantile `q` of `sorted` by rank, as the exact path finds it.
    fn nth(sorted: &[f64], q: f64) -> f64 {
        sorted[(q * (sorted.len() - 1) as f64) as usize]
    }

    /// Asserts that every quantile of `s` is within the sketch's accuracy of the exact one
    /// (`what`: a prefix for the message).
    fn assert_quantiles_near(s: &Stat, sorted: &[f64], what: &str) {
        for (_, q) in QUANTILES {
            let (want, got) = (nth(sorted, q), s.quantile(q));
            assert!(
                (got - want).abs() <= QUANTILE_RELATIVE_ACCURACY * want.abs() + 1e-9,
                "{what}q{q}: {got} vs {want}"
            );
        }
    }

    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 11) as f64 / (1u64 << 53) as f64) * 200.0 - 50.0
            })
            .collect()
    }

    #[test]
    fn moments_and_quantiles_match_a_sorted_reference() {
        let v = values(10_001, 7);
        let s = stat_of(Stat::default(), &v);
        let (mean, std) = exact(&v);
        assert_eq!(s.count, v.len() as u64);
        assert!((s.mean() - mean).abs() < 1e-9 * mean.abs().max(1.0));
        assert!((s.std() - std).abs() < 1e-9 * std);
        let sorted = sorted_copy(&v);
        assert_eq!(s.min(), sorted[0]);
        assert_eq!(s.max(), sorted[sorted.len() - 1]);
        assert_eq!(s.last, v[v.len() - 1]);
        assert_quantiles_near(&s, &sorted, "");
    }

    #[test]
    fn merging_windows_equals_adding_everything_in_order() {
        let v = values(3_000, 11);
        let mut whole = Stat::default();
        v.iter().for_each(|x| whole.add(*x));
        let mut merged = Stat::default();
        for chunk in v.chunks(777) {
            let mut w = Stat::default();
            chunk.iter().for_each(|x| w.add(*x));
            merged.merge(&w);
        }
        assert_eq!(merged.count, whole.count);
        assert!((merged.mean() - whole.mean()).abs() < 1e-9);
        assert!((merged.std() - whole.std()).abs() < 1e-9);
        assert_eq!(
            (merged.min(), merged.max(), merged.last),
            (whole.min(), whole.max(), whole.last)
        );
        for (_, q) in QUANTILES {
            assert_eq!(merged.quantile(q), whole.quantile(q));
        }
    }

    #[test]
    fn nan_is_ignored_and_empty_is_nan() {
        let mut s = Stat::default();
        assert!(s.mean().is_nan() && s.quantile(0.5).is_nan() && s.min().is_nan());
        s.add(f64::NAN);
        assert_eq!(s.count, 0);
        s.add(2.0);
        assert_eq!(
            (s.count, s.mean(), s.std(), s.quantile(0.99)),
            (1, 2.0, 0.0, 2.0)
        );
    }

    #[test]
    fn constant_and_bool_fields_have_exact_quantiles_at_any_count() {
        let n = EXACT_QUANTILES_UP_TO * 4 + 3;
        let mut same = Stat::default();
        (0..n).for_each(|_| same.add(7.5));
        assert_eq!(same.quantiles(), [7.5; 3]);
        // The first different value: a sketch holding both, the 7.5s counted.
        same.add(-1.0);
        let mut sorted = vec![7.5; n];
        sorted.push(-1.0);
        sorted.sort_by(f64::total_cmp);
        for (_, q) in QUANTILES {
            let want = nth(&sorted, q);
            assert!((same.quantile(q) - want).abs() <= 0.01 * want.abs(), "q{q}");
        }
        // Bools: exact, and merged exactly.
        let bits: Vec<f64> = (0..n).map(|i| if i % 10 < 3 { 1.0 } else { 0.0 }).collect();
        let (a, b) = bits.split_at(n / 3);
        let mut sa = stat_of(Stat::binary(), a);
        sa.merge(&stat_of(Stat::binary(), b));
        let sorted = sorted_copy(&bits);
        for (_, q) in QUANTILES {
            assert_eq!(sa.quantile(q), nth(&sorted, q));
        }
        // Constant windows merge into a constant experiment, with no sketch.
        let mut w = Stat::default();
        (0..300).for_each(|_| w.add(3.0));
        let mut e = Stat::default();
        (0..5).for_each(|_| e.merge(&w));
        assert_eq!((e.count, e.quantiles()), (1500, [3.0; 3]));
        assert!(matches!(e.dist, Dist::Same));
    }

    #[test]
    fn small_windows_have_exact_quantiles_and_merge_across_the_threshold() {
        let v = values(EXACT_QUANTILES_UP_TO, 3);
        let s = stat_of(Stat::default(), &v);
        let sorted = sorted_copy(&v);
        for (_, q) in QUANTILES {
            assert_eq!(s.quantile(q), nth(&sorted, q));
        }
        // Small + small past the threshold, small into large and large into small: all
        // within the sketch's accuracy of the exact answer.
        let w = values(EXACT_QUANTILES_UP_TO * 3, 5);
        for split in [
            10,
            EXACT_QUANTILES_UP_TO - 1,
            EXACT_QUANTILES_UP_TO + 7,
            w.len() - 3,
        ] {
            let (a, b) = w.split_at(split);
            let mut sa = stat_of(Stat::default(), a);
            sa.merge(&stat_of(Stat::default(), b));
            let sorted = sorted_copy(&w);
            assert_quantiles_near(&sa, &sorted, &format!("split {split} "));
        }
    }
}
