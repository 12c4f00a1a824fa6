//! A headless Chromium for the page's tests, driven over WebDriver by Debian's
//! `chromedriver`, with a small blocking client written here.
//!
//! Why not a crate: the W3C WebDriver calls the tests need (open a session, load a page,
//! run a script, click, take a screenshot) are a few JSON requests, and a hand-written
//! client over `std::net` keeps the test build free of a browser-automation crate and of
//! any build script that downloads a browser. The browser is the system's
//! (`/usr/bin/chromium`, installed by `scripts/test`).
//!
//! [`Browser::start`] answers `None` when chromium or chromedriver is missing, after
//! printing why; under `scripts/test` (`TREADLE_REQUIRE_BROWSER=1`) a missing browser
//! fails the test instead, so a skip can never pass there silently.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const DRIVER: &str = "/usr/bin/chromedriver";

/// One browser session and the chromedriver serving it; both end when this is dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// Answers whether the browser is present; prints the skip when it is not (and fails when
/// `TREADLE_REQUIRE_BROWSER` is set).
pub fn available(test: &str) -> bool {
    let missing: Vec<&str> = [CHROMIUM, DRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "SKIPPED {test}: {} not installed (apt-get install -y chromium chromium-driver)",
        missing.join(" and ")
    );
    assert!(
        std::env::var_os("TREADLE_REQUIRE_BROWSER").is_none(),
        "{why}; TREADLE_REQUIRE_BROWSER is set, so this is a failure"
    );
    eprintln!("{why}");
    println!("{why}");
    false
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width` x `height`, or answers `None`
    /// (printed) when they are not installed.
    pub fn start(test: &str) -> Option<Self> {
        Self::start_sized(test, 1280, 900)
    }

    pub fn start_sized(test: &str, width: u32, height: u32) -> Option<Self> {
        if !available(test) {
            return None;
        }
        let port = free_port();
        let driver = Command::new(DRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut browser = Self {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while browser.call("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        let args = json!([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ]);
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let answer = browser
            .call("POST", "/session", Some(caps))
            .expect("new browser session");
        browser.session = answer["sessionId"].as_str().expect("session id").to_owned();
        Some(browser)
    }

    /// Sends one WebDriver command and answers its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let (head, rest) = read_response(&mut stream)?;
        let value: Value = serde_json::from_str(&rest).map_err(|e| format!("{e}: {rest}"))?;
        let value = value.get("value").cloned().unwrap_or(Value::Null);
        if head.starts_with("HTTP/1.1 2") {
            Ok(value)
        } else {
            Err(format!("{method} {path}: {value}"))
        }
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.call(method, &path, body)
            .unwrap_or_else(|e| panic!("webdriver: {e}"))
    }

    /// Loads a page and waits for its load event.
    pub fn goto(&self, url: &str) {
        self.session_call("POST", "/url", Some(json!({"url": url})));
    }

    /// Reloads the page.
    pub fn reload(&self) {
        self.session_call("POST", "/refresh", Some(json!({})));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and answers its return value.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Runs an async script: `script` is the body of an async function whose return value is
    /// answered.
    pub fn eval_async(&self, script: &str, args: Value) -> Value {
        let wrapped = format!(
            "const done = arguments[arguments.length - 1];\n\
             (async (...arguments) => {{ {script} }})(...Array.from(arguments).slice(0, -1))\n\
               .then(done, (e) => done({{__error: String(e && e.stack || e)}}));"
        );
        let value = self.session_call(
            "POST",
            "/execute/async",
            Some(json!({"script": wrapped, "args": args})),
        );
        if let Some(error) = value.get("__error") {
            panic!("script failed: {error}");
        }
        value
    }

    /// Polls `condition` (an expression) until it is truthy; answers its value, or panics
    /// naming `what` and the page's text after `timeout`.
    pub fn wait_for(&self, what: &str, condition: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let script = format!("try {{ return ({condition}); }} catch (e) {{ return null; }}");
        loop {
            let value = self.eval(&script, json!([]));
            let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                && value != json!(0)
                && value != json!("");
            if truthy {
                return value;
            }
            if Instant::now() > deadline {
                let text = self.eval("return document.body.innerText", json!([]));
                panic!("timed out waiting for {what}; the page says:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The WebDriver id of the first element matching `css`; fails the test without one.
    fn element(&self, css: &str) -> String {
        let found = self.session_call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_owned()
    }

    /// Clicks the first element matching `css` as a user would (it must be visible).
    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.session_call("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    /// Types into the first element matching `css`.
    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.session_call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        );
    }

    /// A PNG of the viewport.
    pub fn screenshot_png(&self) -> Vec<u8> {
        use base64::Engine;
        let value = self.session_call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().expect("screenshot data"))
            .expect("screenshot base64")
    }

    /// Resizes the window.
    pub fn resize(&self, width: u32, height: u32) {
        self.session_call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }
}

/// Reads one HTTP/1.1 response: the head, then a body of Content-Length bytes or chunks
/// (chromedriver keeps the connection open, so reading to the end would wait forever).
fn read_response(stream: &mut TcpStream) -> Result<(String, String), String> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before the head".into());
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut body = raw[head_end + 4..].to_vec();
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = lower.contains("transfer-encoding: chunked");
    loop {
        let complete = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if complete {
            break;
        }
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    Ok((head, if chunked { dechunk(&body) } else { body }))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Deleting the session closes Chromium; killing only the driver would orphan it.
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
