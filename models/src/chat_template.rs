//! Chat templates: the Jinja a GGUF file carries in `tokenizer.chat_template`, rendered
//! with minijinja (and minijinja-contrib's Python string methods) the way `transformers`'
//! `apply_chat_template` renders it: a `messages` list of `{role, content}` maps,
//! `add_generation_prompt`, `bos_token`, `eos_token` and the functions `raise_exception` and
//! `strftime_now` (`transformers`' helpers).
//!
//! A template comes from the model file, so it is untrusted code. Every rendering is
//! bounded:
//! - instructions: minijinja's fuel, [`TEMPLATE_FUEL`] (nested loops end);
//! - output: [`TEMPLATE_MAX_OUTPUT`] bytes (a prompt past any context vkml loads);
//! - format widths: [`TEMPLATE_MAX_WIDTH`] (`"{:>1000000000000000}".format(1)` aborted
//!   the process allocating the field);
//! - time: [`TEMPLATE_MAX_TIME`]. Printing or iterating a lazily repeated sequence
//!   (`{{ messages * 949749999 }}`, `{% for x in [] * 10**18 %}`) walks it inside one
//!   engine instruction, where neither fuel nor the output bound reaches, so each
//!   rendering runs on a thread of its own and the caller stops waiting at the deadline.
//!   Such a thread cannot be stopped from outside and runs on in the background (for a
//!   long time, or for ever); to keep a process that renders many prompts (`vkml serve`)
//!   from piling them up, at most [`TEMPLATE_MAX_RUNNING`] renderings run at once, and a
//!   template that once ran past its deadline is refused at once afterwards.
//!
//! Files without a template whose vocabulary has Gemma's turn markers get llama.cpp's
//! built-in Gemma template ([`render_gemma`]).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// The instruction budget of one chat-template rendering (minijinja's fuel): real
/// templates render a conversation in thousands; a template that loops past this ends in
/// an error.
pub const TEMPLATE_FUEL: u64 = 5_000_000;

/// Longest one chat-template rendering may take (wall clock).
pub const TEMPLATE_MAX_TIME: Duration = Duration::from_secs(2);

/// Most bytes a rendered chat template may hold (a prompt past any context vkml loads).
pub const TEMPLATE_MAX_OUTPUT: usize = 16 << 20;

/// Widest field a template's `format` (Python's `str.format`, or the printf-style
/// filter) may ask for.
pub const TEMPLATE_MAX_WIDTH: u64 = 4096;

/// Most renderings running at once in the process, runaway ones (past their deadline,
/// still walking) included; one more is refused with an error.
pub const TEMPLATE_MAX_RUNNING: usize = 4;

/// One message of a conversation, with OpenAI's field names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `"system"`, `"user"` or `"assistant"` (templates may know others, e.g. `"tool"`).
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role` with `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("chat template: {e}"))
}

/// Renderings running now (see [`TEMPLATE_MAX_RUNNING`]).
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Hashes of templates that ran past [`TEMPLATE_MAX_TIME`]: refused at once afterwards.
static RUNAWAY: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn template_hash(template: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    template.hash(&mut h);
    h.finish()
}

/// A slot among the [`TEMPLATE_MAX_RUNNING`] renderings of `running`, given back on drop.
struct Slot(&'static AtomicUsize);

impl Slot {
    fn take(running: &'static AtomicUsize, max: usize) -> Option<Slot> {
        running.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot(running))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Renders `template` for `messages`, as `transformers`' `apply_chat_template` does with
/// `add_generation_prompt`; `bos` and `eos` are the vocabulary's BOS and EOS strings
/// (`bos_token`, `eos_token` in the template).
///
/// # Errors
/// [`Error::Tokenizer`] naming the problem when the template does not parse, fails
/// (including its own `raise_exception`), or passes a bound of the module docs: its fuel,
/// output, format widths or time; when [`TEMPLATE_MAX_RUNNING`] renderings are already
/// running; or when this template ran past its deadline before.
pub fn render(
    template: &str,
    messages: &[ChatMessage],
    bos: &str,
    eos: &str,
    add_generation_prompt: bool,
) -> Result<String> {
    let hash = template_hash(template);
    if RUNAWAY.lock().as_ref().is_some_and(|s| s.contains(&hash)) {
        return Err(err(format!(
            "this template ran past {} s before (a runaway template); not rendering it again",
            TEMPLATE_MAX_TIME.as_secs()
        )));
    }
    let slot = Slot::take(&RUNNING, TEMPLATE_MAX_RUNNING).ok_or_else(|| {
        err(format!(
            "{TEMPLATE_MAX_RUNNING} renderings are already running (templates that ran past their deadline); \
             refusing another"
        ))
    })?;
    let job = (template.to_string(), messages.to_vec(), bos.to_string(), eos.to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("chat-template".into())
        .spawn(move || {
            let (template, messages, bos, eos) = job;
            let rendered = render_here(&template, &messages, &bos, &eos, add_generation_prompt);
            // The slot is free before the caller hears back, so that a caller that renders
            // again at once never finds its own finished rendering still counted.
            drop(slot);
            let _ = tx.send(rendered);
        })
        .map_err(|e| err(format!("cannot start its thread: {e}")))?;
    match rx.recv_timeout(TEMPLATE_MAX_TIME) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(err("the template engine failed (it panicked)")),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            RUNAWAY.lock().get_or_insert_with(HashSet::new).insert(hash);
            Err(err(format!("rendering ran past {} s (a runaway template)", TEMPLATE_MAX_TIME.as_secs())))
        }
    }
}

/// `transformers`' `strftime_now(format)` for templates (gpt-oss's writes the current date):
/// the local time in C strftime `format` (chrono's reading of it).
///
/// # Errors
/// A format chrono does not take, or one past 256 bytes.
fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    use std::fmt::Write;
    let bad = |what: String| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, what);
    if format.len() > 256 {
        return Err(bad(format!("strftime_now: a format of {} bytes (at most 256)", format.len())));
    }
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format))
        .map_err(|_| bad(format!("strftime_now: {format:?} is not a strftime format")))?;
    Ok(out)
}

/// llama.cpp's built-in Gemma template (`llm_chat_apply_template`,
/// `LLM_CHAT_TEMPLATE_GEMMA`) for files without `tokenizer.chat_template`: Gemma has no
/// system turn, so system messages (trimmed) open the next user turn; `assistant` is
/// `model`; contents are trimmed.
pub fn render_gemma(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    let mut system = String::new();
    for m in messages {
        if m.role == "system" {
            system.push_str(m.content.trim());
            continue;
        }
        let role = if m.role == "assistant" { "model" } else { m.role.as_str() };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if !system.is_empty() && role != "model" {
            out.push_str(&system);
            out.push_str("\n\n");
            system.clear();
        }
        out.push_str(m.content.trim());
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
    out
}

/// [`render`]'s work, on the calling thread, without the time bound.
fn render_here(
    template: &str,
    messages: &[ChatMessage],
    bos: &str,
    eos: &str,
    add_generation_prompt: bool,
) -> Result<String> {
    let mut env = minijinja::Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_unknown_method_callback(|state, value, method, args| {
        if method == "format" {
            if let Some(s) = value.as_str() {
                check_format_widths(s)?;
            }
        }
        contained(|| minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args))
    });
    env.add_filter(
        "format",
        |state: &minijinja::State<'_, '_>, f: minijinja::Value, args: minijinja::value::Rest<minijinja::Value>| {
            if let Some(s) = f.as_str() {
                check_format_widths(s)?;
            }
            contained(|| minijinja::filters::format(state, &f, args))
        },
    );
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", strftime_now);
    env.add_template("chat", template).map_err(err)?;
    let messages: Vec<_> =
        messages.iter().map(|m| minijinja::context! { role => m.role, content => m.content }).collect();
    let mut out = Bounded { bytes: Vec::new(), limit: TEMPLATE_MAX_OUTPUT };
    let rendered = env.get_template("chat").and_then(|t| {
        t.render_captured_to(
            minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => bos,
                eos_token => eos,
            },
            &mut out,
        )
    });
    match rendered {
        Err(_) if out.bytes.len() > TEMPLATE_MAX_OUTPUT => {
            Err(err(format!("the rendered prompt is past {} MiB", TEMPLATE_MAX_OUTPUT >> 20)))
        }
        Err(e) => Err(err(e)),
        Ok(_) => String::from_utf8(out.bytes).map_err(err),
    }
}

/// `f()`, with a panic inside the template engine turned into an error: minijinja 2.24's
/// printf-style `format` slices a `%(key)` inside a multi-byte character and panics (a
/// fuzz finding), which must not end the process.
fn contained(
    f: impl FnOnce() -> std::result::Result<minijinja::Value, minijinja::Error>,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, "format string the engine cannot parse"))
    })
}

/// An error if format string `f` asks for a field width or precision past
/// [`TEMPLATE_MAX_WIDTH`] (`{:>1000000000000000}` or `%1000000000s` allocate that much),
/// or has a printf-style `%(key)` with characters outside ASCII after it (which minijinja
/// 2.24's parser slices inside a character, and panics).
fn check_format_widths(f: &str) -> std::result::Result<(), minijinja::Error> {
    if let Some(at) = f.find("%(") {
        if !f[at..].is_ascii() {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "a printf-style %(key) format with characters outside ASCII",
            ));
        }
    }
    let mut digits = 0u64;
    let mut in_spec = false;
    for c in f.chars() {
        match c {
            '{' | '%' | ':' => {
                in_spec = true;
                digits = 0;
            }
            '}' | ' ' => in_spec = false,
            d if d.is_ascii_digit() && in_spec => {
                digits = digits.saturating_mul(10).saturating_add(u64::from(d) - u64::from('0'));
                if digits > TEMPLATE_MAX_WIDTH {
                    return Err(minijinja::Error::new(
                        minijinja::ErrorKind::InvalidOperation,
                        format!("format width past {TEMPLATE_MAX_WIDTH} in {f:.40?}"),
                    ));
                }
            }
            _ => digits = 0,
        }
    }
    Ok(())
}

/// A writer that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            self.bytes.resize(self.limit + 1, 0);
            return Err(std::io::Error::other("rendered output past its limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(t: &str) -> Result<String> {
        render(t, &[ChatMessage::new("user", "hi")], "<s>", "</s>", true)
    }

    /// Hostile templates end in an error naming the bound, within a second or two: nested
    /// loops (fuel), a huge rendering (length), huge format widths (which aborted the
    /// process allocating them), a printf format minijinja's parser panics on, a lazily
    /// repeated sequence printed (no fuel or output bound stops the walk: the deadline
    /// does). The runaway template is then refused at once.
    #[test]
    fn hostile_templates_are_bounded() {
        let runaway = "{{ messages * 949749999 }}";
        for (t, needle) in [
            ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "fuel"),
            ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "past 16 MiB"),
            ("{{ \"{:>1000000000000000}\".format(1) }}", "format width past 4096"),
            ("{{ \"%1000000000000s\"|format(1) }}", "format width past 4096"),
            (runaway, "rendering ran past 2 s"),
            ("{{ \"1%(000.04fose###\u{6d6}m%%%\"|format(2) }}", "outside ASCII"),
            ("{{ raise_exception('no system role') }}", "no system role"),
            ("{% for %}", "syntax error"),
        ] {
            let t0 = std::time::Instant::now();
            let e = one(t).unwrap_err().to_string();
            assert!(e.contains(needle), "{t}: {e}");
            assert!(t0.elapsed().as_secs() < 3, "{t}: {:?}", t0.elapsed());
        }
        let t0 = std::time::Instant::now();
        let e = one(runaway).unwrap_err().to_string();
        assert!(e.contains("ran past 2 s before"), "{e}");
        assert!(t0.elapsed().as_millis() < 100, "{:?}", t0.elapsed());
        // Ordinary formatting still works.
        let ok = one("{{ \"{:>8}|\".format('ab') }}{{ \"%5d|\"|format(42) }}{{ messages[0].content }}");
        assert_eq!(ok.unwrap(), "      ab|   42|hi");
    }

    /// Past [`TEMPLATE_MAX_RUNNING`] slots, one more is refused; a slot given back frees one.
    #[test]
    fn running_renderings_are_capped() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let held: Vec<_> = (0..3).map(|_| Slot::take(&COUNT, 3).expect("a free slot")).collect();
        assert!(Slot::take(&COUNT, 3).is_none());
        drop(held);
        assert_eq!(COUNT.load(Ordering::Acquire), 0);
        assert!(Slot::take(&COUNT, 3).is_some());
    }

    /// The conversation, the generation prompt and the special tokens reach the template
    /// as `transformers` passes them.
    #[test]
    fn renders_a_conversation() {
        let t = "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}\
                 {% if add_generation_prompt %}[assistant:{% endif %}{{ eos_token }}";
        let msgs = [ChatMessage::new("system", "S"), ChatMessage::new("user", "U"), ChatMessage::new("assistant", "A")];
        assert_eq!(render(t, &msgs, "<s>", "</s>", true).unwrap(), "<s>[system:S][user:U][assistant:A][assistant:</s>");
        assert_eq!(render(t, &msgs, "<s>", "</s>", false).unwrap(), "<s>[system:S][user:U][assistant:A]</s>");
    }

    /// llama.cpp's Gemma template: the system message opens the next user turn, the
    /// assistant is `model`, contents trimmed (`llm_chat_apply_template`).
    /// What gpt-oss's (Harmony) template uses beyond a plain loop: macros, `namespace`,
    /// `strftime_now` (today's date), slices from `loop.index`, `in` on a message map,
    /// `tojson`; and a format strftime cannot take is an error naming it.
    #[test]
    fn renders_harmony_style_templates() {
        let t = r#"{%- macro system() -%}{{ "Current date: " + strftime_now("%Y-%m-%d") }}{%- endmacro -%}
<|start|>system<|message|>{{ system() }}<|end|>
{%- set last = namespace(role=none) -%}
{%- for m in messages -%}
{%- set later = messages[loop.index:] | length -%}
<|start|>{{ m.role }}<|message|>{{ m.content }}{{ "<|end|>" if later else "<|return|>" }}
{%- if "content" in m %}{% set last.role = m.role %}{% endif -%}
{%- endfor -%}
{{ {"last": last.role} | tojson }}{% if add_generation_prompt %}<|start|>assistant{% endif %}"#;
        let msgs = [ChatMessage::new("user", "Hi"), ChatMessage::new("assistant", "Hello")];
        let got = render(t, &msgs, "", "", true).unwrap();
        let today = chrono::Local::now().format("%Y-%m-%d").to_string();
        assert_eq!(
            got,
            format!(
                "<|start|>system<|message|>Current date: {today}<|end|><|start|>user<|message|>Hi<|end|>\
                 <|start|>assistant<|message|>Hello<|return|>{{\"last\":\"assistant\"}}<|start|>assistant"
            )
        );
        let e = render("{{ strftime_now('%Q%') }}", &msgs, "", "", true).unwrap_err().to_string();
        assert!(e.contains("not a strftime format"), "{e}");
    }

    #[test]
    fn gemma_builtin_matches_llama_cpp() {
        let msgs = [
            ChatMessage::new("system", " Be brief. "),
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello! "),
            ChatMessage::new("user", "Bye"),
        ];
        assert_eq!(
            render_gemma(&msgs, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
