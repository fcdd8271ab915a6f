//! The llama family on the tensor front ([`crate::front`]), generic over the storage:
//! the same code runs on Vulkan ([`crate::vulkan::VulkanStorage`]) and on candle's
//! `CpuStorage`, which makes the CPU run the conformance oracle of the Vulkan one.
//!
//! The computation is [`crate::llama::Llama`]'s (llama.cpp's `llm_build_llama`,
//! candle-transformers' `quantized_llama`, `quantized_qwen2` for the biases), written op
//! by op in candle's terms: `qembedding` → per layer `rms_norm` → Q/K/V `qmatmul` (+ bias)
//! → `rope` → `attention` over the f16 KV cache → `qmatmul` + residual `add` → `rms_norm`
//! → `silu(gate) * up` → `qmatmul` + `add`; final `rms_norm` and the output `qmatmul`.
//!
//! On Vulkan every op records on the device's stream and only the read-back of the
//! logits submits, so one [`GenericLlama::forward`] is one command buffer and one host
//! wait, and the prompt runs in one batched pass. It does not have [`crate::llama::Llama`]'s
//! fusions (stacked Q|K|V and gate|up mat-vecs, epilogues, the next step recorded
//! ahead): that engine is what `vkml generate` runs; this one is the reference the
//! fused engine and the CPU agree with.

use candle_core::backend::BackendDevice;
use candle_core::DType;
use vkml_quant::gguf::GgufFile;

use crate::error::{model_err, Result};
use crate::front::{ModelStorage, Tensor};
use crate::llama::{check_input, rope_tables, LlamaConfig};

struct Layer<S: ModelStorage> {
    attn_norm: Tensor<S>,
    ffn_norm: Tensor<S>,
    wq: S::QWeight,
    wk: S::QWeight,
    wv: S::QWeight,
    wo: S::QWeight,
    w_gate: S::QWeight,
    w_up: S::QWeight,
    w_down: S::QWeight,
    bias: Option<[Tensor<S>; 3]>,
    k_cache: S::KvCache,
    v_cache: S::KvCache,
}

/// A llama-family model on the tensor front, with its KV cache.
pub struct GenericLlama<S: ModelStorage> {
    dev: S::Device,
    cfg: LlamaConfig,
    ctx: usize,
    tok_embd: S::QWeight,
    /// `None`: tied to `tok_embd`.
    output: Option<S::QWeight>,
    output_norm: Tensor<S>,
    layers: Vec<Layer<S>>,
    cos: Tensor<S>,
    sin: Tensor<S>,
    pos: usize,
}

impl<S: ModelStorage> std::fmt::Debug for GenericLlama<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GenericLlama({:?}, ctx {}, at {})", self.cfg, self.ctx, self.pos)
    }
}

impl<S: ModelStorage> GenericLlama<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Loads a llama-family GGUF model onto `dev` with a KV cache of `ctx` positions
    /// (`None`: the model's context length, at most 4096).
    ///
    /// # Errors
    /// As [`crate::llama::Llama::load`].
    pub fn load(dev: &S::Device, file: &GgufFile, ctx: Option<usize>) -> Result<Self> {
        let cfg = LlamaConfig::from_gguf(file)?;
        let ctx = ctx.unwrap_or(cfg.context_length.min(4096)).max(1);
        let matrix = |name: &str, rows: usize, k: usize| -> Result<S::QWeight> {
            let (info, bytes) =
                file.tensor_data_by_name(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
            if info.row_len() as usize != k || info.n_rows() as usize != rows {
                return Err(model_err(format!("tensor {name} has shape {:?}, expected [{k}, {rows}]", info.dims)));
            }
            Ok(S::qweight(dev, info, bytes)?)
        };
        let vector = |name: &str, n: usize| -> Result<Tensor<S>> {
            let v = file.dequantize(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
            if v.len() != n {
                return Err(model_err(format!("tensor {name} has {} elements, expected {n}", v.len())));
            }
            Ok(Tensor::from_slice(&v, n, dev)?)
        };
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
                Some(_) => Some([
                    vector(&p("attn_q.bias"), h)?,
                    vector(&p("attn_k.bias"), hk)?,
                    vector(&p("attn_v.bias"), hk)?,
                ]),
                None => None,
            };
            layers.push(Layer {
                attn_norm: vector(&p("attn_norm.weight"), e)?,
                ffn_norm: vector(&p("ffn_norm.weight"), e)?,
                wq: matrix(&p("attn_q.weight"), h, e)?,
                wk: matrix(&p("attn_k.weight"), hk, e)?,
                wv: matrix(&p("attn_v.weight"), hk, e)?,
                wo: matrix(&p("attn_output.weight"), e, h)?,
                w_gate: matrix(&p("ffn_gate.weight"), ff, e)?,
                w_up: matrix(&p("ffn_up.weight"), ff, e)?,
                w_down: matrix(&p("ffn_down.weight"), e, ff)?,
                bias,
                k_cache: S::kv_cache(dev, cfg.n_kv_head, ctx, cfg.head_dim)?,
                v_cache: S::kv_cache(dev, cfg.n_kv_head, ctx, cfg.head_dim)?,
            });
        }
        let (cos, sin) = rope_tables(&cfg, ctx);
        let half = cfg.rope_dim / 2;
        Ok(GenericLlama {
            dev: dev.clone(),
            output_norm: vector("output_norm.weight", e)?,
            cos: Tensor::from_slice(&cos, (ctx, half), dev)?,
            sin: Tensor::from_slice(&sin, (ctx, half), dev)?,
            cfg,
            ctx,
            tok_embd,
            output,
            layers,
            pos: 0,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// Tokens in the KV cache: the position the next token gets.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Runs `tokens` at positions `position() ..` in one pass, appending them to the KV
    /// cache, and returns the logits (f32, `vocab` per token) of the last token, or of
    /// every token with `all_logits`.
    ///
    /// # Errors
    /// As [`crate::llama::Llama::forward`].
    pub fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        check_input(&self.cfg, self.pos, self.ctx, tokens)?;
        let logits = self.step(tokens, all_logits)?;
        self.pos += tokens.len();
        Ok(logits.to_vec::<f32>()?)
    }

    fn step(&mut self, tokens: &[u32], all_logits: bool) -> candle_core::Result<Tensor<S>> {
        let c = &self.cfg;
        let (t, d, pos) = (tokens.len(), c.head_dim, self.pos);
        let scale = 1.0 / (d as f32).sqrt();
        let ids = Tensor::from_slice(tokens, t, &self.dev)?;
        let mut x = Tensor::qembedding(&ids, &self.tok_embd)?;
        for l in &mut self.layers {
            let xn = x.rms_norm(&l.attn_norm, c.rms_eps)?;
            let (mut q, mut k, mut v) = (xn.qmatmul(&l.wq)?, xn.qmatmul(&l.wk)?, xn.qmatmul(&l.wv)?);
            if let Some([bq, bk, bv]) = &l.bias {
                (q, k, v) = (q.broadcast_add(bq)?, k.broadcast_add(bk)?, v.broadcast_add(bv)?);
            }
            let q = q.reshape((t, c.n_head, d))?.rope(&self.cos, &self.sin, pos, c.rope_style)?;
            let k = k.reshape((t, c.n_kv_head, d))?.rope(&self.cos, &self.sin, pos, c.rope_style)?;
            let v = v.reshape((t, c.n_kv_head, d))?;
            let a = Tensor::attention(&q, &k, &v, (&mut l.k_cache, &mut l.v_cache), pos, scale)?;
            x = x.add(&a.qmatmul(&l.wo)?)?;
            let xn = x.rms_norm(&l.ffn_norm, c.rms_eps)?;
            let g = xn.qmatmul(&l.w_gate)?.silu()?.mul(&xn.qmatmul(&l.w_up)?)?;
            x = x.add(&g.qmatmul(&l.w_down)?)?;
        }
        if !all_logits {
            x = x.narrow(0, t - 1, 1)?;
        }
        let out = self.output.as_ref().unwrap_or(&self.tok_embd);
        let logits = x.rms_norm(&self.output_norm, c.rms_eps)?.qmatmul(out)?;
        debug_assert_eq!(logits.dtype(), DType::F32);
        Ok(logits)
    }
}
