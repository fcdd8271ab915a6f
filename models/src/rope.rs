//! Rotary position embedding: the configuration from GGUF keys ([`RopeConfig`]), its
//! cos/sin tables computed once on the host as ggml's `ggml_rope_ext` computes the angles
//! (`ggml/src/ggml-cpu/ops.cpp`: `rope_yarn`, `ggml_rope_yarn_corr_dims`), and the tables
//! on a device ([`Rope`]).

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::nn::RopeStyle;

use crate::config::Meta;
use crate::error::{model_err, Result};
use crate::storage::ModelStorage;

/// YaRN context extension (`{arch}.rope.scaling.type = "yarn"`), with llama.cpp's
/// parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// `{arch}.rope.scaling.original_context_length` (else `{arch}.context_length`, as
    /// llama.cpp): the context before extension.
    pub n_ctx_orig: usize,
    /// Mix of extrapolated angles in the ramp (llama.cpp's `yarn_ext_factor`, 1 for YaRN).
    pub ext_factor: f32,
    /// Rotations past which a pair keeps the original angle: llama.cpp's `yarn_beta_fast`,
    /// 32 (it reads `{arch}.rope.scaling.yarn_beta_fast` only for grok and mistral3, which
    /// vkml does not load).
    pub beta_fast: f32,
    /// Rotations below which a pair is fully interpolated: llama.cpp's `yarn_beta_slow`, 1
    /// (its key read as `beta_fast`'s).
    pub beta_slow: f32,
}

/// Phi-3's LongRoPE: per-pair frequency divisors for short and long contexts (the
/// `rope_factors_short.weight` / `rope_factors_long.weight` tensors, `f32[dim / 2]`).
/// llama.cpp picks one set for the whole context, once: the long factors where the
/// configured context exceeds the original one (`get_rope_factors`).
#[derive(Debug, Clone, PartialEq)]
pub struct LongRope {
    /// Divisors for contexts up to `n_ctx_orig`.
    pub short: Vec<f32>,
    /// Divisors for longer contexts.
    pub long: Vec<f32>,
    /// `{arch}.rope.scaling.original_context_length` (default: `{arch}.context_length`).
    pub n_ctx_orig: usize,
}

/// How a model rotates its queries and keys.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    /// Rotated dims per head, `{arch}.rope.dimension_count` (defaults to the head dim).
    pub dim: usize,
    /// `{arch}.rope.freq_base` (default 10000).
    pub base: f32,
    /// `1 / {arch}.rope.scaling.factor` (or `1 / {arch}.rope.scale_linear`) unless the
    /// scaling type is none, else 1: llama.cpp's `rope_freq_scale_train`, 1 for type none
    /// as its context makes it.
    pub freq_scale: f32,
    /// Per-pair frequency divisors `f32[dim / 2]` from the `rope_freqs.weight` tensor
    /// (Llama 3.1's long-context factors), when the file has one.
    pub freqs: Option<Vec<f32>>,
    /// YaRN's ramp, when the scaling type is `yarn`.
    pub yarn: Option<Yarn>,
    /// LongRoPE factors, where the file has them and no `rope_freqs.weight`.
    pub longrope: Option<LongRope>,
    /// Multiplies cos and sin: llama.cpp's `attn_factor` (1 unless the model sets
    /// `{arch}.rope.scaling.attn_factor`).
    pub attn_factor: f32,
    /// How dims pair up: interleaved (llama.cpp's `LLAMA_ROPE_TYPE_NORM`) or halves
    /// (`LLAMA_ROPE_TYPE_NEOX`).
    pub style: RopeStyle,
}

impl RopeConfig {
    /// Reads `{arch}.rope.*` for heads of `head_dim` rotated in `style`, and the
    /// `rope_freqs.weight` tensor.
    ///
    /// # Errors
    /// [`crate::Error::Model`] naming the key: an odd or too large `dimension_count`, a
    /// non-positive base or factor, a scaling type other than none / linear / yarn
    /// (`longrope` names its missing support), YaRN or LongRoPE without its original or
    /// training context, a `rope_freqs.weight` of the wrong length or with non-positive
    /// values.
    pub fn from_meta(m: &Meta<'_>, head_dim: usize, style: RopeStyle) -> Result<RopeConfig> {
        let dim = m.opt_u("rope.dimension_count")?.unwrap_or(head_dim);
        if dim == 0 || !dim.is_multiple_of(2) || dim > head_dim {
            return Err(model_err(format!(
                "{} {dim}: need an even number of rotated dims, at most the head dim {head_dim}",
                m.key("rope.dimension_count")
            )));
        }
        let base = m.opt_positive("rope.freq_base")?.unwrap_or(10000.0);
        let scaling = m.opt_str("rope.scaling.type")?;
        // As llama.cpp: the factor from rope.scaling.factor, else the older
        // rope.scale_linear, whatever the type (none of them: linear); type none never
        // scales.
        let factor = match scaling {
            Some("none") => None,
            None | Some("linear") | Some("yarn") | Some("longrope") => match m.opt_positive("rope.scaling.factor")? {
                Some(f) => Some(f),
                None => m.opt_positive("rope.scale_linear")?,
            },
            Some(other) => {
                return Err(model_err(format!(
                    "{} {other:?} is not supported (supported: none, linear, yarn, longrope; llama3 frequency \
                     factors come from the rope_freqs.weight tensor)",
                    m.key("rope.scaling.type")
                )))
            }
        };
        let freq_scale = factor.map_or(1.0, |x| 1.0 / x);
        // YaRN's and LongRoPE's context before extension: the file's original context, else
        // (as llama.cpp) the training context.
        let n_ctx_orig = || -> Result<usize> {
            match m.opt_u("rope.scaling.original_context_length")? {
                Some(n) => Ok(n),
                None => m.opt_u("context_length")?.ok_or_else(|| {
                    model_err(format!(
                        "{} and {} are missing (the rope scaling needs one)",
                        m.key("rope.scaling.original_context_length"),
                        m.key("context_length")
                    ))
                }),
            }
        };
        let yarn = if scaling == Some("yarn") {
            Some(Yarn {
                n_ctx_orig: n_ctx_orig()?,
                // (llama.cpp's values for every architecture vkml loads, whatever the
                // file's rope.scaling.yarn_* keys say: see Yarn)
                ext_factor: 1.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
            })
        } else {
            None
        };
        let attn_factor = m.opt_positive("rope.scaling.attn_factor")?.unwrap_or(1.0);
        let divisors = |name: &str| -> Result<Option<Vec<f32>>> {
            if m.file.header().tensor(name).is_none() {
                return Ok(None);
            }
            let v = m.file.dequantize(name).map_err(|e| model_err(format!("{name}: {e}")))?;
            if v.len() != dim / 2 || v.iter().any(|&x| !(x > 0.0 && x.is_finite())) {
                return Err(model_err(format!(
                    "{name} has {} values, need {} positive ones (rotary dims / 2)",
                    v.len(),
                    dim / 2
                )));
            }
            Ok(Some(v))
        };
        let freqs = divisors("rope_freqs.weight")?;
        let longrope = match (divisors("rope_factors_short.weight")?, divisors("rope_factors_long.weight")?) {
            _ if freqs.is_some() => None,
            (None, None) => None,
            (Some(short), Some(long)) => Some(LongRope { short, long, n_ctx_orig: n_ctx_orig()? }),
            _ => return Err(model_err("LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight")),
        };
        Ok(RopeConfig { dim, base, freq_scale, freqs, yarn, longrope, attn_factor, style })
    }

    /// The same rotation with another base and no scaling (Gemma 3's local layers).
    pub fn unscaled_with_base(&self, base: f32) -> RopeConfig {
        RopeConfig { base, freq_scale: 1.0, freqs: None, yarn: None, longrope: None, attn_factor: 1.0, ..self.clone() }
    }

    /// YaRN's correction dims `[low, high]` (ggml's `ggml_rope_yarn_corr_dims`): pair
    /// indices below `low` keep the extrapolated angle, above `high` the interpolated one.
    pub fn yarn_corr_dims(&self, y: &Yarn) -> [f32; 2] {
        let n = self.dim as f32;
        let corr =
            |rot: f32| n * (y.n_ctx_orig as f32 / (rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * self.base.ln());
        let start = corr(y.beta_fast).floor().max(0.0);
        let end = corr(y.beta_slow).ceil().min(n - 1.0);
        [start, end]
    }

    /// The per-pair divisors for a context of `positions`: `rope_freqs.weight`, or the
    /// LongRoPE set llama.cpp picks for that context.
    pub fn divisors(&self, positions: usize) -> Option<&[f32]> {
        match (&self.freqs, &self.longrope) {
            (Some(f), _) => Some(f),
            (None, Some(l)) => Some(if positions > l.n_ctx_orig { &l.long } else { &l.short }),
            (None, None) => None,
        }
    }

    /// Tables `(cos, sin)`, each `f32[positions, dim / 2]`, of the angles ggml's
    /// `ggml_rope_ext` computes: `theta_i = base^(-2i / dim) / freqs[i]` per pair `i`
    /// (`freqs`: [`RopeConfig::divisors`] for a context of `positions`);
    /// at position `p` the angle is `freq_scale · p · theta_i`, or with YaRN the mix
    /// `interp · (1 - r_i) + extrap · r_i` of that and `p · theta_i` by the ramp
    /// `r_i = (1 - clamp((i - low) / max(0.001, high - low), 0, 1)) · ext_factor`, with
    /// cos and sin scaled by `attn_factor · (1 + 0.1 ln(1 / freq_scale))`; without YaRN
    /// they are scaled by `attn_factor`. Unscaled, the values are bit-identical to
    /// candle-transformers' `precomput_freqs_cis`.
    pub fn tables(&self, positions: usize) -> (Vec<f32>, Vec<f32>) {
        let half = self.dim / 2;
        let div = self.divisors(positions);
        let theta: Vec<f32> = (0..self.dim)
            .step_by(2)
            .map(|i| {
                let th = 1f32 / self.base.powf(i as f32 / self.dim as f32);
                div.map_or(th, |ff| th / ff[i / 2])
            })
            .collect();
        let (ramp, mscale) = match &self.yarn {
            Some(y) if y.ext_factor != 0.0 => {
                let [lo, hi] = self.yarn_corr_dims(y);
                let ramp: Vec<f32> = (0..half)
                    .map(|i| (1.0 - ((i as f32 - lo) / (hi - lo).max(0.001)).clamp(0.0, 1.0)) * y.ext_factor)
                    .collect();
                (Some(ramp), self.attn_factor * (1.0 + 0.1 * (1.0 / self.freq_scale).ln()))
            }
            _ => (None, self.attn_factor),
        };
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for (i, &th) in theta.iter().enumerate() {
                let extrap = p as f32 * th;
                let interp = extrap * self.freq_scale;
                let a = match &ramp {
                    Some(r) => interp * (1.0 - r[i]) + extrap * r[i],
                    None => interp,
                };
                if mscale == 1.0 {
                    cos.push(a.cos());
                    sin.push(a.sin());
                } else {
                    cos.push(a.cos() * mscale);
                    sin.push(a.sin() * mscale);
                }
            }
        }
        (cos, sin)
    }
}

/// A [`RopeConfig`]'s tables on a device, for `positions` positions.
#[derive(Debug)]
pub struct Rope<S: ModelStorage> {
    cos: Tensor<S>,
    sin: Tensor<S>,
    style: RopeStyle,
}

impl<S: ModelStorage> Rope<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Uploads the tables of `cfg` for positions `0..positions`.
    ///
    /// # Errors
    /// Device errors.
    pub fn new(cfg: &RopeConfig, positions: usize, dev: &S::Device) -> Result<Rope<S>> {
        let (cos, sin) = cfg.tables(positions);
        let half = cfg.dim / 2;
        Ok(Rope {
            cos: Tensor::from_slice(&cos, (positions, half), dev)?,
            sin: Tensor::from_slice(&sin, (positions, half), dev)?,
            style: cfg.style,
        })
    }

    /// The tables and pairing, as [`crate::tensor::ModelTensor::attention`] takes them:
    /// `(cos, sin, style)`, tables `f32[positions, rot / 2]`.
    pub fn tables(&self) -> (&Tensor<S>, &Tensor<S>, RopeStyle) {
        (&self.cos, &self.sin, self.style)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkml_quant::gguf::{GgufFile, GgufValue, GgufWriter};
    use vkml_quant::GgmlType;

    /// A config-only llama GGUF (head dim 8, rotary dims 4) plus `extra` keys and
    /// optionally a `rope_freqs.weight` tensor.
    fn file(extra: &[(&str, GgufValue)], freqs: Option<&[f32]>) -> GgufFile {
        let mut w = GgufWriter::new();
        w.push_kv("general.architecture", GgufValue::String("llama".into()));
        w.push_kv("llama.rope.dimension_count", GgufValue::U32(4));
        for (k, v) in extra {
            w.push_kv(*k, v.clone());
        }
        w.push_tensor("token_embd.weight", GgmlType::F32, vec![16, 10], vec![0; 16 * 10 * 4]);
        if let Some(f) = freqs {
            w.push_tensor("rope_freqs.weight", GgmlType::F32, vec![f.len() as u64], bytemuck::cast_slice(f).to_vec());
        }
        GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()
    }

    fn config(extra: &[(&str, GgufValue)], freqs: Option<&[f32]>) -> Result<RopeConfig> {
        let f = file(extra, freqs);
        RopeConfig::from_meta(&Meta::new(&f).unwrap(), 8, RopeStyle::Interleaved)
    }

    #[test]
    fn tables_follow_ggml_linear_scaling_and_frequency_factors() {
        let scaled = [
            ("llama.rope.scaling.type", GgufValue::String("linear".into())),
            ("llama.rope.scaling.factor", GgufValue::F32(4.0)),
        ];
        let freqs = [1.0f32, 8.0];
        let c = config(&scaled, Some(&freqs)).unwrap();
        assert_eq!((c.freq_scale, c.freqs.as_deref()), (0.25, Some(&freqs[..])));
        let (cos, sin) = c.tables(64);
        // ggml_rope_ext with ext_factor 0: angle = freq_scale · p · base^(-2i/rot) / ff_i.
        for p in [0usize, 1, 17, 63] {
            for i in 0..2 {
                let a = 0.25 * p as f64 * 10000f64.powf(-((2 * i) as f64) / 4.0) / f64::from(freqs[i]);
                let (gc, gs) = (f64::from(cos[p * 2 + i]), f64::from(sin[p * 2 + i]));
                assert!((gc - a.cos()).abs() < 1e-5 && (gs - a.sin()).abs() < 1e-5, "p {p} i {i}");
            }
        }
        // The legacy key scales the same way; no key leaves the angles unscaled.
        let legacy = config(&[("llama.rope.scale_linear", GgufValue::F32(4.0))], None).unwrap();
        assert_eq!((legacy.freq_scale, legacy.freqs), (0.25, None));
        assert_eq!(config(&[], None).unwrap().freq_scale, 1.0);
        // As llama.cpp: a factor without a type is linear; type none never scales.
        let untyped = config(&[("llama.rope.scaling.factor", GgufValue::F32(2.0))], None).unwrap();
        assert_eq!(untyped.freq_scale, 0.5);
        let none = [
            ("llama.rope.scaling.type", GgufValue::String("none".into())),
            ("llama.rope.scaling.factor", GgufValue::F32(2.0)),
            ("llama.rope.scale_linear", GgufValue::F32(4.0)),
        ];
        assert_eq!(config(&none, None).unwrap().freq_scale, 1.0);
    }

    /// YaRN against ggml's `rope_yarn` written out in f64 (ggml-cpu/ops.cpp,
    /// `ggml_rope_yarn_corr_dims` in ggml.c): Qwen3's long-context setting (factor 4 over
    /// 32768 positions, base 1e6) on 128 rotated dims.
    #[test]
    fn yarn_tables_follow_ggml_rope_yarn() {
        let f = {
            let mut w = GgufWriter::new();
            w.push_kv("general.architecture", GgufValue::String("qwen3".into()));
            w.push_kv("qwen3.rope.freq_base", GgufValue::F32(1e6));
            w.push_kv("qwen3.rope.scaling.type", GgufValue::String("yarn".into()));
            w.push_kv("qwen3.rope.scaling.factor", GgufValue::F32(4.0));
            w.push_kv("qwen3.rope.scaling.original_context_length", GgufValue::U32(32768));
            GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()
        };
        let c = RopeConfig::from_meta(&Meta::new(&f).unwrap(), 128, RopeStyle::Neox).unwrap();
        let y = c.yarn.unwrap();
        assert_eq!((y.n_ctx_orig, y.ext_factor, y.beta_fast, y.beta_slow), (32768, 1.0, 32.0, 1.0));
        let (n, base, scale) = (128f64, 1e6f64, 0.25f64);
        let corr = |rot: f64| n * (32768.0 / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
        let (lo, hi) = (corr(32.0).floor().max(0.0), corr(1.0).ceil().min(n - 1.0));
        assert_eq!(c.yarn_corr_dims(&y), [lo as f32, hi as f32]);
        assert!(lo > 0.0 && hi < 63.0, "the ramp lies inside the pairs: {lo} .. {hi}");
        let mscale = 1.0 + 0.1 * (1.0 / scale).ln();
        let (cos, sin) = c.tables(40000);
        for p in [0usize, 1, 1000, 32767, 39999] {
            for i in [0usize, 5, 20, 30, 40, 63] {
                let extrap = p as f64 * base.powf(-(2.0 * i as f64) / n);
                let interp = scale * extrap;
                let ramp = 1.0 - ((i as f64 - lo) / (hi - lo).max(0.001)).clamp(0.0, 1.0);
                let theta = interp * (1.0 - ramp) + extrap * ramp;
                let (wc, ws) = (theta.cos() * mscale, theta.sin() * mscale);
                let (gc, gs) = (f64::from(cos[p * 64 + i]), f64::from(sin[p * 64 + i]));
                // f32 angles of up to 4e4 radians: a few ulp of the angle.
                let tol = 1e-5 + 4.0 * theta.abs() * f64::from(f32::EPSILON);
                assert!((gc - wc).abs() < tol && (gs - ws).abs() < tol, "p {p} i {i}: {gc} {gs} vs {wc} {ws}");
            }
        }
    }

    /// Phi-3's LongRoPE as llama.cpp runs it: the short factors for a context up to the
    /// original one, the long factors past it, each dividing its pair's frequency, and
    /// cos / sin scaled by `rope.scaling.attn_factor` (ggml's `rope_yarn` with ext_factor 0).
    #[test]
    fn longrope_picks_factors_by_context_and_scales_by_attn_factor() {
        let (short, long) = ([1.0f32, 1.5], [4.0f32, 9.0]);
        let f = {
            let mut w = GgufWriter::new();
            w.push_kv("general.architecture", GgufValue::String("phi3".into()));
            w.push_kv("phi3.rope.dimension_count", GgufValue::U32(4));
            w.push_kv("phi3.context_length", GgufValue::U32(131072));
            w.push_kv("phi3.rope.scaling.original_context_length", GgufValue::U32(16));
            w.push_kv("phi3.rope.scaling.attn_factor", GgufValue::F32(1.19));
            for (n, v) in [("rope_factors_short.weight", &short), ("rope_factors_long.weight", &long)] {
                w.push_tensor(n, GgmlType::F32, vec![2], bytemuck::cast_slice(v).to_vec());
            }
            GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()
        };
        let c = RopeConfig::from_meta(&Meta::new(&f).unwrap(), 8, RopeStyle::Neox).unwrap();
        assert_eq!(c.longrope.as_ref().map(|l| l.n_ctx_orig), Some(16));
        for (positions, factors) in [(16usize, short), (17, long)] {
            assert_eq!(c.divisors(positions), Some(&factors[..]));
            let (cos, sin) = c.tables(positions);
            for p in [1usize, 7, positions - 1] {
                for i in 0..2 {
                    let a = p as f64 * 10000f64.powf(-((2 * i) as f64) / 4.0) / f64::from(factors[i]);
                    let (wc, ws) = (a.cos() * 1.19, a.sin() * 1.19);
                    let (gc, gs) = (f64::from(cos[p * 2 + i]), f64::from(sin[p * 2 + i]));
                    assert!((gc - wc).abs() < 1e-5 && (gs - ws).abs() < 1e-5, "{positions} positions, p {p} i {i}");
                }
            }
        }
    }

    #[test]
    fn bad_rope_keys_are_errors_naming_them() {
        let e = config(&[("llama.rope.scaling.type", GgufValue::String("dynamic".into()))], None).unwrap_err();
        assert!(e.to_string().contains("llama.rope.scaling.type \"dynamic\" is not supported"), "{e}");
        let e = config(&[], Some(&[1.0, 2.0, 3.0])).unwrap_err().to_string();
        assert!(e.contains("rope_freqs.weight has 3 values, need 2"), "{e}");
        let e = config(&[("llama.rope.freq_base", GgufValue::F32(0.0))], None).unwrap_err().to_string();
        assert!(e.contains("llama.rope.freq_base is 0, not a positive number"), "{e}");
        let e = config(&[("llama.rope.freq_base", GgufValue::F32(f32::NAN))], None).unwrap_err().to_string();
        assert!(e.contains("llama.rope.freq_base is NaN"), "{e}");
        let e = config(&[("llama.rope.scaling.type", GgufValue::String("yarn".into()))], None).unwrap_err().to_string();
        assert!(e.contains("llama.rope.scaling.original_context_length and llama.context_length are missing"), "{e}");
        // (as llama.cpp, YaRN's original context defaults to the training context, and its
        // betas are llama.cpp's whatever the file says)
        let yarn = [
            ("llama.rope.scaling.type", GgufValue::String("yarn".into())),
            ("llama.context_length", GgufValue::U32(4096)),
            ("llama.rope.scaling.yarn_beta_fast", GgufValue::F32(8.0)),
        ];
        let y = config(&yarn, None).unwrap().yarn.unwrap();
        assert_eq!((y.n_ctx_orig, y.ext_factor, y.beta_fast, y.beta_slow), (4096, 1.0, 32.0, 1.0));
        let f = file(&[], None);
        let e = RopeConfig::from_meta(&Meta::new(&f).unwrap(), 2, RopeStyle::Neox).unwrap_err().to_string();
        assert!(
            e.contains("llama.rope.dimension_count 4: need an even number of rotated dims, at most the head dim 2"),
            "{e}"
        );
    }
}
