//! Synthetic llama-family models: the shapes of real models with random weights, made
//! in-process as a GGUF file, so that speed can be measured without a model file (the
//! GPU machine cannot fetch one). The weights are uniform in ±1/√k, quantized with
//! vkml-quant's ggml-compatible quantizers; norm weights are 1.

use vkml_quant::gguf::{GgufFile, GgufValue, GgufWriter};
use vkml_quant::GgmlType;

use crate::error::{model_err, Result};

/// The shape of a llama-family model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthShape {
    /// Name (`smollm2-135m`, `llama-1b`, `llama-7b`, `llama-8b`).
    pub name: &'static str,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Embedding length.
    pub n_embd: usize,
    /// Feed-forward length.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_kv_head: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Whether the output projection is tied to the token embedding.
    pub tied: bool,
}

/// The named shapes: SmolLM2-135M, TinyLlama-1.1B, Llama-2-7B, and Llama-3-8B with a
/// 49152 vocabulary (issue 7's benchmark shapes).
pub const SHAPES: &[SynthShape] = &[
    SynthShape {
        name: "smollm2-135m",
        n_layers: 30,
        n_embd: 576,
        n_ff: 1536,
        n_head: 9,
        n_kv_head: 3,
        vocab: 49152,
        tied: true,
    },
    SynthShape {
        name: "llama-1b",
        n_layers: 22,
        n_embd: 2048,
        n_ff: 5632,
        n_head: 32,
        n_kv_head: 4,
        vocab: 32000,
        tied: false,
    },
    SynthShape {
        name: "llama-7b",
        n_layers: 32,
        n_embd: 4096,
        n_ff: 11008,
        n_head: 32,
        n_kv_head: 32,
        vocab: 32000,
        tied: false,
    },
    SynthShape {
        name: "llama-8b",
        n_layers: 32,
        n_embd: 4096,
        n_ff: 14336,
        n_head: 32,
        n_kv_head: 8,
        vocab: 49152,
        tied: false,
    },
];

/// The named shape.
///
/// # Errors
/// [`crate::Error::Model`] naming the known shapes.
pub fn shape(name: &str) -> Result<SynthShape> {
    SHAPES.iter().copied().find(|s| s.name == name).ok_or_else(|| {
        model_err(format!(
            "no synthetic shape {name:?} (known: {})",
            SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        ))
    })
}

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

/// `rows x k` random weights of type `ty` (quantized on all CPU cores).
fn random_matrix(ty: GgmlType, rows: usize, k: usize, seed: u64) -> Result<Vec<u8>> {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    let rows_per = rows.div_ceil(threads).max(1);
    let scale = 1.0 / (k as f32).sqrt();
    let parts: Vec<Result<Vec<u8>>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..rows)
            .step_by(rows_per)
            .map(|r0| {
                sc.spawn(move || {
                    let n = rows_per.min(rows - r0) * k;
                    let x: Vec<f32> = uniform(seed ^ (r0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), n)
                        .map(|u| (u * 2.0 - 1.0) * scale)
                        .collect();
                    vkml_quant::quantize(ty, &x).map_err(|e| model_err(format!("quantize {ty:?}: {e}")))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("quantize thread")).collect()
    });
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(&p?);
    }
    Ok(out)
}

/// A llama-architecture GGUF file of `shape` with every matrix (embedding and output
/// included) of type `ty`, random weights from `seed`, and no tokenizer.
///
/// # Errors
/// [`crate::Error::Model`] for a type vkml-quant cannot quantize or a row length that is
/// not a multiple of its block; GGUF errors.
pub fn synthetic_llama(sh: &SynthShape, ty: GgmlType, seed: u64) -> Result<GgufFile> {
    synthetic_model("llama", sh, ty, seed)
}

/// [`synthetic_llama`] for GGUF architecture `arch` (`llama`, `mistral` or `qwen2`; qwen2
/// gets random f32 Q/K/V biases).
///
/// # Errors
/// As [`synthetic_llama`].
pub fn synthetic_model(arch: &str, sh: &SynthShape, ty: GgmlType, seed: u64) -> Result<GgufFile> {
    let mut w = GgufWriter::new();
    let u = |v: usize| GgufValue::U32(v as u32);
    let k = |key: &str| format!("{arch}.{key}");
    w.push_kv("general.architecture", GgufValue::String(arch.into()));
    w.push_kv("general.name", GgufValue::String(format!("synthetic {} {ty:?}", sh.name)));
    w.push_kv(k("block_count"), u(sh.n_layers));
    w.push_kv(k("context_length"), u(4096));
    w.push_kv(k("embedding_length"), u(sh.n_embd));
    w.push_kv(k("feed_forward_length"), u(sh.n_ff));
    w.push_kv(k("attention.head_count"), u(sh.n_head));
    w.push_kv(k("attention.head_count_kv"), u(sh.n_kv_head));
    w.push_kv(k("rope.freq_base"), GgufValue::F32(10000.0));
    w.push_kv(k("rope.dimension_count"), u(sh.n_embd / sh.n_head));
    w.push_kv(k("attention.layer_norm_rms_epsilon"), GgufValue::F32(1e-5));
    let d = sh.n_embd / sh.n_head;
    let bias_seed = seed;
    let mut seed = seed;
    let mut mat = |w: &mut GgufWriter, name: String, rows: usize, k: usize| -> Result<()> {
        seed = seed.wrapping_add(0x2545_f491_4f6c_dd1d);
        let bytes = random_matrix(ty, rows, k, seed)?;
        w.push_tensor(name, ty, vec![k as u64, rows as u64], bytes);
        Ok(())
    };
    let ones = |n: usize| bytemuck::cast_slice(&vec![1f32; n]).to_vec();
    mat(&mut w, "token_embd.weight".into(), sh.vocab, sh.n_embd)?;
    if !sh.tied {
        mat(&mut w, "output.weight".into(), sh.vocab, sh.n_embd)?;
    }
    w.push_tensor("output_norm.weight", GgmlType::F32, vec![sh.n_embd as u64], ones(sh.n_embd));
    for i in 0..sh.n_layers {
        let p = |n: &str| format!("blk.{i}.{n}");
        w.push_tensor(p("attn_norm.weight"), GgmlType::F32, vec![sh.n_embd as u64], ones(sh.n_embd));
        w.push_tensor(p("ffn_norm.weight"), GgmlType::F32, vec![sh.n_embd as u64], ones(sh.n_embd));
        mat(&mut w, p("attn_q.weight"), sh.n_head * d, sh.n_embd)?;
        mat(&mut w, p("attn_k.weight"), sh.n_kv_head * d, sh.n_embd)?;
        mat(&mut w, p("attn_v.weight"), sh.n_kv_head * d, sh.n_embd)?;
        if arch == "qwen2" {
            for (name, n) in
                [("attn_q.bias", sh.n_head * d), ("attn_k.bias", sh.n_kv_head * d), ("attn_v.bias", sh.n_kv_head * d)]
            {
                let b: Vec<f32> = uniform(bias_seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9) ^ n as u64, n)
                    .map(|u| u - 0.5)
                    .collect();
                w.push_tensor(p(name), GgmlType::F32, vec![n as u64], bytemuck::cast_slice(&b).to_vec());
            }
        }
        mat(&mut w, p("attn_output.weight"), sh.n_embd, sh.n_head * d)?;
        mat(&mut w, p("ffn_gate.weight"), sh.n_ff, sh.n_embd)?;
        mat(&mut w, p("ffn_up.weight"), sh.n_ff, sh.n_embd)?;
        mat(&mut w, p("ffn_down.weight"), sh.n_embd, sh.n_ff)?;
    }
    Ok(GgufFile::from_vec(w.to_bytes()?)?)
}
