//! `web_fetch`: one HTTP GET of an `http://` or `https://` URL, returning
//! `{status, content_type, body, truncated}` as JSON.
//!
//! * The body is cut at [`MAX_BODY_BYTES`] (`truncated: true`), read piece by piece so a
//!   large page is never held whole; the page is still on the web, so nothing is spilled.
//! * Text only: a response whose content type is not text (`text/*`, JSON, XML,
//!   JavaScript) is refused, and so is a body that is not UTF-8.
//! * With an `allow:` list, the host must be one of its entries or a subdomain of one
//!   (case-insensitive). Redirects are followed here, one hop at a time, and every hop is
//!   checked again, so an allowed host that redirects elsewhere is refused mid-way.
//! * Nothing secret goes out or comes back: a URL with a user name or password in it is
//!   refused, no credential header or cookie is ever sent, and the step masks its keys in
//!   the result like any tool's.
//!
//! A refusal is a tool error the model reads (the turn goes on), naming the host and the
//! list, and it happens before any connection is made.

use std::time::Duration;

use reqwest::{Url, redirect};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_session::{Effect, FnTool, Tool, ToolError};

/// The most bytes of a body returned.
pub const MAX_BODY_BYTES: usize = 100_000;
/// The longest one fetch (every redirect included) may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The most redirects followed.
const MAX_REDIRECTS: usize = 10;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    /// The `http://` or `https://` URL to GET.
    url: String,
}

/// The hosts a fetch may reach: every host when `allow` is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    allow: Vec<String>,
}

impl Fence {
    /// A fence of these hosts (each covering its subdomains); empty: any host.
    pub fn new(allow: impl IntoIterator<Item = String>) -> Self {
        Self {
            allow: allow
                .into_iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        }
    }

    /// The entries, lower-cased.
    pub fn hosts(&self) -> &[String] {
        &self.allow
    }

    /// Why `url` may not be fetched, if it may not.
    fn refuse(&self, url: &Url) -> Option<String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Some(format!(
                "only http:// and https:// URLs can be fetched, not {}:",
                url.scheme()
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Some("a URL with a user name or password in it is not fetched".to_owned());
        }
        let host = url
            .host_str()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if host.is_empty() {
            return Some("the URL has no host".to_owned());
        }
        if self.allow.is_empty()
            || self
                .allow
                .iter()
                .any(|a| host == *a || host.ends_with(&format!(".{a}")))
        {
            return None;
        }
        Some(format!(
            "host `{host}` is not allowed: it is not on this agent's web_fetch allow: list, which holds {} (each with its subdomains)",
            self.allow.join(", ")
        ))
    }
}

/// The `web_fetch` tool, fenced by `fence`.
pub(super) fn web_fetch(fence: Fence) -> impl Tool {
    let description = if fence.allow.is_empty() {
        "HTTP GET an http(s) URL. Returns JSON {status, content_type, body, truncated}; text only, the body cut at 100 KB.".to_owned()
    } else {
        format!(
            "HTTP GET an http(s) URL on {} (or their subdomains); other hosts are refused. Returns JSON {{status, content_type, body, truncated}}; text only, the body cut at 100 KB.",
            fence.allow.join(", ")
        )
    };
    FnTool::new("web_fetch", description, move |args: FetchArgs| {
        let fence = fence.clone();
        async move { fetch(&fence, &args.url).await }
    })
    // It reads the network only: nothing a file call of the step could see or change.
    .touches_nothing()
    .effect(Effect::Idempotent)
}

async fn fetch(fence: &Fence, url: &str) -> Result<String, ToolError> {
    let refused = |why: String| ToolError::new(format!("web_fetch refused {url}: {why}"));
    let mut url = Url::parse(url).map_err(|e| refused(format!("not a URL ({e})")))?;
    if let Some(why) = fence.refuse(&url) {
        return Err(refused(why));
    }
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| ToolError::new(format!("web_fetch cannot make an HTTP client: {e}")))?;
    let mut hops = 0;
    let mut response = loop {
        let response = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| ToolError::new(format!("web_fetch of {url} failed: {e}")))?;
        if !response.status().is_redirection() {
            break response;
        }
        let next = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| url.join(l).ok());
        let Some(next) = next else { break response };
        hops += 1;
        if hops > MAX_REDIRECTS {
            return Err(refused(format!("more than {MAX_REDIRECTS} redirects")));
        }
        if let Some(why) = fence.refuse(&next) {
            return Err(refused(format!("it redirects to {next}, and {why}")));
        }
        url = next;
    };
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if !content_type.is_empty() && !is_text(&content_type) {
        return Err(refused(format!(
            "its content type is `{content_type}`; only text is fetched"
        )));
    }
    let status = response.status().as_u16();
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ToolError::new(format!("web_fetch of {url} failed mid-body: {e}")))?
    {
        let room = MAX_BODY_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let body = text(body, truncated).ok_or_else(|| refused("its body is not text".to_owned()))?;
    Ok(json!({
        "status": status,
        "content_type": content_type,
        "body": body,
        "truncated": truncated,
    })
    .to_string())
}

fn is_text(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/x-ndjson"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
        )
}

/// The body as text; a cut may end inside a character, which is dropped.
fn text(mut body: Vec<u8>, truncated: bool) -> Option<String> {
    match String::from_utf8(body.clone()) {
        Ok(s) => Some(s),
        Err(e) if truncated && e.utf8_error().error_len().is_none() => {
            body.truncate(e.utf8_error().valid_up_to());
            String::from_utf8(body).ok()
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuse(fence: &Fence, url: &str) -> Option<String> {
        fence.refuse(&Url::parse(url).unwrap())
    }

    #[test]
    fn hosts_and_their_subdomains_only() {
        let fence = Fence::new(["Specification.Website".to_owned()]);
        assert_eq!(refuse(&fence, "https://specification.website/a"), None);
        assert_eq!(refuse(&fence, "http://docs.SPECIFICATION.website./x"), None);
        let why = refuse(&fence, "https://issues.example/open").unwrap();
        assert!(why.contains("issues.example") && why.contains("specification.website"));
        assert!(refuse(&fence, "https://evilspecification.website/").is_some());
        assert!(refuse(&Fence::default(), "ftp://example.com/").is_some());
        assert!(refuse(&Fence::default(), "https://user:pw@example.com/").is_some());
        assert_eq!(refuse(&Fence::default(), "http://127.0.0.1:9/"), None);
    }

    #[test]
    fn text_types_pass_and_binary_ones_do_not() {
        for t in [
            "text/html; charset=utf-8",
            "application/json",
            "application/ld+json",
        ] {
            assert!(is_text(t), "{t}");
        }
        for t in ["image/png", "application/octet-stream", "application/pdf"] {
            assert!(!is_text(t), "{t}");
        }
        assert_eq!(
            text("é".as_bytes()[..1].to_vec(), true).as_deref(),
            Some("")
        );
        assert_eq!(text(vec![0xff, 0x00], false), None);
    }
}
