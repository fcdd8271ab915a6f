//! Synthetic llama-family models: the shapes of real models with random weights, made
//! in-process as a GGUF file, so that speed can be measured without a model file (the
//! GPU machine cannot fetch one), and written to disk (`vkml gguf synth`) so that other
//! engines (llama.cpp) can be measured on identical weights. The weights are uniform in
//! ±1/√k, quantized with vkml-quant's ggml-compatible quantizers; norm weights are 1.
//!
//! # Tokenizer
//! Every synthetic model carries a SentencePiece-style tokenizer in its metadata, in the
//! form of the GGUF spec's "Tokenizer" section that llama.cpp's `llama-vocab.cpp` loads
//! as `LLAMA_VOCAB_TYPE_SPM` (and [`crate::tokenizer::GgufTokenizer`] as well):
//!
//! - `tokenizer.ggml.model = "llama"`;
//! - `tokenizer.ggml.tokens`: exactly `vocab` unique strings: `<unk>` (id 0), `<s>` (1),
//!   `</s>` (2), the 256 byte tokens `<0x00>` … `<0xFF>` (3 … 258), then `▁` (U+2581, the
//!   SentencePiece space), the 94 printable ASCII characters `!` … `~`, then `▁` followed
//!   by lower-case words (`▁a` … `▁z`, `▁aa` … `▁zz`, `▁aaa` …, shortest first, each
//!   length in alphabetical order) until the vocabulary is full. Every word's prefixes
//!   are pieces too, so BPE merges build words one letter at a time;
//! - `tokenizer.ggml.scores`: f32, `-id` (decreasing with the id: shorter words merge
//!   first);
//! - `tokenizer.ggml.token_type`: i32, ggml's `llama_token_type` values: 2 (unknown) for
//!   `<unk>`, 3 (control) for `<s>` and `</s>`, 6 (byte) for `<0xNN>`, 1 (normal) for the
//!   rest;
//! - `tokenizer.ggml.bos_token_id = 1`, `eos_token_id = 2`, `unknown_token_id = 0`
//!   (u32), `add_bos_token = true`, `add_eos_token = false`, `add_space_prefix = true`.
//!
//! A vocabulary needs at least [`TOKENIZER_FIXED`] + 1 entries. The model also records
//! `{arch}.vocab_size`; `general.file_type` is left out (llama.cpp guesses it from the
//! tensor types).
//!
//! # File layout
//! GGUF v3 with the default alignment of 32 (GGUF spec "File Structure"), the same bytes
//! as [`GgufWriter::to_bytes`] would produce for it, but streamed: one tensor is made,
//! quantized and written at a time, so writing an 8B model needs one tensor's memory, and
//! [`synthetic_model`] holds the file once.

use std::io::Write;
use std::path::Path;

use vkml_quant::gguf::{header_bytes, GgufArray, GgufError, GgufFile, GgufValue, DEFAULT_ALIGNMENT};
use vkml_quant::GgmlType;

use crate::error::{model_err, Error, Result};

#[cfg(doc)]
use vkml_quant::gguf::GgufWriter;

mod shapes;

pub use shapes::*;

/// The GGUF architectures a synthetic model can be written as (`general.architecture`):
/// `llama` and `mistral` have the same tensors; `qwen2` adds Q/K/V biases; `qwen3` per-head
/// q/k norms; `gemma3` q/k norms, post-attention and post-feed-forward norms and, where the
/// shape has one, a sliding window; `gemma2` the same without q/k norms (llama.cpp's
/// default soft-caps, 50 and 30); `phi3` stores Q, K and V in one `attn_qkv` and gate and
/// up in one `ffn_up` tensor (the gate's rows first); `qwen3moe` is `qwen3` with the shape's
/// experts in place of the dense feed-forward (`ffn_gate_inp` in F32, 3-D `ffn_{gate,up,down}_exps`);
/// `qwen2moe` is `qwen2` with the shape's experts and a shared expert of `n_ff`
/// (`ffn_gate_inp_shexp`, `ffn_{gate,up,down}_shexp`);
/// `gpt-oss` has Q/K/V and output biases, a sink per head, `post_attention_norm` as the
/// feed-forward's norm, the shape's experts with biases (router, gate, up, down: F32), YaRN
/// (factor 32 over 4 096 positions) and the shape's window on even layers; with MXFP4
/// weights only its experts are MXFP4, its other matrices Q8_0 (as gpt-oss files ship).
/// Norm weights are 1 for llama, mistral and qwen2, and uniform in [0.5, 1.5) for the others.
pub const ARCHS: &[&str] =
    &["llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gpt-oss", "gemma2", "gemma3", "phi3"];

/// The seed the benchmarks and `vkml gguf synth` use unless told otherwise.
pub const DEFAULT_SEED: u64 = 42;

/// Token id of `<unk>` in the synthetic tokenizer.
pub const UNK_ID: u32 = 0;
/// Token id of `<s>` (beginning of sequence) in the synthetic tokenizer.
pub const BOS_ID: u32 = 1;
/// Token id of `</s>` (end of sequence) in the synthetic tokenizer.
pub const EOS_ID: u32 = 2;
/// Tokens every synthetic vocabulary starts with: `<unk>`, `<s>`, `</s>` and the 256
/// byte tokens.
pub const TOKENIZER_FIXED: usize = 3 + 256;

/// `n` values uniform in [0, 1) on a 2^-24 grid from an xorshift64 generator seeded with
/// `seed | 1`.
fn uniform(seed: u64, n: usize) -> impl Iterator<Item = f32> {
    let mut s = seed | 1;
    (0..n).map(move |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    })
}

/// Rows per independently seeded chunk of a random matrix: the values depend on the seed
/// and the shape only, not on how many threads quantize them.
const CHUNK_ROWS: usize = 64;

/// `rows x k` random weights of type `ty`: chunks of [`CHUNK_ROWS`] rows, chunk `c` drawn
/// from `uniform(seed ^ c * golden)`, quantized on all CPU cores.
fn random_matrix(ty: GgmlType, rows: usize, k: usize, seed: u64) -> Result<Vec<u8>> {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    let chunks = rows.div_ceil(CHUNK_ROWS);
    let scale = 1.0 / (k as f32).sqrt();
    let chunk = |c: usize| -> Result<Vec<u8>> {
        let r0 = c * CHUNK_ROWS;
        let n = CHUNK_ROWS.min(rows - r0) * k;
        let x: Vec<f32> = uniform(seed ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15), n)
            .map(|u| (u * 2.0 - 1.0) * scale)
            .collect();
        vkml_quant::quantize(ty, &x).map_err(|e| model_err(format!("quantize {ty:?}: {e}")))
    };
    let chunk = &chunk;
    // Worker w makes chunks w, w + threads, ...; the parts are put back in chunk order.
    let parts: Vec<Vec<(usize, Result<Vec<u8>>)>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads.min(chunks.max(1)))
            .map(|w| sc.spawn(move || (w..chunks).step_by(threads).map(|c| (c, chunk(c))).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let mut ordered: Vec<Option<Result<Vec<u8>>>> = (0..chunks).map(|_| None).collect();
    for (c, r) in parts.into_iter().flatten() {
        ordered[c] = Some(r);
    }
    let mut out = Vec::new();
    for (c, r) in ordered.into_iter().enumerate() {
        let bytes = r.ok_or_else(|| model_err(format!("quantize {ty:?}: worker for chunk {c} failed")))??;
        out.extend_from_slice(&bytes);
    }
    Ok(out)
}

fn tokenizer_vocab(vocab: usize) -> Result<(Vec<String>, Vec<f32>, Vec<i32>)> {
    if vocab <= TOKENIZER_FIXED {
        return Err(model_err(format!(
            "a synthetic vocabulary of {vocab} is too small: the tokenizer needs more than {TOKENIZER_FIXED} tokens"
        )));
    }
    let mut tokens: Vec<String> = Vec::with_capacity(vocab);
    let mut types: Vec<i32> = Vec::with_capacity(vocab);
    tokens.extend(["<unk>", "<s>", "</s>"].map(String::from));
    types.extend([2, 3, 3]);
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.extend([6; 256]);
    let chars = std::iter::once("▁".to_string()).chain((b'!'..=b'~').map(|c| char::from(c).to_string()));
    // Words of length 1, 2, 3, ... in alphabetical order: the digits of `n` in base 26.
    let words = (1u32..).flat_map(|len| {
        (0..26u64.pow(len)).map(move |mut n| {
            let mut w = vec![b'a'; len as usize];
            for c in w.iter_mut().rev() {
                *c = b'a' + (n % 26) as u8;
                n /= 26;
            }
            // Only ASCII letters were written.
            format!("▁{}", String::from_utf8_lossy(&w))
        })
    });
    let rest = vocab - tokens.len();
    tokens.extend(chars.chain(words).take(rest));
    types.resize(vocab, 1);
    let scores = (0..vocab).map(|i| -(i as f32)).collect();
    Ok((tokens, scores, types))
}

/// What fills a tensor.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// Random weights of the tensor's type from this seed (`dims = [k, rows]`).
    Random(u64),
    /// f32 ones.
    Ones,
    /// f32 uniform in ±0.5 from this seed.
    Bias(u64),
    /// f32 uniform in [0.5, 1.5) from this seed.
    Norm(u64),
}

/// FNV-1a of a tensor name: a seed per norm that does not depend on file order.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// One tensor of the file, before its data is made.
#[derive(Debug)]
struct Planned {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    fill: Fill,
}

impl Planned {
    fn n_bytes(&self) -> u64 {
        // Row lengths are checked against the block size in `plan`.
        self.ty.row_size(self.dims[0]).unwrap_or(0) * self.dims[1..].iter().product::<u64>()
    }

    fn data(&self) -> Result<Vec<u8>> {
        let n = self.dims.iter().product::<u64>() as usize;
        Ok(match self.fill {
            Fill::Random(seed) => {
                let rows = self.dims[1..].iter().product::<u64>() as usize;
                random_matrix(self.ty, rows, self.dims[0] as usize, seed)?
            }
            Fill::Ones => bytemuck::cast_slice(&vec![1f32; n]).to_vec(),
            Fill::Bias(seed) => {
                let b: Vec<f32> = uniform(seed, n).map(|u| u - 0.5).collect();
                bytemuck::cast_slice(&b).to_vec()
            }
            Fill::Norm(seed) => {
                let b: Vec<f32> = uniform(seed, n).map(|u| u + 0.5).collect();
                bytemuck::cast_slice(&b).to_vec()
            }
        })
    }
}

/// A synthetic model's metadata and tensors (in file order), data not yet made.
#[derive(Debug)]
struct Plan {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<Planned>,
}

/// Whether synthetic weights of `ty` can be made: vkml-quant has a quantizer for it (the
/// grid i-quants and the float types without one cannot).
pub fn can_make(ty: GgmlType) -> bool {
    quantize_probe(ty).is_ok()
}

fn quantize_probe(ty: GgmlType) -> std::result::Result<Vec<u8>, vkml_quant::QuantError> {
    vkml_quant::quantize(ty, &vec![0.0; ty.block_size()])
}

/// Checks that a synthetic model of `arch`, `sh` and `ty` can be made, without making it:
/// a known architecture, a type vkml-quant can quantize to, heads that divide the
/// embedding, rows that are whole blocks of `ty`, and a vocabulary larger than the
/// tokenizer's fixed tokens.
///
/// # Errors
/// [`crate::Error::Model`] naming the first problem.
pub fn check(arch: &str, sh: &SynthShape, ty: GgmlType) -> Result<()> {
    if !ARCHS.contains(&arch) {
        return Err(model_err(format!("no synthetic architecture {arch:?} (known: {})", ARCHS.join(", "))));
    }
    if let Err(e) = quantize_probe(ty) {
        return Err(model_err(format!("cannot make {ty} weights: {e}")));
    }
    if sh.n_head == 0
        || sh.n_kv_head == 0
        || (sh.head_dim.is_none() && !sh.n_embd.is_multiple_of(sh.n_head))
        || !sh.n_head.is_multiple_of(sh.n_kv_head)
    {
        return Err(model_err(format!(
            "shape {}: {} heads ({} KV heads) do not divide an embedding of {}",
            sh.name, sh.n_head, sh.n_kv_head, sh.n_embd
        )));
    }
    let d = sh.head_dim();
    let n_ff_exp = sh.experts.map_or(sh.n_ff, |e| e.n_ff_exp);
    for (what, k) in
        [("n_embd", sh.n_embd), ("n_ff", sh.n_ff), ("n_head x head_dim", sh.n_head * d), ("n_ff_exp", n_ff_exp)]
    {
        if !k.is_multiple_of(ty.block_size()) {
            return Err(model_err(format!(
                "{ty} packs {} values per block, and shape {}'s rows of {k} ({what}) are not a whole number of blocks",
                ty.block_size(),
                sh.name
            )));
        }
    }
    if sh.vocab <= TOKENIZER_FIXED {
        return Err(model_err(format!(
            "shape {}: a vocabulary of {} has no room past the tokenizer's {TOKENIZER_FIXED} fixed tokens",
            sh.name, sh.vocab
        )));
    }
    Ok(())
}

fn plan(arch: &str, sh: &SynthShape, ty: GgmlType, seed: u64) -> Result<Plan> {
    check(arch, sh, ty)?;
    let d = sh.head_dim();
    let (qk_norm, post_norms) = (matches!(arch, "qwen3" | "qwen3moe" | "gemma3"), matches!(arch, "gemma2" | "gemma3"));
    let random_norms = matches!(arch, "qwen3" | "qwen3moe" | "gpt-oss" | "gemma2" | "gemma3");
    let oss = arch == "gpt-oss";
    let experts = if matches!(arch, "qwen2moe" | "qwen3moe" | "gpt-oss") {
        Some(sh.experts.ok_or_else(|| model_err(format!("shape {} has no experts for a {arch} model", sh.name)))?)
    } else {
        None
    };
    let (tokens, scores, types) = tokenizer_vocab(sh.vocab)?;
    let mut metadata: Vec<(String, GgufValue)> = Vec::new();
    let mut kv = |key: String, v: GgufValue| metadata.push((key, v));
    let u = |v: usize| GgufValue::U32(v as u32);
    let k = |key: &str| format!("{arch}.{key}");
    kv("general.architecture".into(), GgufValue::String(arch.into()));
    // The shape goes in the description: llama.cpp sets token attributes by general.name
    // (a name containing "phi3" makes it look up `<|endoftext|>`, which this vocabulary
    // lacks).
    kv("general.name".into(), GgufValue::String("vkml synthetic model".into()));
    kv(
        "general.description".into(),
        GgufValue::String(format!("{} {ty:?}, random weights (vkml gguf synth)", sh.name)),
    );
    kv(k("block_count"), u(sh.n_layers));
    kv(k("context_length"), u(4096));
    kv(k("embedding_length"), u(sh.n_embd));
    kv(k("feed_forward_length"), u(sh.n_ff));
    kv(k("attention.head_count"), u(sh.n_head));
    kv(k("attention.head_count_kv"), u(sh.n_kv_head));
    let rope_base = match arch {
        "gemma3" => 1e6,
        "gpt-oss" => 150000.0,
        _ => 10000.0,
    };
    kv(k("rope.freq_base"), GgufValue::F32(rope_base));
    if oss {
        kv(k("rope.scaling.type"), GgufValue::String("yarn".into()));
        kv(k("rope.scaling.factor"), GgufValue::F32(32.0));
        kv(k("rope.scaling.original_context_length"), u(4096));
    }
    kv(k("rope.dimension_count"), u(d));
    if sh.head_dim.is_some() {
        kv(k("attention.key_length"), u(d));
        kv(k("attention.value_length"), u(d));
    }
    if let Some(e) = experts {
        kv(k("expert_count"), u(e.n_expert));
        kv(k("expert_used_count"), u(e.n_used));
        kv(k("expert_feed_forward_length"), u(e.n_ff_exp));
        if arch == "qwen2moe" {
            kv(k("expert_shared_feed_forward_length"), u(sh.n_ff));
        }
    }
    if let (Some(w), "gemma2" | "gemma3") = (sh.sliding_window, arch) {
        kv(k("attention.sliding_window"), u(w));
    }
    if oss {
        // (llama.cpp requires it; gpt-oss's own is 128)
        kv(k("attention.sliding_window"), u(sh.sliding_window.unwrap_or(128)));
    }
    kv(k("attention.layer_norm_rms_epsilon"), GgufValue::F32(if random_norms { 1e-6 } else { 1e-5 }));
    kv(k("vocab_size"), u(sh.vocab));
    kv("tokenizer.ggml.model".into(), GgufValue::String("llama".into()));
    kv("tokenizer.ggml.tokens".into(), GgufValue::Array(GgufArray::String(tokens)));
    kv("tokenizer.ggml.scores".into(), GgufValue::Array(GgufArray::F32(scores)));
    kv("tokenizer.ggml.token_type".into(), GgufValue::Array(GgufArray::I32(types)));
    kv("tokenizer.ggml.bos_token_id".into(), GgufValue::U32(BOS_ID));
    kv("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(EOS_ID));
    kv("tokenizer.ggml.unknown_token_id".into(), GgufValue::U32(UNK_ID));
    kv("tokenizer.ggml.add_bos_token".into(), GgufValue::Bool(true));
    kv("tokenizer.ggml.add_eos_token".into(), GgufValue::Bool(false));
    kv("tokenizer.ggml.add_space_prefix".into(), GgufValue::Bool(true));

    let mut tensors = Vec::new();
    let mut seed_next = seed;
    // (gpt-oss with MXFP4 experts: its other matrices Q8_0)
    let dense_ty = if oss && ty == GgmlType::MXFP4 { GgmlType::Q8_0 } else { ty };
    let mut mat = |name: String, rows: usize, k: usize| {
        seed_next = seed_next.wrapping_add(0x2545_f491_4f6c_dd1d);
        Planned { name, ty: dense_ty, dims: vec![k as u64, rows as u64], fill: Fill::Random(seed_next) }
    };
    let norm_of = |name: String, n: usize| {
        let fill = if random_norms { Fill::Norm(seed ^ name_hash(&name)) } else { Fill::Ones };
        Planned { name, ty: GgmlType::F32, dims: vec![n as u64], fill }
    };
    let norm = |name: String| norm_of(name, sh.n_embd);
    tensors.push(mat("token_embd.weight".into(), sh.vocab, sh.n_embd));
    if !sh.tied {
        tensors.push(mat("output.weight".into(), sh.vocab, sh.n_embd));
    }
    tensors.push(norm("output_norm.weight".into()));
    // An f32 vector of small values (biases, sinks) for layer i.
    let small = |name: String, i: usize, n: usize| {
        let s = seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9) ^ n as u64 ^ name_hash(&name);
        Planned { name, ty: GgmlType::F32, dims: vec![n as u64], fill: Fill::Bias(s) }
    };
    for i in 0..sh.n_layers {
        let p = |n: &str| format!("blk.{i}.{n}");
        tensors.push(norm(p("attn_norm.weight")));
        tensors.push(norm(p(if oss { "post_attention_norm.weight" } else { "ffn_norm.weight" })));
        if qk_norm {
            tensors.push(norm_of(p("attn_q_norm.weight"), d));
            tensors.push(norm_of(p("attn_k_norm.weight"), d));
        }
        if post_norms {
            tensors.push(norm(p("post_attention_norm.weight")));
            tensors.push(norm(p("post_ffw_norm.weight")));
        }
        if arch == "phi3" {
            tensors.push(mat(p("attn_qkv.weight"), (sh.n_head + 2 * sh.n_kv_head) * d, sh.n_embd));
        } else {
            tensors.push(mat(p("attn_q.weight"), sh.n_head * d, sh.n_embd));
            tensors.push(mat(p("attn_k.weight"), sh.n_kv_head * d, sh.n_embd));
            tensors.push(mat(p("attn_v.weight"), sh.n_kv_head * d, sh.n_embd));
        }
        if matches!(arch, "qwen2" | "qwen2moe" | "gpt-oss") {
            for (name, n) in
                [("attn_q.bias", sh.n_head * d), ("attn_k.bias", sh.n_kv_head * d), ("attn_v.bias", sh.n_kv_head * d)]
            {
                tensors.push(small(p(name), i, n));
            }
        }
        tensors.push(mat(p("attn_output.weight"), sh.n_embd, sh.n_head * d));
        if oss {
            tensors.push(small(p("attn_output.bias"), i, sh.n_embd));
            tensors.push(small(p("attn_sinks.weight"), i, sh.n_head));
        }
        if let Some(e) = experts {
            // The router in F32 (as Qwen3-MoE files hold it), the experts 3-D.
            let router = mat(p("ffn_gate_inp.weight"), e.n_expert, sh.n_embd);
            tensors.push(Planned { ty: GgmlType::F32, ..router });
            for (name, rows, k) in [
                ("ffn_gate_exps.weight", e.n_ff_exp, sh.n_embd),
                ("ffn_up_exps.weight", e.n_ff_exp, sh.n_embd),
                ("ffn_down_exps.weight", sh.n_embd, e.n_ff_exp),
            ] {
                let m = mat(p(name), rows, k);
                tensors.push(Planned { ty, dims: vec![k as u64, rows as u64, e.n_expert as u64], ..m });
            }
            if arch == "qwen2moe" {
                // The shared expert: its gate's logit row [n_embd] (F32), its SwiGLU of n_ff.
                let gate = mat(p("ffn_gate_inp_shexp.weight"), 1, sh.n_embd);
                tensors.push(Planned { ty: GgmlType::F32, dims: vec![sh.n_embd as u64], ..gate });
                tensors.push(mat(p("ffn_gate_shexp.weight"), sh.n_ff, sh.n_embd));
                tensors.push(mat(p("ffn_up_shexp.weight"), sh.n_ff, sh.n_embd));
                tensors.push(mat(p("ffn_down_shexp.weight"), sh.n_embd, sh.n_ff));
            }
            if oss {
                // Biases: the router's [n_expert], the experts' 2-D [rows, n_expert].
                tensors.push(small(p("ffn_gate_inp.bias"), i, e.n_expert));
                for (name, rows) in [
                    ("ffn_gate_exps.bias", e.n_ff_exp),
                    ("ffn_up_exps.bias", e.n_ff_exp),
                    ("ffn_down_exps.bias", sh.n_embd),
                ] {
                    let b = small(p(name), i, rows * e.n_expert);
                    tensors.push(Planned { dims: vec![rows as u64, e.n_expert as u64], ..b });
                }
            }
            continue;
        }
        if arch == "phi3" {
            tensors.push(mat(p("ffn_up.weight"), 2 * sh.n_ff, sh.n_embd));
        } else {
            tensors.push(mat(p("ffn_gate.weight"), sh.n_ff, sh.n_embd));
            tensors.push(mat(p("ffn_up.weight"), sh.n_ff, sh.n_embd));
        }
        tensors.push(mat(p("ffn_down.weight"), sh.n_embd, sh.n_ff));
    }
    Ok(Plan { metadata, tensors })
}

fn padding(n: u64) -> u64 {
    n.div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT - n
}

impl Plan {
    /// The GGUF v3 header: magic, version, counts, metadata, tensor infos, padding to the
    /// data section (`vkml_quant::gguf::header_bytes`; no `general.alignment`, so the data
    /// is aligned to [`DEFAULT_ALIGNMENT`], as [`padding`] assumes).
    fn header(&self) -> Result<Vec<u8>> {
        let infos: Vec<(&str, GgmlType, &[u64])> =
            self.tensors.iter().map(|t| (t.name.as_str(), t.ty, t.dims.as_slice())).collect();
        Ok(header_bytes(&self.metadata, &infos)?)
    }

    /// The file's length: the header and every tensor, each padded to the alignment.
    fn file_len(&self, header_len: u64) -> u64 {
        header_len + self.tensors.iter().map(|t| t.n_bytes() + padding(t.n_bytes())).sum::<u64>()
    }

    /// Writes the file (`header` is [`Plan::header`]), making one tensor at a time;
    /// returns the bytes written.
    fn emit(&self, header: &[u8], w: &mut impl Write, io: &dyn Fn(std::io::Error) -> Error) -> Result<u64> {
        w.write_all(header).map_err(io)?;
        let zeros = [0u8; DEFAULT_ALIGNMENT as usize];
        for t in &self.tensors {
            let data = t.data()?;
            if data.len() as u64 != t.n_bytes() {
                return Err(model_err(format!(
                    "tensor {}: made {} bytes where the header says {}",
                    t.name,
                    data.len(),
                    t.n_bytes()
                )));
            }
            w.write_all(&data).map_err(io)?;
            w.write_all(&zeros[..padding(data.len() as u64) as usize]).map_err(io)?;
        }
        Ok(self.file_len(header.len() as u64))
    }
}

/// A llama-architecture GGUF file of `shape` with every matrix (embedding and output
/// included) of type `ty`, random weights from `seed`, and the synthetic tokenizer (see
/// the module docs).
///
/// # Errors
/// As [`synthetic_model`].
pub fn synthetic_llama(sh: &SynthShape, ty: GgmlType, seed: u64) -> Result<GgufFile> {
    synthetic_model("llama", sh, ty, seed)
}

/// [`synthetic_llama`] for GGUF architecture `arch` (one of [`ARCHS`]: qwen2 gets random
/// f32 Q/K/V biases, qwen3 and gemma3 their norms), held in memory.
///
/// # Errors
/// [`crate::Error::Model`] for an architecture not in [`ARCHS`], a type vkml-quant cannot
/// quantize, heads that do not divide the embedding, a row length (`n_embd`, `n_ff`) that
/// is not a multiple of the type's block, or a vocabulary of [`TOKENIZER_FIXED`] or fewer.
pub fn synthetic_model(arch: &str, sh: &SynthShape, ty: GgmlType, seed: u64) -> Result<GgufFile> {
    let plan = plan(arch, sh, ty, seed)?;
    let header = plan.header()?;
    let mut bytes = Vec::with_capacity(plan.file_len(header.len() as u64) as usize);
    plan.emit(&header, &mut bytes, &unreachable_io)?;
    Ok(GgufFile::from_vec(bytes)?)
}

/// Writing to a `Vec` does not fail; should it, the error is still reported.
fn unreachable_io(e: std::io::Error) -> Error {
    Error::Gguf(GgufError::Io { path: "<memory>".into(), source: e })
}

/// [`synthetic_model`] written to the file `path` (replaced if it exists) without holding
/// the model in memory: the file is written as `PATH.part` and renamed to `path` once
/// complete, so an interrupted run leaves no partial model under `path`. Returns the
/// file's length in bytes.
///
/// # Errors
/// As [`synthetic_model`], plus [`crate::Error::Gguf`] ([`GgufError::Io`]) when the file
/// cannot be created, written or renamed.
pub fn write_synthetic_model(arch: &str, sh: &SynthShape, ty: GgmlType, seed: u64, path: &Path) -> Result<u64> {
    let plan = plan(arch, sh, ty, seed)?;
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    let part = std::path::PathBuf::from(part);
    let io_at = |p: &Path| {
        let p = p.display().to_string();
        move |source: std::io::Error| Error::Gguf(GgufError::Io { path: p.clone(), source })
    };
    let io = io_at(&part);
    let result = (|| {
        let file = std::fs::File::create(&part).map_err(&io)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        let n = plan.emit(&plan.header()?, &mut w, &io)?;
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(&io)?;
        std::fs::rename(&part, path).map_err(io_at(path))?;
        Ok(n)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::GgufTokenizer;
    use vkml_quant::gguf::GgufWriter;

    const TINY: SynthShape = SynthShape {
        name: "tiny",
        arch: "llama",
        head_dim: None,
        sliding_window: None,
        experts: None,
        n_layers: 2,
        n_embd: 64,
        n_ff: 128,
        n_head: 4,
        n_kv_head: 2,
        vocab: 1100,
        tied: false,
    };

    /// The tokenizer layout of the module docs, and vkml's tokenizer on it: an ASCII
    /// sentence round-trips, words become their pieces, BOS/EOS are `<s>`/`</s>`.
    #[test]
    fn synthetic_tokenizer_loads_and_round_trips() {
        let file = synthetic_model("llama", &TINY, GgmlType::F32, 3).unwrap();
        let tok = GgufTokenizer::from_gguf(&file).unwrap();
        assert_eq!(tok.vocab_size(), TINY.vocab);
        assert_eq!((tok.bos, tok.eos), (Some(BOS_ID), Some(EOS_ID)));
        assert_eq!(tok.token(BOS_ID), Some("<s>"));
        assert_eq!(tok.token(EOS_ID), Some("</s>"));
        assert_eq!(tok.token(UNK_ID), Some("<unk>"));
        assert_eq!(tok.token(3), Some("<0x00>"));
        assert_eq!(tok.token(258), Some("<0xFF>"));
        assert_eq!(tok.token(259), Some("▁"));
        assert_eq!(tok.token(260), Some("!"));
        assert_eq!(tok.token(353), Some("~"));
        assert_eq!(tok.token(354), Some("▁a"));
        assert_eq!(tok.token(380), Some("▁aa"));
        // Two-letter words end at 380 + 26²; 1099 = 1056 + 43, and 43 = 1·26 + 17: "abr".
        assert_eq!(tok.token(1056), Some("▁aaa"));
        assert_eq!(tok.token(TINY.vocab as u32 - 1), Some("▁abr"));
        let text = "Hello, World! the quick brown fox jumps over 13 lazy dogs; {x: [1, 2]} ~ok?";
        let ids = tok.encode(text, true).unwrap();
        assert_eq!(ids[0], BOS_ID);
        assert_eq!(tok.decode(&ids[1..]).unwrap(), text);
        // Two-letter words are single pieces, longer ones start with one.
        let id = |s: &str| (0..TINY.vocab as u32).find(|&i| tok.token(i) == Some(s)).unwrap();
        assert_eq!(tok.encode("ab zz", false).unwrap(), vec![id("▁ab"), id("▁zz")]);
        assert_eq!(tok.encode("fox", false).unwrap(), vec![id("▁fo"), id("x")]);
        // Outside ASCII: byte fallback, and back.
        let ids = tok.encode("é", false).unwrap();
        assert_eq!(ids, vec![id("▁"), 3 + 0xC3, 3 + 0xA9]);
        assert_eq!(tok.decode(&ids).unwrap(), "é");
    }

    #[test]
    fn vocabularies_are_unique_for_every_named_shape() {
        for sh in SHAPES {
            let (tokens, scores, types) = tokenizer_vocab(sh.vocab).unwrap();
            assert_eq!((tokens.len(), scores.len(), types.len()), (sh.vocab, sh.vocab, sh.vocab));
            let set: std::collections::HashSet<&String> = tokens.iter().collect();
            assert_eq!(set.len(), sh.vocab, "{}", sh.name);
            assert!(scores.windows(2).all(|w| w[1] < w[0]));
        }
        assert!(tokenizer_vocab(TOKENIZER_FIXED).is_err());
    }

    /// The streamed file is what vkml-quant's `GgufWriter` makes of the same metadata and
    /// tensors, and writing it to disk gives the same bytes.
    #[test]
    fn streamed_file_matches_gguf_writer_and_disk() {
        for (arch, tied) in [("llama", false), ("qwen2", true), ("qwen3", true), ("gemma3", false), ("phi3", false)] {
            let sh = SynthShape { tied, ..TINY };
            let file = synthetic_model(arch, &sh, GgmlType::Q8_0, 5).unwrap();
            let mut w = GgufWriter::new();
            for (k, v) in file.metadata() {
                w.push_kv(k.clone(), v.clone());
            }
            for t in file.tensors() {
                w.push_tensor(t.name.clone(), t.ty, t.dims.clone(), file.tensor_data(t).to_vec());
            }
            assert!(w.to_bytes().unwrap() == file.bytes(), "{arch}");
            let path = std::env::temp_dir().join(format!("vkml-synth-{}-{arch}.gguf", std::process::id()));
            let n = write_synthetic_model(arch, &sh, GgmlType::Q8_0, 5, &path).unwrap();
            let disk = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            assert_eq!(n, disk.len() as u64);
            assert!(disk == file.bytes(), "{arch}");
        }
    }

    #[test]
    fn unusable_types_and_shapes_are_errors() {
        let err = |r: Result<GgufFile>| r.unwrap_err().to_string();
        let e = err(synthetic_model("llama", &TINY, GgmlType::IQ2_XXS, 1));
        assert!(e.contains("IQ2_XXS"), "{e}");
        let e = err(synthetic_model("llama", &TINY, GgmlType::Q4_K, 1));
        assert!(e.contains("Q4_K") && e.contains("256"), "{e}");
        let e = err(synthetic_model("gpt2", &TINY, GgmlType::F32, 1));
        assert!(e.contains("gpt2") && e.contains("qwen2"), "{e}");
        let e = err(synthetic_model("llama", &SynthShape { vocab: 200, ..TINY }, GgmlType::F32, 1));
        assert!(e.contains("200"), "{e}");
    }
}
