//! What a chat model's output means, in pure Rust (no llama.cpp, no model):
//! - [`schema`]: JSON schemas compiled to GBNF grammars for llama.cpp's grammar sampler, so
//!   that constrained output *is* valid against the schema (bounds and ECMA-262 `pattern`s
//!   included);
//! - [`lark`]: a custom tool's Lark grammar compiled to GBNF rules for its input string;
//! - [`family`]: the tool-call formats of the model families users run, detected from the
//!   chat template, with the grammar that makes a reply a valid call;
//! - [`parse`]: the streaming parser that splits generated text into content, reasoning and
//!   tool calls.

#![forbid(unsafe_code)]

pub mod family;
pub mod lark;
pub mod parse;
mod pattern;
pub mod schema;

pub use family::{ReplyStart, ToolFamily, ToolSpec};
pub use parse::{OutputParser, Piece, ReasoningSplit, ToolCall};
pub use schema::{compile_schema, Grammar, SchemaError};
