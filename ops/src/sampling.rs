//! Choosing tokens on the device, so that a decode step can feed its own choice to the
//! next step and the host reads back one id: [`argmax_rows`], greedy decoding's choice
//! and a finiteness check of the logits in one dispatch (`argmax.comp`); [`sample_rows`],
//! a seeded draw at a temperature with min-p, top-k and top-p in one dispatch
//! (`sample.comp`).

use vkml_hal::{Buffer, Stream};

use crate::error::{OpsError, Result};
use crate::launch::{pipeline, push_words};

/// Invocations of an `argmax` workgroup.
const WORKGROUP: u32 = 256;
/// Elements each invocation folds, at most: a row of `n` gets `ceil(n / (256 · 16))`
/// workgroups (12 for a vocabulary of 49 152, 64 for 262 144).
const PER_INVOCATION: usize = 16;

/// Workgroups per row of `n` logits.
fn groups(n: usize) -> usize {
    n.div_ceil(WORKGROUP as usize * PER_INVOCATION).max(1)
}

/// 32-bit words of the scratch [`argmax_rows`] needs for `rows` rows of `n`: per row a
/// counter and three words per workgroup.
pub fn argmax_scratch_words(rows: usize, n: usize) -> usize {
    rows * (1 + 3 * groups(n))
}

/// The checks [`argmax_rows`] and [`sample_rows`] share: `rows` rows of `n` logits from
/// element `offset` of `x` (a workgroup row each, 32-bit element indices), `scratch` of
/// `words` 32-bit words, and the three outputs of a word per row. `Ok(false)` for no rows.
fn check_rows(
    op: &'static str,
    x: &Buffer,
    offset: usize,
    rows: usize,
    n: usize,
    (scratch, words): (&Buffer, usize),
    [chosen, sums, ids]: [&Buffer; 3],
) -> Result<bool> {
    let bad = |reason: String| OpsError::Shape { op, reason };
    if rows == 0 {
        return Ok(false);
    }
    if n == 0 {
        return Err(bad("rows of 0 logits have no token to choose".into()));
    }
    if rows > u16::MAX as usize {
        return Err(bad(format!("{rows} rows: at most 65535 (one workgroup row each)")));
    }
    let end = offset
        .checked_add(rows * n)
        .filter(|&e| e <= u32::MAX as usize)
        .ok_or_else(|| bad(format!("{rows} rows of {n} from element {offset} pass 2^32 - 1 elements")))?;
    for (what, b, bytes) in [
        ("x", x, 4 * end),
        ("scratch", scratch, 4 * words),
        ("chosen", chosen, 4 * rows),
        ("sums", sums, 4 * rows),
        ("ids", ids, 4 * rows),
    ] {
        if b.size() < bytes as u64 {
            return Err(bad(format!("{what} holds {} bytes, needs {bytes}", b.size())));
        }
    }
    Ok(true)
}

/// Records, for each of `rows` rows of `n` f32 logits in `x` (row `r` from element
/// `offset + r * n`): the index of its first largest value, as candle's CPU `argmax`
/// picks it (NaN values skipped; a NaN element 0 is the answer), into `chosen[r]` and
/// `ids[r]` (u32), and the row's sum into `sums[r]` (f32; not finite where a logit is
/// not). `scratch` holds [`argmax_scratch_words`] words; this zeroes its counters first.
/// `chosen` and `sums` may be host-visible memory: the host then reads the choice
/// without copies, and `ids` alone feeds later work. One fill and one dispatch.
///
/// # Errors
/// [`OpsError::Shape`] for `n == 0`, more than 65 535 rows or `u32::MAX` elements, or
/// buffers too small;
/// HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn argmax_rows(
    s: &mut Stream,
    x: &Buffer,
    offset: usize,
    rows: usize,
    n: usize,
    scratch: &Buffer,
    chosen: &Buffer,
    sums: &Buffer,
    ids: &Buffer,
) -> Result<()> {
    let words = argmax_scratch_words(rows, n);
    if !check_rows("argmax_rows", x, offset, rows, n, (scratch, words), [chosen, sums, ids])? {
        return Ok(());
    }
    let g = groups(n);
    let chunk = n.div_ceil(g);
    let dev = s.device().clone();
    let p = pipeline(&dev, "argmax", WORKGROUP)?;
    s.fill(scratch, 0, 4 * words as u64, 0)?;
    let pc = push_words(&[offset as u32, n as u32, chunk as u32, g as u32]);
    let grid = [g as u32, rows as u32, 1];
    s.dispatch(&p, &[x.into(), scratch.into(), chosen.into(), sums.into(), ids.into()], &pc, grid)?;
    Ok(())
}

/// What [`sample_rows`] draws from: the softmax of `logits / temperature` over the tokens
/// that min-p (on the raw logits, as llama.cpp's), then top-k, then top-p keep, top-p
/// measured over the renormalised top-k as Hugging Face's `TopKLogitsWarper` then
/// `TopPLogitsWarper` and llama.cpp's top-k then top-p measure it (candle-transformers'
/// `TopKThenTopP` measures the unrenormalised mass instead). Equal logits at a threshold
/// are all kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleParams {
    /// Softmax temperature, finite and above 0 (greedy decoding is [`argmax_rows`]).
    pub temperature: f32,
    /// Keep the `top_k` largest logits (0: all); equal logits at the k-th are all kept.
    pub top_k: u32,
    /// Keep the largest-probability tokens while the probability before each (renormalised
    /// over the top-k) is below `top_p` (the nucleus reaching `top_p`), in (0, 1] (1: all).
    pub top_p: f32,
    /// Keep the tokens whose logit is at least the largest plus `ln(min_p)`, i.e. at least
    /// `min_p` times as likely before the temperature; in [0, 1] (0: all).
    pub min_p: f32,
    /// The key of the Philox4x32-10 generator.
    pub seed: u64,
}

impl SampleParams {
    /// Checks the ranges: a temperature above 0 whose inverse is finite in f32, `top_p` in
    /// (0, 1], `min_p` in [0, 1].
    ///
    /// # Errors
    /// [`OpsError::Shape`] naming the setting and its value.
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| Err(OpsError::Shape { op: "sample_rows", reason });
        if !(self.temperature.is_finite() && self.temperature > 0.0 && (1.0 / self.temperature).is_finite()) {
            return bad(format!("temperature {}: need a finite number > 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top-p {}: need a number in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min-p {}: need a number in [0, 1]", self.min_p));
        }
        Ok(())
    }
}

/// Logits per slice of the candidate stage (`sample_candidates.comp`'s `SLICE`).
const CANDIDATE_SLICE: usize = 4096;
/// Largest top-k the candidate stage takes; larger ones (and none) draw over the row.
pub const MAX_CANDIDATE_TOP_K: u32 = 256;

/// The candidate stage's slices and slots per slice, where [`sample_rows`] runs it: a
/// top-k of at most [`MAX_CANDIDATE_TOP_K`] over rows of at least two slices.
fn candidate_plan(n: usize, params: &SampleParams) -> Option<(usize, usize)> {
    let k = params.top_k;
    (k > 0 && k <= MAX_CANDIDATE_TOP_K && n >= 2 * CANDIDATE_SLICE)
        .then(|| (n.div_ceil(CANDIDATE_SLICE), 2 * k as usize))
}

/// 32-bit words of the scratch [`sample_rows`] needs for `rows` rows of `n` with
/// `params`: per row and slice a count, a sum and `2 top_k` candidates (value, index)
/// where the candidate stage runs, else 1.
pub fn sample_scratch_words(rows: usize, n: usize, params: &SampleParams) -> usize {
    candidate_plan(n, params).map_or(1, |(g, cap)| rows * g * (2 + 2 * cap))
}

/// The draw counter of [`sample_rows`].
#[derive(Debug, Clone, Copy)]
pub enum Draw<'a> {
    /// A value recorded with the dispatch.
    Counter(u64),
    /// Word 0 of this buffer (u32, at least 4 bytes, on the stream's device) when the
    /// dispatch runs, the high word 0: the position of a replayed decode step, written
    /// between its submissions.
    Step(&'a Buffer),
}

/// Records, for each of `rows` rows of `n` f32 logits in `x` (row `r` from element
/// `offset + r * n`), one token drawn from the distribution `params` describe, into
/// `chosen[r]` and `ids[r]` (u32), and the row's sum into `sums[r]` (f32; not finite
/// where a logit is not, and then the row chooses 0). Row `r`'s uniform variate is
/// Philox4x32-10's first word for counter (`draw`, `r`, "SAMP") and key `params.seed`
/// ([`Draw`]: recorded, or read when the dispatch runs):
/// the same seed, draw and logits give the same tokens. `chosen` and `sums` may be
/// host-visible memory, as for [`argmax_rows`]. `scratch` holds
/// [`sample_scratch_words`] words.
///
/// Kernel `sample`, one workgroup per row ([`crate::tuning::sample_workgroup`]
/// invocations, fewer for rows under 8 per invocation), which alone streams the row
/// several times (the maximum, each radix-select level, the draw). With a top-k of at
/// most [`MAX_CANDIDATE_TOP_K`] on rows of at least 8192, `sample_candidates` runs first
/// on every 4096-logit slice at once and keeps each slice's top-k in `scratch`; `sample`
/// then reads those candidates instead of the row (the row's top-k is within them: the same
/// distribution, the same tokens but where float rounding moves a draw across a boundary).
/// Equal seeds and draw counters give equal variates whatever the logits: streams that
/// must not be correlated need different seeds.
///
/// # Errors
/// [`OpsError::Shape`] for `n == 0`, more than 65 535 rows or `u32::MAX` elements, buffers
/// too small, or settings out of their ranges (see [`SampleParams`]); HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn sample_rows(
    s: &mut Stream,
    x: &Buffer,
    offset: usize,
    rows: usize,
    n: usize,
    params: &SampleParams,
    draw: Draw<'_>,
    scratch: &Buffer,
    chosen: &Buffer,
    sums: &Buffer,
    ids: &Buffer,
) -> Result<()> {
    params.check()?;
    let words = sample_scratch_words(rows, n, params);
    if !check_rows("sample_rows", x, offset, rows, n, (scratch, words), [chosen, sums, ids])? {
        return Ok(());
    }
    let dev = s.device().clone();
    let plan = candidate_plan(n, params);
    if let Some((g, cap)) = plan {
        let p = pipeline(&dev, "sample_candidates", 256.min(crate::tuning::sample_workgroup(dev.caps())))?;
        let pc = push_words(&[offset as u32, n as u32, params.top_k, g as u32, cap as u32]);
        s.dispatch(&p, &[x.into(), scratch.into()], &pc, [g as u32, rows as u32, 1])?;
    }
    let (groups, cap) = plan.unwrap_or((0, 0));
    // The elements the draw streams: rows shorter than the workgroup's loads leave
    // invocations idle: fewer, down to 64.
    let elements = if groups > 0 { groups * cap } else { n };
    let workgroup =
        crate::tuning::sample_workgroup(dev.caps()).min((elements.div_ceil(8).next_power_of_two().max(64)) as u32);
    let p = pipeline(&dev, "sample", workgroup)?;
    let log_min_p = if params.min_p > 0.0 { (params.min_p as f64).ln() as f32 } else { f32::NEG_INFINITY };
    // Without a step buffer the candidates stand in for its binding.
    let (counter, step) = match draw {
        Draw::Counter(c) => (c, None),
        Draw::Step(b) => (0, Some(b)),
    };
    let pc = push_words(&[
        offset as u32,
        n as u32,
        params.top_k,
        params.top_p.to_bits(),
        log_min_p.to_bits(),
        (1.0 / params.temperature).to_bits(),
        params.seed as u32,
        (params.seed >> 32) as u32,
        counter as u32,
        (counter >> 32) as u32,
        groups as u32,
        cap as u32,
        u32::from(step.is_some()),
    ]);
    let bindings = [x.into(), chosen.into(), sums.into(), ids.into(), scratch.into(), step.unwrap_or(scratch).into()];
    s.dispatch(&p, &bindings, &pc, [1, rows as u32, 1])?;
    Ok(())
}

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
/// of `counter` under `key`: the generator of `sample.comp` and `rand.comp`, on the CPU.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(0x9E37_79B9), k[1].wrapping_add(0xBB67_AE85)];
        }
        let p0 = 0xD251_1F53u64 * c[0] as u64;
        let p1 = 0xCD9E_8D57u64 * c[2] as u64;
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

/// The uniform variate in [0, 1) that [`sample_rows`] draws row `row` with: the first
/// Philox4x32-10 word for counter (`draw`, `row`, "SAMP") and key `seed`, its top 24 bits
/// times 2^-24.
pub fn sample_uniform(seed: u64, draw: u64, row: u32) -> f32 {
    let w = philox4x32_10([draw as u32, (draw >> 32) as u32, row, 0x5341_4D50], [seed as u32, (seed >> 32) as u32]);
    (w[0] >> 8) as f32 * (1.0 / 16_777_216.0)
}
