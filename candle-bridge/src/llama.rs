//! The llama family (llama, mistral, smollm: GGUF architecture `llama` or `mistral`;
//! qwen2: the same blocks with Q/K/V biases and neox rope) on
//! vkml's kernels, read from GGUF: quantized weights stay quantized on the device, the
//! KV cache is f16 on the device, and each call of [`Llama::forward`] runs the whole
//! step (every layer, the final norm and the output projection) as one command buffer
//! and waits for it once. The next decode step is recorded while the GPU runs the
//! current one (two streams), so generation does not wait on host recording.
//!
//! The computation is llama.cpp's `llm_build_llama` / candle-transformers'
//! `quantized_llama` (pre-norm blocks: rms_norm → Q/K/V → rope → causal GQA attention →
//! output projection + residual → rms_norm → SwiGLU MLP + residual; final rms_norm and
//! the output projection, tied to `token_embd.weight` when `output.weight` is absent).
//! Rope is the interleaved (GGML "NORM") style for llama and mistral and the neox style
//! for qwen2, as llama.cpp's `llama_model_rope_type` says (the GGUF converters permute
//! llama's Q/K rows to match). qwen2's Q/K/V biases are added after the projections
//! (candle-transformers' `quantized_qwen2`).
//!
//! The step per layer, for `t` new tokens (DESIGN.md, "one decode step"):
//! - `t == 1` (decode): one mat-vec over the stacked Q|K|V matrix, rope of Q and K in one
//!   dispatch, K and V appended from their place in the stacked row, split-KV flash
//!   attention, the output projection with the
//!   residual add as its epilogue, rms_norm, one mat-vec over the stacked gate|up matrix
//!   with the SwiGLU epilogue, the down projection with the residual add.
//! - `t` below [`tuning::mat_mat_min_tokens`] (9 on GPUs; every `t` on lavapipe): the
//!   same with batched mat-vecs (Q, K, V separately: the stacked output would interleave
//!   them per token).
//! - from there on (prompts on GPUs): quantized mat-mats (cooperative-matrix where the
//!   device has it), the residual adds folded in as `accumulate`.

use vkml_hal::{Buffer, Device, MemoryKind, Stream};
use vkml_ops::attention::{self, AttnShape, KvCache};
use vkml_ops::nn::{self, GluActivation, RopeShape, RopeStyle};
use vkml_ops::quant::{self, MatVecEpilogue, QMatrix};
use vkml_ops::{tuning, Dtype};
use vkml_quant::gguf::{GgufFile, GgufValue};

use crate::error::{model_err, Error, Result};

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
    /// From how many tokens a step's projections run as mat-mats rather than batched
    /// mat-vecs; `None`: [`tuning::mat_mat_min_tokens`] for the device.
    pub mat_mat_min_tokens: Option<usize>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { ctx: None, max_batch: 512, mat_mat_min_tokens: None }
    }
}

#[derive(Debug)]
struct Layer {
    attn_norm: Buffer,
    ffn_norm: Buffer,
    wq: QMatrix,
    wk: QMatrix,
    wv: QMatrix,
    wqkv: QMatrix,
    wo: QMatrix,
    w_gate: QMatrix,
    w_up: QMatrix,
    w_gate_up: QMatrix,
    w_down: QMatrix,
    /// Q, K, V biases (qwen2), and the three stacked for the one-pass QKV.
    bias: Option<[Buffer; 4]>,
    k_cache: KvCache,
    v_cache: KvCache,
}

/// Per-step buffers, sized for `max_batch` tokens (f32).
#[derive(Debug)]
struct Scratch {
    /// Token ids, one buffer per stream.
    ids: [Buffer; 2],
    x: Buffer,
    xn: Buffer,
    q: Buffer,
    k: Buffer,
    v: Buffer,
    qr: Buffer,
    kr: Buffer,
    attn: Buffer,
    gate: Buffer,
    up: Buffer,
    ffn: Buffer,
    last: Buffer,
    last_n: Buffer,
    split_o: Buffer,
    split_ml: Buffer,
    logits: Buffer,
    all_logits: Option<Buffer>,
}

/// Where the host time of the last [`Llama::forward`] chunk went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepProfile {
    /// Recording the command buffer on the host, seconds (0 when it was recorded ahead,
    /// while the previous step ran).
    pub record_s: f64,
    /// Submitting and waiting for the GPU, seconds.
    pub wait_s: f64,
    /// Reading back the logits, seconds.
    pub read_s: f64,
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Barriers recorded.
    pub barriers: u64,
}

/// Largest KV split of a decode step's attention.
const MAX_SPLITS: usize = 16;

/// A llama-family model on a vkml device, with its KV cache.
#[derive(Debug)]
pub struct Llama {
    dev: Device,
    cfg: LlamaConfig,
    ctx: usize,
    max_batch: usize,
    mat_mat_min_tokens: usize,
    tok_embd: QMatrix,
    output: QMatrix,
    output_norm: Buffer,
    layers: Vec<Layer>,
    cos: Buffer,
    sin: Buffer,
    scratch: Scratch,
    /// Two streams: while one runs a decode step, the next step is recorded on the other.
    streams: [Stream; 2],
    /// The stream the next step runs on.
    cur: usize,
    /// The position of a decode step already recorded on `streams[cur]`, waiting for its
    /// token id.
    pending: Option<usize>,
    /// Dispatches and barriers of the step recorded ahead.
    pending_counts: (u64, u64),
    pos: usize,
    profile: StepProfile,
}

fn f32_bytes(n: usize) -> u64 {
    4 * n.max(1) as u64
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

impl Llama {
    /// Loads a llama-family GGUF model onto `dev`, calling `progress(done, total)` (in
    /// bytes of tensor data) as tensors are uploaded.
    ///
    /// # Errors
    /// [`Error::Model`] for unsupported or inconsistent models (see
    /// [`LlamaConfig::from_gguf`]) and missing or misshapen tensors; [`Error::Ops`] for
    /// tensor types without GPU kernels or tensors past the device's limits; HAL errors
    /// (out of device memory names the size).
    pub fn load(dev: &Device, file: &GgufFile, opts: LoadOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<Llama> {
        let cfg = LlamaConfig::from_gguf(file)?;
        let ctx = opts.ctx.unwrap_or(cfg.context_length.min(4096)).max(1);
        let max_batch = opts.max_batch.max(1);
        let total: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
        let mut done = 0u64;
        let mut matrix = |name: &str, rows: usize, k: usize| -> Result<QMatrix> {
            let (info, bytes) =
                file.tensor_data_by_name(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
            if info.row_len() as usize != k || info.n_rows() as usize != rows {
                return Err(model_err(format!("tensor {name} has shape {:?}, expected [{k}, {rows}]", info.dims)));
            }
            let m = QMatrix::from_gguf(dev, info, bytes)?;
            done += info.n_bytes;
            progress(done, total);
            Ok(m)
        };
        let (e, h, hk, ff) = (cfg.n_embd, cfg.n_head * cfg.head_dim, cfg.n_kv_head * cfg.head_dim, cfg.n_ff);
        let tok_embd = matrix("token_embd.weight", cfg.vocab, e)?;
        let output = if file.header().tensor("output.weight").is_some() {
            matrix("output.weight", cfg.vocab, e)?
        } else {
            tok_embd.clone()
        };
        let vector = |name: &str, n: usize| -> Result<Buffer> {
            let v = file.dequantize(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
            if v.len() != n {
                return Err(model_err(format!("tensor {name} has {} elements, expected {n}", v.len())));
            }
            Ok(dev.upload(&v)?)
        };
        let output_norm = vector("output_norm.weight", e)?;
        let mut stream = Stream::new(dev)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = |n: &str| format!("blk.{i}.{n}");
            let bias = if file.header().tensor(&p("attn_q.bias")).is_some() {
                let (bq, bk, bv) =
                    (vector(&p("attn_q.bias"), h)?, vector(&p("attn_k.bias"), hk)?, vector(&p("attn_v.bias"), hk)?);
                let all = dev.alloc(f32_bytes(h + 2 * hk), MemoryKind::DeviceLocal)?;
                stream.copy(&bq, 0, &all, 0, 4 * h as u64)?;
                stream.copy(&bk, 0, &all, 4 * h as u64, 4 * hk as u64)?;
                stream.copy(&bv, 0, &all, 4 * (h + hk) as u64, 4 * hk as u64)?;
                Some([bq, bk, bv, all])
            } else {
                None
            };
            let wq = matrix(&p("attn_q.weight"), h, e)?;
            let wk = matrix(&p("attn_k.weight"), hk, e)?;
            let wv = matrix(&p("attn_v.weight"), hk, e)?;
            let w_gate = matrix(&p("ffn_gate.weight"), ff, e)?;
            let w_up = matrix(&p("ffn_up.weight"), ff, e)?;
            let wqkv = QMatrix::concat_rows(&mut stream, &[&wq, &wk, &wv])?;
            let w_gate_up = QMatrix::concat_rows(&mut stream, &[&w_gate, &w_up])?;
            layers.push(Layer {
                attn_norm: vector(&p("attn_norm.weight"), e)?,
                ffn_norm: vector(&p("ffn_norm.weight"), e)?,
                wo: matrix(&p("attn_output.weight"), e, h)?,
                w_down: matrix(&p("ffn_down.weight"), e, ff)?,
                wq,
                wk,
                wv,
                wqkv,
                w_gate,
                w_up,
                w_gate_up,
                bias,
                k_cache: KvCache::new(dev, cfg.n_kv_head, ctx, cfg.head_dim)?,
                v_cache: KvCache::new(dev, cfg.n_kv_head, ctx, cfg.head_dim)?,
            });
        }
        stream.finish_and_wait()?;
        let (cos, sin) = rope_tables(&cfg, ctx);
        let b = max_batch;
        let a = |n: usize| dev.alloc(f32_bytes(n), MemoryKind::DeviceLocal);
        let scratch = Scratch {
            ids: [dev.alloc(f32_bytes(b), MemoryKind::Upload)?, dev.alloc(f32_bytes(b), MemoryKind::Upload)?],
            x: a(b * e)?,
            xn: a(b * e)?,
            q: a(b * (h + 2 * hk))?,
            k: a(b * hk)?,
            v: a(b * hk)?,
            qr: a(b * (h + hk))?,
            kr: a(b * hk)?,
            attn: a(b * h)?,
            gate: a(b * ff)?,
            up: a(b * ff)?,
            ffn: a(b * ff)?,
            last: a(e)?,
            last_n: a(e)?,
            split_o: a(MAX_SPLITS * h)?,
            split_ml: a(MAX_SPLITS * cfg.n_head * 2)?,
            logits: dev.alloc(f32_bytes(cfg.vocab), MemoryKind::Readback)?,
            all_logits: None,
        };
        Ok(Llama {
            dev: dev.clone(),
            cos: dev.upload(&cos)?,
            sin: dev.upload(&sin)?,
            cfg,
            ctx,
            max_batch: b,
            mat_mat_min_tokens: opts
                .mat_mat_min_tokens
                .unwrap_or_else(|| tuning::mat_mat_min_tokens(dev.caps()))
                .max(2),
            tok_embd,
            output,
            output_norm,
            layers,
            scratch,
            streams: [stream, Stream::new(dev)?],
            cur: 0,
            pending: None,
            pending_counts: (0, 0),
            pos: 0,
            profile: StepProfile::default(),
        })
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
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Host timings and command counts of the last step (chunk) run.
    pub fn last_step(&self) -> StepProfile {
        self.profile
    }

    /// Empties the KV cache (the next token is at position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Drops a decode step recorded ahead that will not run.
    fn discard_pending(&mut self) -> Result<()> {
        if self.pending.take().is_some() {
            self.streams[self.cur].discard()?;
        }
        Ok(())
    }

    /// Runs `tokens` at positions `position() ..`, appending them to the KV cache, and
    /// returns the logits (f32, `vocab` per token) of the last token, or of every token
    /// with `all_logits`. Inputs longer than the batch run in chunks, each one command
    /// buffer with one host wait. While the GPU runs the last chunk, the decode step at
    /// the next position is recorded on a second stream, so a following one-token call
    /// only writes its id and submits.
    ///
    /// # Errors
    /// [`Error::Context`] when the cache cannot take the tokens; [`Error::Model`] for
    /// an empty input or a token id past the vocabulary; kernel and device errors.
    pub fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        check_input(&self.cfg, self.pos, self.ctx, tokens)?;
        let mut out = Vec::with_capacity(if all_logits { tokens.len() * self.cfg.vocab } else { self.cfg.vocab });
        let n_chunks = tokens.len().div_ceil(self.max_batch);
        for (i, chunk) in tokens.chunks(self.max_batch).enumerate() {
            let last = i + 1 == n_chunks;
            let l = self.run_chunk(chunk, all_logits, all_logits || last, last)?;
            if let Some(l) = l {
                if !all_logits {
                    out.clear();
                }
                out.extend_from_slice(&l);
            }
        }
        Ok(out)
    }

    /// Runs one chunk: records it (unless it is the decode step recorded ahead), writes
    /// its token ids, submits; then, with `record_next`, records the next decode step on
    /// the other stream while the GPU runs this one; then waits and reads the logits.
    fn run_chunk(
        &mut self,
        tokens: &[u32],
        all_logits: bool,
        want: bool,
        record_next: bool,
    ) -> Result<Option<Vec<f32>>> {
        let t = tokens.len();
        let t_start = std::time::Instant::now();
        let idx = self.cur;
        let mut record_s = 0.0;
        let ahead = t == 1 && !all_logits && want && self.pending == Some(self.pos);
        let counts = if ahead {
            self.pending_counts
        } else {
            self.discard_pending()?;
            let c = self.record(idx, t, self.pos, all_logits, want)?;
            record_s = t_start.elapsed().as_secs_f64();
            c
        };
        self.pending = None;
        self.scratch.ids[idx].write(0, bytemuck::cast_slice(tokens))?;
        let sub = self.streams[idx].submit()?;
        self.pos += t;
        self.cur = 1 - idx;
        if record_next && self.pos < self.ctx {
            self.pending_counts = self.record(self.cur, 1, self.pos, false, true)?;
            self.pending = Some(self.pos);
        }
        let w = std::time::Instant::now();
        sub.wait()?;
        let wait_s = w.elapsed().as_secs_f64();
        let r = std::time::Instant::now();
        let result = if !want {
            None
        } else if all_logits {
            let mut v = vec![0f32; t * self.cfg.vocab];
            self.scratch.all_logits.as_ref().expect("allocated by record").read(0, bytemuck::cast_slice_mut(&mut v))?;
            Some(v)
        } else {
            let mut v = vec![0f32; self.cfg.vocab];
            self.scratch.logits.read(0, bytemuck::cast_slice_mut(&mut v))?;
            Some(v)
        };
        self.profile = StepProfile {
            record_s,
            wait_s,
            read_s: r.elapsed().as_secs_f64(),
            dispatches: counts.0,
            barriers: counts.1,
        };
        Ok(result)
    }

    /// Records (does not submit) a step of `t <= max_batch` tokens at positions
    /// `pos0 ..` on `streams[idx]`, reading the token ids from `ids[idx]`; the logits go
    /// to `scratch.logits` (last token) or `scratch.all_logits` (every token). Returns the
    /// dispatches and barriers recorded.
    fn record(&mut self, idx: usize, t: usize, pos0: usize, all_logits: bool, want_logits: bool) -> Result<(u64, u64)> {
        let stats0 = self.streams[idx].stats();
        if want_logits && all_logits {
            let need = f32_bytes(t * self.cfg.vocab);
            if self.scratch.all_logits.as_ref().is_none_or(|b| b.size() < need) {
                self.scratch.all_logits = Some(self.dev.alloc(need, MemoryKind::Readback)?);
            }
        }
        let c = &self.cfg;
        let (e, d) = (c.n_embd, c.head_dim);
        let (h, hk) = (c.n_head * d, c.n_kv_head * d);
        let sc = &self.scratch;
        let ids = &self.scratch.ids[idx];
        let s = &mut self.streams[idx];
        let kv_len = pos0 + t;
        let mv_cfg = tuning::mat_vec_config(self.dev.caps());
        let matvec = t < self.mat_mat_min_tokens;
        // y (+)= W x over t tokens, the kernel by batch size.
        let linear = |s: &mut Stream, w: &QMatrix, x: &Buffer, y: &Buffer, add: bool| -> Result<()> {
            if matvec {
                let ep = if add { MatVecEpilogue::Add } else { MatVecEpilogue::Store };
                quant::mat_vec_fused(s, w, x, t, y, mv_cfg, ep)?;
            } else {
                let path = quant::MatMatPath::best(s.device().caps(), w);
                let opts = quant::MatMatOptions { accumulate: add, ..quant::MatMatOptions::new(path) };
                quant::mat_mat_with(s, w, x, t, y, opts)?;
            }
            Ok(())
        };
        let rope = |s: &mut Stream, x: &Buffer, heads: usize, y: &Buffer| -> Result<()> {
            let sh = RopeShape {
                bh: heads,
                t,
                d,
                rot: c.rope_dim,
                pos_offset: pos0,
                positions: self.ctx,
                token_major: true,
            };
            nn::rope(s, Dtype::F32, c.rope_style, x, &self.cos, &self.sin, sh, y)?;
            Ok(())
        };
        quant::get_rows(s, &self.tok_embd, ids, t, &sc.x)?;
        let splits = if t == 1 { kv_len.div_ceil(256).clamp(1, MAX_SPLITS) } else { 1 };
        for l in &self.layers {
            nn::rms_norm(s, Dtype::F32, &sc.x, Some(&l.attn_norm), t, e, c.rms_eps, &sc.xn)?;
            if t == 1 {
                // One pass over the stacked Q|K|V rows; rope rotates the Q and K heads,
                // which are adjacent.
                quant::mat_vec_fused(s, &l.wqkv, &sc.xn, 1, &sc.q, mv_cfg, MatVecEpilogue::Store)?;
                if let Some([_, _, _, b]) = &l.bias {
                    nn::add_bias(s, Dtype::F32, &sc.q, b, 1, h + 2 * hk)?;
                }
                // K (rotated) and V are appended from their place in the stacked row.
                rope(s, &sc.q, c.n_head + c.n_kv_head, &sc.qr)?;
                attention::kv_append_from(s, Dtype::F32, &sc.qr, h, h + 2 * hk, 1, pos0, &l.k_cache)?;
                attention::kv_append_from(s, Dtype::F32, &sc.q, h + hk, h + 2 * hk, 1, pos0, &l.v_cache)?;
            } else {
                linear(s, &l.wq, &sc.xn, &sc.q, false)?;
                linear(s, &l.wk, &sc.xn, &sc.k, false)?;
                linear(s, &l.wv, &sc.xn, &sc.v, false)?;
                if let Some([bq, bk, bv, _]) = &l.bias {
                    nn::add_bias(s, Dtype::F32, &sc.q, bq, t, h)?;
                    nn::add_bias(s, Dtype::F32, &sc.k, bk, t, hk)?;
                    nn::add_bias(s, Dtype::F32, &sc.v, bv, t, hk)?;
                }
                rope(s, &sc.q, c.n_head, &sc.qr)?;
                rope(s, &sc.k, c.n_kv_head, &sc.kr)?;
                attention::kv_append(s, Dtype::F32, &sc.kr, t, pos0, &l.k_cache)?;
                attention::kv_append(s, Dtype::F32, &sc.v, t, pos0, &l.v_cache)?;
            }
            let sh = AttnShape {
                t_q: t,
                n_heads: c.n_head,
                kv_len,
                q_pos0: pos0,
                causal: true,
                scale: 1.0 / (d as f32).sqrt(),
                n_splits: splits,
            };
            let scratch = (splits > 1).then_some((&sc.split_o, &sc.split_ml));
            attention::flash_attn(s, Dtype::F32, &sc.qr, &l.k_cache, &l.v_cache, sh, &sc.attn, scratch)?;
            linear(s, &l.wo, &sc.attn, &sc.x, true)?;
            nn::rms_norm(s, Dtype::F32, &sc.x, Some(&l.ffn_norm), t, e, c.rms_eps, &sc.xn)?;
            if matvec {
                let ep = MatVecEpilogue::Glu(GluActivation::Silu);
                quant::mat_vec_fused(s, &l.w_gate_up, &sc.xn, t, &sc.ffn, mv_cfg, ep)?;
            } else {
                linear(s, &l.w_gate, &sc.xn, &sc.gate, false)?;
                linear(s, &l.w_up, &sc.xn, &sc.up, false)?;
                nn::glu(s, Dtype::F32, GluActivation::Silu, &sc.gate, &sc.up, t * c.n_ff, &sc.ffn)?;
            }
            linear(s, &l.w_down, &sc.ffn, &sc.x, true)?;
        }
        if want_logits && all_logits {
            let out = sc.all_logits.as_ref().expect("allocated above");
            nn::rms_norm(s, Dtype::F32, &sc.x, Some(&self.output_norm), t, e, c.rms_eps, &sc.xn)?;
            linear(s, &self.output, &sc.xn, out, false)?;
        } else if want_logits {
            s.copy(&sc.x, 4 * ((t - 1) * e) as u64, &sc.last, 0, 4 * e as u64)?;
            nn::rms_norm(s, Dtype::F32, &sc.last, Some(&self.output_norm), 1, e, c.rms_eps, &sc.last_n)?;
            quant::mat_vec_fused(s, &self.output, &sc.last_n, 1, &sc.logits, mv_cfg, MatVecEpilogue::Store)?;
        }
        let stats = s.stats();
        Ok((stats.dispatches - stats0.dispatches, stats.barriers - stats0.barriers))
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
