//! Export of the spans over OTLP (HTTP/protobuf) when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, through tracing-opentelemetry.
//!
//! The exporter's HTTP client is [`RuntimeClient`]: the SDK's batch processor exports from
//! its own thread, and each request is handed to the command's tokio runtime on the shared
//! reqwest client, so no second runtime or blocking HTTP client is built and no worker of
//! the runtime ever blocks on the collector. The other standard variables
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SDK_DISABLED`) are honoured by the SDK or here.
//!
//! What the spans carry is decided where they are made (`spans`, `treadle_session`'s
//! `trace`): names, ids, counts and outcomes, never a key, a prompt or an argument.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tokio::runtime::Handle;

use super::TelemetryError;

/// How long one export request may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the environment asks for export: an OTLP endpoint is set and the SDK is not
/// disabled.
pub fn wanted() -> bool {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim() == "true");
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The tracer provider exporting to the configured endpoint; spans are sent in batches
/// until [`SdkTracerProvider::shutdown`], which sends the rest.
pub fn provider(runtime: Handle) -> Result<SdkTracerProvider, TelemetryError> {
    treadle_session::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(TelemetryError::OtlpClient)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(RuntimeClient { http, runtime })
        .build()
        .map_err(TelemetryError::Otlp)?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("treadle");
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// The tracing layer that turns spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("treadle"))
        // Source locations and thread names say nothing a collector needs.
        .with_location(false)
        .with_threads(false)
}

/// The exporter's HTTP client: runs each request on the command's runtime (see the module
/// docs) and waits for it from the exporter's thread.
#[derive(Debug)]
struct RuntimeClient {
    http: reqwest::Client,
    runtime: Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let exchange = self.runtime.spawn(async move {
            let response = http.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = exchange.await??;
        let mut answer = Response::builder().status(status);
        if let Some(h) = answer.headers_mut() {
            *h = headers;
        }
        Ok(answer.body(body)?)
    }
}
