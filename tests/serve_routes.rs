//! Every route of a real `treadle serve` with a token, walked from the server's own route
//! table (`treadle::server::routes::ROUTES`, the table the router is built from, so a
//! route added later is covered the day it is added): without the token each answers 401
//! and changes nothing, except the health check and the page's static files.

use crate::common;

use common::Fixture;
use common::server::Server;
use serde_json::{Value, json};
use treadle::server::routes::{Access, ROUTES};

const PIPELINE: &str =
    "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n";
const TOKEN: &str = "route-table-token-0123456789";

/// A concrete path for a route pattern: each `{segment}` becomes `1`.
fn sample(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| if seg.starts_with('{') { "1" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

async fn status(req: reqwest::RequestBuilder) -> u16 {
    req.send().await.expect("request").status().as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_but_health_and_the_page_needs_the_token() {
    let f = Fixture::new(PIPELINE);
    let s = Server::start(
        f.path(),
        &["--token-env", "TEST_TOKEN"],
        &[("TEST_TOKEN", TOKEN)],
    );
    let c = common::http();
    let mut walked = 0;
    for route in ROUTES {
        let url = s.url(&sample(route.path));
        for method in route.methods {
            let method: reqwest::Method = method.parse().expect("method");
            let body = json!({"pipeline": "treadle", "decision": "approve", "by": "api"});
            let without = status(c.request(method.clone(), &url).json(&body)).await;
            match route.access {
                Access::Token => assert_eq!(without, 401, "{method} {}", route.path),
                Access::Open => assert_ne!(without, 401, "{method} {}", route.path),
            }
            // The table's methods are the ones routed: with the token, none is a 405.
            let with = status(c.request(method.clone(), &url).bearer_auth(TOKEN)).await;
            assert_ne!(with, 405, "{method} {}", route.path);
            assert_ne!(with, 401, "{method} {}", route.path);
            walked += 1;
        }
    }
    assert!(walked >= 17, "{walked} routes walked");
    let metrics = ROUTES
        .iter()
        .find(|r| r.path == "/metrics")
        .expect("/metrics");
    assert_eq!(metrics.access, Access::Token);
    // Open: the health check and the page's static bytes, nothing else.
    let open: Vec<&str> = ROUTES
        .iter()
        .filter(|r| r.access == Access::Open)
        .map(|r| r.path)
        .collect();
    assert_eq!(
        open,
        [
            "/api/v1/health",
            "/",
            "/p/{pipeline}",
            "/runs/{id}",
            "/compare/{a}/{b}",
            "/compare/{a}/shadow/{n}",
            "/approvals",
            "/assets/{name}"
        ]
    );
    // A path that is no route tells a stranger nothing either.
    assert_eq!(status(c.get(s.url("/api/v1/nothing-here"))).await, 401);
    assert_eq!(status(c.get(s.url("/metrics"))).await, 401);
    // Nothing was started without the token (the POST with it had no body: 4xx).
    let list: Value = c
        .get(s.url("/api/v1/runs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("runs")
        .json()
        .await
        .expect("json");
    assert_eq!(list, json!([]));
}
