//! `vkml gguf quantize IN OUT --type T`: llama-quantize's job for its base types, the
//! matrices quantized on the GPU (`vkml_ops::quant::quantize`: ggml's reference arithmetic,
//! the CPU's bytes but where the device's division moves a value across a rounding
//! boundary). Which tensor gets which type follows llama.cpp's `llama_tensor_get_type` and
//! `llama_model_quantize_impl` for these types: 2-D `*.weight` tensors to T but the MoE
//! router (`ffn_gate_inp`), 2-D norms and position / token-type embeddings, which are kept;
//! `attn_k` and `attn_v` to Q8_0 in models of 8 experts; the output projection (or, with the
//! head tied to it, the token embedding) to Q6_K (on the CPU, vkml-quant), or Q8_0 where T is
//! Q8_0 or its rows are not whole 256-value blocks; rows that are not whole blocks of T (where
//! llama.cpp stops) and 1-D tensors as they are. `general.file_type` is set to T's
//! `llama_ftype` and `general.quantization_version` to 2. The input must hold its matrices in
//! F32, F16, BF16 or Q8_0 (llama-quantize takes a quantized input only with
//! `--allow-requantize`; Q8_0 is taken here as the issue of a Q8_0 checkpoint).

use std::path::PathBuf;
use std::time::Instant;

use vkml_hal::{Device, Stream};
use vkml_ops::quant::{quantize, QMatrix};
use vkml_quant::gguf::{GgufFile, GgufValue, GgufWriter, TensorInfo};
use vkml_quant::GgmlType;

/// Arguments of `vkml gguf quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF file to read (matrices in F32, F16, BF16 or Q8_0).
    input: PathBuf,
    /// The GGUF file to write (replaced if it exists).
    output: PathBuf,
    /// The type of the matrices: Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 (any case).
    #[arg(long = "type")]
    ty: String,
}

/// The types the GPU writes as a file type, with their `llama_ftype` (`LLAMA_FTYPE_MOSTLY_*`).
const FILE_TYPES: [(GgmlType, u32); 5] =
    [(GgmlType::Q4_0, 2), (GgmlType::Q4_1, 3), (GgmlType::Q8_0, 7), (GgmlType::Q5_0, 8), (GgmlType::Q5_1, 9)];

/// The types a matrix may come in.
const SOURCES: [GgmlType; 4] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0];

/// What becomes of one tensor.
enum Plan {
    /// Copied as it is.
    Keep,
    /// Quantized on the GPU to the file's type.
    Gpu(GgmlType),
    /// Quantized on the CPU (the output projection's Q6_K).
    Cpu(GgmlType),
}

/// llama.cpp's choice for tensor `t` of a file whose head is `output.weight` (`has_output`)
/// or tied to the token embedding, with `n_expert` experts, quantized to `ty`.
fn plan(t: &TensorInfo, ty: GgmlType, has_output: bool, n_expert: u64) -> Plan {
    let k = t.dims.first().copied().unwrap_or(0) as usize;
    let kept = ["ffn_gate_inp.weight", "_norm.weight", "position_embd.weight", "token_types.weight"];
    // Empty rows (k = 0, a GGUF may declare them) have nothing to quantize.
    if k == 0 || t.dims.len() < 2 || !t.name.ends_with(".weight") || kept.iter().any(|s| t.name.ends_with(s)) {
        return Plan::Keep;
    }
    if n_expert == 8
        && (t.name.ends_with("attn_k.weight") || t.name.ends_with("attn_v.weight"))
        && k.is_multiple_of(GgmlType::Q8_0.block_size())
    {
        return Plan::Gpu(GgmlType::Q8_0);
    }
    let head = t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
    if head {
        return if ty != GgmlType::Q8_0 && k.is_multiple_of(GgmlType::Q6_K.block_size()) {
            Plan::Cpu(GgmlType::Q6_K)
        } else if k.is_multiple_of(GgmlType::Q8_0.block_size()) {
            Plan::Gpu(GgmlType::Q8_0)
        } else {
            Plan::Keep
        };
    }
    if k.is_multiple_of(ty.block_size()) {
        Plan::Gpu(ty)
    } else {
        Plan::Keep
    }
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
    let ty = GgmlType::from_name(&a.ty).and_then(|t| FILE_TYPES.iter().find(|(f, _)| *f == t)).copied().ok_or_else(
        || {
            let names = FILE_TYPES.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>().join(", ");
            format!("--type {:?}: vkml quantizes files to {names} (on the GPU)", a.ty)
        },
    )?;
    let (ty, ftype) = ty;
    let t0 = Instant::now();
    let f = GgufFile::open(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let has_output = f.header().tensor("output.weight").is_some();
    let n_expert = f
        .metadata()
        .iter()
        .find(|(key, _)| key.ends_with(".expert_count"))
        .and_then(|(_, v)| match v {
            GgufValue::U32(n) => Some(u64::from(*n)),
            GgufValue::U64(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(0);
    let plans: Vec<Plan> = f.tensors().iter().map(|t| plan(t, ty, has_output, n_expert)).collect();
    if let Some(t) = f
        .tensors()
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
    let mut w = GgufWriter::new();
    for (key, value) in f.metadata() {
        w.push_kv(key.clone(), value.clone());
    }
    w.set_kv("general.file_type", Some(GgufValue::U32(ftype)));
    w.set_kv("general.quantization_version", Some(GgufValue::U32(2)));
    let total: u64 = f.tensors().iter().map(|t| t.n_bytes).sum();
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("quantizing {bar:40} {bytes}/{total_bytes} {eta}")
            .map_err(|e| e.to_string())?,
    );
    let (mut on_gpu, mut on_cpu, mut kept) = (0, 0, 0);
    for (t, p) in f.tensors().iter().zip(&plans) {
        let data = f.tensor_data(t);
        let k = t.dims[0] as usize;
        let values = || vkml_quant::dequant::dequantize_to_vec(t.ty, data).map_err(|e| format!("{}: {e}", t.name));
        let (out_ty, bytes) = match *p {
            Plan::Gpu(to) if to != t.ty => {
                on_gpu += 1;
                (to, gpu_quantize(&dev, &mut s, to, &values()?, k).map_err(|e| format!("{}: {e}", t.name))?)
            }
            Plan::Cpu(to) if to != t.ty => {
                on_cpu += 1;
                (to, vkml_quant::quantize(to, &values()?).map_err(|e| format!("{}: {e}", t.name))?)
            }
            _ => {
                kept += 1;
                (t.ty, data.to_vec())
            }
        };
        w.push_tensor(t.name.clone(), out_ty, t.dims.clone(), bytes);
        bar.inc(t.n_bytes);
    }
    bar.finish_and_clear();
    w.write_to(&a.output).map_err(|e| format!("{}: {e}", a.output.display()))?;
    let size = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "{}: {ty} ({on_gpu} tensors quantized on {}, {on_cpu} on the CPU, {kept} kept), {size} bytes in {:.1} s",
        a.output.display(),
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
