//! Hostile model files and arguments through the whole `vkml generate` program, one per
//! defect of the hostile-inputs issue: each ends in exit status 1 and one `error:` line
//! naming the problem, within a few seconds, with the process's data segment limited to
//! 1 GiB (`prlimit --data`, so an allocation past it fails instead of succeeding).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use vkml_models::synth::{synthetic_model, SynthShape};
use vkml_quant::gguf::{GgufArray, GgufValue, GgufWriter};
use vkml_quant::GgmlType;

/// Memory a hostile input may cost the process: RLIMIT_DATA (heap and private mappings).
const MEMORY_LIMIT: u64 = 1 << 30;

/// Longest a hostile input may take to be refused (2 s of the issue, plus the start of
/// the program and the device on a loaded 2-core CI machine).
const TIME_LIMIT: Duration = Duration::from_secs(5);

const TINY: SynthShape = SynthShape {
    experts: None,
    name: "tiny",
    arch: "llama",
    head_dim: Some(64),
    sliding_window: None,
    n_layers: 2,
    n_embd: 128,
    n_ff: 256,
    n_head: 4,
    n_kv_head: 2,
    vocab: 300,
    tied: true,
};

fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vkml-hostile-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tiny synthetic llama at `dir/name` with metadata `edits` applied (a key set to a
/// value, or removed with `None`) and tensor `zeroed` (if any) set to zeros.
fn model(dir: &Path, name: &str, edits: &[(&str, Option<GgufValue>)], zeroed: Option<&str>) -> PathBuf {
    let mut w = GgufWriter::from_file(&synthetic_model("llama", &TINY, GgmlType::F32, 5).unwrap());
    for (k, v) in edits {
        w.set_kv(k, v.clone());
    }
    for t in w.tensors.iter_mut().filter(|t| Some(t.name.as_str()) == zeroed) {
        t.data.fill(0);
    }
    let p = dir.join(name);
    std::fs::write(&p, w.to_bytes().unwrap()).unwrap();
    p
}

/// `vkml generate -m MODEL ARGS` under the memory limit, with its wall time.
fn generate(model: &Path, args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new("prlimit")
        .arg(format!("--data={MEMORY_LIMIT}"))
        .arg(env!("CARGO_BIN_EXE_vkml"))
        .args(["generate", "-m", model.to_str().unwrap(), "-n", "4", "--temperature", "0"])
        .args(args)
        .env("VKML_VALIDATION", "1")
        .output()
        .expect("prlimit (util-linux) runs vkml");
    (out, t.elapsed())
}

/// Exit status 1, one line on stderr starting `error: ` and containing `needle`, in time.
fn refused(case: &str, (out, took): (Output, Duration), needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{case}: exit status {:?}, stderr: {err}", out.status);
    let lines: Vec<_> = err.trim_end().lines().collect();
    assert!(lines.len() == 1 && lines[0].starts_with("error: ") && lines[0].contains(needle), "{case}: {err}");
    assert!(took < TIME_LIMIT, "{case}: refused after {took:?}");
}

#[test]
fn hostile_inputs_end_in_one_line_errors_quickly_within_1_gib() {
    let dir = scratch("refused");
    let ok = model(&dir, "ok.gguf", &[], None);
    // The good file runs under the same limits, so a refusal below is the input's doing.
    let (out, took) = generate(&ok, &["-p", "hello"]);
    assert!(out.status.success(), "the unedited model: {}", String::from_utf8_lossy(&out.stderr));
    assert!(took < TIME_LIMIT, "the unedited model took {took:?}");

    // Layer counts no tensors back (10^9 aborted allocating 480 GB; 2^62 overflowed).
    for n in [1_000_000_000u64, 1 << 62] {
        let m = model(&dir, "blocks.gguf", &[("llama.block_count", Some(GgufValue::U64(n)))], None);
        refused("block_count", generate(&m, &["-p", "hi"]), &format!("llama.block_count is {n}"));
    }
    // Contexts that wrapped the KV-cache size, or reached Vulkan as a 0-byte buffer.
    for ctx in ["576460752303423489", "18446744073709551615"] {
        refused("--ctx", generate(&ok, &["-p", "hi", "--ctx", ctx]), &format!("a context of {ctx} positions"));
    }
    // Hyper-parameters that are not numbers a model can have.
    for (key, v, needle) in [
        ("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(f32::NAN), "is NaN, not a finite number"),
        ("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(-1.0), "is -1, not a positive number"),
        ("llama.rope.freq_base", GgufValue::F32(0.0), "is 0, not a positive number"),
        ("llama.rope.freq_base", GgufValue::F32(f32::NAN), "is NaN, not a finite number"),
    ] {
        let m = model(&dir, "hparams.gguf", &[(key, Some(v))], None);
        refused(key, generate(&m, &["-p", "hi"]), &format!("{key} {needle}"));
    }
    // A token list shorter than the embedding's rows silently dropped tokens.
    let short: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    let m = model(
        &dir,
        "tokens.gguf",
        &[("tokenizer.ggml.tokens", Some(GgufValue::Array(GgufArray::String(short))))],
        None,
    );
    refused("tokens", generate(&m, &["-p", "hi"]), "tokenizer.ggml.tokens lists 200 tokens");
    // Chat templates that looped, grew without bound, or aborted the process.
    for (tpl, needle) in [
        ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "fuel"),
        ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "past 16 MiB"),
        ("{{ \"{:>1000000000000000}\".format(1) }}", "format width past 4096"),
        ("{{ [] * 1000000000000000000 }}", "ran past 2 s"),
    ] {
        let m = model(&dir, "template.gguf", &[("tokenizer.chat_template", Some(GgufValue::String(tpl.into())))], None);
        refused(tpl, generate(&m, &["-p", "hi", "--chat"]), needle);
    }
    // Sampling arguments that gave an opaque sampler error after a full load.
    for (flag, v) in [("--temperature", "nan"), ("--top-p", "0"), ("--repeat-penalty", "0")] {
        let (out, took) = generate(&ok, &["-p", "hi", flag, v]);
        assert_eq!(out.status.code(), Some(2), "{flag} {v}: clap's usage error");
        assert!(String::from_utf8_lossy(&out.stderr).contains(flag), "{flag} {v}");
        assert!(took < TIME_LIMIT);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A greedy run whose first token is the stop token prints nothing, and says so, with
/// success: output norm weights of zero make every logit 0, the argmax picks token 0, and
/// token 0 is made the EOS.
#[test]
fn a_greedy_run_that_produces_nothing_says_why() {
    let dir = scratch("silent");
    let m = model(
        &dir,
        "silent.gguf",
        &[("tokenizer.ggml.eos_token_id", Some(GgufValue::U32(0)))],
        Some("output_norm.weight"),
    );
    let (out, took) = generate(&m, &["-p", "hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(out.stdout.iter().all(u8::is_ascii_whitespace), "{:?}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("no text: the model's first token was its stop token"), "{err}");
    assert!(took < TIME_LIMIT);
    std::fs::remove_dir_all(&dir).unwrap();
}
