//! The TLS crypto provider of every HTTPS client the runtime builds: rustls with *ring*.
//!
//! Why *ring* and not rustls's default, aws-lc-rs: aws-lc-sys compiles a large C library
//! (minutes on two cores, and it needs a C toolchain tuned for it), which made the first build
//! of `treadle` slow. *ring* is rustls's other first-party provider, maintained and audited,
//! and the most used after aws-lc-rs; it has some C and assembly too, but it compiles in
//! seconds. Pure-Rust providers (rustls-rustcrypto, graviola) exist but are young, not
//! audited, or limited to some CPUs, so they are not yet a safe default for API keys in
//! transit.
//!
//! reqwest is built with `rustls-no-provider`, so it has no provider of its own: building a
//! client before one is installed would panic. Every place in the runtime that builds an HTTP
//! client calls [`install_crypto_provider`] first; code that builds its own client on this
//! crate's dependency tree (a bench on async-openai, say) calls it too.

/// Installs *ring* as the process's rustls provider, unless one is installed already (by an
/// earlier call, or by the application, whose choice is kept). Cheap after the first call.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return;
    }
    // rustls 0.23.48 deprecates *ring*'s provider for its lack of post-quantum key
    // exchange, pointing to aws-lc-rs, which this crate keeps out of the build (above). The
    // lock file's 0.23.46 has no such deprecation; a fresh resolution gets 0.23.48, whose
    // warning every path build of a user's crate printed. The provider is the same, so the
    // lint is allowed here, on this one call, rather than shown to every user.
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    // `Err` only says a provider was installed meanwhile, which is all this function ensures.
    let _ = provider.install_default();
}
