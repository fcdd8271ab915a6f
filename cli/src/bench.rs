//! `vkml bench`: prompt-processing and generation speed of a GGUF model in llama-bench's
//! terms, and `vkml bench ops`: per-kernel bandwidth and FLOP figures
//! ([`vkml_ops::bench`]).
//!
//! Model tests follow llama-bench (llama.cpp `tools/llama-bench`): `ppN` runs an N-token
//! prompt in one forward pass from an empty KV cache, timing the prompt alone
//! (`Runner::prefill`: no decode step recorded ahead); `tgN` generates N tokens one at a
//! time from an empty cache, each step one forward pass of one token whose greedy choice
//! is fed back: chosen on the GPU, which runs the next step on it while the host reads it
//! (`Runner::forward_choose`, what `vkml generate` does without a repeat penalty; `--sample`
//! draws with llama.cpp's default sampler settings), or with `--sample-on-host` from the
//! logits read back every step (what the repeat penalty needs). Each test runs once to warm
//! up (pipelines, caches), then `-r` times; the figure is tokens per second, mean ± sample
//! standard deviation over the repetitions. Attention is the flash-attention kernel
//! (llama-bench's `-fa 1`); the KV cache is f16.

use std::time::Instant;

use candle_core::backend::BackendDevice;
use serde_json::json;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_hal::{Device, DeviceOptions, DeviceSelector};
use vkml_models::sampling::{SampleParams, TokenChoice};
use vkml_models::storage::ModelStorage;
use vkml_models::synth;
use vkml_models::{LoadOptions, Runner};
use vkml_ops::bench::{self as ops_bench, Limit, Scale};
use vkml_quant::gguf::GgufFile;
use vkml_quant::GgmlType;

/// The commit vkml was built from (`build.rs`: `git rev-parse`, or `VKML_COMMIT`).
pub const COMMIT: &str = env!("VKML_COMMIT");

/// Arguments of `vkml bench`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Bandwidth and FLOP figures per kernel (mat-vec per GGML type, mat-mat, matmul,
    /// element-wise, softmax, rms_norm, attention), each as a fraction of the device's
    /// measured copy bandwidth, f32 FMA rate or f16 cooperative-matrix rate.
    Ops(OpsArgs),
}

/// Arguments of the model benchmark.
#[derive(clap::Args, Debug)]
struct ModelArgs {
    /// GGUF model files (repeatable).
    #[arg(long, short = 'm')]
    model: Vec<std::path::PathBuf>,
    /// Synthetic models (random weights made in-process): NAME or NAME:TYPE, comma-separated
    /// or repeated. Names: smollm2-135m, llama-1b, llama-7b, llama-8b, llama-70b, llama-90b, qwen3-0.6b, gemma2-2b, gemma3-270m, gemma3-1b, phi3-mini, qwen2moe-a2.7b, qwen3moe-30b-a3b, gpt-oss-20b.
    #[arg(long, value_delimiter = ',')]
    synthetic: Vec<String>,
    /// GGML types of the synthetic models named without one (comma-separated).
    #[arg(long = "type", short = 't', value_delimiter = ',', default_value = "Q4_0")]
    types: Vec<String>,
    /// Prompt lengths to test (comma-separated; 0 skips the prompt tests).
    #[arg(long = "n-prompt", short = 'p', value_delimiter = ',', default_value = "512")]
    n_prompt: Vec<usize>,
    /// Generation lengths to test (comma-separated; 0 skips the generation tests).
    #[arg(long = "n-gen", short = 'n', value_delimiter = ',', default_value = "128")]
    n_gen: Vec<usize>,
    /// Timed repetitions of each test (after the warm-up).
    #[arg(long, short = 'r', default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    repetitions: u32,
    /// Warm-up before each test's timed runs: one untimed run, then untimed runs until this
    /// many seconds have passed since it ended. A GPU that was idle runs at low clocks for a
    /// while (the H100 took about ten 512-token prompts, 1 s, to reach its steady speed), so
    /// figures taken straight after an idle spell understate the steady throughput; the
    /// first run does not count towards the seconds, as it creates the pipelines (seconds
    /// on a cold cache, the GPU idle meanwhile).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Md)]
    output: Format,
    /// `cpu` (candle's CPU backend, weights in their GGML blocks, every core), or a Vulkan
    /// device: an index from `vkml info`, or part of its name (default: the best).
    #[arg(long, short = 'd')]
    device: Option<String>,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Time every command on the GPU (Vulkan timestamps) and print, per test, where the
    /// GPU time goes by kernel (also in the JSON output as `gpu_profile`). The
    /// timestamps can serialize commands, so the t/s of a profiled run are lower.
    #[arg(long)]
    profile: bool,
    #[command(flatten)]
    split: crate::model_args::SplitArgs,
    /// Generation tests read every step's logits back and take the argmax on the host
    /// (as the repeat penalty needs), instead of the GPU choosing it.
    #[arg(long, conflicts_with = "sample")]
    sample_on_host: bool,
    /// Generation tests draw each token on the GPU with llama.cpp's default sampler
    /// settings (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05; `sample.comp`)
    /// instead of its greedy choice.
    #[arg(long)]
    sample: bool,
    /// With --devices: tokens per micro-batch of a prompt (llama-bench's `-ub`); default
    /// half the prompt, at most 256.
    #[arg(long)]
    micro_batch: Option<usize>,
}

/// Arguments of `vkml bench ops`.
#[derive(clap::Args, Debug)]
struct OpsArgs {
    /// Shapes: `full` (an 8B model's, for GPUs) or `small` (for lavapipe); default by
    /// device type.
    #[arg(long)]
    scale: Option<String>,
    /// Only workloads of this group (mat_vec, mat_mat, matmul, elementwise, softmax,
    /// rms_norm, attention) or whose name contains this text; the ceilings always run.
    #[arg(long)]
    filter: Option<String>,
    /// Timed repetitions of each workload.
    #[arg(long, short = 'r', default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repetitions: u32,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Md)]
    output: Format,
    /// Vulkan device: an index from `vkml info`, or part of its name (default: the best).
    #[arg(long, short = 'd')]
    device: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// A Markdown table.
    Md,
    /// One JSON array.
    Json,
}

/// Runs `vkml bench` or `vkml bench ops`.
pub fn run(a: Args) -> Result<(), String> {
    match a.command {
        Some(Sub::Ops(o)) => ops(o),
        None => models(a.model),
    }
}

fn open_device(device: Option<&str>) -> Result<Device, String> {
    let selector = device.map(DeviceSelector::parse).unwrap_or_else(DeviceSelector::from_env);
    Device::open(&selector, DeviceOptions::default()).map_err(|e| e.to_string())
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "unknown".into())
}

/// Device, driver, commit and time: the header of both reports.
fn header(dev: &Device) -> serde_json::Value {
    let c = dev.caps();
    json!({
        "device": c.name,
        "driver": format!("{} {}", c.driver_name, c.driver_info),
        "driver_version": c.driver_version,
        "vulkan": c.api_version,
        "build_commit": COMMIT,
        "test_time": now_rfc3339(),
    })
}

fn print_header(h: &serde_json::Value) {
    println!(
        "device: {}, driver: {} ({}), Vulkan {}; vkml {}; {}",
        h["device"].as_str().unwrap_or(""),
        h["driver"].as_str().unwrap_or(""),
        h["driver_version"].as_str().unwrap_or(""),
        h["vulkan"].as_str().unwrap_or(""),
        h["build_commit"].as_str().unwrap_or(""),
        h["test_time"].as_str().unwrap_or(""),
    );
}

/// One model under test: a file or a synthetic shape and type.
enum Source {
    File(std::path::PathBuf),
    Synthetic(synth::SynthShape, GgmlType),
}

fn sources(a: &ModelArgs) -> Result<Vec<Source>, String> {
    let mut out: Vec<Source> = a.model.iter().cloned().map(Source::File).collect();
    for spec in &a.synthetic {
        let (name, types) = match spec.split_once(':') {
            Some((n, t)) => (n, vec![t.to_string()]),
            None => (spec.as_str(), a.types.clone()),
        };
        let shape = synth::shape(name).map_err(|e| e.to_string())?;
        for t in types {
            let ty = GgmlType::from_name(&t).ok_or_else(|| format!("unknown GGML type {t:?}"))?;
            // Every model is checked before the first one runs.
            synth::check(shape.arch, &shape, ty).map_err(|e| format!("--synthetic {name}:{ty}: {e}"))?;
            out.push(Source::Synthetic(shape, ty));
        }
    }
    if out.is_empty() {
        let names = synth::SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
        return Err(format!("nothing to benchmark: give -m FILE or --synthetic NAME[:TYPE] (names: {names})"));
    }
    Ok(out)
}

/// How a generation test chooses each token: on the device as `TokenChoice` says, or
/// greedy on the host (`None`, `--sample-on-host`).
fn choice(a: &ModelArgs) -> Option<TokenChoice> {
    match (a.sample_on_host, a.sample) {
        (true, _) => None,
        (false, false) => Some(TokenChoice::Greedy),
        (false, true) => {
            Some(TokenChoice::Sample(SampleParams { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 1 }))
        }
    }
}

/// The warm-up of a test: one untimed run, then untimed runs until `secs` seconds have
/// passed since it ended (the first creates the pipelines, seconds on a cold cache during
/// which the GPU idles at low clocks). Returns the number of runs.
fn warm_up<E>(secs: f64, mut run: impl FnMut() -> Result<f64, E>) -> Result<usize, E> {
    run()?;
    let (start, mut runs) = (Instant::now(), 1);
    while start.elapsed().as_secs_f64() < secs {
        run()?;
        runs += 1;
    }
    Ok(runs)
}

/// One test run from an empty cache: an `n_prompt`-token prompt, or `n_gen` one-token
/// steps, each fed the token `how` chose (their host times added to `prof`); seconds.
fn one_run<S: ModelStorage>(
    model: &mut Runner<S>,
    n_prompt: usize,
    n_gen: usize,
    vocab: u32,
    how: Option<TokenChoice>,
    prof: &mut vkml_models::StepProfile,
) -> vkml_models::Result<f64>
where
    S::Device: BackendDevice<Storage = S>,
{
    model.reset();
    let t = Instant::now();
    if n_prompt > 0 {
        let prompt: Vec<u32> = (0..n_prompt as u32).map(|i| (i * 7919 + 13) % vocab).collect();
        // The prompt alone, as llama-bench times it: no decode step recorded ahead.
        model.prefill(&prompt)?;
        *prof += model.last_step();
    } else {
        let mut tok = 1u32 % vocab;
        for _ in 0..n_gen {
            tok = match &how {
                None => {
                    let l = model.forward(&[tok], false)?;
                    l.iter().enumerate().max_by(|x, y| x.1.total_cmp(y.1)).map_or(0, |m| m.0 as u32)
                }
                Some(how) => model.forward_choose(tok, how)?,
            };
            *prof += model.last_step();
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The label and the opened (or made) GGUF file of a benchmark source.
fn open_source(src: &Source, seed: u64) -> Result<(String, GgufFile), String> {
    Ok(match src {
        Source::File(p) => (
            p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned()),
            GgufFile::open(p).map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        Source::Synthetic(sh, ty) => (
            format!("{} {ty:?} (synthetic)", sh.name),
            synth::synthetic_model(sh.arch, sh, *ty, seed).map_err(|e| format!("synthetic {}: {e}", sh.name))?,
        ),
    })
}

/// The `(n_prompt, n_gen)` tests `-p` and `-n` ask for: each prompt length, then each
/// generation length.
fn tests(a: &ModelArgs) -> impl Iterator<Item = (usize, usize)> + '_ {
    a.n_prompt.iter().filter(|&&p| p > 0).map(|&p| (p, 0)).chain(a.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)))
}

fn models(a: ModelArgs) -> Result<(), String> {
    let list = sources(&a)?;
    if a.n_prompt.iter().chain(&a.n_gen).all(|&n| n == 0) {
        return Err("no test to run: -p and -n are all 0".into());
    }
    let reps = a.repetitions as usize;
    if crate::model_args::is_cpu(crate::model_args::named_device(a.device.as_deref()).as_deref()) {
        return models_cpu(&a, &list);
    }
    let (vdevs, shares) = match a.split.open()? {
        Some(s) => (s.devices, s.shares),
        None => {
            let dev = open_device(a.device.as_deref())?;
            (vec![VulkanDevice::from_device(&dev, 0).map_err(|e| e.to_string())?], None)
        }
    };
    let mut head = header(vdevs[0].hal());
    if vdevs.len() > 1 {
        head["device"] = vdevs.iter().map(|d| d.hal().caps().name.clone()).collect::<Vec<_>>().join(" + ").into();
    }
    if a.profile {
        for d in &vdevs {
            d.hal().set_profiling(true).map_err(|e| e.to_string())?;
        }
    }
    // Counters and profiles summed over the devices.
    let stream_stats = || {
        vdevs.iter().map(|d| d.stream_stats()).fold(vkml_hal::StreamStats::default(), |a, s| vkml_hal::StreamStats {
            dispatches: a.dispatches + s.dispatches,
            barriers: a.barriers + s.barriers,
            transfers: a.transfers + s.transfers,
            submissions: a.submissions + s.submissions,
        })
    };
    let take_profile = || {
        let mut all: Vec<vkml_hal::KernelTime> = Vec::new();
        for k in vdevs.iter().flat_map(|d| d.hal().take_profile()) {
            match all.iter_mut().find(|x| x.name == k.name) {
                Some(x) => {
                    x.calls += k.calls;
                    x.seconds += k.seconds;
                }
                None => all.push(k),
            }
        }
        all.sort_by(|x, y| y.seconds.total_cmp(&x.seconds));
        all
    };
    let max_p = a.n_prompt.iter().copied().max().unwrap_or(0);
    let max_n = a.n_gen.iter().copied().max().unwrap_or(0);
    let mut rows = Vec::new();
    if a.output == Format::Md {
        print_header(&head);
        println!(
            "settings: {} repetitions after >= {} s of warm-up runs; flash attention on; KV cache f16; prompt in one batch\n",
            reps, a.warmup
        );
        println!("| model | size | params | backend | test | t/s |\n| --- | ---: | ---: | --- | --- | ---: |");
    }
    for src in &list {
        let t0 = Instant::now();
        let (label, file) = open_source(src, a.seed)?;
        let made_s = t0.elapsed().as_secs_f64();
        let size: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
        let params: u64 = file.tensors().iter().map(|t| t.n_elements).sum();
        let t1 = Instant::now();
        let opts = LoadOptions {
            ctx: Some(max_p.max(max_n) + 1),
            max_batch: max_p.max(1),
            micro_batch: a.micro_batch,
            ..Default::default()
        };
        let mut model = Runner::<VulkanStorage>::load_split(&vdevs, shares.as_deref(), &file, opts, &mut |_, _| {})
            .map_err(|e| format!("{label}: {e}"))?;
        if model.devices().is_split() {
            eprintln!("{label}: {}", crate::model_args::split_label(&model));
        }
        drop(file);
        tracing::info!("{label}: made/opened in {made_s:.1} s, loaded in {:.1} s", t1.elapsed().as_secs_f64());
        let vocab = model.hparams().vocab as u32;
        if vocab == 0 {
            return Err(format!("{label}: the model has an empty vocabulary"));
        }
        let tests = tests(&a);
        for (n_prompt, n_gen) in tests {
            let run = |model: &mut Runner<VulkanStorage>, prof: &mut vkml_models::StepProfile| {
                one_run(model, n_prompt, n_gen, vocab, choice(&a), prof).map_err(|e| format!("{label}: {e}"))
            };
            // Warm-up (one run, then runs until a.warmup seconds have passed since it
            // ended), then `reps` timed ones; the counts and the GPU profile cover the timed
            // runs only.
            let mut prof = vkml_models::StepProfile::default();
            let warm_runs = warm_up(a.warmup, || run(&mut model, &mut prof))?;
            prof = vkml_models::StepProfile::default();
            let stats0 = stream_stats();
            if a.profile {
                take_profile(); // loading, earlier tests, warm-up
            }
            let samples = (0..reps).map(|_| run(&mut model, &mut prof)).collect::<Result<Vec<f64>, String>>()?;
            let tokens = (n_prompt + n_gen) as f64;
            let ts: Vec<f64> = samples.iter().map(|s| tokens / s).collect();
            let (m, sd) = ops_bench::mean_sd(&ts);
            let (mns, sdns) = ops_bench::mean_sd(&samples);
            let test = if n_prompt > 0 { format!("pp{n_prompt}") } else { format!("tg{n_gen}") };
            // Where the time goes (the timed runs): host times per token of a generation and
            // commands per decode step, both per run of a prompt.
            let stats = stream_stats();
            let runs = reps as f64;
            // Commands per decode step: a generation of n_gen tokens records n_gen + 1 steps
            // (the last, recorded ahead, is left unused when the run ends); per run for a
            // prompt.
            let steps_per_run = if n_gen > 0 { n_gen + 1 } else { 1 };
            let per = |v: u64| v as f64 / runs / steps_per_run as f64;
            let per_ms = |seconds: f64| seconds / runs / n_gen.max(1) as f64 * 1e3;
            let mut step = json!({
                "dispatches": per(stats.dispatches - stats0.dispatches),
                "barriers": per(stats.barriers - stats0.barriers),
                "submissions": per(stats.submissions - stats0.submissions),
            });
            let counts = format!(
                "{:.0} dispatches, {:.0} barriers, {:.1} submissions",
                per(stats.dispatches - stats0.dispatches),
                per(stats.barriers - stats0.barriers),
                per(stats.submissions - stats0.submissions)
            );
            if n_gen > 0 {
                let steps = runs * n_gen as f64;
                let (rec, ahead, wait) =
                    (prof.record_s / steps * 1e6, prof.ahead_s / steps * 1e6, prof.wait_s / steps * 1e6);
                if let Some(o) = step.as_object_mut() {
                    o.insert("host_record_us".into(), json!(rec));
                    o.insert("host_record_ahead_us".into(), json!(ahead));
                    o.insert("submit_wait_readback_us".into(), json!(wait));
                }
                // Runner::forward_choose replays one recorded step where the device can.
                let replayed = choice(&a).is_some() && model.replays();
                if let Some(o) = step.as_object_mut() {
                    o.insert("replayed".into(), json!(replayed));
                }
                let how = if replayed { "replayed step" } else { "step recorded per token" };
                eprintln!(
                    "{label} {test} ({how}): per token: host record {rec:.0} µs, recorded ahead {ahead:.0} µs, submit + wait + read-back {wait:.0} µs; per decode step: {counts}"
                );
            } else {
                let ms = |v: f64| v / runs * 1e3;
                eprintln!(
                    "{label} {test}: per run: host record {:.2} ms, recorded ahead {:.2} ms, submit + wait + read-back {:.2} ms; {counts}",
                    ms(prof.record_s),
                    ms(prof.ahead_s),
                    ms(prof.wait_s)
                );
            }
            if a.profile {
                let prof = take_profile();
                let total: f64 = prof.iter().map(|k| k.seconds).sum();
                eprintln!(
                    "{label} {test}: GPU time per {} ({reps} timed runs after {warm_runs} warm-up): {:.3} ms",
                    if n_gen > 0 { "token" } else { "run" },
                    per_ms(total)
                );
                for k in prof.iter().take(30) {
                    eprintln!(
                        "  {:>9.3} ms {:>5.1} % {:>8.1} calls  {}",
                        per_ms(k.seconds),
                        100.0 * k.seconds / total.max(f64::MIN_POSITIVE),
                        per(k.calls),
                        k.name
                    );
                }
                if let Some(o) = step.as_object_mut() {
                    let list: Vec<serde_json::Value> = prof
                        .iter()
                        .map(|k| json!({"kernel": k.name, "calls": per(k.calls), "gpu_ms": per_ms(k.seconds)}))
                        .collect();
                    o.insert("gpu_profile".into(), json!(list));
                }
            }
            if a.output == Format::Md {
                println!(
                    "| {label} | {:.2} GiB | {:.2} B | Vulkan | {test} | {m:.2} ± {sd:.2} |",
                    size as f64 / f64::from(1 << 30),
                    params as f64 / 1e9
                );
            }
            let mut row = head.clone();
            let extra = json!({
                "model_filename": match src {
                    Source::File(p) => p.display().to_string(),
                    Source::Synthetic(..) => String::new(),
                },
                "model_type": label,
                "model_size": size,
                "model_n_params": params,
                "n_prompt": n_prompt,
                "n_gen": n_gen,
                "test": test,
                "repetitions": reps,
                "warmup_runs": warm_runs,
                "flash_attn": true,
                "type_k": "f16",
                "type_v": "f16",
                "avg_ns": (mns * 1e9).round(),
                "stddev_ns": (sdns * 1e9).round(),
                "avg_ts": m,
                "stddev_ts": sd,
                "samples_ns": samples.iter().map(|x| (x * 1e9).round()).collect::<Vec<f64>>(),
                "samples_ts": ts,
                "per_run_or_token": step,
            });
            if let (Some(r), Some(e)) = (row.as_object_mut(), extra.as_object()) {
                r.extend(e.clone());
            }
            rows.push(row);
        }
    }
    if a.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
    }
    Ok(())
}

fn ops(a: OpsArgs) -> Result<(), String> {
    let dev = open_device(a.device.as_deref())?;
    let scale = match a.scale.as_deref() {
        None => Scale::for_device(&dev),
        Some(s) => Scale::parse(s).ok_or_else(|| format!("--scale {s:?}: expected full or small"))?,
    };
    let head = header(&dev);
    let specs = ops_bench::suite(&dev, scale);
    let (ceilings, rest): (Vec<_>, Vec<_>) = specs.into_iter().partition(|s| matches!(s.group, "copy" | "peak"));
    let rest = ops_bench::select(rest, a.filter.as_deref()).map_err(|e| e.to_string())?;
    if a.output == Format::Md {
        print_header(&head);
        println!(
            "scale {scale:?}; {} repetitions; each a submission of >= {} ms of calls, after a warm-up call\n",
            a.repetitions,
            ops_bench::MIN_BATCH_SECONDS * 1e3
        );
        println!(
            "| group | workload | µs / call | GB/s | TFLOP/s | of ceiling |\n| --- | --- | ---: | ---: | ---: | ---: |"
        );
    }
    let mut limits: std::collections::HashMap<Limit, f64> = std::collections::HashMap::new();
    let mut rows = Vec::new();
    for spec in ceilings.iter().chain(&rest) {
        let result =
            spec.build(&dev).and_then(|mut w| Ok((ops_bench::measure(&dev, &mut w, a.repetitions as usize)?, w)));
        let (m, w) = match result {
            Ok(x) => x,
            Err(e) => {
                if a.output == Format::Md {
                    println!("| {} | {} | - | - | - | not run: {e} |", spec.group, spec.name);
                }
                rows.push(json!({"group": spec.group, "workload": spec.name, "error": e.to_string()}));
                continue;
            }
        };
        let (secs, sd) = m.mean_sd();
        let gbs = w.bytes / secs / 1e9;
        let tflops = w.flops / secs / 1e12;
        let rate = if w.limit == Limit::Bandwidth { w.bytes / secs } else { w.flops / secs };
        // Each ceiling is the best rate of its kind: the faster of the two copies, the fma
        // loop, the matrix loop.
        let is_ceiling = matches!(spec.group, "copy" | "peak");
        if is_ceiling {
            let l = limits.entry(w.limit).or_insert(rate);
            *l = l.max(rate);
        }
        let frac = if is_ceiling { None } else { limits.get(&w.limit).map(|l| rate / l) };
        if a.output == Format::Md {
            // Three significant digits down to 0.001 (lavapipe's TFLOP/s are small).
            let f = |v: f64, show: bool| match v {
                _ if !show => "-".into(),
                v if v >= 100.0 => format!("{v:.0}"),
                v if v >= 10.0 => format!("{v:.1}"),
                v if v >= 1.0 => format!("{v:.2}"),
                v => format!("{v:.3}"),
            };
            let of = match frac {
                _ if is_ceiling => format!("ceiling: {}", limit_name(w.limit)),
                Some(fr) => format!("{:.0} % of {}", 100.0 * fr, limit_name(w.limit)),
                None => "-".into(),
            };
            println!(
                "| {} | {} | {:.1} ± {:.1} | {} | {} | {of} |",
                w.group,
                w.name,
                secs * 1e6,
                sd * 1e6,
                f(gbs, w.bytes > 0.0 && (w.limit == Limit::Bandwidth || w.flops == 0.0)),
                f(tflops, w.flops > 0.0 && w.limit != Limit::Bandwidth)
            );
        }
        rows.push(json!({
            "group": w.group,
            "workload": w.name,
            "bytes": w.bytes,
            "flops": w.flops,
            "calls_per_submission": m.calls,
            "seconds": m.seconds,
            "avg_us": secs * 1e6,
            "stddev_us": sd * 1e6,
            "gb_per_s": gbs,
            "tflop_per_s": tflops,
            "limit": limit_name(w.limit),
            "fraction_of_limit": frac,
        }));
    }
    if a.output == Format::Json {
        let out = json!({"header": head, "scale": format!("{scale:?}"), "results": rows});
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
    }
    Ok(())
}

fn limit_name(l: Limit) -> &'static str {
    match l {
        Limit::Bandwidth => "copy bandwidth",
        Limit::Fma => "f32 FMA peak",
        Limit::Matrix => "f16 matrix peak",
    }
}

/// `vkml bench -d cpu`: the same pp/tg tests on candle's CPU backend with the weights in
/// their GGML blocks (no GPU counters or profile).
fn models_cpu(a: &ModelArgs, list: &[Source]) -> Result<(), String> {
    let reps = a.repetitions as usize;
    let threads = vkml_models::storage::cpu_blocks::cpu_threads();
    let max_p = a.n_prompt.iter().copied().max().unwrap_or(0);
    let max_n = a.n_gen.iter().copied().max().unwrap_or(0);
    let mut rows = Vec::new();
    if a.output == Format::Md {
        println!("device: CPU ({threads} threads), candle's CPU backend, weights in their GGML blocks on Q8 activations; vkml {}; {}", env!("CARGO_PKG_VERSION"), now_rfc3339());
        println!(
            "settings: {reps} repetitions after >= {} s of warm-up runs; KV cache f16; prompt in one batch\n",
            a.warmup
        );
        println!("| model | size | params | backend | test | t/s |\n| --- | ---: | ---: | --- | --- | ---: |");
    }
    for src in list {
        let (label, file) = open_source(src, a.seed)?;
        let size: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
        let params: u64 = file.tensors().iter().map(|t| t.n_elements).sum();
        let opts = LoadOptions {
            ctx: Some(max_p.max(max_n) + 1),
            max_batch: max_p.max(1),
            weights: vkml_models::WeightFormat::Blocks,
            micro_batch: None,
        };
        let mut model =
            Runner::<candle_core::CpuStorage>::load(&candle_core::cpu_backend::CpuDevice, &file, opts, &mut |_, _| {})
                .map_err(|e| format!("{label}: {e}"))?;
        drop(file);
        let vocab = model.hparams().vocab as u32;
        if vocab == 0 {
            return Err(format!("{label}: the model has an empty vocabulary"));
        }
        let tests = tests(a);
        for (n_prompt, n_gen) in tests {
            let mut prof = vkml_models::StepProfile::default();
            let mut run = || {
                one_run(&mut model, n_prompt, n_gen, vocab, choice(a), &mut prof).map_err(|e| format!("{label}: {e}"))
            };
            let warm_runs = warm_up(a.warmup, &mut run)?;
            let samples = (0..reps).map(|_| run()).collect::<Result<Vec<f64>, String>>()?;
            let tokens = (n_prompt + n_gen) as f64;
            let ts: Vec<f64> = samples.iter().map(|s| tokens / s).collect();
            let (m, sd) = ops_bench::mean_sd(&ts);
            let test = if n_prompt > 0 { format!("pp{n_prompt}") } else { format!("tg{n_gen}") };
            if a.output == Format::Md {
                println!(
                    "| {label} | {:.2} GiB | {:.2} B | CPU | {test} | {m:.2} ± {sd:.2} |",
                    size as f64 / f64::from(1 << 30),
                    params as f64 / 1e9
                );
            }
            rows.push(json!({
                "backend": "CPU", "threads": threads, "model_type": label, "model_size": size,
                "model_n_params": params, "n_prompt": n_prompt, "n_gen": n_gen, "test": test,
                "repetitions": reps, "warmup_runs": warm_runs, "avg_ts": m, "stddev_ts": sd, "samples_ts": ts,
            }));
        }
    }
    if a.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::warm_up;
    use std::time::Duration;

    /// The warm-up's seconds count from the end of its first run: a first run longer than
    /// them (pipeline creation) is still followed by runs until they have passed. Any
    /// run's error ends it.
    #[test]
    fn warm_up_counts_its_seconds_after_the_first_run() {
        let mut calls = 0;
        let runs = warm_up(0.05, || -> Result<f64, ()> {
            calls += 1;
            std::thread::sleep(Duration::from_millis(if calls == 1 { 100 } else { 10 }));
            Ok(0.0)
        })
        .unwrap();
        assert_eq!(runs, calls);
        assert!(runs >= 2, "{runs} runs: the first run's 100 ms counted towards the 50");
        assert_eq!(warm_up(0.0, || Ok::<f64, ()>(0.0)), Ok(1));
        assert_eq!(warm_up(1.0, || Err::<f64, &str>("no device")), Err("no device"));
    }
}
