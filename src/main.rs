//! `epm-run`: the command-line entry point. Parsing and dispatch only; the work lives in
//! the library and in `cli`.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 bad input or usage.

mod cli;

fn main() {
    // Installed first, so a SIGUSR2 that arrives during start-up never kills the process.
    cli::install_stats_signal();
    let args = cli::normalize_args(std::env::args_os());
    let code = match cli::run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            cli::exit_code(&e)
        }
    };
    std::process::exit(code);
}
