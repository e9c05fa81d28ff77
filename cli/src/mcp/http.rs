//! `snapbus mcp --http ADDR`: the same server over MCP's streamable HTTP transport, with the
//! plotter's rule: a random token per server, which every request must carry (`Authorization:
//! Bearer <token>` or `?token=<token>`), and 127.0.0.1 unless `--allow-remote`. The URL printed
//! on stdout carries the token.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::{Config, Server};

/// A new random token (128 bits, hex).
fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for the server's token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `req` carries `token` (the header or the query).
fn authorized<B>(req: &Request<B>, token: &str) -> bool {
    let bearer = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t == token);
    let query = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.strip_prefix("token=") == Some(token))
    });
    bearer || query
}

/// Serves until the process is stopped (Ctrl-C, SIGTERM).
pub(crate) async fn serve_http(
    config: Config,
    addr: SocketAddr,
    allow_remote: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        addr.ip().is_loopback() || allow_remote,
        "--http {addr}: not a loopback address; the server would be reachable from other \
         machines (add --allow-remote if that is meant: the token then crosses the network \
         in clear)"
    );
    let token: Arc<str> = new_token()?.into();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let local = listener.local_addr()?;
    let cfg = Arc::new(config);
    let mut http = StreamableHttpServerConfig::default();
    if allow_remote {
        // The token guards it; DNS rebinding needs a browser on a loopback server.
        http = http.disable_allowed_hosts();
    }
    let service: StreamableHttpService<Server, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Server::with(Arc::clone(&cfg))),
        Arc::default(),
        http,
    );
    crate::stdout::vital(
        format!("http://{local}/mcp?token={token}"),
        "the URL it serves",
    )?;
    snapbus_bus::say!(
        "snapbus mcp: serving MCP over HTTP on {local} (requests need the token in the URL \
         printed, or `Authorization: Bearer <token>`)"
    );
    loop {
        let (stream, _) = listener.accept().await.context("accepting a connection")?;
        let (service, token) = (service.clone(), Arc::clone(&token));
        tokio::spawn(async move {
            let handle = hyper::service::service_fn(move |req: Request<Incoming>| {
                let mut service = service.clone();
                let ok = authorized(&req, &token);
                async move {
                    if !ok {
                        let body = Full::new(Bytes::from_static(
                            b"a token is needed: the URL `snapbus mcp --http` printed, or \
                              Authorization: Bearer <token>\n",
                        ))
                        .boxed();
                        let mut refused = Response::new(body);
                        *refused.status_mut() = StatusCode::UNAUTHORIZED;
                        return Ok::<_, std::convert::Infallible>(refused);
                    }
                    tower_call(&mut service, req).await
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), handle)
                .await;
        });
    }
}

/// Calls rmcp's tower service (its error type is `Infallible`).
async fn tower_call(
    service: &mut StreamableHttpService<Server, LocalSessionManager>,
    req: Request<Incoming>,
) -> Result<
    Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>,
    std::convert::Infallible,
> {
    tower_service::Service::call(service, req).await
}
