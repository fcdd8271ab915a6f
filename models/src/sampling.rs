//! Choosing the next token from logits: greedy (argmax), or seeded sampling at a
//! temperature, optionally restricted to the top-k tokens, to tokens at least `min_p`
//! times as likely as the most likely one (min-p, as llama.cpp's sampler applies it: on
//! the logits before the temperature) and/or to the top-p nucleus (Holtzman et al.,
//! 2019), after an optional repeat penalty over the last tokens (the CTRL penalty,
//! Keskar et al., 2019: positive logits divided, negative multiplied).
//!
//! The distribution is `vkml_ops::sampling::SampleParams`': min-p, then the softmax at
//! the temperature, top-k, and top-p over the renormalised top-k (Hugging Face's and
//! llama.cpp's order; candle's `TopKThenTopP` differs in measuring top-p in the
//! unrenormalised mass). Two samplers draw from it:
//! - on the device, [`TokenChoice`] ([`SamplingConfig::device_choice`]): the decode step
//!   chooses its own next token (`vkml_ops::sampling::{argmax_rows, sample_rows}`, a
//!   seeded Philox draw) and the host reads back one id; [`choose_host`] is the same draw
//!   on the CPU, in f64 (the CPU backend's, and the tests' reference);
//! - on the host, [`Sampler`]: candle-transformers' `utils::apply_repeat_penalty` on the
//!   logits read back every token, then [`choose_host`] with the sampler's own draw
//!   counter: for the repeat penalty, which the device path lacks.
//!
//! Each is reproducible for a seed.

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};
pub use vkml_ops::sampling::SampleParams;

/// How a decode step chooses its next token on the device
/// ([`crate::storage::ModelStorage::choose_ids`], [`crate::runner::Runner::forward_choose`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenChoice {
    /// The first largest logit (candle's `argmax`).
    Greedy,
    /// A seeded draw from the distribution [`SampleParams`] define.
    Sample(SampleParams),
}

/// Sampling settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingConfig {
    /// Softmax temperature; `<= 0` is greedy (argmax).
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (`None` or 0: all).
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches `p` (`None` or `>= 1`: all).
    pub top_p: Option<f64>,
    /// Keep the tokens whose probability is at least `min_p` times the largest one's
    /// (`None` or 0: all).
    pub min_p: Option<f64>,
    /// Repeat penalty (1: none).
    pub repeat_penalty: f32,
    /// How many of the last tokens the penalty covers.
    pub repeat_last_n: usize,
    /// Seed of the random generator.
    pub seed: u64,
}

impl SamplingConfig {
    /// Checks every setting: a finite temperature of at least 0, `top_p` finite in
    /// `(0, 1]`, `min_p` in `[0, 1]`, a finite repeat penalty above 0.
    ///
    /// # Errors
    /// [`Error::Sampling`] naming the setting and its value.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: String, need: &str| Err(Error::Sampling(format!("{what} {v}: {need}")));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature", self.temperature.to_string(), "need a finite number >= 0 (0: greedy)");
        }
        if let Some(p) = self.top_p {
            if !(p.is_finite() && p > 0.0 && p <= 1.0) {
                return bad("top-p", p.to_string(), "need a number in (0, 1] (1: all tokens)");
            }
        }
        if let Some(p) = self.min_p {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return bad("min-p", p.to_string(), "need a number in [0, 1] (0: all tokens)");
            }
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat penalty", self.repeat_penalty.to_string(), "need a finite number > 0 (1: none)");
        }
        Ok(())
    }
}

impl SamplingConfig {
    /// The device's way of choosing with these settings; `None` where only the host
    /// [`Sampler`] can (a repeat penalty). Greedy for a temperature of 0; else
    /// [`TokenChoice::Sample`] with top-k (0: all), top-p (1: all), min-p (0: none) and
    /// the seed. Assumes [`SamplingConfig::validate`] passed.
    pub fn device_choice(&self) -> Option<TokenChoice> {
        if self.repeat_penalty != 1.0 {
            return None;
        }
        if self.temperature <= 0.0 {
            return Some(TokenChoice::Greedy);
        }
        Some(TokenChoice::Sample(SampleParams {
            temperature: self.temperature as f32,
            top_k: self.top_k.map_or(0, |k| k.min(u32::MAX as usize) as u32),
            top_p: self.top_p.map_or(1.0, |p| p.min(1.0) as f32),
            min_p: self.min_p.map_or(0.0, |p| p as f32),
            seed: self.seed,
        }))
    }
}

/// The token [`TokenChoice`] picks from `logits` (row `row` of a draw with counter
/// `draw`), on the CPU: the first largest logit; or the distribution of [`SampleParams`] computed in
/// f64 (min-p's floor in f32 as the host computes it; equal logits at a threshold all
/// kept) and inverted at `vkml_ops::sampling::sample_uniform(seed, draw, row)` in index
/// order, as `sample.comp` does in f32: the device's token but where rounding moves a
/// threshold or the variate sits on a boundary between two tokens.
///
/// # Errors
/// [`Error::Sampling`] for empty logits, logits that are not all finite, or settings out
/// of their ranges ([`SampleParams::check`]).
pub fn choose_host(logits: &[f32], choice: &TokenChoice, draw: u64, row: u32) -> Result<u32> {
    if logits.is_empty() {
        return Err(Error::Sampling("no logits to sample from".into()));
    }
    check_finite(logits)?;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let p = match choice {
        TokenChoice::Greedy => return Ok(logits.iter().position(|&l| l == max).unwrap_or(0) as u32),
        TokenChoice::Sample(p) => p,
    };
    p.check().map_err(|e| Error::Sampling(e.to_string()))?;
    let floor = if p.min_p > 0.0 { max + (p.min_p as f64).ln() as f32 } else { f32::NEG_INFINITY };
    let mut lower = floor;
    let mut order: Vec<usize> = (0..logits.len()).filter(|&i| logits[i] >= floor).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if p.top_k > 0 && (p.top_k as usize) < order.len() {
        lower = lower.max(logits[order[p.top_k as usize - 1]]);
    }
    let inv_t = 1.0 / p.temperature as f64;
    let w = |l: f32| ((l as f64 - max as f64) * inv_t).exp();
    if p.top_p < 1.0 {
        let z: f64 = order.iter().map(|&i| logits[i]).filter(|&l| l >= lower).map(w).sum();
        let mut acc = 0.0;
        for &i in order.iter().filter(|&&i| logits[i] >= lower) {
            acc += w(logits[i]);
            if acc >= p.top_p as f64 * z {
                lower = logits[i];
                break;
            }
        }
    }
    let total: f64 = logits.iter().filter(|&&l| l >= lower).map(|&l| w(l)).sum();
    let target = vkml_ops::sampling::sample_uniform(p.seed, draw, row) as f64 * total;
    let mut acc = 0.0;
    let mut pick = 0;
    for (i, &l) in logits.iter().enumerate().filter(|(_, &l)| l >= lower) {
        pick = i;
        acc += w(l);
        if acc > target {
            break;
        }
    }
    Ok(pick as u32)
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 299792458,
        }
    }
}

/// A seeded sampler on the host (the repeat penalty, then [`choose_host`]).
#[derive(Debug)]
pub struct Sampler {
    cfg: SamplingConfig,
    how: TokenChoice,
    /// Draws so far: the Philox counter of the next one.
    draws: u64,
}

impl Sampler {
    /// A sampler for `cfg`.
    ///
    /// # Errors
    /// As [`SamplingConfig::validate`].
    pub fn new(cfg: SamplingConfig) -> Result<Sampler> {
        cfg.validate()?;
        let how = SamplingConfig { repeat_penalty: 1.0, ..cfg }.device_choice().expect("no repeat penalty");
        if let TokenChoice::Sample(p) = how {
            p.check().map_err(|e| Error::Sampling(e.to_string()))?;
        }
        Ok(Sampler { cfg, how, draws: 0 })
    }

    /// The next token from `logits` (one per vocabulary entry), with `history` (the
    /// tokens so far) for the repeat penalty: the penalised logits (min-p then sees them,
    /// as in llama.cpp's chain), then [`choose_host`] with this sampler's draw counter
    /// (row 1 of the Philox stream, apart from the device's row 0).
    ///
    /// # Errors
    /// [`Error::Sampling`] for empty logits or logits that are not all finite (a model
    /// that overflowed); from candle otherwise.
    pub fn sample(&mut self, logits: Vec<f32>, history: &[u32]) -> Result<u32> {
        let n = logits.len();
        if n == 0 {
            return Err(Error::Sampling("no logits to sample from".into()));
        }
        check_finite(&logits)?;
        let mut logits = logits;
        if self.cfg.repeat_penalty != 1.0 {
            let start = history.len().saturating_sub(self.cfg.repeat_last_n);
            let t = Tensor::from_vec(logits, n, &Device::Cpu)?;
            let t = candle_transformers::utils::apply_repeat_penalty(&t, self.cfg.repeat_penalty, &history[start..])?;
            logits = t.to_vec1()?;
        }
        let draw = self.draws;
        self.draws += 1;
        choose_host(&logits, &self.how, draw, 1)
    }
}

/// An error naming the first logit that is not finite (a model whose output overflowed),
/// if any.
///
/// # Errors
/// [`Error::Sampling`] naming the logit's index and value.
pub(crate) fn check_finite(logits: &[f32]) -> Result<()> {
    match logits.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Error::Sampling(format!("logit {i} is {}: the model's output is not finite", logits[i]))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Min-p keeps exactly the tokens within a factor `min_p` of the most likely one: with
    /// logits ln(1), ln(0.5), ln(0.09), ln(0.11) and min-p 0.1, token 2 (0.09 < 0.1) is
    /// never drawn and the others are, over many draws at temperature 1.
    #[test]
    fn min_p_drops_exactly_the_tokens_below_the_floor() {
        let logits: Vec<f32> = [1.0f32, 0.5, 0.09, 0.11].iter().map(|p| p.ln()).collect();
        let cfg = SamplingConfig { temperature: 1.0, min_p: Some(0.1), seed: 7, ..SamplingConfig::default() };
        let mut s = Sampler::new(cfg).unwrap();
        let mut seen = [0usize; 4];
        for _ in 0..4000 {
            seen[s.sample(logits.clone(), &[]).unwrap() as usize] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        assert!(seen[0] > 0 && seen[1] > 0 && seen[3] > 0, "{seen:?}");
        // Without min-p, token 2 is drawn about 5 % of the time.
        let mut s = Sampler::new(SamplingConfig { min_p: None, ..cfg }).unwrap();
        assert!((0..4000).filter(|_| s.sample(logits.clone(), &[]).unwrap() == 2).count() > 100);
    }

    /// The device takes every setting but the repeat penalty; 0 / 1 / 0 mean "all".
    #[test]
    fn device_choice_maps_the_settings() {
        let d = SamplingConfig::default();
        assert_eq!(d.device_choice(), Some(TokenChoice::Greedy));
        assert_eq!(SamplingConfig { repeat_penalty: 1.1, ..d }.device_choice(), None);
        let c = SamplingConfig { temperature: 0.7, top_k: Some(40), top_p: Some(0.9), min_p: Some(0.05), seed: 9, ..d };
        let want = SampleParams { temperature: 0.7, top_k: 40, top_p: 0.9, min_p: 0.05, seed: 9 };
        assert_eq!(c.device_choice(), Some(TokenChoice::Sample(want)));
        let all = SamplingConfig { temperature: 1.0, ..d }.device_choice();
        assert_eq!(
            all,
            Some(TokenChoice::Sample(SampleParams {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: d.seed
            }))
        );
        // The host reference: greedy is the first maximum; a draw stays in the top-k.
        assert_eq!(choose_host(&[1.0, 3.0, 3.0], &TokenChoice::Greedy, 0, 0).unwrap(), 1);
        let top2 = TokenChoice::Sample(SampleParams { top_k: 2, ..want });
        for draw in 0..50 {
            assert!([0, 2].contains(&choose_host(&[5.0, 0.0, 4.9, 1.0], &top2, draw, 0).unwrap()));
        }
        assert!(choose_host(&[f32::NAN], &top2, 0, 0).is_err());
        // Settings out of range are errors on the host path too.
        let cold = TokenChoice::Sample(SampleParams { temperature: 0.0, ..want });
        assert!(choose_host(&[1.0, 2.0], &cold, 0, 0).unwrap_err().to_string().contains("temperature 0"));
        let over = TokenChoice::Sample(SampleParams { min_p: 1.5, ..want });
        assert!(choose_host(&[1.0, 2.0], &over, 0, 0).unwrap_err().to_string().contains("min-p 1.5"));
    }

    #[test]
    fn bad_settings_and_logits_are_errors_naming_them() {
        let with = |f: fn(&mut SamplingConfig)| {
            let mut c = SamplingConfig::default();
            f(&mut c);
            Sampler::new(c).map(|_| ()).unwrap_err().to_string()
        };
        assert!(with(|c| c.temperature = f64::NAN).contains("temperature NaN"));
        assert!(with(|c| c.temperature = -1.0).contains("temperature -1"));
        assert!(with(|c| c.top_p = Some(0.0)).contains("top-p 0: need a number in (0, 1]"));
        assert!(with(|c| c.top_p = Some(1.5)).contains("top-p 1.5"));
        assert!(with(|c| c.repeat_penalty = 0.0).contains("repeat penalty 0"));
        assert!(with(|c| c.min_p = Some(1.5)).contains("min-p 1.5: need a number in [0, 1]"));
        assert!(with(|c| c.min_p = Some(f64::NAN)).contains("min-p NaN"));
        assert!(with(|c| c.repeat_penalty = f32::INFINITY).contains("repeat penalty inf"));
        let mut s = Sampler::new(SamplingConfig { top_p: Some(1.0), ..SamplingConfig::default() }).unwrap();
        assert_eq!(s.sample(vec![0.0, 2.0, 1.0], &[]).unwrap(), 1);
        assert!(s.sample(vec![], &[]).unwrap_err().to_string().contains("no logits"));
        let e = s.sample(vec![0.0, f32::NAN], &[]).unwrap_err().to_string();
        assert!(e.contains("logit 1 is NaN"), "{e}");
    }
}
