//! `fluss-sink`: a tool for transform authors and operators.
//!
//! - `fluss-sink dry-run` runs messages from a JSON-lines file through a
//!   transform (or the JSON mapping) exactly as the sink would, and prints
//!   each message's outcome: its rows, filtered, or dead-lettered with why.
//! - `fluss-sink check` validates a connector file: its options, the
//!   transform component, and the table against Fluss when reachable.

mod check;
mod compare;
mod dry_run;
mod input;
mod shown;
mod stage;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Tools for the Iggy → Fluss WebAssembly sink.
#[derive(Parser)]
#[command(name = "fluss-sink", version, about)]
struct Cli {
    /// Show debug log lines too.
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run messages through a transform (or the JSON mapping) as the sink would, writing nothing.
    DryRun(stage::Args),
    /// Validate a connector file: options, transform, and the table in Fluss when reachable.
    Check {
        /// The connector file (TOML) with a `[plugin_config]` table.
        #[arg(long)]
        config: PathBuf,
        /// Do not contact Fluss.
        #[arg(long)]
        offline: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The transform's own log lines and stderr, and the sink's warnings, on stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(if cli.verbose {
            tracing::Level::DEBUG
        } else {
            tracing::Level::INFO
        })
        .init();
    match cli.command {
        Command::DryRun(args) => {
            let ran = match args.compare.clone() {
                Some(candidate) => compare::run(&args, &candidate),
                None => dry_run::run(args),
            };
            ran.unwrap_or_else(|e| {
                eprintln!("error: {e}");
                ExitCode::from(2)
            })
        }
        Command::Check { config, offline } => check::run(&config, offline),
    }
}
