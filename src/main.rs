//! The `treadle` binary: parses the command line and turns the command's result into the
//! process exit code. Everything else lives in the library (`treadle::cli`).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // First, while this process is one thread and small: the process that starts every
    // command's keeper (treadle::keeper). Without it (refused: an old kernel) commands
    // start as forks of treadle, every guarantee the same, each fork costlier.
    let _ = treadle::keeper::start_spawner();
    let cli = treadle::cli::Cli::parse();
    // Before any HTTP client exists: reqwest has no TLS provider of its own (see
    // treadle_session::tls); the runtime's builders install it too, this covers the rest.
    treadle_session::tls::install_crypto_provider();
    // SAFETY: no other thread exists yet; the runtime (and the span exporter's thread) are
    // started below.
    unsafe { treadle::environ::take_keys(treadle::cli::key_vars(&cli)) };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            // Not `eprintln!`: it panics when stderr is closed.
            let _ = writeln!(
                std::io::stderr(),
                "treadle: cannot start the async runtime: {e}"
            );
            return ExitCode::from(treadle::cli::EXIT_CONFIG);
        }
    };
    let telemetry = match treadle::telemetry::init(&cli.log_options(), runtime.handle().clone()) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "treadle: {e}");
            return ExitCode::from(treadle::cli::EXIT_CONFIG);
        }
    };
    let code = runtime.block_on(treadle::cli::dispatch(cli));
    // The last spans are exported on the runtime, so before it is dropped.
    telemetry.finish();
    // Reaped, so that `time treadle ...` counts what the spawner spent.
    treadle::keeper::stop_spawner();
    ExitCode::from(code)
}
