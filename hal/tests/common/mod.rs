//! Shared test setup: every test opens its own instance with the Khronos validation
//! layer on (unless `VKML_VALIDATION=0`), and fails if the layer reported any error
//! during the test.

#![allow(dead_code)]

use std::ops::Deref;

use vkml_hal::{Device, DeviceOptions, DeviceSelector, Instance, InstanceOptions};

/// A device whose drop asserts that validation stayed clean.
pub struct Checked(pub Device);

impl Deref for Checked {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.0
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        let errors = self.0.instance().take_validation_errors();
        if !errors.is_empty() && !std::thread::panicking() {
            panic!("Vulkan validation reported {} error(s):\n{}", errors.len(), errors.join("\n"));
        }
    }
}

pub fn validation() -> bool {
    std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0")
}

pub fn instance() -> Instance {
    let inst = Instance::new(&InstanceOptions { validation: validation() })
        .expect("a Vulkan instance (is libvulkan1 + a driver installed?)");
    assert_eq!(inst.validation_enabled(), validation());
    inst
}

pub fn device_with(options: DeviceOptions) -> Checked {
    let inst = instance();
    Checked(inst.create_device(&DeviceSelector::from_env(), options).expect("a Vulkan device"))
}

pub fn device() -> Checked {
    device_with(DeviceOptions::default())
}

/// Deterministic pseudo-random f32 values in [-1, 1) (xorshift64*).
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
            ((r >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        out.extend_from_slice(&s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Push constants of the `affine` kernels: n, mul, add.
pub fn affine_push(n: u32, mul: f32, add: f32) -> Vec<u8> {
    [n.to_le_bytes(), mul.to_le_bytes(), add.to_le_bytes()].concat()
}

pub fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}
