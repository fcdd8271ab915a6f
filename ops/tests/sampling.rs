//! `sampling::argmax_rows` against candle's CPU `argmax` (first of equal maxima, NaN
//! skipped, a NaN first element the answer) and `sum`, on rows of one to many workgroups,
//! with ties across and within workgroups, NaN and infinite values placed by proptest.
//! `sampling::sample_rows` against the distribution its settings define, computed here in
//! f64 (min-p, top-k, top-p over the renormalised top-k): a chi-square test over many
//! draws, the filtered tokens never drawn, reproducible draws.

mod common;
use common::device;

use candle_core::{Device as Cpu, Tensor};
use proptest::prelude::*;
use vkml_hal::{MemoryKind, Stream};
use vkml_ops::sampling::{argmax_rows, argmax_scratch_words, sample_rows, sample_scratch_words, Draw, SampleParams};

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

/// `rows` draws from `v` (one row of logits repeated: row r of batch b has counter
/// (draw + b, r); batches of at most 16 MiB of logits), and the rows' sums.
fn draw(v: &[f32], rows: usize, params: &SampleParams, draw: u64) -> (Vec<u32>, Vec<f32>) {
    let dev = device();
    let n = v.len();
    let batch = (4usize << 20).div_ceil(n).clamp(1, rows);
    let all: Vec<f32> = (0..batch).flat_map(|_| v.iter().copied()).collect();
    let x = dev.upload(&all).unwrap();
    let chosen = dev.alloc(4 * rows as u64, MemoryKind::Readback).unwrap();
    let sums = dev.alloc(4 * rows as u64, MemoryKind::Readback).unwrap();
    let mut s = Stream::new(dev).unwrap();
    let (mut c, mut sm) = (Vec::new(), Vec::new());
    for (b, start) in (0..rows).step_by(batch).enumerate() {
        let r = batch.min(rows - start);
        let ids = dev.alloc(4 * r as u64, MemoryKind::DeviceLocal).unwrap();
        let scratch = dev.alloc(4 * sample_scratch_words(r, n, params) as u64, MemoryKind::DeviceLocal).unwrap();
        sample_rows(&mut s, &x, 0, r, n, params, Draw::Counter(draw + b as u64), &scratch, &chosen, &sums, &ids)
            .unwrap();
        s.finish_and_wait().unwrap();
        let (got, i, sum): (Vec<u32>, Vec<u32>, Vec<f32>) =
            (chosen.to_vec().unwrap(), ids.to_vec().unwrap(), sums.to_vec().unwrap());
        assert_eq!(got[..r], i[..]);
        c.extend_from_slice(&got[..r]);
        sm.extend_from_slice(&sum[..r]);
    }
    (c, sm)
}

/// The probabilities `params` define over `v`, in f64: min-p on the raw logits (the floor
/// `max + ln(min_p)` in f32, as the host sampler computes it), softmax of `l / T`, the
/// `top_k` largest, then the fewest largest whose renormalised probability reaches
/// `top_p` (candle's `sample_topp`: a token is kept while the sum before it is below p).
fn expected(v: &[f32], params: &SampleParams) -> Vec<f64> {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let floor = if params.min_p > 0.0 { max + (params.min_p as f64).ln() as f32 } else { f32::NEG_INFINITY };
    let t = params.temperature as f64;
    let mut p: Vec<f64> =
        v.iter().map(|&l| if l >= floor { ((l as f64 - max as f64) / t).exp() } else { 0.0 }).collect();
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
    if params.top_k > 0 {
        for &i in order.iter().skip(params.top_k as usize) {
            p[i] = 0.0;
        }
    }
    let z: f64 = p.iter().sum();
    let mut before = 0.0;
    for &i in &order {
        if before >= params.top_p as f64 * z {
            p[i] = 0.0;
        } else {
            before += p[i];
        }
    }
    let z: f64 = p.iter().sum();
    p.iter().map(|x| x / z).collect()
}

/// Pearson's chi-square of `counts` against `probs` (bins of expectation below 5 merged),
/// with its degrees of freedom; and the draws of tokens of probability 0.
fn chi_square(counts: &[usize], probs: &[f64]) -> (f64, usize, usize) {
    let total: usize = counts.iter().sum();
    let outside = counts.iter().zip(probs).filter(|(_, &p)| p == 0.0).map(|(c, _)| c).sum();
    let (mut chi, mut bins, mut pooled_o, mut pooled_e) = (0.0, 0usize, 0.0, 0.0);
    for (&c, &p) in counts.iter().zip(probs).filter(|(_, &p)| p > 0.0) {
        let e = p * total as f64;
        if e < 5.0 {
            pooled_o += c as f64;
            pooled_e += e;
        } else {
            chi += (c as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if pooled_e > 0.0 {
        chi += (pooled_o - pooled_e).powi(2) / pooled_e.max(1e-9);
        bins += 1;
    }
    (chi, bins.saturating_sub(1), outside)
}

/// The chi-square value that a right distribution exceeds with probability 1e-6 at `df`
/// degrees of freedom (Wilson-Hilferty).
fn chi_square_bound(df: usize) -> f64 {
    let d = df.max(1) as f64;
    let z = 4.753;
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

/// Distinct logits over 40 tokens (a spread like a language model's head: a few likely
/// tokens, a long tail).
fn logits40() -> Vec<f32> {
    (0..40).map(|i| ((i * 17) % 40) as f32 * 0.15 - 2.0 + (i % 3) as f32 * 0.01).collect()
}

/// 20 000 draws for each combination of the filters: the counts fit the distribution
/// the settings define (chi-square below its 1e-6 quantile), the tokens the filters drop
/// never come, and a wrong distribution (a 50 % hotter softmax, top-p one token short)
/// fails the same test.
#[test]
fn sample_rows_draws_from_the_filtered_softmax() {
    let v = logits40();
    let base = SampleParams { temperature: 0.8, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 42 };
    let cases = [
        base,
        SampleParams { temperature: 1.7, ..base },
        SampleParams { top_k: 7, ..base },
        SampleParams { top_p: 0.6, ..base },
        SampleParams { top_k: 12, top_p: 0.8, ..base },
        SampleParams { min_p: 0.2, ..base },
        SampleParams { temperature: 1.3, top_k: 20, top_p: 0.9, min_p: 0.05, seed: 7 },
        SampleParams { top_k: 1, ..base },
        SampleParams { top_k: 40, top_p: 1.0, ..base },
    ];
    let rows = 20_000;
    for params in cases {
        let (ids, sums) = draw(&v, rows, &params, 1000);
        assert!(sums.iter().all(|s| s.is_finite()));
        let mut counts = vec![0usize; v.len()];
        for &i in &ids {
            counts[i as usize] += 1;
        }
        let want = expected(&v, &params);
        let (chi, df, outside) = chi_square(&counts, &want);
        assert_eq!(outside, 0, "{params:?}: filtered tokens drawn: {counts:?} for {want:?}");
        assert!(chi < chi_square_bound(df), "{params:?}: chi-square {chi} at {df} df: {counts:?} for {want:?}");
        // The test tells a wrong distribution from the right one.
        if want.iter().filter(|&&p| p > 0.0).count() == 1 {
            continue;
        }
        let hotter = expected(&v, &SampleParams { temperature: params.temperature * 1.5, ..params });
        let (chi, df, outside) = chi_square(&counts, &hotter);
        assert!(outside > 0 || chi > chi_square_bound(df), "{params:?}: a 50 % hotter softmax passes");
    }
    // Top-p keeping one token fewer (p just below the sum of the kept tokens but one)
    // would leave the last kept token undrawn.
    let params = SampleParams { top_p: 0.6, ..base };
    let want = expected(&v, &params);
    let kept = want.iter().filter(|&&p| p > 0.0).count();
    let (ids, _) = draw(&v, 4000, &params, 5);
    let mut seen: Vec<u32> = ids.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), kept, "{seen:?}");
}

/// A vocabulary of 150 000 whose logits differ only in their last bits near the top
/// (the radix select resolves every level): the draws stay inside the top-k / top-p set
/// computed on the CPU, and every token of a small kept set comes.
#[test]
fn sample_rows_large_vocabulary_and_close_logits() {
    let n = 150_000;
    let mut v: Vec<f32> = (0..n).map(|i| -8.0 + ((i * 7919) % 1000) as f32 * 0.004).collect();
    // 30 tokens just above 4.0, one ulp-scale apart, spread over the row.
    let top = 4.0f32;
    for j in 0..30u32 {
        v[(j as usize * 4999 + 13) % n] = f32::from_bits(top.to_bits() + j * 3);
    }
    for params in [
        SampleParams { temperature: 1.0, top_k: 10, top_p: 1.0, min_p: 0.0, seed: 3 },
        SampleParams { temperature: 1.0, top_k: 0, top_p: 0.5, min_p: 0.0, seed: 4 },
        SampleParams { temperature: 0.5, top_k: 25, top_p: 0.7, min_p: 0.0, seed: 5 },
    ] {
        let want = expected(&v, &params);
        let kept: Vec<usize> = (0..n).filter(|&i| want[i] > 0.0).collect();
        assert!(kept.len() >= 5 && kept.len() <= 30, "{params:?}: {} kept", kept.len());
        let (ids, _) = draw(&v, 300, &params, 0);
        let mut counts = vec![0usize; n];
        for &i in &ids {
            counts[i as usize] += 1;
        }
        let (chi, df, outside) = chi_square(&counts, &want);
        assert_eq!(outside, 0, "{params:?}: drew outside the kept set {kept:?}");
        assert!(chi < chi_square_bound(df), "{params:?}: chi-square {chi} at {df} df");
        assert!(kept.iter().all(|&i| counts[i] > 0), "{params:?}: a kept token never came");
    }
}

/// The same seed and draw give the same tokens; another seed or draw others; a row with
/// a NaN or an infinity chooses 0 with a sum that is not finite; settings out of range
/// are errors naming them.
#[test]
fn sample_rows_is_reproducible_and_checks_its_input() {
    let v = logits40();
    let params = SampleParams { temperature: 1.0, top_k: 0, top_p: 0.95, min_p: 0.0, seed: 11 };
    let a = draw(&v, 64, &params, 9).0;
    assert_eq!(a, draw(&v, 64, &params, 9).0);
    assert_ne!(a, draw(&v, 64, &params, 10).0);
    assert_ne!(a, draw(&v, 64, &SampleParams { seed: 12, ..params }, 9).0);
    let mut bad = v.clone();
    bad[3] = f32::NAN;
    let (ids, sums) = draw(&bad, 2, &params, 0);
    assert_eq!(ids, vec![0, 0]);
    assert!(sums.iter().all(|s| s.is_nan()));
    bad[3] = f32::INFINITY;
    assert!(draw(&bad, 1, &params, 0).1[0].is_infinite());
    let dev = device();
    let x = dev.upload(&v).unwrap();
    let out = dev.alloc(4, MemoryKind::DeviceLocal).unwrap();
    let mut s = Stream::new(dev).unwrap();
    for (p, what) in [
        (SampleParams { temperature: 0.0, ..params }, "temperature 0"),
        (SampleParams { temperature: f32::NAN, ..params }, "temperature NaN"),
        (SampleParams { top_p: 0.0, ..params }, "top-p 0"),
        (SampleParams { top_p: 1.5, ..params }, "top-p 1.5"),
        (SampleParams { min_p: -0.1, ..params }, "min-p -0.1"),
    ] {
        let e = sample_rows(&mut s, &x, 0, 1, v.len(), &p, Draw::Counter(0), &out, &out, &out, &out)
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
    }
    let e = sample_rows(&mut s, &x, 0, 2, v.len(), &params, Draw::Counter(0), &out, &out, &out, &out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("x holds 160 bytes, needs 320"), "{e}");
}

/// A replayed recording that draws with the counter in a step buffer (`Draw::Step`),
/// resubmitted with the counter written between submissions, chooses what dispatches
/// recorded with each counter choose: 64 rows at counters 0..40, on the row itself and
/// through the candidate stage.
#[test]
fn sample_rows_draws_with_a_counter_from_a_step_buffer() {
    let dev = device();
    let small = logits40();
    let large: Vec<f32> = (0..20_000).map(|i| ((i * 7919) % 20_000) as f32 * 4e-4 - 4.0).collect();
    for (v, params) in [
        (&small, SampleParams { temperature: 0.9, top_k: 0, top_p: 0.9, min_p: 0.0, seed: 5 }),
        (&large, SampleParams { temperature: 1.2, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 6 }),
    ] {
        let (rows, n) = (64, v.len());
        let all: Vec<f32> = (0..rows).flat_map(|_| v.iter().copied()).collect();
        let x = dev.upload(&all).unwrap();
        let buf = |kind| dev.alloc(4 * rows as u64, kind).unwrap();
        let (chosen, sums, ids) = (buf(MemoryKind::Readback), buf(MemoryKind::Readback), buf(MemoryKind::DeviceLocal));
        let scratch = dev.alloc(4 * sample_scratch_words(rows, n, &params) as u64, MemoryKind::DeviceLocal).unwrap();
        let step = dev.alloc(4, MemoryKind::Upload).unwrap();
        let mut s = Stream::new(dev).unwrap();
        sample_rows(&mut s, &x, 0, rows, n, &params, Draw::Step(&step), &scratch, &chosen, &sums, &ids).unwrap();
        let mut rec = s.into_recording().unwrap();
        let mut distinct = std::collections::HashSet::new();
        for counter in 0..40u32 {
            step.write(0, &counter.to_le_bytes()).unwrap();
            rec.submit().unwrap().wait().unwrap();
            let replayed: Vec<u32> = chosen.to_vec().unwrap();
            let (recorded, _) = draw(v, rows, &params, u64::from(counter));
            assert_eq!(replayed[..rows], recorded[..], "n {n}, counter {counter}");
            distinct.insert(replayed);
        }
        assert!(distinct.len() > 30, "n {n}: the counters drew only {} distinct choices", distinct.len());
    }
}

/// Where the candidate stage runs (top-k of at most 256 over rows of 8192 or more): a
/// slice with more logits equal to its k-th than its slots (600 ties at the top, top-k
/// 5) sends the draw back to the whole row, which keeps every tie; a row with a NaN in
/// a later slice still reports a NaN sum.
#[test]
fn sample_rows_candidate_overflow_and_sums() {
    let n = 20_000;
    let mut v: Vec<f32> = (0..n).map(|i| -3.0 + ((i * 37) % 1000) as f32 * 0.001).collect();
    for j in 0..600 {
        v[j * 3] = 5.0;
    }
    let params = SampleParams { temperature: 1.0, top_k: 5, top_p: 1.0, min_p: 0.0, seed: 8 };
    let (ids, sums) = draw(&v, 400, &params, 3);
    assert!(ids.iter().all(|&i| i % 3 == 0 && i < 1800), "{ids:?}");
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert!(distinct.len() > 200, "{} distinct of 600 ties", distinct.len());
    let want: f32 = v.iter().sum();
    assert!((sums[0] - want).abs() <= 1e-3 * want.abs(), "{} against {want}", sums[0]);
    v[n - 7] = f32::NAN;
    let (ids, sums) = draw(&v, 1, &params, 3);
    assert!(ids == [0] && sums[0].is_nan(), "{ids:?} {sums:?}");
}

/// The candidate stage with its last slice's slots exactly full (10 of 10: a 4.9 at the
/// slice's last index and nine tied 4.4s for top-k 5): the draw's passes read past the
/// candidates and must not count the last slot again; the kept set is the row's top 5
/// (4.9 .. 4.5), every one drawn. A top-p so small that p times the total rounds below one
/// unit still keeps the top token alone.
#[test]
fn sample_rows_full_last_slice_and_tiny_top_p() {
    let n = 3 * 4096;
    let mut v: Vec<f32> = (0..n).map(|i| -2.0 + ((i * 37) % 1000) as f32 * 0.001).collect();
    let last = 2 * 4096;
    for j in 0..9 {
        v[last + 100 + j * 300] = 4.4;
    }
    v[n - 1] = 4.9;
    for (at, x) in [(7usize, 4.8f32), (3007, 4.7), (5007, 4.6), (7007, 4.5)] {
        v[at] = x;
    }
    let params = SampleParams { temperature: 1.0, top_k: 5, top_p: 1.0, min_p: 0.0, seed: 21 };
    let (ids, _) = draw(&v, 400, &params, 0);
    let want: std::collections::BTreeSet<u32> = [n as u32 - 1, 7, 3007, 5007, 7007].into_iter().collect();
    let got: std::collections::BTreeSet<u32> = ids.iter().copied().collect();
    assert_eq!(got, want);
    let tiny = SampleParams { temperature: 1.0, top_k: 0, top_p: 1e-12, min_p: 0.0, seed: 22 };
    let (ids, _) = draw(&v, 50, &tiny, 0);
    assert!(ids.iter().all(|&i| i == n as u32 - 1), "{ids:?}");
}
