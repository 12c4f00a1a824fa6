//! The page's own pieces in a real headless Chromium, served by `treadle::web::router()`
//! alone: the markdown renderer keeps model text inert (no script runs, no image is
//! fetched, dangerous links lose their target), JSON is highlighted, and the event-stream
//! parser reads SSE however the bytes are split. Also the headers every asset carries.

use crate::browser;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use browser::Browser;
use serde_json::{Value, json};

/// The page's router on a free loopback port, on its own runtime.
struct PageServer {
    rt: tokio::runtime::Runtime,
    url: String,
}

fn serve_page() -> PageServer {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    rt.spawn(async move { axum::serve(listener, treadle::web::router()).await });
    PageServer { rt, url }
}

/// A loopback listener that counts every connection made to it: where an image would be
/// fetched from.
fn connection_counter(rt: &tokio::runtime::Runtime) -> (String, Arc<AtomicUsize>) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    rt.spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (format!("http://{addr}"), hits)
}

/// Renders `markdown` with the page's renderer into the open page; answers what came out.
fn render(b: &Browser, markdown: &str) -> Value {
    b.eval_async(
        r#"
        const md = await import('/assets/markdown.js');
        window.__pwned = 0;
        const host = document.createElement('div');
        host.id = 'probe';
        document.body.append(host);
        host.append(md.render(arguments[0]));
        // Give a script, an error handler or an image load time to happen.
        await new Promise((r) => setTimeout(r, 700));
        return {
            pwned: window.__pwned,
            active: host.querySelectorAll('script,img,iframe,object,embed,svg,style,link').length,
            handlers: [...host.querySelectorAll('*')].flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on')),
            links: [...host.querySelectorAll('a')].map((a) => [a.textContent, a.getAttribute('href'), a.getAttribute('rel')]),
            tags: [...host.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()),
            text: host.textContent,
        };
        "#,
        json!([markdown]),
    )
}

#[test]
fn model_markdown_renders_inert() {
    let Some(b) = Browser::start("model_markdown_renders_inert") else {
        return;
    };
    let page = serve_page();
    let (sink, hits) = connection_counter(&page.rt);
    b.goto(&format!("{}/approvals", page.url));
    let hostile = format!(
        "# Report <img src=x onerror=\"window.__pwned=1\">\n\
         <script>window.__pwned = 2</script>\n\n\
         ![tracker]({sink}/pixel.png) and <img src=\"{sink}/raw.png\">\n\n\
         [a](javascript:window.__pwned=3) [b](data:text/html,hi) [c](java\tscript:x) \
         [d](JAVASCRIPT:x) [ok](https://example.com/a) [rel](/runs/1) [mail](mailto:a@b.c)\n\n\
         - **bold** and `code <b>x</b>`\n- _em_ <iframe src=\"{sink}/frame\"></iframe>\n"
    );
    let out = render(&b, &hostile);
    assert_eq!(out["pwned"], json!(0), "a script ran: {out}");
    assert_eq!(out["active"], json!(0), "an active element was made: {out}");
    assert_eq!(out["handlers"], json!([]), "{out}");
    let text = out["text"].as_str().expect("text");
    assert!(
        text.contains("<script>window.__pwned = 2</script>"),
        "raw HTML is shown as text: {text}"
    );
    assert!(text.contains("image: tracker (127.0.0.1:"), "{text}");
    let links = out["links"].as_array().expect("links");
    let href = |label: &str| {
        links
            .iter()
            .find(|l| l[0] == json!(label))
            .map(|l| l[1].clone())
    };
    for refused in ["a", "b", "c", "d"] {
        assert_eq!(href(refused), None, "link {refused} kept a target: {out}");
    }
    assert_eq!(href("ok"), Some(json!("https://example.com/a")));
    assert_eq!(href("rel"), Some(json!("/runs/1")));
    assert_eq!(href("mail"), Some(json!("mailto:a@b.c")));
    assert!(
        links
            .iter()
            .all(|l| l[2] == json!("noopener noreferrer nofollow")),
        "{out}"
    );
    let tags = out["tags"].as_array().expect("tags");
    for tag in ["h3", "ul", "li", "strong", "em", "code"] {
        assert!(tags.contains(&json!(tag)), "no <{tag}>: {out}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the browser fetched from the image host"
    );
}

#[test]
fn json_blocks_and_payloads_are_highlighted() {
    let Some(b) = Browser::start("json_blocks_and_payloads_are_highlighted") else {
        return;
    };
    let page = serve_page();
    b.goto(&format!("{}/approvals", page.url));
    let out = b.eval_async(
        r#"
        const md = await import('/assets/markdown.js');
        const json = await import('/assets/json.js');
        const a = md.render('```json\n{"k": [1, true, null, "s"]}\n```');
        const b = document.createElement('pre');
        b.append(...json.highlight({content: '{"inner": 2}'}));
        const big = json.payload({content: 'x'.repeat(5000)}, 'result');
        return {
            a: [...a.querySelectorAll('span')].map((s) => [s.className, s.textContent]),
            b: b.textContent,
            bKeys: [...b.querySelectorAll('.j-key')].map((s) => s.textContent),
            big: big.tagName + ' ' + big.querySelector('summary').textContent,
        };
        "#,
        json!([]),
    );
    let spans = out["a"].as_array().expect("spans");
    for (class, text) in [
        ("j-key", "\"k\""),
        ("j-num", "1"),
        ("j-bool", "true"),
        ("j-null", "null"),
        ("j-str", "\"s\""),
    ] {
        assert!(spans.contains(&json!([class, text])), "{class}: {out}");
    }
    // A JSON document inside a string is shown as the document, inside its quotes.
    assert_eq!(out["bKeys"], json!(["\"content\"", "\"inner\""]), "{out}");
    assert_eq!(
        out["big"],
        json!("DETAILS result · content · 4.9 KB"),
        "{out}"
    );
}

#[test]
fn durations_and_costs_read_as_rounded_once_and_replayed() {
    let Some(b) = Browser::start("durations_and_costs_read_as_rounded_once_and_replayed") else {
        return;
    };
    let page = serve_page();
    b.goto(&format!("{}/approvals", page.url));
    let out = b.eval_async(
        r#"
        const { duration, spent } = await import('/assets/dom.js');
        return {
          d: [239600, 59960, 61000, 3599600, 7199999, 900].map(duration),
          cached: spent({tokens: 60, cost_usd: null, replayed_tokens: 60, replayed_cost_usd: null}),
          priced: spent({tokens: 60, cost_usd: 0.0001, replayed_tokens: 60, replayed_cost_usd: 0.0001}),
        };
        "#,
        json!([]),
    );
    assert_eq!(
        out["d"],
        json!([
            "4 m 0 s", "1 m 0 s", "1 m 1 s", "1 h 0 m", "2 h 0 m", "900 ms"
        ]),
        "{out}"
    );
    // An all-cached run on an unpriced model is unpriced, never $0; a priced one says
    // its cost was replayed.
    assert_eq!(out["cached"], "unpriced replayed", "{out}");
    assert_eq!(out["priced"], "$0.0001 replayed", "{out}");
}

#[test]
fn sse_parser_reads_events_however_split() {
    let Some(b) = Browser::start("sse_parser_reads_events_however_split") else {
        return;
    };
    let page = serve_page();
    b.goto(&format!("{}/approvals", page.url));
    let stream = ": keep-alive\r\nid: 1\r\nevent: output\r\ndata: {\"a\":1}\r\n\r\n\
                  event: token\ndata: {\"seq\":2,\"text\":\"h\u{e9}\"}\n\n\
                  id: 2\nevent: agent\ndata: line one\ndata: line two\n\n\
                  id: 3\revent: end\rdata:\r\r";
    let out = b.eval_async(
        r#"
        const { SseParser } = await import('/assets/api.js');
        const text = arguments[0];
        const whole = [];
        new SseParser((e) => whole.push(e)).push(text);
        // Every split into three pieces gives the same events.
        for (let i = 0; i <= text.length; i++) {
            for (let j = i; j <= text.length; j += 7) {
                const got = [];
                const p = new SseParser((e) => got.push(e));
                p.push(text.slice(0, i)); p.push(text.slice(i, j)); p.push(text.slice(j));
                if (JSON.stringify(got) !== JSON.stringify(whole)) return {bad: [i, j, got]};
            }
        }
        return {whole};
        "#,
        json!([stream]),
    );
    assert_eq!(
        out["whole"],
        json!([
            {"id": "1", "event": "output", "data": "{\"a\":1}"},
            {"id": null, "event": "token", "data": "{\"seq\":2,\"text\":\"h\u{e9}\"}"},
            {"id": "2", "event": "agent", "data": "line one\nline two"},
            {"id": "3", "event": "end", "data": ""},
        ]),
        "{out}"
    );
}

#[test]
fn every_asset_is_served_with_its_type_and_policy() {
    let page = serve_page();
    // reqwest has no TLS provider of its own here (see pkg-session/src/tls.rs).
    treadle_session::tls::install_crypto_provider();
    // reqwest has no TLS provider of its own in this workspace (see treadle_session::tls).
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::new();
    for (path, kind) in [
        ("/", "text/html"),
        ("/runs/7", "text/html"),
        ("/p/quickstart", "text/html"),
        ("/approvals", "text/html"),
        ("/assets/style.css", "text/css"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/markdown.js", "text/javascript"),
    ] {
        let response = page
            .rt
            .block_on(client.get(format!("{}{path}", page.url)).send())
            .expect("request");
        assert_eq!(response.status(), 200, "{path}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        assert!(
            header("content-security-policy").contains("script-src 'self'"),
            "{path}"
        );
    }
    let missing = page
        .rt
        .block_on(client.get(format!("{}/assets/nope.js", page.url)).send())
        .expect("request");
    assert_eq!(missing.status(), 404);
}
