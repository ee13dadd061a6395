// SPDX-License-Identifier: GPL-2.0

//! Targets measured with their operations interleaved: a ratio of two operations timed minutes
//! apart moves with everything else the machine does in between (under emulation, and on a
//! machine shared with other guests, more than with the code), so each timed target's
//! operations also run in turn, a block of each per round, and the target is computed from
//! them: once from the medians of all their rounds, and once per round, whose spread says how
//! far the figure can be trusted.

use crate::measure::WARMUP;
use crate::report::{self, Interleaved, Latency, Op};
use std::time::Duration;

/// Rounds of an interleaved measurement.
pub const ROUNDS: usize = 25;

/// An operation of an interleaved measurement: its key and words (as in `Report::ops`), the
/// repetitions of each of its blocks, and the operation, which returns the time of the part
/// it measures.
pub struct Step<'a> {
    pub key: &'static str,
    pub what: &'static str,
    pub block: usize,
    pub op: Box<dyn FnMut() -> Result<Duration, String> + 'a>,
}

impl<'a> Step<'a> {
    pub fn new(
        key: &'static str,
        what: &'static str,
        block: usize,
        op: impl FnMut() -> Result<Duration, String> + 'a,
    ) -> Self {
        Step {
            key,
            what,
            block: block.max(1),
            op: Box::new(op),
        }
    }
}

/// The median of `samples` (0 for none).
fn median(samples: &[u64]) -> u64 {
    let mut s = samples.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

/// Runs `steps` in turn, a block of each per round, [`ROUNDS`] rounds, after [`WARMUP`]
/// untimed repetitions of each; `figure` computes the target from the steps' medians, in
/// the steps' order.
pub fn measure(
    id: &str,
    what: &str,
    mut steps: Vec<Step<'_>>,
    figure: fn(&[u64]) -> Option<f64>,
) -> Result<Interleaved, String> {
    for s in steps.iter_mut() {
        for _ in 0..WARMUP {
            (s.op)()?;
        }
    }
    // samples[step][round]: the block's times, in nanoseconds.
    let mut samples: Vec<Vec<Vec<u64>>> = steps.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (s, out) in steps.iter_mut().zip(samples.iter_mut()) {
            let mut block = Vec::with_capacity(s.block);
            for _ in 0..s.block {
                block.push((s.op)()?.as_nanos() as u64);
            }
            out.push(block);
        }
    }
    let rounds = (0..ROUNDS)
        .filter_map(|r| figure(&samples.iter().map(|s| median(&s[r])).collect::<Vec<_>>()))
        .collect();
    let ops: Vec<Op> = steps
        .iter()
        .zip(samples)
        .map(|(s, rounds)| Op {
            key: s.key.into(),
            what: s.what.into(),
            latency: Latency::of(rounds.concat()),
        })
        .collect();
    let value = figure(&ops.iter().map(|o| o.latency.median_ns).collect::<Vec<_>>());
    let r = Interleaved {
        id: id.into(),
        what: what.into(),
        blocks: steps.iter().map(|s| s.block).collect(),
        ops,
        value,
        rounds,
    };
    eprintln!("bench: {id} interleaved: {}", r.summary());
    Ok(r)
}

/// `a / b` of the first two medians.
pub fn quotient(m: &[u64]) -> Option<f64> {
    report::quotient(m.first().copied(), m.get(1).copied())
}

/// P7: the kernel-API hit (REG_LOOP's) / PIN + UNPIN, of the medians of REG_LOOP's hit, its
/// hit alternating two regions (P7d's), the NIC's REG + DEREG, its null ioctl (the two P7c's:
/// [`report::kapi_time`]) and PIN + UNPIN, in that order.
pub fn kapi_loop_quotient(m: &[u64]) -> Option<f64> {
    report::quotient(m.first().copied(), m.get(4).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each step runs its blocks in turn, and the figure comes from the medians.
    #[test]
    fn rounds_alternate_and_figures_follow() {
        let order = std::cell::RefCell::new(Vec::new());
        let step = |key: &'static str, ns: u64, block| {
            let order = &order;
            Step::new(key, key, block, move || {
                order.borrow_mut().push(key);
                Ok(Duration::from_nanos(ns))
            })
        };
        let r = measure(
            "P",
            "a / b",
            vec![step("a", 300, 2), step("b", 100, 3)],
            quotient,
        )
        .unwrap();
        let order = order.into_inner();
        // Warm-up first, then a block of a and one of b per round.
        assert_eq!(
            &order[..2 * WARMUP],
            [vec!["a"; WARMUP], vec!["b"; WARMUP]].concat()
        );
        assert_eq!(
            &order[2 * WARMUP..2 * WARMUP + 5],
            ["a", "a", "b", "b", "b"]
        );
        assert_eq!(order.len(), 2 * WARMUP + ROUNDS * 5);
        assert_eq!(r.value, Some(3.0));
        assert_eq!(r.rounds, vec![3.0; ROUNDS]);
        assert_eq!(r.ops[1].latency.reps, 3 * ROUNDS);
    }

    #[test]
    fn kapi_loop_quotient_divides_the_first_by_the_last() {
        assert_eq!(kapi_loop_quotient(&[3, 5, 10, 2, 12]), Some(0.25));
        assert_eq!(kapi_loop_quotient(&[3, 5, 10, 2, 0]), None);
        assert_eq!(kapi_loop_quotient(&[3, 5, 10, 2]), None);
    }
}
