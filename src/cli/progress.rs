//! Progress bars on the terminal (hidden when stderr is not one).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

fn bar(template: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template(template).expect("static template"));
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// A callback for the engine's model load (fraction 0 to 1), drawing a bar on a terminal.
pub fn loading() -> Option<Box<dyn FnMut(f32) + Send>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = bar("loading {bar:40} {pos:>3}%");
    b.set_length(100);
    Some(Box::new(move |p| {
        b.set_position((p * 100.0) as u64);
        if p >= 1.0 {
            b.finish_and_clear();
        }
    }))
}

/// A bar over a prompt's prefill, in tokens, updated once per ubatch.
pub fn prefill() -> ProgressBar {
    bar("prompt  {bar:40} {pos}/{len} tokens, {per_sec}, {eta} left")
}

/// A byte-count bar for writing files.
pub fn bytes(what: &str) -> ProgressBar {
    bar(&format!(
        "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}}"
    ))
}
