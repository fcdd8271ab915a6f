//! The driver's compiler statistics (registers, spills, shared memory, instructions: what
//! the driver reports through VK_KHR_pipeline_executable_properties) of built-in kernels,
//! each with the specialization constants given, as the ops create them; for asking why
//! a kernel is slow without a profiler that reads Vulkan pipelines.
//!
//! Usage: `kernel_stats NAME[:ID=VALUE,...][:sg=N]...` (device per `VKML_DEVICE`), e.g.
//! `kernel_stats flash_attn_gqa.rope_neox_f32_wide1024:0=256,1=8,2=2`; `sg=N` requires
//! subgroups of N (with full subgroups where the device has them). Prints one line per
//! pipeline executable, or why there are no statistics.

use vkml_hal::{DeviceOptions, DeviceSelector, Instance, InstanceOptions, PipelineOptions};

/// `NAME[:ID=VALUE,...][:sg=N]` as the kernel's name and pipeline options; `None` for a
/// malformed item.
fn parse(item: &str, full_subgroups: bool) -> Option<(&str, PipelineOptions)> {
    let mut parts = item.split(':');
    let name = parts.next()?;
    let mut options = PipelineOptions::default();
    for part in parts {
        for kv in part.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=')?;
            let v: u32 = v.trim().parse().ok()?;
            if k.trim() == "sg" {
                options.required_subgroup_size = Some(v);
                options.full_subgroups = full_subgroups;
            } else {
                options.spec_constants.push((k.trim().parse().ok()?, v));
            }
        }
    }
    Some((name, options))
}

fn main() {
    let items: Vec<String> = std::env::args().skip(1).collect();
    if items.is_empty() {
        eprintln!("usage: kernel_stats NAME[:ID=VALUE,...][:sg=N]...");
        std::process::exit(2);
    }
    let inst = Instance::new(&InstanceOptions::from_env()).expect("a Vulkan instance");
    let options = DeviceOptions { pipeline_statistics: true, ..Default::default() };
    let dev = inst.create_device(&DeviceSelector::from_env(), options).expect("a Vulkan device");
    let c = dev.caps();
    println!("device: {} ({}, driver {})", c.name, c.driver_name, c.driver_version);
    for item in &items {
        let Some((name, options)) = parse(item, c.subgroup.full_subgroups) else {
            println!("{item}: not NAME[:ID=VALUE,...][:sg=N]");
            continue;
        };
        let stats = dev.kernel(name).and_then(|k| dev.pipeline(&k, &options)).and_then(|p| dev.pipeline_statistics(&p));
        match stats {
            Ok(stats) => {
                let line: Vec<String> = stats.iter().map(|s| format!("{}={}", s.name, s.value)).collect();
                println!("{item}: {}", line.join(", "));
            }
            Err(e) => println!("{item}: {e}"),
        }
    }
}
