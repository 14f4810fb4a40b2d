//! `tinyrun-sandbox-api`: the sandbox over HTTP/JSON (`tinyrun sandbox
//! serve`). A tokio/axum server that checks each request (who asks, the
//! policy, the caps) and hands the library call to a worker process of
//! its own (module `worker`, which says why); the `tinyrun` binary itself
//! has no async runtime.
#![deny(unsafe_code)]

mod app;
mod archive;
mod args;
mod boxes;
mod e2b;
mod error;
mod files;
#[cfg(test)]
mod man;
mod metrics;
mod options;
mod owners;
mod policy;
mod routes;
mod server;
mod spawn;
mod stream;
mod worker;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = args::Args::parse();
    if args.worker {
        // No runtime, no thread: the library forks from here.
        return ExitCode::from(worker::main(&args.root));
    }
    match server::main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tinyrun sandbox serve: {e:#}");
            ExitCode::from(1)
        }
    }
}
