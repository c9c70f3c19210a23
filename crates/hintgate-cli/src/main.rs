//! The `hintgate` command: a thin shell over the policy core.
//!
//! `main` only parses and dispatches; each command lives in its own module,
//! reads its files at the edge (`load`) and writes only through `output`.
#![forbid(unsafe_code)]

mod approvals;
mod args;
mod auth;
mod config_check;
mod console;
mod demo;
mod demo_server;
mod examples;
mod exit;
mod explain;
mod hook;
mod hosts;
mod lint;
mod load;
mod log;
mod metrics;
mod output;
mod pins;
mod run;
mod sandbox;
mod scan;
mod ship;
mod signal;
mod state;
mod token;
mod when;
mod wrap;

use clap::Parser;
use clap::error::ErrorKind;

use crate::args::{Cli, Command, ConfigCommand, SandboxCommand};
use crate::exit::Exit;

/// The allocator: jemalloc, which gives most of the memory of a burst back
/// to the system once the burst is over (glibc's malloc kept it), and
/// spends less CPU per call; measured in `docs/performance.md`. MSVC
/// targets keep the system allocator.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> Exit {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let exit = match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Exit::Success,
                _ => Exit::Usage,
            };
            // Help goes to stdout, usage errors to stderr, as clap renders them.
            let _ = error.print();
            return exit;
        }
    };
    let result = match &cli.command {
        Command::Explain(args) if args.example => examples::run(args.json),
        Command::Explain(args) => explain::run(args),
        Command::Run(args) => run::run(args),
        Command::Pins(args) => pins::run(args),
        Command::Log(args) => log::run(args),
        Command::Lint(args) => lint::run(args),
        Command::Scan(args) => scan::run(args),
        Command::Demo => demo::run(),
        Command::DemoServer { flavor } => demo_server::run(*flavor),
        Command::DemoHook => hook::demo_hook(),
        Command::Config(ConfigCommand::Check(args)) => config_check::run(args),
        Command::Approvals(args) => approvals::run(args),
        Command::Console(args) => console::run(args),
        Command::Token(args) => token::run(args),
        Command::Auth(args) => auth::run(args),
        Command::Wrap(args) => wrap::wrap(args),
        Command::Unwrap(args) => wrap::unwrap(args),
        Command::Sandbox(SandboxCommand::Check(args)) => sandbox::check(args),
        Command::Sandbox(SandboxCommand::Explain(args)) => sandbox::explain(args),
        Command::Sandbox(SandboxCommand::Prepare(args)) => sandbox::prepare(args),
        Command::Sandbox(SandboxCommand::Suggest(args)) => wrap::suggest(args),
    };
    match result {
        Ok(exit) => exit,
        Err(error) => {
            let _ = output::err(&format!("error: {error:#}\n"));
            if error.downcast_ref::<load::InputError>().is_some() {
                Exit::Usage
            } else {
                Exit::Error
            }
        }
    }
}
