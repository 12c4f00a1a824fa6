//! Where the process's tracing goes: log lines on stderr (`--log LEVEL` or `RUST_LOG`,
//! plain or JSON), and the spans of the run, its steps and the runtime below them.
//!
//! # Layout
//!
//! * `spans`: the run, job and step spans.
//! * `otlp`: export of the spans over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//!
//! Without `--log` or `RUST_LOG` only warnings and errors are shown: the runtime's
//! warnings (a journal write that failed, a hook that panicked) always reach stderr unless
//! a filter asks for less.

mod otlp;
pub mod spans;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The filter when neither `--log` nor `RUST_LOG` gives one.
pub const DEFAULT_FILTER: &str = "warn";

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event, with the spans it happened in.
    #[default]
    Plain,
    /// One JSON object per line, with the event's fields and its spans'.
    Json,
}

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// `--log`: a level (`info`) or any `RUST_LOG` filter (`treadle_session=debug`).
    pub filter: Option<String>,
    /// `--log-format`.
    pub format: LogFormat,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The `--log` or `RUST_LOG` filter does not parse.
    #[error(
        "invalid log filter {filter:?} (from {source_name}): {detail}; use a level (error, \
         warn, info, debug, trace) or directives such as `warn,treadle_session=debug`"
    )]
    Filter {
        /// The filter as given.
        filter: String,
        /// Where it came from: `--log` or `RUST_LOG`.
        source_name: &'static str,
        /// What the parser said.
        detail: String,
    },
    /// The OTLP exporter's HTTP client cannot be set up (no TLS backend, say).
    #[error("cannot export traces over OTLP: cannot set up the HTTP client: {0}")]
    OtlpClient(#[source] reqwest::Error),
    /// The OTLP exporter cannot be set up (an invalid endpoint, say).
    #[error("cannot export traces over OTLP: {0}")]
    Otlp(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The telemetry of the process, live until [`Telemetry::finish`].
#[must_use = "finish() sends the spans not yet exported"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans not yet exported (waiting for the collector at most its timeout).
    /// Call it while the runtime given to [`init`] still runs: the export runs on it.
    pub fn finish(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            crate::console::tell!("treadle: the last spans could not be exported over OTLP: {e}");
        }
    }
}

/// The stderr filter: `--log`, else `RUST_LOG`, else [`DEFAULT_FILTER`].
fn filter(options: &LogOptions) -> Result<EnvFilter, TelemetryError> {
    let (text, source_name) = match (&options.filter, std::env::var("RUST_LOG")) {
        (Some(given), _) => (given.clone(), "--log"),
        (None, Ok(env)) if !env.trim().is_empty() => (env, "RUST_LOG"),
        _ => (DEFAULT_FILTER.to_owned(), "the default"),
    };
    EnvFilter::builder()
        .parse(&text)
        .map_err(|e| TelemetryError::Filter {
            filter: text.clone(),
            source_name,
            detail: e.to_string(),
        })
}

/// Installs the process's subscriber: log lines to stderr, filtered, and the spans over
/// OTLP when the environment names an endpoint (exported on `runtime`). Call once, early.
pub fn init(
    options: &LogOptions,
    runtime: tokio::runtime::Handle,
) -> Result<Telemetry, TelemetryError> {
    let filter = filter(options)?;
    // A closed span is logged with its fields (tokens, status) at its own level, so
    // `--log info` shows each model call, tool call and step as it ends.
    let base = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE);
    let stderr: Box<dyn Layer<Registry> + Send + Sync> = match options.format {
        LogFormat::Plain => base.with_filter(filter).boxed(),
        LogFormat::Json => base
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
    };
    let provider = if otlp::wanted() {
        Some(otlp::provider(runtime)?)
    } else {
        None
    };
    // Only treadle's own spans are exported, whatever the stderr filter says; the HTTP
    // stack's (the exporter's own requests among them) never are.
    let exported = Targets::new()
        .with_target("treadle", Level::INFO)
        .with_target("treadle_session", Level::INFO);
    let otel = provider
        .as_ref()
        .map(|p| otlp::layer(p).with_filter(exported));
    // `try_init`: a second call (tests calling `dispatch` twice) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(otel)
        .try_init();
    Ok(Telemetry { provider })
}
