//! `epm-run`: the command-line entry point. Parsing, dispatch and the exit code; each
//! subcommand lives in its own file under `cli/`.

#![forbid(unsafe_code)]

mod cli;

fn main() {
    epm_sys::default_sigpipe();
    let code = match cli::run(cli::normalize_args(std::env::args_os())) {
        Ok(()) => cli::exit::OK,
        Err(e) => {
            eprintln!("error: {}", cli::exit::message(&e));
            cli::exit::code(&e)
        }
    };
    std::process::exit(code);
}
