//! `vkml gguf synth`: a synthetic model (`vkml_models::synth`: a named model shape, random
//! weights of one GGML type, a synthetic SentencePiece tokenizer) written as a GGUF file,
//! the same model the in-process benchmarks run, so that other engines (llama.cpp) can be
//! measured on identical weights.

use std::path::PathBuf;
use std::time::Instant;

use vkml_models::synth;
use vkml_quant::GgmlType;

/// Arguments of `vkml gguf synth`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model shape: smollm2-135m, llama-1b, llama-7b, llama-8b, llama-70b, llama-90b, qwen3-0.6b, gemma2-2b,
    /// gemma3-270m, gemma3-1b, phi3-mini, qwen2moe-a2.7b, qwen3moe-30b-a3b or gpt-oss-20b.
    #[arg(long)]
    shape: String,
    /// GGML type of every matrix (embedding and output included; norms stay F32), e.g.
    /// Q4_0, Q8_0, Q4_K, F16.
    #[arg(long = "type", default_value = "Q4_0")]
    ty: String,
    /// GGUF architecture: llama, mistral, qwen2 (Q/K/V biases), qwen2moe (biases, experts and a
    /// shared expert), qwen3 (q/k norms), qwen3moe (q/k norms,
    /// experts: only for a shape with experts), gpt-oss (biases, sinks, experts with biases; MXFP4
    /// experts with Q8_0 elsewhere for --type MXFP4), gemma2
    /// (post norms, soft-caps, sliding window), gemma3 (q/k and post norms, sliding window)
    /// or phi3 (fused QKV and gate|up); default: the shape's own.
    #[arg(long)]
    arch: Option<String>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = synth::DEFAULT_SEED)]
    seed: u64,
    /// The .gguf file to write (replaced if it exists).
    #[arg(long, short = 'o')]
    output: PathBuf,
}

/// The types vkml-quant can quantize to (those a synthetic model can have).
fn quantizable() -> Vec<GgmlType> {
    GgmlType::ALL.iter().copied().filter(|&t| synth::can_make(t)).collect()
}

fn type_list() -> String {
    quantizable().iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Parses `--type`: a GGML type name (any case) that vkml-quant can quantize to.
fn parse_type(name: &str) -> Result<GgmlType, String> {
    let ty = GgmlType::from_name(name)
        .ok_or_else(|| format!("--type {name:?} is not a GGML type (types vkml can write: {})", type_list()))?;
    if !quantizable().contains(&ty) {
        return Err(format!("--type {ty}: vkml-quant cannot quantize to it (types vkml can write: {})", type_list()));
    }
    Ok(ty)
}

/// Runs `vkml gguf synth`; one line to stderr at the end: path, shape, type, bytes, seconds.
pub fn run(a: Args) -> Result<(), String> {
    let shape = synth::shape(&a.shape).map_err(|_| {
        let known = synth::SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
        format!("--shape {:?} is not a synthetic shape (known: {known})", a.shape)
    })?;
    let ty = parse_type(&a.ty)?;
    let arch = a.arch.as_deref().unwrap_or(shape.arch);
    if !synth::ARCHS.contains(&arch) {
        return Err(format!("--arch {arch:?} is not supported (supported: {})", synth::ARCHS.join(", ")));
    }
    let t0 = Instant::now();
    let bytes = synth::write_synthetic_model(arch, &shape, ty, a.seed, &a.output).map_err(|e| e.to_string())?;
    eprintln!(
        "{}: {} {ty} ({}, seed {}), {bytes} bytes in {:.2} s",
        a.output.display(),
        shape.name,
        arch,
        a.seed,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_names_every_shape_and_arch() {
        let mut cmd = <Args as clap::Args>::augment_args(clap::Command::new("synth"));
        let help = cmd.render_long_help().to_string();
        for s in synth::SHAPES {
            assert!(help.contains(s.name), "{} missing from:\n{help}", s.name);
        }
        for a in synth::ARCHS {
            assert!(help.contains(a), "{a} missing from:\n{help}");
        }
    }

    #[test]
    fn types_parse_by_name_and_unquantizable_ones_are_refused() {
        assert_eq!(parse_type("q4_0"), Ok(GgmlType::Q4_0));
        assert_eq!(parse_type("Q4_K"), Ok(GgmlType::Q4_K));
        assert_eq!(parse_type("f16"), Ok(GgmlType::F16));
        let e = parse_type("Q4_X").unwrap_err();
        assert!(e.contains("\"Q4_X\"") && e.contains("Q8_0"), "{e}");
        let e = parse_type("iq2_xxs").unwrap_err();
        assert!(e.contains("IQ2_XXS") && e.contains("cannot quantize"), "{e}");
        assert!(parse_type("i32").is_err());
    }
}
