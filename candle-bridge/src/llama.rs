use std::time::Instant;

use candle_core::backend::BackendDevice;
use vkml_ops::attention;
use vkml_ops::nn::{GluActivation, RopeStyle};
use vkml_quant::gguf::{GgufFile, GgufValue};

use crate::error::{model_err, Error, Result};
use crate::front::{ModelStorage, Tensor};
use crate::vulkan::VulkanStorage;

/// Hyper-parameters of a llama-family model, from GGUF metadata (`{arch}.*` keys of the
/// GGUF spec, "LLM" section).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layers: usize,
    /// `{arch}.embedding_length`.
    pub n_embd: usize,
    /// `{arch}.feed_forward_length`.
    pub n_ff: usize,
    /// `{arch}.attention.head_count`.
    pub n_head: usize,
    /// `{arch}.attention.head_count_kv` (defaults to `n_head`).
    pub n_kv_head: usize,
    /// `n_embd / n_head` (or `{arch}.attention.key_length`).
    pub head_dim: usize,
    /// `{arch}.rope.dimension_count` (defaults to `head_dim`).
    pub rope_dim: usize,
    /// `{arch}.rope.freq_base` (defaults to 10000).
    pub rope_base: f32,
    /// Linear rope scaling: `1 / {arch}.rope.scaling.factor` when
    /// `{arch}.rope.scaling.type` is `linear` (or `1 / {arch}.rope.scale_linear`), else 1
    /// (llama.cpp's `rope_freq_scale_train`).
    pub rope_freq_scale: f32,
    /// Per-pair frequency divisors from the `rope_freqs.weight` tensor (`f32[rot / 2]`;
    /// Llama 3.1's long-context scaling), when the file has one.
    pub rope_freqs: Option<Vec<f32>>,
    /// `{arch}.attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// How rope pairs dimensions: interleaved for llama/mistral, neox for qwen2.
    pub rope_style: RopeStyle,
    /// `{arch}.context_length`: the context the model was trained for.
    pub context_length: usize,
    /// Rows of `token_embd.weight`.
    pub vocab: usize,
}

fn meta_u(f: &GgufFile, key: &str) -> Result<Option<usize>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|x| Some(x as usize))
            .ok_or_else(|| model_err(format!("metadata {key} is not an unsigned integer"))),
    }
}

fn meta_f(f: &GgufFile, key: &str) -> Result<Option<f32>> {
    match f.get(key) {
        None => Ok(None),
        Some(GgufValue::F32(x)) => Ok(Some(*x)),
        Some(GgufValue::F64(x)) => Ok(Some(*x as f32)),
        Some(_) => Err(model_err(format!("metadata {key} is not a float"))),
    }
}

impl LlamaConfig {
    /// Reads the hyper-parameters.
    ///
    /// # Errors
    /// [`Error::Model`] for an architecture other than `llama`/`mistral`/`qwen2`, a missing or
    /// ill-typed key, or inconsistent shapes (heads not dividing, odd head dims).
    pub fn from_gguf(f: &GgufFile) -> Result<LlamaConfig> {
        let arch = f
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| model_err("metadata general.architecture is missing"))?
            .to_string();
        let rope_style = match arch.as_str() {
            "llama" | "mistral" => RopeStyle::Interleaved,
            "qwen2" => RopeStyle::Neox,
            _ => {
                return Err(model_err(format!(
                    "architecture {arch:?} is not supported (supported: llama, mistral, qwen2)"
                )))
            }
        };
        let req = |k: &str| -> Result<usize> {
            let key = format!("{arch}.{k}");
            meta_u(f, &key)?.ok_or_else(|| model_err(format!("metadata {key} is missing")))
        };
        let n_layers = req("block_count")?;
        let n_embd = req("embedding_length")?;
        let n_ff = req("feed_forward_length")?;
        let n_head = req("attention.head_count")?;
        let n_kv_head = meta_u(f, &format!("{arch}.attention.head_count_kv"))?.unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || !n_head.is_multiple_of(n_kv_head) || !n_embd.is_multiple_of(n_head) {
            return Err(model_err(format!(
                "{n_head} heads, {n_kv_head} KV heads and embedding length {n_embd} do not divide"
            )));
        }
        let head_dim = meta_u(f, &format!("{arch}.attention.key_length"))?.unwrap_or(n_embd / n_head);
        let rope_dim = meta_u(f, &format!("{arch}.rope.dimension_count"))?.unwrap_or(head_dim);
        if !head_dim.is_multiple_of(2)
            || head_dim > attention::MAX_HEAD_DIM
            || rope_dim > head_dim
            || !rope_dim.is_multiple_of(2)
        {
            return Err(model_err(format!(
                "head dim {head_dim} / rotary dims {rope_dim}: need even dims, rot <= head dim <= {}",
                attention::MAX_HEAD_DIM
            )));
        }
        let rope_base = meta_f(f, &format!("{arch}.rope.freq_base"))?.unwrap_or(10000.0);
        let scaling_key = format!("{arch}.rope.scaling.type");
        let factor = match f.get(&scaling_key).map(|v| v.as_str()) {
            None | Some(Some("none")) => meta_f(f, &format!("{arch}.rope.scale_linear"))?,
            Some(Some("linear")) => meta_f(f, &format!("{arch}.rope.scaling.factor"))?,
            Some(other) => {
                return Err(model_err(format!(
                    "{scaling_key} {} is not supported (supported: none, linear; llama3 frequency \
                     factors come from the rope_freqs.weight tensor)",
                    other.map_or_else(|| "(not a string)".to_string(), |s| format!("{s:?}"))
                )))
            }
        };
        let rope_freq_scale = match factor {
            Some(x) if x > 0.0 && x.is_finite() => 1.0 / x,
            Some(x) if x != 0.0 => return Err(model_err(format!("rope scaling factor {x} is not a positive number"))),
            _ => 1.0,
        };
        let rope_freqs = match f.header().tensor("rope_freqs.weight") {
            None => None,
            Some(_) => {
                let v = f.dequantize("rope_freqs.weight").map_err(|e| model_err(format!("rope_freqs.weight: {e}")))?;
                if v.len() != rope_dim / 2 || v.iter().any(|&x| !(x > 0.0 && x.is_finite())) {
                    return Err(model_err(format!(
                        "rope_freqs.weight has {} values, need {} positive ones (rotary dims / 2)",
                        v.len(),
                        rope_dim / 2
                    )));
                }
                Some(v)
            }
        };
        let rms_eps = meta_f(f, &format!("{arch}.attention.layer_norm_rms_epsilon"))?
            .ok_or_else(|| model_err(format!("metadata {arch}.attention.layer_norm_rms_epsilon is missing")))?;
        let context_length = req("context_length")?;
        let emb =
            f.header().tensor("token_embd.weight").ok_or_else(|| model_err("tensor token_embd.weight is missing"))?;
        if emb.row_len() as usize != n_embd {
            return Err(model_err(format!("token_embd.weight rows have {} elements, not {n_embd}", emb.row_len())));
        }
        let vocab = emb.n_rows() as usize;
        Ok(LlamaConfig {
            arch,
            n_layers,
            n_embd,
            n_ff,
            n_head,
            n_kv_head,
            head_dim,
            rope_dim,
            rope_base,
            rope_freq_scale,
            rope_freqs,
            rms_eps,
            rope_style,
            context_length,
            vocab,
        })
    }
}

/// How to load a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Positions of the KV cache; `None`: the model's context length, at most 4096.
    pub ctx: Option<usize>,
    /// Most tokens one [`Llama::forward`] call processes in one pass; longer inputs run
    /// in chunks of this size.
    pub max_batch: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { ctx: None, max_batch: 512 }
    }
}

struct Layer<S: ModelStorage> {
    attn_norm: Tensor<S>,
    ffn_norm: Tensor<S>,
    /// Q, K and V stacked: `[h + 2 hk, e]`.
    wqkv: S::QWeight,
    wo: S::QWeight,
    /// Gate and up stacked: `[2 ff, e]`.
    w_gate_up: S::QWeight,
    w_down: S::QWeight,
    /// qwen2's Q, K and V biases, stacked: `f32[h + 2 hk]`.
    bias: Option<Tensor<S>>,
    k_cache: S::KvCache,
    v_cache: S::KvCache,
}

/// A decode step recorded ahead on a deferred device, waiting for its token id.
struct Pending<S: ModelStorage> {
    pos: usize,
    ids: Tensor<S>,
    logits: Tensor<S>,
    /// [`ModelStorage::submissions`] right after recording: if it moved, the step has
    /// already run (with a stale id) and its logits are not this position's.
    submissions: u64,
}

/// Where the host time of the last [`Llama::forward`] chunk went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepProfile {
    /// Recording the step on the host, seconds (0 when it was recorded ahead, while the
    /// previous step ran).
    pub record_s: f64,
    /// Recording the next decode step ahead, while the device runs this one, seconds.
    pub ahead_s: f64,
    /// Submitting, waiting for the device and reading the logits back, seconds (less
    /// `ahead_s`).
    pub wait_s: f64,
}

/// A llama-family model with its KV cache, on any [`ModelStorage`] (default: Vulkan).
pub struct Llama<S: ModelStorage = VulkanStorage> {
    dev: S::Device,
    cfg: LlamaConfig,
    ctx: usize,
    max_batch: usize,
    tok_embd: S::QWeight,
    /// `None`: tied to `tok_embd`.
    output: Option<S::QWeight>,
    output_norm: Tensor<S>,
    layers: Vec<Layer<S>>,
    cos: Tensor<S>,
    sin: Tensor<S>,
    pos: usize,
    pending: Option<Pending<S>>,
    profile: StepProfile,
}

impl<S: ModelStorage> std::fmt::Debug for Llama<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Llama({:?}, ctx {}, at {})", self.cfg, self.ctx, self.pos)
    }
}

/// Rope tables `f32[positions, rot / 2]` (cos, sin) as candle-transformers'
/// `quantized_llama::precomput_freqs_cis` computes them, `theta_i = 1 / base^(2i / rot)`
/// and `angle = pos * theta_i`, with ggml's scaling (`ggml_rope_ext`, ext_factor 0):
/// `theta_i` divided by the frequency factor `rope_freqs[i]` and the angle multiplied by
/// `rope_freq_scale`. Without scaling the values are bit-identical to candle's.
pub(crate) fn rope_tables(c: &LlamaConfig, positions: usize) -> (Vec<f32>, Vec<f32>) {
    let (rot, base) = (c.rope_dim, c.rope_base);
    let theta: Vec<f32> = (0..rot)
        .step_by(2)
        .map(|i| {
            let th = 1f32 / base.powf(i as f32 / rot as f32);
            c.rope_freqs.as_ref().map_or(th, |ff| th / ff[i / 2])
        })
        .collect();
    let mut cos = Vec::with_capacity(positions * theta.len());
    let mut sin = Vec::with_capacity(positions * theta.len());
    for p in 0..positions {
        for &th in &theta {
            let a = p as f32 * th * c.rope_freq_scale;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    (cos, sin)
}

/// The input checks of a forward call: at least one token, ids inside the vocabulary,
/// positions `pos..pos + tokens.len()` inside a cache of `ctx`.
pub(crate) fn check_input(cfg: &LlamaConfig, pos: usize, ctx: usize, tokens: &[u32]) -> Result<()> {
    if tokens.is_empty() {
        return Err(model_err("forward needs at least one token"));
    }
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab) {
        return Err(model_err(format!("token id {bad} is past the vocabulary of {}", cfg.vocab)));
    }
    if pos + tokens.len() > ctx {
        return Err(Error::Context { tokens: pos + tokens.len(), ctx });
    }
    Ok(())
}

impl<S: ModelStorage> Llama<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Loads a llama-family GGUF model onto `dev`, calling `progress(done, total)` (in
    /// bytes of tensor data) as weight matrices are uploaded.
    ///
    /// # Errors
    /// [`Error::Model`] for unsupported or inconsistent models (see
    /// [`LlamaConfig::from_gguf`]) and missing or misshapen tensors; [`Error::Candle`]
    /// for tensor types without kernels on the backend, tensors past the device's limits
    /// and device errors (out of device memory names the size).
    pub fn load(
        dev: &S::Device,
        file: &GgufFile,
        opts: LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        let cfg = LlamaConfig::from_gguf(file)?;
        let ctx = opts.ctx.unwrap_or(cfg.context_length.min(4096)).max(1);
        let total: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
        let mut done = 0u64;
        let mut matrix = |name: &str, rows: usize, k: usize| -> Result<S::QWeight> {
            let (info, bytes) =
                file.tensor_data_by_name(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
            if info.row_len() as usize != k || info.n_rows() as usize != rows {
                return Err(model_err(format!("tensor {name} has shape {:?}, expected [{k}, {rows}]", info.dims)));
            }
            let w = S::qweight(dev, info, bytes)?;
            done += info.n_bytes;
            progress(done, total);
            Ok(w)
        };
        let values = |name: &str, n: usize| -> Result<Vec<f32>> {
            let v = file.dequantize(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
            if v.len() != n {
                return Err(model_err(format!("tensor {name} has {} elements, expected {n}", v.len())));
            }
            Ok(v)
        };
        let vector = |name: &str, n: usize| -> Result<Tensor<S>> { Ok(Tensor::from_slice(&values(name, n)?, n, dev)?) };
        let (e, h, hk, ff) = (cfg.n_embd, cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim, cfg.n_ff);
        let tok_embd = matrix("token_embd.weight", cfg.vocab, e)?;
        let output = match file.header().tensor("output.weight") {
            Some(_) => Some(matrix("output.weight", cfg.vocab, e)?),
            None => None,
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = |n: &str| format!("blk.{i}.{n}");
            let bias = match file.header().tensor(&p("attn_q.bias")) {
                Some(_) => {
                    let mut b = values(&p("attn_q.bias"), h)?;
                    b.extend(values(&p("attn_k.bias"), hk)?);
                    b.extend(values(&p("attn_v.bias"), hk)?);
                    Some(Tensor::from_slice(&b, h + 2 * hk, dev)?)
                }
                None => None,
            };
            let (wq, wk, wv) = (
                matrix(&p("attn_q.weight"), h, e)?,
                matrix(&p("attn_k.weight"), hk, e)?,
                matrix(&p("attn_v.weight"), hk, e)?,
            );
            let wqkv = S::qweight_concat(dev, &[&wq, &wk, &wv])?;
            let (w_gate, w_up) = (matrix(&p("ffn_gate.weight"), ff, e)?, matrix(&p("ffn_up.weight"), ff, e)?);
            let w_gate_up = S::qweight_concat(dev, &[&w_gate, &w_up])?;
            layers.push(Layer {
                attn_norm: vector(&p("attn_norm.weight"), e)?,
                ffn_norm: vector(&p("ffn_norm.weight"), e)?,
                wqkv,
                wo: matrix(&p("attn_output.weight"), e, h)?,
                w_gate_up,
                w_down: matrix(&p("ffn_down.weight"), e, ff)?,
                bias,
                k_cache: S::kv_cache(dev, cfg.n_kv_head, ctx, cfg.head_dim)?,
                v_cache: S::kv_cache(dev, cfg.n_kv_head, ctx, cfg.head_dim)?,
            });
        }
        let (cos, sin) = rope_tables(&cfg, ctx);
        let half = cfg.rope_dim / 2;
        let model = Llama {
            dev: dev.clone(),
            output_norm: vector("output_norm.weight", e)?,
            cos: Tensor::from_slice(&cos, (ctx, half), dev)?,
            sin: Tensor::from_slice(&sin, (ctx, half), dev)?,
            cfg,
            ctx,
            max_batch: opts.max_batch.max(1),
            tok_embd,
            output,
            layers,
            pos: 0,
            pending: None,
            profile: StepProfile::default(),
        };
        // The stacking copies are recorded on deferred devices; finish them here, so
        // that the load time includes them.
        dev.synchronize()?;
        Ok(model)
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Positions the KV cache holds.
    pub fn context(&self) -> usize {
        self.ctx
    }

    /// Tokens in the KV cache: the position the next token gets.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The device.
    pub fn device(&self) -> &S::Device {
        &self.dev
    }

    /// Host timings of the last chunk run.
    pub fn last_step(&self) -> StepProfile {
        self.profile
    }

    /// Empties the KV cache (the next token is at position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Runs `tokens` at positions `position() ..`, appending them to the KV cache, and
    /// returns the logits (f32, `vocab` per token) of the last token, or of every token
    /// with `all_logits`. Inputs longer than the batch run in chunks, each one submission
    /// with one host wait. On a deferred device (Vulkan), while the last chunk runs, the
    /// decode step at the next position is recorded ahead, so a following one-token call
    /// only writes its id and submits.
    ///
    /// # Errors
    /// [`Error::Context`] when the cache cannot take the tokens; [`Error::Model`] for an
    /// empty input or a token id past the vocabulary; kernel and device errors.
    pub fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        check_input(&self.cfg, self.pos, self.ctx, tokens)?;
        let mut out = Vec::new();
        let n_chunks = tokens.len().div_ceil(self.max_batch);
        for (i, chunk) in tokens.chunks(self.max_batch).enumerate() {
            let last = i + 1 == n_chunks;
            if let Some(l) = self.run_chunk(chunk, all_logits, all_logits || last, last)? {
                out.extend_from_slice(&l);
            }
        }
        Ok(out)
    }

    /// Runs one chunk: records it (unless it is the decode step recorded ahead, whose id
    /// is then written), submits; then, with `record_next` on a deferred device, records
    /// the next decode step while the device runs this one; then reads the logits.
    ///
    /// A step recorded ahead that is not used (the caller reset the cache or passed more
    /// than one token) still runs, at the next submission, with a stale id: it writes
    /// K and V at a position that the next step to reach it overwrites before any step
    /// reads it, and its logits are dropped.
    fn run_chunk(
        &mut self,
        tokens: &[u32],
        all_logits: bool,
        want: bool,
        record_next: bool,
    ) -> Result<Option<Vec<f32>>> {
        let t = tokens.len();
        let t0 = Instant::now();
        let reuse = self.pending.as_ref().is_some_and(|p| {
            t == 1 && want && !all_logits && p.pos == self.pos && p.submissions == S::submissions(&self.dev)
        });
        let mut record_s = 0.0;
        let logits = match self.pending.take() {
            Some(p) if reuse => {
                p.ids.storage().write_u32(tokens)?;
                Some(p.logits)
            }
            _ => {
                let ids = Tensor::from_slice(tokens, t, &self.dev)?;
                let l = self.step(&ids, self.pos, all_logits, want)?;
                record_s = t0.elapsed().as_secs_f64();
                l
            }
        };
        let w = Instant::now();
        S::submit(&self.dev)?;
        self.pos += t;
        let a = Instant::now();
        if record_next && self.pos < self.ctx && S::is_deferred(&self.dev) {
            let ids = Tensor::from_storage(S::host_u32(&self.dev, 1)?, 1);
            let logits = self.step(&ids, self.pos, false, true)?.expect("logits wanted");
            let submissions = S::submissions(&self.dev);
            self.pending = Some(Pending { pos: self.pos, ids, logits, submissions });
        }
        let ahead_s = a.elapsed().as_secs_f64();
        let out = match logits {
            Some(l) => Some(l.storage().read_f32(l.layout())?),
            None => None,
        };
        self.profile = StepProfile { record_s, ahead_s, wait_s: w.elapsed().as_secs_f64() - ahead_s };
        Ok(out)
    }

    /// Records (on the CPU: runs) one step over `ids: u32[t]` at positions `pos..`:
    /// every layer, then, with `want`, the final norm and the output projection of the
    /// last token (every token with `all_logits`).
    fn step(&mut self, ids: &Tensor<S>, pos: usize, all_logits: bool, want: bool) -> Result<Option<Tensor<S>>> {
        let c = &self.cfg;
        let (t, d, nh, nkv) = (ids.dims()[0], c.head_dim, c.n_head, c.n_kv_head);
        let scale = 1.0 / (d as f32).sqrt();
        let mut x = Tensor::qembedding(ids, &self.tok_embd)?;
        for l in &mut self.layers {
            let mut qkv = x.rms_norm_linear(&l.attn_norm, c.rms_eps, &l.wqkv, None)?;
            if let Some(b) = &l.bias {
                qkv = qkv.broadcast_add(b)?;
            }
            let heads = qkv.reshape((t, nh + 2 * nkv, d))?;
            // Q and K heads are adjacent: one rope call rotates both.
            let qk = heads.narrow(1, 0, nh + nkv)?.rope(&self.cos, &self.sin, pos, c.rope_style)?;
            let (q, k, v) = (qk.narrow(1, 0, nh)?, qk.narrow(1, nh, nkv)?, heads.narrow(1, nh + nkv, nkv)?);
            let a = Tensor::attention(&q, &k, &v, (&mut l.k_cache, &mut l.v_cache), pos, scale)?;
            x.qmatmul_add_(&a, &l.wo)?;
            let g = x.rms_norm_linear(&l.ffn_norm, c.rms_eps, &l.w_gate_up, Some(GluActivation::Silu))?;
            x.qmatmul_add_(&g, &l.w_down)?;
        }
        if !want {
            return Ok(None);
        }
        if !all_logits {
            x = x.narrow(0, t - 1, 1)?;
        }
        let out = self.output.as_ref().unwrap_or(&self.tok_embd);
        Ok(Some(x.rms_norm_linear(&self.output_norm, c.rms_eps, out, None)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkml_quant::gguf::GgufWriter;
    use vkml_quant::GgmlType;

    /// A config-only llama GGUF (head dim 8, rotary dims 4) plus `extra` keys and
    /// optionally a `rope_freqs.weight` tensor.
    fn file(extra: &[(&str, GgufValue)], freqs: Option<&[f32]>) -> GgufFile {
        let mut w = GgufWriter::new();
        let u = |v: u32| GgufValue::U32(v);
        w.push_kv("general.architecture", GgufValue::String("llama".into()));
        for (k, v) in [
            ("block_count", u(1)),
            ("context_length", u(64)),
            ("embedding_length", u(16)),
            ("feed_forward_length", u(32)),
            ("attention.head_count", u(2)),
            ("rope.dimension_count", u(4)),
            ("attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5)),
        ] {
            w.push_kv(format!("llama.{k}"), v);
        }
        for (k, v) in extra {
            w.push_kv(*k, v.clone());
        }
        w.push_tensor("token_embd.weight", GgmlType::F32, vec![16, 10], vec![0; 16 * 10 * 4]);
        if let Some(f) = freqs {
            w.push_tensor("rope_freqs.weight", GgmlType::F32, vec![f.len() as u64], bytemuck::cast_slice(f).to_vec());
        }
        GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn rope_tables_follow_ggml_scaling() {
        let scaled = [
            ("llama.rope.scaling.type", GgufValue::String("linear".into())),
            ("llama.rope.scaling.factor", GgufValue::F32(4.0)),
        ];
        let freqs = [1.0f32, 8.0];
        let c = LlamaConfig::from_gguf(&file(&scaled, Some(&freqs))).unwrap();
        assert_eq!((c.rope_freq_scale, c.rope_freqs.as_deref()), (0.25, Some(&freqs[..])));
        let (cos, sin) = rope_tables(&c, 64);
        // ggml_rope_ext with ext_factor 0: angle = freq_scale · p · base^(-2i/rot) / ff_i.
        for p in [0usize, 1, 17, 63] {
            for i in 0..2 {
                let a = 0.25 * p as f64 * 10000f64.powf(-((2 * i) as f64) / 4.0) / f64::from(freqs[i]);
                let (gc, gs) = (f64::from(cos[p * 2 + i]), f64::from(sin[p * 2 + i]));
                assert!((gc - a.cos()).abs() < 1e-5 && (gs - a.sin()).abs() < 1e-5, "p {p} i {i}");
            }
        }
        // The legacy key scales the same way; no key leaves the angles unscaled.
        let legacy = LlamaConfig::from_gguf(&file(&[("llama.rope.scale_linear", GgufValue::F32(4.0))], None)).unwrap();
        assert_eq!((legacy.rope_freq_scale, legacy.rope_freqs), (0.25, None));
        assert_eq!(LlamaConfig::from_gguf(&file(&[], None)).unwrap().rope_freq_scale, 1.0);
    }

    #[test]
    fn unsupported_rope_scaling_is_an_error() {
        let e = LlamaConfig::from_gguf(&file(&[("llama.rope.scaling.type", GgufValue::String("yarn".into()))], None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("llama.rope.scaling.type \"yarn\" is not supported"), "{e}");
        let e = LlamaConfig::from_gguf(&file(&[], Some(&[1.0, 2.0, 3.0]))).unwrap_err().to_string();
        assert!(e.contains("rope_freqs.weight has 3 values, need 2"), "{e}");
    }
}
