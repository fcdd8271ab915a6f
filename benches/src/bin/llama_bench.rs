//! Prompt and generation speed of a synthetic llama-family model (random weights made
//! in-process, `vkml_candle::synth`), in llama-bench's terms: `pp N` runs an N-token
//! prompt in one `Llama::forward` from an empty cache; `tg N` generates N tokens one at
//! a time from an empty cache (each step one command buffer and one host wait, logits
//! read back). Each figure is the mean ± standard deviation over repetitions, after one
//! warm-up run (pipeline creation).
//!
//! `llama_bench [SHAPE[:TYPE] ...]` (default `smollm2-135m:Q4_1`); env `VKML_BENCH_PP`
//! (512), `VKML_BENCH_TG` (128), `VKML_BENCH_REPS` (3).

use std::time::Instant;

use vkml_candle::llama::{Llama, LoadOptions};
use vkml_candle::synth;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_hal::Device;
use vkml_quant::GgmlType;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len().max(2) - 1) as f64;
    (m, var.sqrt())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let specs: Vec<String> = std::env::args().skip(1).collect();
    let specs = if specs.is_empty() { vec!["smollm2-135m:Q4_1".to_string()] } else { specs };
    let (pp, tg, reps) = (env("VKML_BENCH_PP", 512), env("VKML_BENCH_TG", 128), env("VKML_BENCH_REPS", 3).max(1));
    let dev = Device::from_env()?;
    println!("device: {}, driver {}", dev.caps().name, dev.caps().driver_info);
    println!("| model | type | test | t/s |\n|---|---|---|---|");
    for spec in specs {
        let (name, ty) = spec.split_once(':').unwrap_or((spec.as_str(), "Q4_0"));
        let shape = synth::shape(name)?;
        let ty = GgmlType::from_name(ty).ok_or_else(|| format!("unknown GGML type {ty}"))?;
        let t0 = Instant::now();
        let file = synth::synthetic_llama(&shape, ty, 42)?;
        let made = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let ctx = pp + tg + 1;
        let vd = VulkanDevice::from_device(&dev, 0)?;
        let opts = LoadOptions { ctx: Some(ctx), max_batch: pp };
        let mut model = Llama::<VulkanStorage>::load(&vd, &file, opts, &mut |_, _| {})?;
        eprintln!("{name} {ty:?}: made in {made:.1} s, loaded in {:.1} s", t0.elapsed().as_secs_f64());
        drop(file);
        let vocab = shape.vocab as u32;
        let prompt: Vec<u32> = (0..pp as u32).map(|i| (i * 7919 + 13) % vocab).collect();
        let mut pp_runs = Vec::new();
        for r in 0..=reps {
            model.reset();
            let t = Instant::now();
            model.forward(&prompt, false)?;
            if r > 0 {
                pp_runs.push(pp as f64 / t.elapsed().as_secs_f64());
            }
        }
        let mut tg_runs = Vec::new();
        let mut prof = [0f64; 3];
        let stats0 = vd.stream_stats();
        for r in 0..=reps {
            model.reset();
            let mut tok = 1u32;
            let t = Instant::now();
            for _ in 0..tg {
                let l = model.forward(&[tok], false)?;
                let p = model.last_step();
                prof[0] += p.record_s;
                prof[1] += p.ahead_s;
                prof[2] += p.wait_s;
                tok = (l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |x| x.0) as u32) % vocab;
            }
            if r > 0 {
                tg_runs.push(tg as f64 / t.elapsed().as_secs_f64());
            }
        }
        let (m, s) = mean_sd(&pp_runs);
        println!("| {name} | {ty:?} | pp{pp} | {m:.1} ± {s:.1} |");
        let (m, s) = mean_sd(&tg_runs);
        println!("| {name} | {ty:?} | tg{tg} | {m:.1} ± {s:.1} |");
        let steps = ((reps + 1) * tg) as f64;
        let stats = vd.stream_stats();
        eprintln!(
            "{name} tg step: record {:.0} µs, record the next ahead {:.0} µs, submit+wait+read-back {:.0} µs; {:.0} dispatches, {:.0} barriers",
            prof[0] / steps * 1e6,
            prof[1] / steps * 1e6,
            prof[2] / steps * 1e6,
            (stats.dispatches - stats0.dispatches) as f64 / steps,
            (stats.barriers - stats0.barriers) as f64 / steps
        );
    }
    Ok(())
}
