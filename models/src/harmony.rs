//! gpt-oss's Harmony format in a generated stream (OpenAI's `harmony` response format, as
//! llama.cpp's `common/parsers/gpt-oss.cpp` reads it): messages
//! `<|channel|>NAME<|message|>TEXT<|end|>` separated by `<|start|>ROLE` headers, the last
//! ended by `<|return|>` or `<|call|>` (stop tokens). The text of `final` messages is the
//! reply; that of the others (`analysis`: the model's reasoning; `commentary`: tool
//! preambles) is kept apart. Text before the first `<|channel|>` counts as reply.

use crate::tokenizer::GgufTokenizer;

/// Where a generated token's text goes ([`Harmony::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Part of the reply (a `final` message, or text outside any message).
    Reply,
    /// Part of another channel's message (the reasoning).
    Reasoning,
    /// A special token or a header: no text.
    Drop,
}

/// The part of a message the stream is in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// After `<|start|>` or `<|end|>`: a role until `<|channel|>`.
    Header,
    /// After `<|channel|>`: the channel's name until `<|message|>` (its token ids).
    Name(Vec<u32>),
    /// A message's text, in the reply or not.
    Text(bool),
}

/// The Harmony state of a generation: the vocabulary's `<|start|>`, `<|channel|>`,
/// `<|message|>` and `<|end|>` ids and where the stream is.
#[derive(Debug, Clone)]
pub struct Harmony {
    start: u32,
    channel: u32,
    message: u32,
    end: u32,
    part: Part,
}

impl Harmony {
    /// The state of a new generation where the vocabulary has the four Harmony tokens
    /// (gpt-oss's o200k_harmony); `None` elsewhere.
    pub fn of(tok: &GgufTokenizer) -> Option<Harmony> {
        let id = |s: &str| tok.id_of(s);
        Some(Harmony::new([id("<|start|>")?, id("<|channel|>")?, id("<|message|>")?, id("<|end|>")?]))
    }

    /// The state of a new generation with the ids of `<|start|>`, `<|channel|>`,
    /// `<|message|>` and `<|end|>`.
    pub fn new([start, channel, message, end]: [u32; 4]) -> Harmony {
        Harmony { start, channel, message, end, part: Part::Text(true) }
    }

    /// Where token `id`'s text goes, the state moved past it; `name` decodes a channel
    /// name's ids (the text between `<|channel|>` and `<|message|>`).
    pub fn route(&mut self, id: u32, name: impl Fn(&[u32]) -> String) -> Route {
        if id == self.start || id == self.end {
            self.part = Part::Header;
            return Route::Drop;
        }
        if id == self.channel {
            self.part = Part::Name(Vec::new());
            return Route::Drop;
        }
        if id == self.message {
            let reply = match &self.part {
                // (a channel name may carry a recipient: "commentary to=functions.f")
                Part::Name(ids) => name(ids).split_whitespace().next() == Some("final"),
                _ => true,
            };
            self.part = Part::Text(reply);
            return Route::Drop;
        }
        match &mut self.part {
            Part::Header => Route::Drop,
            Part::Name(ids) => {
                ids.push(id);
                Route::Drop
            }
            Part::Text(true) => Route::Reply,
            Part::Text(false) => Route::Reasoning,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gpt-oss reply: reasoning in `analysis`, a new header, the answer in `final`; a
    /// channel name split over tokens and a recipient after it; text before any channel
    /// counts as reply.
    #[test]
    fn final_messages_are_the_reply() {
        // 0 <|start|>, 1 <|channel|>, 2 <|message|>, 3 <|end|>; 10.. ordinary tokens.
        let names = |ids: &[u32]| -> String {
            ids.iter()
                .map(|&i| match i {
                    10 => "analysis",
                    11 => "fin",
                    12 => "al",
                    13 => "commentary",
                    14 => " to=functions.f",
                    _ => "x",
                })
                .collect()
        };
        let mut h = Harmony::new([0, 1, 2, 3]);
        let seq = [
            (20, Route::Reply),
            (1, Route::Drop),
            (10, Route::Drop),
            (2, Route::Drop),
            (21, Route::Reasoning),
            (22, Route::Reasoning),
            (3, Route::Drop),
            (0, Route::Drop),
            (30, Route::Drop), // the role "assistant"
            (1, Route::Drop),
            (13, Route::Drop),
            (14, Route::Drop),
            (2, Route::Drop),
            (23, Route::Reasoning),
            (3, Route::Drop),
            (0, Route::Drop),
            (1, Route::Drop),
            (11, Route::Drop),
            (12, Route::Drop),
            (2, Route::Drop),
            (24, Route::Reply),
            (25, Route::Reply),
        ];
        for (i, (id, want)) in seq.into_iter().enumerate() {
            assert_eq!(h.route(id, names), want, "token {i} ({id})");
        }
    }
}
