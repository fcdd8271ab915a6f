//! Choosing tokens on the device: [`argmax_rows`], greedy decoding's choice and a
//! finiteness check of the logits in one dispatch (`argmax.comp`), so that a decode step
//! can feed its own choice to the next step and the host reads back one id.

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
    let bad = |reason: String| OpsError::Shape { op: "argmax_rows", reason };
    if rows == 0 {
        return Ok(());
    }
    if n == 0 {
        return Err(bad("rows of 0 logits have no largest".into()));
    }
    if rows > u16::MAX as usize {
        return Err(bad(format!("{rows} rows: at most 65535 (one workgroup row each)")));
    }
    let end = offset
        .checked_add(rows * n)
        .filter(|&e| e <= u32::MAX as usize)
        .ok_or_else(|| bad(format!("{rows} rows of {n} from element {offset} pass 2^32 - 1 elements")))?;
    let words = argmax_scratch_words(rows, n);
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
