//! `sampling::argmax_rows` against candle's CPU `argmax` (first of equal maxima, NaN
//! skipped, a NaN first element the answer) and `sum`, on rows of one to many workgroups,
//! with ties across and within workgroups, NaN and infinite values placed by proptest.

mod common;
use common::device;

use candle_core::{Device as Cpu, Tensor};
use proptest::prelude::*;
use vkml_hal::{MemoryKind, Stream};
use vkml_ops::sampling::{argmax_rows, argmax_scratch_words};

/// Logits in [-4, 4) on a grid of 1/8 (so that ties are common), with `specials` values
/// set at chosen places: 0 = NaN, 1 = +inf, 2 = -inf, 3 = the row's grid maximum again.
fn rows_strategy() -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (1usize..4, prop_oneof![1usize..300, 4000usize..5000, 60_000usize..70_000]).prop_flat_map(|(t, n)| {
        (
            Just(t),
            Just(n),
            proptest::collection::vec(-32i32..32, t * n),
            proptest::collection::vec((0usize..t * n, 0u8..4), 0..6),
        )
            .prop_map(|(t, n, grid, specials)| {
                let mut v: Vec<f32> = grid.iter().map(|&g| g as f32 / 8.0).collect();
                for (at, what) in specials {
                    v[at] = match what {
                        0 => f32::NAN,
                        1 => f32::INFINITY,
                        2 => f32::NEG_INFINITY,
                        _ => 31.0 / 8.0,
                    };
                }
                (t, n, v)
            })
    })
}

fn run(t: usize, n: usize, v: &[f32], offset: usize) -> (Vec<u32>, Vec<f32>, Vec<u32>) {
    let dev = device();
    let mut padded = vec![0.5f32; offset];
    padded.extend_from_slice(v);
    let x = dev.upload(&padded).unwrap();
    let scratch = dev.alloc(4 * argmax_scratch_words(t, n) as u64, MemoryKind::DeviceLocal).unwrap();
    let chosen = dev.alloc(4 * t as u64, MemoryKind::Readback).unwrap();
    let sums = dev.alloc(4 * t as u64, MemoryKind::Readback).unwrap();
    let ids = dev.alloc(4 * t as u64, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(dev).unwrap();
    // Twice: the counters must start from zero however the scratch was left.
    for _ in 0..2 {
        argmax_rows(&mut s, &x, offset, t, n, &scratch, &chosen, &sums, &ids).unwrap();
    }
    s.finish_and_wait().unwrap();
    (chosen.to_vec().unwrap(), sums.to_vec().unwrap(), ids.to_vec().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn argmax_rows_matches_candle((t, n, v) in rows_strategy(), offset in 0usize..5) {
        let (chosen, sums, ids) = run(t, n, &v, offset);
        let cpu = Tensor::from_vec(v.clone(), (t, n), &Cpu::Cpu).unwrap();
        let want: Vec<u32> = cpu.argmax(1).unwrap().to_vec1().unwrap();
        prop_assert_eq!(&chosen, &want);
        prop_assert_eq!(&ids, &want);
        for r in 0..t {
            let row = &v[r * n..(r + 1) * n];
            let finite = row.iter().all(|x| x.is_finite());
            prop_assert_eq!(sums[r].is_finite(), finite, "row {}: sum {}", r, sums[r]);
            if finite {
                // Sums of multiples of 1/8 below 2^21 in magnitude are exact in f32.
                let want: f32 = row.iter().sum();
                prop_assert_eq!(sums[r], want);
            }
        }
    }
}

/// The edges candle's fold defines: a NaN first element wins; ties go to the first; a
/// row of -inf picks 0; an all-NaN row picks 0.
#[test]
fn argmax_rows_edges() {
    let n = 9000; // three workgroups
    let mut v = vec![0.0f32; 4 * n];
    v[0] = f32::NAN;
    v[5] = 1.0;
    v[n + 4500] = 2.0;
    v[n + 8999] = 2.0;
    v[n + 100] = f32::NAN;
    v[2 * n..3 * n].fill(f32::NEG_INFINITY);
    v[3 * n..].fill(f32::NAN);
    let (chosen, sums, _) = run(4, n, &v, 0);
    assert_eq!(chosen, vec![0, 4500, 0, 0]);
    assert!(sums[0].is_nan() && sums[1].is_nan() && sums[2] == f32::NEG_INFINITY && sums[3].is_nan(), "{sums:?}");
}
