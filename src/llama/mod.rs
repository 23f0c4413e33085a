//! Everything that touches llama.cpp: loading a model through the patched llama-cpp-2
//! (no populate, no extra buffer types), the eval-callback hook, finding llama.cpp's file
//! mapping, and driving generation. No other module uses llama.cpp types.

pub mod hook;
mod session;

pub use session::{
    run, ChatTurn, GenerateParams, GenerationOutcome, PagerMode, Prediction, SessionError,
    SessionOptions,
};
