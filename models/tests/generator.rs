//! The library API on lavapipe: a KV cache cut back and continued gives the logits of a
//! fresh run (and refuses where a sliding window's ring has lost the keys); a chat's
//! second turn runs only its new tokens and replies as a fresh generator does; stop
//! texts, `max_tokens` and finish reasons.

mod common;

use vkml_candle::vulkan::VulkanStorage;
use vkml_models::chat_template::ChatMessage;
use vkml_models::sampling::SamplingConfig;
use vkml_models::synth::{synthetic_model, SynthShape};
use vkml_models::{FinishReason, GenerateOptions, Generator, LoadOptions, Runner};
use vkml_quant::gguf::GgufFile;
use vkml_quant::GgmlType;

const SHAPE: SynthShape = SynthShape {
    experts: None,
    name: "tiny",
    arch: "gemma3",
    head_dim: Some(64),
    sliding_window: Some(8),
    n_layers: 6,
    n_embd: 128,
    n_ff: 256,
    n_head: 4,
    n_kv_head: 2,
    vocab: 300,
    tied: true,
};

const MAX_BATCH: usize = 4;

fn runner(f: &GgufFile) -> Runner<VulkanStorage> {
    let opts = LoadOptions { ctx: Some(64), max_batch: MAX_BATCH, ..Default::default() };
    Runner::load(&common::vulkan_device(), f, opts, &mut |_, _| {}).unwrap()
}

/// Cutting the cache back to `n` and running the rest gives the logits a fresh run of the
/// whole sequence gives (the same kernels, so to float noise: 1e-3 of the logits'
/// spread), for a model with global caches only (llama) and one with sliding-window rings
/// (gemma3: window 8, ring 8 + 4 - 1 = 11 slots), which refuses a cut whose ring already
/// overwrote keys the next positions read.
#[test]
fn a_truncated_cache_continues_like_a_fresh_one() {
    let seq: Vec<u32> = (0..30u32).map(|i| (i * 37 + 11) % 300).collect();
    let other: Vec<u32> = (0..8u32).map(|i| (i * 53 + 5) % 300).collect();
    for arch in ["llama", "gemma3"] {
        let f = synthetic_model(arch, &SynthShape { arch, ..SHAPE }, GgmlType::Q8_0, 9).unwrap();
        let mut fresh = runner(&f);
        let want = fresh.forward(&seq, false).unwrap();
        let spread = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let mut r = runner(&f);
        // 20 shared tokens, then 2 others (22 - 20 < MAX_BATCH: every ring keeps its keys).
        r.forward(&[&seq[..20], &other[..2]].concat(), false).unwrap();
        assert!(r.truncate(20), "{arch}: a cut of 2 positions");
        let got = r.forward(&seq[20..], false).unwrap();
        let d = common::max_diff(&got, &want);
        assert!(d <= 1e-3 * spread, "{arch}: cut and continued differs from fresh by {d} (spread {spread})");
        // 20 shared, then 8 others: past gemma3's ring of 11 (28 > 11) by more than a chunk.
        r.reset();
        r.forward(&[&seq[..20], &other].concat(), false).unwrap();
        assert_eq!(r.truncate(20), arch == "llama", "{arch}: a cut of 8 positions");
        assert!(!r.truncate(29), "{arch}: past the position");
        if arch == "llama" {
            let d = common::max_diff(&r.forward(&seq[20..], false).unwrap(), &want);
            assert!(d <= 1e-3 * spread, "{arch}: a long cut differs by {d}");
        }
    }
}

fn smollm() -> (GgufFile, Generator) {
    let f = GgufFile::open(common::test_model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let g = Generator::from_gguf(
        &common::vulkan_device(),
        &f,
        LoadOptions { ctx: Some(512), max_batch: 64, ..Default::default() },
    )
    .unwrap();
    (f, g)
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_tokens, sampling: SamplingConfig::default(), stop: Vec::new() }
}

fn reply(g: &mut Generator, messages: &[ChatMessage], opts: &GenerateOptions) -> (String, usize, FinishReason) {
    let mut gen = g.chat(messages, opts).unwrap();
    let text: String = (&mut gen).map(Result::unwrap).collect();
    let reused = gen.reused_tokens();
    (text, reused, gen.finish_reason().unwrap())
}

/// A second chat turn reuses the first turn's cache (its tokens are not run again) and
/// replies with what a fresh generator replies to the whole conversation (greedy; the
/// first 12 tokens' text, since the cached path ran the history in other chunks).
#[test]
fn a_second_chat_turn_reuses_the_cache_and_replies_as_a_fresh_one() {
    let (f, mut g) = smollm();
    let opts = greedy(24);
    let mut msgs = vec![ChatMessage::new("user", "Name three colours.")];
    let (first, reused, _) = reply(&mut g, &msgs, &opts);
    assert_eq!(reused, 0);
    assert!(!first.trim().is_empty());
    let cached = g.cached_tokens();
    msgs.push(ChatMessage::new("assistant", first.as_str()));
    msgs.push(ChatMessage::new("user", "And three animals?"));
    let prompt = g.chat_tokens(&msgs).unwrap();
    let (second, reused, _) = reply(&mut g, &msgs, &greedy(12));
    // Everything up to the first reply's tokens is shared; the reply itself may tokenize
    // otherwise when re-rendered, so at least the first prompt's tokens are reused.
    let first_prompt = g.chat_tokens(&msgs[..1]).unwrap().len();
    assert!(reused >= first_prompt && reused <= cached && reused < prompt.len(), "{reused} of {cached}");
    let mut fresh = Generator::from_gguf(
        &common::vulkan_device(),
        &f,
        LoadOptions { ctx: Some(512), max_batch: 64, ..Default::default() },
    )
    .unwrap();
    let (again, reused, _) = reply(&mut fresh, &msgs, &greedy(12));
    assert_eq!(reused, 0);
    assert_eq!(second, again, "the second turn from the cache and from scratch");
}

/// Stop texts end the generation before them (finish reason stop), also when they span
/// tokens; `max_tokens` ends it with finish reason length; 0 tokens give nothing.
#[test]
fn stop_texts_and_max_tokens_end_generations() {
    let (_, mut g) = smollm();
    let prompt = "The capital of France is";
    let full: String = g.generate(prompt, &greedy(16)).unwrap().map(Result::unwrap).collect();
    let mut gen = g.generate(prompt, &greedy(16)).unwrap();
    let again: String = (&mut gen).map(Result::unwrap).collect();
    assert_eq!((full.as_str(), gen.finish_reason()), (again.as_str(), Some(FinishReason::Length)));
    assert_eq!(gen.generated(), 16);
    // A stop text from the middle of the reply (two characters either side of a cut).
    let cut = full.char_indices().map(|(i, _)| i).find(|&i| i >= full.len() / 2).unwrap();
    let stop = full[cut..].chars().take(3).collect::<String>();
    let opts = GenerateOptions { stop: vec!["never seen text".into(), stop.clone()], ..greedy(16) };
    let mut gen = g.generate(prompt, &opts).unwrap();
    let stopped: String = (&mut gen).map(Result::unwrap).collect();
    assert_eq!(gen.finish_reason(), Some(FinishReason::Stop));
    assert_eq!(stopped, full[..full.find(&stop).unwrap()], "stop {stop:?} in {full:?}");
    let mut gen = g.generate(prompt, &greedy(0)).unwrap();
    assert!(gen.next().is_none());
    assert_eq!(gen.finish_reason(), Some(FinishReason::Length));
    // Stop texts are bounded (each piece is checked against every prefix of each).
    let long_stop = GenerateOptions { stop: vec!["x".repeat(257)], ..greedy(4) };
    let e = g.generate(prompt, &long_stop).unwrap_err().to_string();
    assert!(e.contains("a stop text of 257 bytes: at most 256"), "{e}");
    let many = GenerateOptions { stop: vec![".".into(); 17], ..greedy(4) };
    assert!(g.generate(prompt, &many).unwrap_err().to_string().contains("17 stop texts: at most 16"));
    // A prompt as long as the context is refused by name.
    let long = "word ".repeat(600);
    let e = g.generate(&long, &greedy(4)).unwrap_err().to_string();
    assert!(e.contains("exceed the context of 512 positions"), "{e}");
}
