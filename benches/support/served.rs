//! What the benches that start `treadle serve` share: the token they give it and a client
//! that sends it (a served server always has a token).

/// The server's token (`--token-env`).
pub const TOKEN: &str = "bench-token-41c7";

/// A client that sends [`TOKEN`] with every request.
pub fn authorized_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().expect("header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
}
