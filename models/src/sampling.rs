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

use crate::error::Result;

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
    pub fn new(cfg: SamplingConfig) -> Sampler {
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
        Sampler { cfg, inner: LogitsProcessor::from_sampling(cfg.seed, sampling) }
    }

    /// The next token from `logits` (one per vocabulary entry), with `history` (the
    /// tokens so far) for the repeat penalty.
    ///
    /// # Errors
    /// From candle, for empty logits.
    pub fn sample(&mut self, logits: Vec<f32>, history: &[u32]) -> Result<u32> {
        let n = logits.len();
        let mut t = Tensor::from_vec(logits, n, &Device::Cpu)?;
        if self.cfg.repeat_penalty != 1.0 {
            let start = history.len().saturating_sub(self.cfg.repeat_last_n);
            t = candle_transformers::utils::apply_repeat_penalty(&t, self.cfg.repeat_penalty, &history[start..])?;
        }
        Ok(self.inner.sample(&t)?)
    }
}
