//! Choosing the next token from logits: greedy (argmax), or seeded sampling at a
//! temperature, optionally restricted to the top-k tokens and/or the top-p nucleus
//! (Holtzman et al., 2019), after an optional repeat penalty over the last tokens (the
//! CTRL penalty, Keskar et al., 2019: positive logits divided, negative multiplied).
//!
//! The sampling itself is candle-transformers' `LogitsProcessor` and
//! `utils::apply_repeat_penalty` on a CPU tensor of the logits (one vocabulary row,
//! read back once per token).

use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};

use crate::error::{Error, Result};

/// Sampling settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingConfig {
    /// Softmax temperature; `<= 0` is greedy (argmax).
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (`None` or 0: all).
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches `p` (`None` or `>= 1`: all).
    pub top_p: Option<f64>,
    /// Repeat penalty (1: none).
    pub repeat_penalty: f32,
    /// How many of the last tokens the penalty covers.
    pub repeat_last_n: usize,
    /// Seed of the random generator.
    pub seed: u64,
}

impl SamplingConfig {
    /// Checks every setting: a finite temperature of at least 0, `top_p` finite in
    /// `(0, 1]`, a finite repeat penalty above 0.
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
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat penalty", self.repeat_penalty.to_string(), "need a finite number > 0 (1: none)");
        }
        Ok(())
    }
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 299792458,
        }
    }
}

/// A seeded sampler.
pub struct Sampler {
    cfg: SamplingConfig,
    inner: LogitsProcessor,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("cfg", &self.cfg).finish()
    }
}

impl Sampler {
    /// A sampler for `cfg`.
    ///
    /// # Errors
    /// As [`SamplingConfig::validate`].
    pub fn new(cfg: SamplingConfig) -> Result<Sampler> {
        cfg.validate()?;
        let top_k = cfg.top_k.filter(|&k| k > 0);
        let top_p = cfg.top_p.filter(|&p| p > 0.0 && p < 1.0);
        let temperature = cfg.temperature;
        let sampling = if temperature <= 0.0 {
            Sampling::ArgMax
        } else {
            match (top_k, top_p) {
                (None, None) => Sampling::All { temperature },
                (Some(k), None) => Sampling::TopK { k, temperature },
                (None, Some(p)) => Sampling::TopP { p, temperature },
                (Some(k), Some(p)) => Sampling::TopKThenTopP { k, p, temperature },
            }
        };
        Ok(Sampler { cfg, inner: LogitsProcessor::from_sampling(cfg.seed, sampling) })
    }

    /// The next token from `logits` (one per vocabulary entry), with `history` (the
    /// tokens so far) for the repeat penalty.
    ///
    /// # Errors
    /// [`Error::Sampling`] for empty logits or logits that are not all finite (a model
    /// that overflowed); from candle otherwise.
    pub fn sample(&mut self, logits: Vec<f32>, history: &[u32]) -> Result<u32> {
        let n = logits.len();
        if n == 0 {
            return Err(Error::Sampling("no logits to sample from".into()));
        }
        if let Some(i) = logits.iter().position(|x| !x.is_finite()) {
            return Err(Error::Sampling(format!("logit {i} is {}: the model's output is not finite", logits[i])));
        }
        let mut t = Tensor::from_vec(logits, n, &Device::Cpu)?;
        if self.cfg.repeat_penalty != 1.0 {
            let start = history.len().saturating_sub(self.cfg.repeat_last_n);
            t = candle_transformers::utils::apply_repeat_penalty(&t, self.cfg.repeat_penalty, &history[start..])?;
        }
        Ok(self.inner.sample(&t)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(with(|c| c.repeat_penalty = f32::INFINITY).contains("repeat penalty inf"));
        let mut s = Sampler::new(SamplingConfig { top_p: Some(1.0), ..SamplingConfig::default() }).unwrap();
        assert_eq!(s.sample(vec![0.0, 2.0, 1.0], &[]).unwrap(), 1);
        assert!(s.sample(vec![], &[]).unwrap_err().to_string().contains("no logits"));
        let e = s.sample(vec![0.0, f32::NAN], &[]).unwrap_err().to_string();
        assert!(e.contains("logit 1 is NaN"), "{e}");
    }
}
