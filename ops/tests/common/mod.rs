//! Devices and dtype helpers shared by the nn and attention tests.
//!
//! Two devices on the same adapter: [`device`] with its real capabilities, and
//! [`portable_device`] with `arithmetic` removed from the subgroup operations, so that
//! ops pick the shared-memory reductions there and the subgroup ones on the first (where
//! the hardware has them: lavapipe, NVIDIA, AMD, Intel all do).

#![allow(dead_code)]

use std::sync::OnceLock;

use half::f16;
use vkml_hal::{Buffer, Device, DeviceSelector, Instance, InstanceOptions, MemoryKind};
use vkml_ops::Dtype;

fn instance() -> &'static Instance {
    static INST: OnceLock<Instance> = OnceLock::new();
    INST.get_or_init(|| {
        let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
        Instance::new(&InstanceOptions { validation }).unwrap()
    })
}

fn device_with(edit: impl FnOnce(&mut vkml_hal::Capabilities)) -> Device {
    let mut adapter = instance().select(&DeviceSelector::from_env()).unwrap();
    edit(&mut adapter.caps);
    Device::from_adapter(instance(), &adapter, Default::default()).unwrap()
}

/// The device as probed.
pub fn device() -> &'static Device {
    static DEV: OnceLock<Device> = OnceLock::new();
    DEV.get_or_init(|| device_with(|_| {}))
}

/// The same adapter, told it has no subgroup arithmetic: portable reductions.
pub fn portable_device() -> &'static Device {
    static DEV: OnceLock<Device> = OnceLock::new();
    DEV.get_or_init(|| device_with(|c| c.subgroup.operations.retain(|&op| op != "arithmetic")))
}

/// The same adapter with its integer dot products counted as accelerated: the decode
/// mat-vecs take Q8_1 activations (`tuning::q8_1_activations`), as on the H100.
#[allow(dead_code)] // (not every test binary uses it)
pub fn integer_dot_device() -> &'static Device {
    static DEV: OnceLock<Device> = OnceLock::new();
    DEV.get_or_init(|| device_with(|c| c.integer_dot.packed_4x8_signed_accelerated = true))
}

/// Both devices, labelled: every reducing op runs on each.
pub fn reduce_devices() -> [(&'static str, &'static Device); 2] {
    [("subgroup", device()), ("portable", portable_device())]
}

/// The same adapter as an architecture without a tuning table of its own (`Other`): the
/// decode attention runs its narrow form (`tuning::DECODE_ATTN_NARROW`) there.
pub fn narrow_attention_device() -> &'static Device {
    static DEV: OnceLock<Device> = OnceLock::new();
    DEV.get_or_init(|| device_with(|c| c.arch = vkml_hal::caps::ArchClass::Other))
}

/// The same adapter without 16-bit storage (the feature is then not enabled either).
pub fn no_f16_device() -> Device {
    device_with(|c| c.types.storage_buffer_16bit = false)
}

/// Both activation types.
pub const DTYPES: [Dtype; 2] = [Dtype::F32, Dtype::F16];

/// `v` as the device will see it in `dt` (rounded to nearest f16 for F16).
pub fn round(dt: Dtype, v: &[f32]) -> Vec<f32> {
    match dt {
        Dtype::F32 => v.to_vec(),
        _ => v.iter().map(|&x| f16::from_f32(x).to_f32()).collect(),
    }
}

/// Uploads `v` as `dt`.
pub fn upload(dev: &Device, dt: Dtype, v: &[f32]) -> Buffer {
    match dt {
        Dtype::F32 => dev.upload(v).unwrap(),
        _ => dev.upload(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()).unwrap(),
    }
}

/// A device-local buffer of `n` elements of `dt`.
pub fn alloc(dev: &Device, dt: Dtype, n: usize) -> Buffer {
    dev.alloc((dt.size() * n) as u64, MemoryKind::DeviceLocal).unwrap()
}

/// Reads a buffer of `dt` back as f32.
pub fn download(dt: Dtype, b: &Buffer) -> Vec<f32> {
    match dt {
        Dtype::F32 => b.to_vec::<f32>().unwrap(),
        _ => b.to_vec::<f16>().unwrap().iter().map(|x| x.to_f32()).collect(),
    }
}

/// A prologue with head norms (QKV bias, q/k norms) against the host's normalising first,
/// within the rounding of the norms' sums of squares: outputs within 1e-5 of the largest
/// wanted value, the key caches' f16 words within 1e-3 relative (one f16 step), which must
/// hold written keys; `case` names the call.
pub fn assert_normed_close(case: &str, (got, want): (&[f32], &[f32]), (keys_got, keys_want): (&[u32], &[u32])) {
    let top = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-5 * top, "{case}: output {i}: {a} vs {b}");
    }
    let halves = |w: &[u32]| -> Vec<f32> {
        w.iter().flat_map(|&x| [x as u16, (x >> 16) as u16]).map(|h| f16::from_bits(h).to_f32()).collect()
    };
    let ks = halves(keys_want);
    assert!(ks.iter().any(|&v| v != 0.0), "{case}: keys written");
    for (a, b) in halves(keys_got).iter().zip(ks) {
        assert!((a - b).abs() <= b.abs() * 1e-3 + 1e-6, "{case}: key {a} vs {b}");
    }
}
