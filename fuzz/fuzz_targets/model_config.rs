//! Arbitrary bytes through `vkml_models::fuzzing::config` (see that module); the same
//! function replays this target's kept inputs in `models/tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vkml_models::fuzzing::config(data));
