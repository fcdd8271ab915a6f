//! `vkml gguf quantize IN OUT --type T`: llama-quantize's job, the matrices quantized on the
//! GPU (`vkml_ops::quant::quantize`: ggml's reference arithmetic, the CPU's bytes but where
//! the device's division moves a value of a block of 32 across a rounding boundary). T is a
//! llama.cpp file type (`llama_ftype`), as llama-quantize names it: the base types Q1_0,
//! Q2_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0, IQ4_NL, IQ4_XS, Q6_K, Q8_0, MXFP4_MOE (the
//! experts MXFP4, the rest Q8_0), the k-quant mixes Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L,
//! Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M (Q3_K, Q4_K and Q5_K name the _M mixes), and F16, BF16,
//! F32 (every matrix converted on the CPU). The types the GPU does not quantize
//! (`vkml_ops::quant::GPU_QUANTIZED`) are quantized on the CPU by vkml-quant.
//!
//! Which tensor gets which type follows llama.cpp's `llama_tensor_get_type_impl` and
//! `tensor_type_fallback` (src/llama-quant.cpp, without an importance matrix):
//! - tensors in llama-quantize's order (by layer, then name), which its per-layer counters
//!   follow and the output keeps;
//! - kept as they are: what `tensor_allows_quantization` keeps (1-D tensors, norms, the MoE
//!   router, position and token-type embeddings, small convolutions, ...: `allows_quantization`);
//! - the output projection (or, with the head tied to it, the token embedding): Q6_K, or
//!   Q8_0 for Q8_0, for Falcon, or where its rows are not whole blocks of T's base type;
//! - per category (`attn_v` / `attn_qkv`, `attn_k`, `attn_output`, `ffn_down`), layer
//!   (`use_more_bits`: the first and last eighth and every third layer between) and model
//!   (grouped-query factor, 8 experts, Falcon, Llama 70B) the mixes' larger types;
//! - TQ1_0, TQ2_0 and Q2_0 files keep the token embedding in Q4_K;
//! - a type whose block does not divide the rows falls back (IQ4_XS to IQ4_NL; Q2_0, Q2_K,
//!   Q3_K, TQ1_0 and TQ2_0 to Q4_0; Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0), then to F16
//!   (on the CPU); Q1_0, which llama.cpp gives no fallback, is an error naming the tensor.
//!
//! The output is written as it is made, one tensor in memory at a time (the header first:
//! every type is chosen before any matrix is quantized), to `OUT.part`, renamed to OUT once
//! complete. `general.file_type` is set to T's `llama_ftype` and
//! `general.quantization_version` to 2.
//! The input must hold its matrices in F32, F16, BF16 or Q8_0 (llama-quantize takes a
//! quantized input only with `--allow-requantize`; Q8_0 is taken here as the issue of a
//! Q8_0 checkpoint).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use vkml_hal::{Device, Stream};
use vkml_ops::quant::{quantize, QMatrix, GPU_QUANTIZED};
use vkml_quant::gguf::{alignment_of, header_bytes, GgufArray, GgufFile, GgufValue, TensorInfo};
use vkml_quant::GgmlType;

/// Arguments of `vkml gguf quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF file to read (matrices in F32, F16, BF16 or Q8_0).
    input: PathBuf,
    /// The GGUF file to write (replaced if it exists).
    output: PathBuf,
    /// The file type, as llama-quantize names it (any case): Q1_0, Q2_0, Q4_0, Q4_1,
    /// MXFP4_MOE, Q5_0, Q5_1, TQ1_0, TQ2_0, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, IQ4_NL,
    /// IQ4_XS, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, Q8_0, F16, BF16, F32; Q3_K, Q4_K and Q5_K
    /// are the _M mixes.
    #[arg(long = "type")]
    ty: String,
}

/// A llama.cpp file type: its name, `llama_ftype` (`LLAMA_FTYPE_MOSTLY_*`, include/llama.h)
/// and the type of the matrices no rule singles out (`llama_ftype_get_default_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileType {
    name: &'static str,
    ftype: u32,
    base: GgmlType,
}

const fn file_type(name: &'static str, ftype: u32, base: GgmlType) -> FileType {
    FileType { name, ftype, base }
}

const Q4_0: FileType = file_type("Q4_0", 2, GgmlType::Q4_0);
const Q4_1: FileType = file_type("Q4_1", 3, GgmlType::Q4_1);
const Q8_0: FileType = file_type("Q8_0", 7, GgmlType::Q8_0);
const Q5_0: FileType = file_type("Q5_0", 8, GgmlType::Q5_0);
const Q5_1: FileType = file_type("Q5_1", 9, GgmlType::Q5_1);
const Q2_K: FileType = file_type("Q2_K", 10, GgmlType::Q2_K);
const Q3_K_S: FileType = file_type("Q3_K_S", 11, GgmlType::Q3_K);
const Q3_K_M: FileType = file_type("Q3_K_M", 12, GgmlType::Q3_K);
const Q3_K_L: FileType = file_type("Q3_K_L", 13, GgmlType::Q3_K);
const Q4_K_S: FileType = file_type("Q4_K_S", 14, GgmlType::Q4_K);
const Q4_K_M: FileType = file_type("Q4_K_M", 15, GgmlType::Q4_K);
const Q5_K_S: FileType = file_type("Q5_K_S", 16, GgmlType::Q5_K);
const Q5_K_M: FileType = file_type("Q5_K_M", 17, GgmlType::Q5_K);
const Q6_K: FileType = file_type("Q6_K", 18, GgmlType::Q6_K);
const Q2_K_S: FileType = file_type("Q2_K_S", 21, GgmlType::Q2_K);
const IQ4_NL: FileType = file_type("IQ4_NL", 25, GgmlType::IQ4_NL);
const IQ4_XS: FileType = file_type("IQ4_XS", 30, GgmlType::IQ4_XS);
const F32: FileType = file_type("F32", 0, GgmlType::F32);
const F16: FileType = file_type("F16", 1, GgmlType::F16);
const BF16: FileType = file_type("BF16", 32, GgmlType::BF16);
const TQ1_0: FileType = file_type("TQ1_0", 36, GgmlType::TQ1_0);
const TQ2_0: FileType = file_type("TQ2_0", 37, GgmlType::TQ2_0);
const MXFP4_MOE: FileType = file_type("MXFP4_MOE", 38, GgmlType::MXFP4);
const Q1_0: FileType = file_type("Q1_0", 40, GgmlType::Q1_0);
const Q2_0: FileType = file_type("Q2_0", 41, GgmlType::Q2_0);

/// The file types `--type` takes, in llama-quantize's order (its `QUANT_OPTIONS` but the
/// IQ1 / IQ2 / IQ3 ones, which need an importance matrix and quantizers vkml lacks).
const FILE_TYPES: [FileType; 25] = [
    Q1_0, Q2_0, Q4_0, Q4_1, MXFP4_MOE, Q5_0, Q5_1, TQ1_0, TQ2_0, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, IQ4_NL, IQ4_XS,
    Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, Q8_0, F16, BF16, F32,
];

/// The file type named `name` (any case; llama-quantize's aliases Q3_K, Q4_K, Q5_K for the
/// _M mixes).
fn file_type_named(name: &str) -> Option<FileType> {
    let up = name.to_ascii_uppercase();
    let up = match up.as_str() {
        "Q3_K" => "Q3_K_M",
        "Q4_K" => "Q4_K_M",
        "Q5_K" => "Q5_K_M",
        other => other,
    };
    FILE_TYPES.iter().copied().find(|f| f.name == up)
}

/// The types a matrix may come in.
const SOURCES: [GgmlType; 4] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0];

/// What becomes of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Copied as it is.
    Keep,
    /// Quantized on the GPU.
    Gpu(GgmlType),
    /// Converted on the CPU (F16, the last fallback).
    Cpu(GgmlType),
}

/// The model facts llama.cpp's type choice reads (from the GGUF metadata).
#[derive(Clone, Copy, Debug, Default)]
struct Model<'a> {
    /// `general.architecture`.
    arch: &'a str,
    /// `{arch}.block_count`.
    n_layer: usize,
    /// `{arch}.attention.head_count` and `head_count_kv` (of the first layer where they
    /// are per layer); the grouped-query factor is their ratio.
    n_head: usize,
    n_head_kv: usize,
    /// `{arch}.expert_count`.
    n_expert: usize,
    /// Whether the file has `output.weight` (else the head is the token embedding).
    has_output: bool,
}

impl Model<'_> {
    /// `hparams.n_gqa()`: query heads per KV head.
    fn n_gqa(&self) -> usize {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// `LLM_TYPE_70B` as llama.cpp's loaders give it (src/models/*.cpp): a Llama of 80
    /// layers with grouped-query attention, a Qwen2, OLMo or DeciLM of 80 layers, a Jais2
    /// of 68.
    fn is_70b(&self) -> bool {
        match self.arch {
            "llama" => self.n_layer == 80 && self.n_head != self.n_head_kv,
            "qwen2" | "olmo" | "deci" => self.n_layer == 80,
            "jais2" => self.n_layer == 68,
            _ => false,
        }
    }
}

/// llama.cpp's `tensor_allows_quantization` (src/llama-quant.cpp): tensors of 2 or 3 dims
/// (trailing dims of 1 not counted, as `ggml_n_dims`) whose name ends in `weight`, but the
/// norms, the MoE router and DeepSeek's token-to-expert table, Gemma 3n's `altup`,
/// `laurel` and `per_layer_model_proj`, position and token-type embeddings, the small
/// convolutions (`ssm_conv1d`, `shortconv.conv`), MiniMax's indexer projections, RWKV's
/// `time_mix_*` tensors, T5's `attn_rel_b` and the multimodal ones llama.cpp lists.
/// (GLM-5-next's own exceptions are not here: vkml does not load that architecture.)
fn allows_quantization(t: &TensorInfo) -> bool {
    let n_dims = t.dims.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
    let name = t.name.as_str();
    let never = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    let rwkv = [
        "first",
        "w0",
        "w1",
        "w2",
        "v0",
        "v1",
        "v2",
        "a0",
        "a1",
        "a2",
        "g1",
        "g2",
        "decay_w1",
        "decay_w2",
        "lerp_fused",
    ];
    n_dims >= 2
        && name.ends_with("weight")
        && !never.iter().any(|s| name.contains(s))
        && name != "position_embd.weight"
        && name != "token_types.weight"
        && !rwkv.iter().any(|s| name.contains(&format!("time_mix_{s}.weight")))
}

/// The layer of a tensor named `blk.N.…` (llama.cpp's `sscanf(name, "blk.%d.")`), else -1.
fn layer_of(name: &str) -> i64 {
    let Some(rest) = name.strip_prefix("blk.") else { return -1 };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().unwrap_or(-1)
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third
/// layer between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// llama.cpp's `tensor_category`, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    let has = |s: &str| name.contains(s);
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        Category::TokenEmbd
    } else if has("attn_qkv.weight") {
        Category::AttnQkv
    } else if has("attn_kv_b.weight") {
        Category::AttnKvB
    } else if has("attn_v.weight") {
        Category::AttnV
    } else if has("attn_k.weight") {
        Category::AttnK
    } else if has("attn_q.weight") {
        Category::AttnQ
    } else if has("attn_output.weight") {
        Category::AttnOutput
    } else if has("ffn_up") {
        Category::FfnUp
    } else if has("ffn_gate") {
        Category::FfnGate
    } else if has("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// The choice over a file's tensors in order, with llama.cpp's counters
/// (`quantize_state_impl`: the `attn_v`-like tensors and `ffn_down` tensors seen so far).
struct Chooser<'a> {
    ft: FileType,
    model: Model<'a>,
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
}

impl<'a> Chooser<'a> {
    fn new(ft: FileType, model: Model<'a>, tensors: &[TensorInfo]) -> Chooser<'a> {
        let n_attention_wv = tensors
            .iter()
            .filter(|t| matches!(category(&t.name), Category::AttnV | Category::AttnQkv | Category::AttnKvB))
            .count();
        Chooser { ft, model, n_attention_wv, i_attention_wv: 0, i_ffn_down: 0 }
    }

    /// The plan for the next tensor `t` (call in file order).
    fn plan(&mut self, t: &TensorInfo) -> Result<Plan, String> {
        let k = t.dims.first().copied().unwrap_or(0) as usize;
        // Empty rows (k = 0, a GGUF may declare them) have nothing to quantize.
        if k == 0 || !allows_quantization(t) {
            return Ok(Plan::Keep);
        }
        // A float file type takes every matrix as it is, converted (no rule, no fallback).
        if self.ft.base.block_size() == 1 {
            return Ok(Plan::Cpu(self.ft.base));
        }
        let ty = fallback(self.choose(t, k), k).map_err(|e| format!("tensor {}: {e}", t.name))?;
        Ok(if GPU_QUANTIZED.contains(&ty) { Plan::Gpu(ty) } else { Plan::Cpu(ty) })
    }

    /// `llama_tensor_get_type_impl` for the file types here (no importance matrix).
    fn choose(&mut self, t: &TensorInfo, k: usize) -> GgmlType {
        use GgmlType as G;
        let (ft, m) = (self.ft, self.model);
        let cat = category(&t.name);
        let falcon = m.arch == "falcon";
        // The layer of an expert tensor is in its name (`blk.N.`); else the tensor's index
        // among those of its category, over the model's layers.
        let layer = |i: usize| -> usize {
            if m.n_expert > 1 {
                usize::try_from(layer_of(&t.name)).unwrap_or(i)
            } else {
                i
            }
        };
        let mut ty = ft.base;
        if cat == Category::Output || (!m.has_output && cat == Category::TokenEmbd) {
            return if ft == MXFP4_MOE || falcon || !k.is_multiple_of(ft.base.block_size()) {
                G::Q8_0
            } else if ft.base != G::Q8_0 {
                G::Q6_K
            } else {
                ft.base
            };
        }
        if ft == MXFP4_MOE {
            // Expert tensors (3-D) to MXFP4, the others to Q8_0.
            return if t.dims.get(2).is_some_and(|&e| e > 1) { G::MXFP4 } else { G::Q8_0 };
        }
        match cat {
            Category::TokenEmbd if [TQ1_0, TQ2_0, Q2_0].contains(&ft) => ty = G::Q4_K,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB => {
                let (i, n) = (self.i_attention_wv, self.n_attention_wv);
                if ft == Q2_K {
                    ty = if m.n_gqa() >= 4 { G::Q4_K } else { G::Q3_K };
                } else if ft == Q2_K_S && m.n_gqa() >= 4 {
                    ty = G::Q4_K;
                } else if ft == Q3_K_M {
                    ty = if i < 2 { G::Q5_K } else { G::Q4_K };
                } else if ft == Q3_K_L || ((ft == IQ4_NL || ft == IQ4_XS) && m.n_gqa() >= 4) {
                    ty = G::Q5_K;
                } else if (ft == Q4_K_M || ft == Q5_K_M) && use_more_bits(i, n) {
                    ty = G::Q6_K;
                } else if ft == Q4_K_S && i < 4 {
                    ty = G::Q5_K;
                }
                if m.is_70b() && (ty == G::Q3_K || ty == G::Q4_K) {
                    ty = G::Q5_K;
                }
                if m.n_expert == 8 {
                    ty = G::Q8_0;
                }
                self.i_attention_wv += 1;
            }
            Category::AttnK if m.n_expert == 8 => ty = G::Q8_0,
            Category::FfnDown => {
                let (i, n) = (layer(self.i_ffn_down), m.n_layer.max(1));
                if ft == Q2_K {
                    ty = G::Q3_K;
                } else if ft == Q2_K_S {
                    if i < n / 8 {
                        ty = G::Q4_K;
                    }
                } else if ft == Q3_K_M {
                    ty = if i < n / 16 {
                        G::Q5_K
                    } else if !falcon || use_more_bits(i, n) {
                        G::Q4_K
                    } else {
                        G::Q3_K
                    };
                } else if ft == Q3_K_L {
                    ty = if falcon { G::Q4_K } else { G::Q5_K };
                } else if ft == Q4_K_M {
                    if falcon {
                        ty = if i < n / 16 {
                            G::Q6_K
                        } else if use_more_bits(i, n) {
                            G::Q5_K
                        } else {
                            G::Q4_K
                        };
                    } else if use_more_bits(i, n) {
                        ty = G::Q6_K;
                    }
                } else if i < n / 8 && (ft == IQ4_NL || ft == IQ4_XS) {
                    ty = G::Q5_K;
                } else if ft == Q5_K_M && use_more_bits(i, n) {
                    ty = G::Q6_K;
                } else if ft == Q4_K_S && !falcon && i < n / 8 {
                    ty = G::Q5_K;
                }
                self.i_ffn_down += 1;
            }
            Category::AttnOutput => {
                if !falcon {
                    if m.n_expert == 8 {
                        if [Q2_K, Q3_K_S, Q3_K_M, IQ4_NL, Q4_K_S, Q4_K_M, IQ4_XS].contains(&ft) {
                            ty = G::Q5_K;
                        }
                    } else if ft == Q2_K {
                        ty = G::Q3_K;
                    } else if ft == Q3_K_M {
                        ty = G::Q4_K;
                    } else if ft == Q3_K_L {
                        ty = G::Q5_K;
                    }
                } else if ft == Q3_K_L {
                    ty = G::Q4_K;
                }
            }
            _ => {}
        }
        // attn_qkv's own rule comes after the attn_v-like one in llama.cpp's chain of
        // `else if`s, so it never applies: kept out.
        ty
    }
}

/// llama.cpp's `tensor_type_fallback`: a type whose block does not divide the row length `k`
/// gives way to one of 32-value blocks, else F16.
///
/// # Errors
/// A type of blocks over 32 values that llama.cpp gives no fallback (Q1_0), naming it.
fn fallback(ty: GgmlType, k: usize) -> Result<GgmlType, String> {
    use GgmlType as G;
    if k.is_multiple_of(ty.block_size()) {
        return Ok(ty);
    }
    let to = match ty {
        G::IQ4_XS => G::IQ4_NL,
        G::Q2_0 | G::Q2_K | G::Q3_K | G::TQ1_0 | G::TQ2_0 => G::Q4_0,
        G::Q4_K => G::Q5_0,
        G::Q5_K => G::Q5_1,
        G::Q6_K => G::Q8_0,
        other if other.block_size() <= 32 => other,
        other => {
            return Err(format!(
            "rows of {k} are not whole {other} blocks ({} values), and llama.cpp defines no fallback type for {other}",
            other.block_size()
        ))
        }
    };
    Ok(if k.is_multiple_of(to.block_size()) { to } else { G::F16 })
}

/// `x` (`rows x k` f32) quantized to `ty` on `dev`, in row chunks that fit one binding.
fn gpu_quantize(dev: &Device, s: &mut Stream, ty: GgmlType, x: &[f32], k: usize) -> Result<Vec<u8>, String> {
    let rows = x.len() / k;
    let per = ((dev.caps().limits.max_storage_buffer_range / 4) as usize / k).clamp(1, rows.max(1));
    let mut out = Vec::with_capacity(rows * (k / ty.block_size() * ty.type_size()));
    for r0 in (0..rows).step_by(per) {
        let n = per.min(rows - r0);
        let xb = dev.upload(&x[r0 * k..(r0 + n) * k]).map_err(|e| e.to_string())?;
        let m = QMatrix::alloc(dev, ty, n, k).map_err(|e| e.to_string())?;
        quantize(s, &xb, &m).map_err(|e| e.to_string())?;
        s.finish_and_wait().map_err(|e| e.to_string())?;
        out.extend(m.read_blocks().map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// Runs `vkml gguf quantize`: a progress bar over the input's tensor bytes, then one line
/// to stderr: path, type, tensors per treatment, bytes, seconds.
pub fn run(a: Args) -> Result<(), String> {
    let ft = file_type_named(&a.ty).ok_or_else(|| {
        let names = FILE_TYPES.iter().map(|f| f.name).collect::<Vec<_>>().join(", ");
        format!("--type {:?}: vkml quantizes files to {names} (Q3_K, Q4_K, Q5_K: the _M mixes)", a.ty)
    })?;
    let t0 = Instant::now();
    let f = GgufFile::open(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let meta = |key: &str| f.metadata().iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let arch = meta("general.architecture").and_then(GgufValue::as_str).unwrap_or("");
    // A count, or the first of per-layer counts.
    let count = |key: &str| -> usize {
        let n = match meta(&format!("{arch}.{key}")) {
            Some(GgufValue::Array(GgufArray::U32(v))) => v.first().map(|&n| u64::from(n)),
            Some(GgufValue::Array(GgufArray::I32(v))) => v.first().and_then(|&n| u64::try_from(n).ok()),
            Some(v) => v.as_u64(),
            None => None,
        };
        n.and_then(|n| usize::try_from(n).ok()).unwrap_or(0)
    };
    let model = Model {
        arch,
        n_layer: count("block_count"),
        n_head: count("attention.head_count"),
        // llama.cpp's default where the key is missing: as many KV heads as query heads.
        n_head_kv: Some(count("attention.head_count_kv")).filter(|&n| n > 0).unwrap_or(count("attention.head_count")),
        n_expert: count("expert_count"),
        has_output: f.header().tensor("output.weight").is_some(),
    };
    // llama-quantize's order (its loader's weights map): by layer, then by name; the
    // choice's counters follow it, and the output is written in it.
    let mut tensors: Vec<&TensorInfo> = f.tensors().iter().collect();
    tensors.sort_by_cached_key(|t| (layer_of(&t.name), t.name.clone()));
    let mut chooser = Chooser::new(ft, model, f.tensors());
    let plans: Vec<Plan> = tensors
        .iter()
        .map(|t| chooser.plan(t))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", a.input.display()))?;
    if let Some(t) = tensors
        .iter()
        .zip(&plans)
        .find_map(|(t, p)| p.to().is_some_and(|to| to != t.ty && !SOURCES.contains(&t.ty)).then_some(t))
    {
        return Err(format!(
            "{}: tensor {} is {}: vkml requantizes matrices from F32, F16, BF16 or Q8_0 only (quantizing a \
             quantized matrix again loses precision)",
            a.input.display(),
            t.name,
            t.ty
        ));
    }
    let dev = Device::from_env().map_err(|e| format!("quantizing needs a Vulkan device: {e}"))?;
    let mut s = Stream::new(&dev).map_err(|e| e.to_string())?;
    let mut metadata: Vec<(String, GgufValue)> = f.metadata().to_vec();
    for (key, value) in [("general.file_type", ft.ftype), ("general.quantization_version", 2)] {
        match metadata.iter_mut().find(|(k, _)| k == key) {
            Some(kv) => kv.1 = GgufValue::U32(value),
            None => metadata.push((key.to_string(), GgufValue::U32(value))),
        }
    }
    // The output's types are known before any matrix is quantized: the header first,
    // then each tensor as it is made (one in memory at a time), into OUT.part, renamed to
    // OUT once complete.
    let out_ty: Vec<GgmlType> = tensors.iter().zip(&plans).map(|(t, p)| p.to().unwrap_or(t.ty)).collect();
    let infos: Vec<(&str, GgmlType, &[u64])> =
        tensors.iter().zip(&out_ty).map(|(t, &ty)| (t.name.as_str(), ty, t.dims.as_slice())).collect();
    let header = header_bytes(&metadata, &infos).map_err(|e| format!("{}: {e}", a.output.display()))?;
    let alignment = alignment_of(&metadata).map_err(|e| e.to_string())? as usize;
    let mut part = a.output.clone().into_os_string();
    part.push(".part");
    let part = PathBuf::from(part);
    let io = |e: std::io::Error| format!("{}: {e}", part.display());
    let total: u64 = f.tensors().iter().map(|t| t.n_bytes).sum();
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("quantizing {bar:40} {bytes}/{total_bytes} {eta}")
            .map_err(|e| e.to_string())?,
    );
    let (mut on_gpu, mut on_cpu, mut kept) = (0, 0, 0);
    let written = (|| -> Result<u64, String> {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&part).map_err(io)?);
        w.write_all(&header).map_err(io)?;
        let mut size = header.len() as u64;
        for ((t, p), &ty) in tensors.iter().zip(&plans).zip(&out_ty) {
            let data = f.tensor_data(t);
            let k = t.dims[0] as usize;
            let values = || vkml_quant::dequant::dequantize_to_vec(t.ty, data).map_err(|e| format!("{}: {e}", t.name));
            let bytes = match *p {
                Plan::Gpu(to) if to != t.ty => {
                    on_gpu += 1;
                    gpu_quantize(&dev, &mut s, to, &values()?, k).map_err(|e| format!("{}: {e}", t.name))?
                }
                Plan::Cpu(to) if to != t.ty => {
                    on_cpu += 1;
                    vkml_quant::quantize(to, &values()?).map_err(|e| format!("{}: {e}", t.name))?
                }
                _ => {
                    kept += 1;
                    data.to_vec()
                }
            };
            let n: u64 = t.dims.iter().product();
            let want = n / ty.block_size() as u64 * ty.type_size() as u64;
            if bytes.len() as u64 != want {
                return Err(format!("{}: made {} bytes of {ty} where the header says {want}", t.name, bytes.len()));
            }
            w.write_all(&bytes).map_err(io)?;
            let pad = bytes.len().next_multiple_of(alignment) - bytes.len();
            // Zeros streamed, not allocated: the alignment comes from the file.
            std::io::copy(&mut std::io::Read::take(std::io::repeat(0), pad as u64), &mut w).map_err(io)?;
            size += (bytes.len() + pad) as u64;
            bar.inc(t.n_bytes);
        }
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&part, &a.output).map_err(|e| format!("{}: {e}", a.output.display()))?;
        Ok(size)
    })();
    bar.finish_and_clear();
    let size = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&part);
    })?;
    eprintln!(
        "{}: {} ({on_gpu} tensors quantized on {}, {on_cpu} on the CPU, {kept} kept), {size} bytes in {:.1} s",
        a.output.display(),
        ft.name,
        dev.caps().name,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

impl Plan {
    /// The type the plan quantizes to (`None` for `Keep`).
    fn to(&self) -> Option<GgmlType> {
        match *self {
            Plan::Gpu(t) | Plan::Cpu(t) => Some(t),
            Plan::Keep => None,
        }
    }
}
