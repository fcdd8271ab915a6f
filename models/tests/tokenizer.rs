//! GGUF tokenizers rebuilt through the `tokenizers` crate, on the real test models
//! (`quant/scripts/fetch_test_models.sh`; the tests FAIL, naming the script, when the
//! files are missing): SmolLM2 (gpt2 byte-level BPE, `smollm` pre-tokenizer) and Gemma 3
//! (SentencePiece BPE with byte fallback, 262144 pieces), the latter also against ids from
//! Google's `sentencepiece` library (`tests/data/gemma3_spm_reference.json`).

mod common;

use vkml_models::tokenizer::{GgufTokenizer, TokenStream};
use vkml_quant::gguf::GgufFile;

fn model(name: &str) -> GgufFile {
    GgufFile::open(common::test_model(name)).unwrap()
}

const TEXTS: &[&str] = &[
    "Hello world",
    "  leading spaces and trailing  ",
    "The year 2026 has 365 days; π ≈ 3.14159.",
    "Ünïcödé, 日本語のテキスト, emoji 🦀🚀 and tabs\tand\nnewlines\n\n",
    "fn main() { println!(\"{}\", 1 + 2); }",
];

fn round_trips(tok: &GgufTokenizer) {
    for t in TEXTS {
        let ids = tok.encode(t, false).unwrap();
        assert!(!ids.is_empty(), "{t:?}");
        assert_eq!(tok.decode(&ids).unwrap(), *t, "round trip of {t:?} via {ids:?}");
        // Streaming the same ids emits the same text, whole characters only.
        let mut s = TokenStream::new();
        let mut out = String::new();
        for &id in &ids {
            if let Some(piece) = s.push(tok, id).unwrap() {
                assert!(!piece.contains('\u{fffd}'), "{t:?}: partial character emitted");
                out.push_str(&piece);
            }
        }
        out.push_str(&s.rest(tok).unwrap());
        assert_eq!(out, *t);
    }
}

#[test]
fn smollm2_gpt2_bpe() {
    let tok = GgufTokenizer::from_gguf(&model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    assert_eq!((tok.bos, tok.eos, tok.add_bos), (Some(1), Some(2), false));
    round_trips(&tok);
    // Special tokens are matched whole, wherever they are in the text.
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", true).unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(*ids.last().unwrap(), 2);
    assert!(tok.stop.contains(&2));
    // The smollm pre-tokenizer splits digits one by one.
    let ids = tok.encode("12345", false).unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
    for (id, d) in ids.iter().zip("12345".chars()) {
        assert_eq!(tok.token(*id), Some(d.to_string().as_str()));
    }
    // A frequent word with its leading space is one byte-level token ("Ġthe").
    let ids = tok.encode(" the", false).unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(tok.token(ids[0]), Some("Ġthe"));
    // The chat template as its Jinja source says: a default system turn, the user turn,
    // the assistant's turn opened.
    let chat = tok.apply_chat_template(None, "Hi").unwrap();
    assert_eq!(
        chat,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let chat = tok.apply_chat_template(Some("Be brief."), "Hi").unwrap();
    assert!(chat.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"), "{chat}");
}

#[test]
fn gemma3_sentencepiece_bpe() {
    let tok = GgufTokenizer::from_gguf(&model("gemma-3-270m-q4_k_m.gguf")).unwrap();
    assert_eq!(tok.vocab_size(), 262144);
    assert_eq!((tok.bos, tok.eos, tok.add_bos), (Some(2), Some(1), true));
    round_trips(&tok);
    let ids = tok.encode("Hello world", true).unwrap();
    assert_eq!(ids[0], 2, "BOS first");
    // Whole words are single pieces, spaces as '▁' (no prefix space: add_space_prefix false).
    let pieces: Vec<&str> = ids[1..].iter().map(|&i| tok.token(i).unwrap()).collect();
    assert_eq!(pieces, ["Hello", "▁world"]);
    // Characters outside the vocabulary fall back to bytes, which decode back.
    let rare = "\u{10FFFD}";
    let ids = tok.encode(rare, false).unwrap();
    assert!(ids.iter().all(|&i| tok.token(i).unwrap().starts_with("<0x")), "{ids:?}");
    assert_eq!(tok.decode(&ids).unwrap(), rare);
    assert!(tok.stop.contains(&tok.encode("<end_of_turn>", false).unwrap()[0]));
    // No chat template in the file: llama.cpp's built-in Gemma turns.
    assert!(tok.chat_template.is_none());
    assert_eq!(
        tok.apply_chat_template(Some("Be brief."), "Hi").unwrap(),
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
}

/// Gemma 3's tokenizer against Google's `sentencepiece` library: the ids of every case in
/// `tests/data/gemma3_spm_reference.json` (written by `scripts/spm_reference.py` from a
/// SentencePiece model rebuilt from the same GGUF's `tokenizer.ggml.*` metadata), and the
/// text back from them. Every difference is reported, each with its text and first
/// differing position. No case contains a control piece's text (`<start_of_turn>`):
/// sentencepiece spells those out character by character, GgufTokenizer (like llama.cpp
/// parsing specials) matches them whole, a difference on purpose.
#[test]
fn gemma3_matches_sentencepiece() {
    let tok = GgufTokenizer::from_gguf(&model("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let fixture: serde_json::Value = serde_json::from_str(include_str!("data/gemma3_spm_reference.json")).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let pieces = |ids: &[u32]| -> Vec<String> {
        ids.iter().map(|&i| format!("{i}:{:?}", tok.token(i).unwrap_or("?"))).collect()
    };
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> =
            case["ids"].as_array().unwrap().iter().map(|v| u32::try_from(v.as_u64().unwrap()).unwrap()).collect();
        let got = tok.encode(text, false).unwrap();
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
            failures.push(format!(
                "{text:?}: ids differ from position {at} on\n  sentencepiece: {:?}\n  GgufTokenizer: {:?}",
                pieces(&want[at..]),
                pieces(&got[at..])
            ));
            continue;
        }
        if case["decodes"].as_bool().unwrap_or(true) {
            let back = tok.decode(&want).unwrap();
            if back != text {
                let at = back
                    .chars()
                    .zip(text.chars())
                    .position(|(a, b)| a != b)
                    .unwrap_or(back.chars().count().min(text.chars().count()));
                failures.push(format!("{text:?}: decode gives {back:?}, different from character {at} on"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from sentencepiece ({}):\n{}",
        failures.len(),
        cases.len(),
        fixture["source"].as_str().unwrap_or(""),
        failures.join("\n")
    );
}

#[test]
fn unsupported_tokenizers_are_clear_errors() {
    use vkml_quant::gguf::{GgufValue, GgufWriter};
    let mut w = GgufWriter::new();
    w.push_kv("tokenizer.ggml.model", GgufValue::String("bert".into()));
    w.push_kv("tokenizer.ggml.tokens", GgufValue::Array(vkml_quant::gguf::GgufArray::String(vec!["a".into()])));
    let f = GgufFile::from_vec(w.to_bytes().unwrap()).unwrap();
    let e = GgufTokenizer::from_gguf(&f).unwrap_err().to_string();
    assert!(e.contains("tokenizer model \"bert\" is not supported"), "{e}");
}
