//! The MCP server of `snapbus mcp`, on the official Rust SDK (`rmcp`).
//!
//! Tools (each result typed: structured content with an output schema; bounded: at most
//! `--max-result-bytes` of JSON, with a cursor to continue where a result was cut):
//! - over the live bus: `ls`, `describe_schema`, `tail` (a bounded count and time),
//!   `summarize` (the aggregator's statistics of what the rings hold now);
//! - over files: `list_recordings`, `query_recording` (filter by schema, time, episode and
//!   field predicates; project fields; one record per episode; statistics), `episode_reports`
//!   (the files of `snapbus attach monty`);
//! - writing, refused unless `--allow-write`: `snapshot` (the rings into a recording),
//!   `attach` (start a supervised consumer).
//!
//! Resources: each schema on the bus (`snapbus://schema/<id>`: `describe_schema`'s result)
//! and each recording (`file://…`: what `snapbus inspect --json` says). Prompts:
//! `summarise_last_run` and `compare_runs`.
//!
//! Everything that touches the bus or a file runs on the runtime's blocking pool; reading the
//! rings never holds up a producer.

mod http;
mod json;
mod live;
mod query;
mod reports;
mod write;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::router::prompt::PromptRouter;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    Implementation, ListResourcesResult, PaginatedRequestParams, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData, Json, RoleServer, ServerHandler, ServiceExt, prompt, prompt_handler, prompt_router,
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cli::BusArgs;

/// What the server was started with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) bus: BusArgs,
    pub(crate) allow_write: bool,
    /// Directories of recordings (absolute).
    pub(crate) recordings: Vec<PathBuf>,
    pub(crate) max_result_bytes: usize,
    /// This binary, for the write tools and `inspect` (run as child processes).
    pub(crate) exe: PathBuf,
}

/// Serves MCP on stdin/stdout until the client closes stdin.
pub(crate) async fn serve_stdio(config: Config) -> anyhow::Result<()> {
    let service = Server::new(config)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("starting the MCP session: {e}"))?;
    service
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("MCP session: {e}"))?;
    Ok(())
}

#[derive(Clone)]
pub(crate) struct Server {
    cfg: Arc<Config>,
    tool_router: ToolRouter<Server>,
    prompt_router: PromptRouter<Server>,
}

/// A path given by the client: absolute, or relative to the first recordings directory.
pub(crate) fn resolve_recording(cfg: &Config, path: &str) -> anyhow::Result<PathBuf> {
    let p = PathBuf::from(path.strip_prefix("file://").unwrap_or(path));
    let p = match (p.is_absolute(), cfg.recordings.first()) {
        (false, Some(dir)) => dir.join(p),
        _ => p,
    };
    anyhow::ensure!(p.is_file(), "{}: no such recording", p.display());
    Ok(p)
}

pub(crate) use http::serve_http;

impl Server {
    fn new(config: Config) -> Server {
        Server::with(Arc::new(config))
    }

    /// A server of a shared configuration (one per HTTP session).
    fn with(cfg: Arc<Config>) -> Server {
        Server {
            cfg,
            tool_router: Self::tool_router(),
            prompt_router: Self::prompt_router(),
        }
    }

    /// Runs `f` on the blocking pool; its error (with causes) becomes the tool's error text.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Config) -> anyhow::Result<T> + Send + 'static,
    ) -> Result<Json<T>, String> {
        let cfg = Arc::clone(&self.cfg);
        match tokio::task::spawn_blocking(move || f(&cfg)).await {
            Ok(Ok(v)) => Ok(Json(v)),
            Ok(Err(e)) => Err(crate::bus::error_chain(&e)),
            Err(e) => Err(format!("the tool failed: {e}")),
        }
    }
}

#[tool_router]
impl Server {
    /// Producers, consumers and schemas on the bus, with rates, lag and losses.
    #[tool(annotations(read_only_hint = true))]
    async fn ls(&self) -> Result<Json<live::LsOut>, String> {
        self.blocking(live::ls).await
    }

    /// A schema's versions on the bus (descriptor, rate, records in the rings, producers) and
    /// the JSON Schema of its records.
    #[tool(annotations(read_only_hint = true))]
    async fn describe_schema(
        &self,
        Parameters(p): Parameters<live::DescribeIn>,
    ) -> Result<Json<live::DescribeOut>, String> {
        self.blocking(move |c| live::describe(c, p)).await
    }

    /// Records of a schema as they are emitted (or the oldest the rings hold): at most
    /// `count`, waiting at most `timeout_ms`. Large arrays are summarized.
    #[tool(annotations(read_only_hint = true))]
    async fn tail(
        &self,
        Parameters(p): Parameters<live::TailIn>,
    ) -> Result<Json<live::TailOut>, String> {
        self.blocking(move |c| live::tail(c, p)).await
    }

    /// Statistics (count, mean, std, min, max, last, p50, p95, p99 of every numeric field)
    /// per episode (or N steps, or T seconds) and per experiment, of what the rings hold now:
    /// the summaries `snapbus aggregate` emits.
    #[tool(annotations(read_only_hint = true))]
    async fn summarize(
        &self,
        Parameters(p): Parameters<live::SummarizeIn>,
    ) -> Result<Json<live::SummarizeOut>, String> {
        self.blocking(move |c| live::summarize(c, p)).await
    }

    /// The recordings (`.mcap`) in the server's recordings directories, newest first.
    #[tool(annotations(read_only_hint = true))]
    async fn list_recordings(&self) -> Result<Json<write::RecordingsOut>, String> {
        self.blocking(write::list_recordings).await
    }

    /// Records of a recording: filtered by schema, time, episodes and field conditions
    /// (`where`), projected to `fields`, optionally one per episode (`per_episode`: first or
    /// last), with count/mean/min/max of `stats` fields over what matched.
    #[tool(annotations(read_only_hint = true))]
    async fn query_recording(
        &self,
        Parameters(p): Parameters<query::QueryIn>,
    ) -> Result<Json<query::QueryOut>, String> {
        self.blocking(move |c| query::query(c, p)).await
    }

    /// The per-episode report files of `snapbus attach monty` (tbp.monty's `{mode}_stats.csv`
    /// rows and `{mode}_overall_stats.json`), filtered by mode, episodes and columns.
    #[tool(annotations(read_only_hint = true))]
    async fn episode_reports(
        &self,
        Parameters(p): Parameters<reports::ReportsIn>,
    ) -> Result<Json<reports::ReportsOut>, String> {
        self.blocking(move |c| reports::reports(c, p)).await
    }

    /// [write: needs `snapbus mcp --allow-write`] Writes what the rings hold now into a
    /// recording (`snapbus snapshot`).
    #[tool(annotations(read_only_hint = false, destructive_hint = false))]
    async fn snapshot(
        &self,
        Parameters(p): Parameters<write::SnapshotIn>,
    ) -> Result<Json<write::CommandOut>, String> {
        self.blocking(move |c| write::snapshot(c, p)).await
    }

    /// [write: needs `snapbus mcp --allow-write`] Starts a supervised consumer (`snapbus
    /// attach KIND ARGS…`, e.g. `recorder -o run.mcap`); returns its id.
    #[tool(annotations(read_only_hint = false, destructive_hint = false))]
    async fn attach(
        &self,
        Parameters(p): Parameters<write::AttachIn>,
    ) -> Result<Json<write::CommandOut>, String> {
        self.blocking(move |c| write::attach(c, p)).await
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct LastRunIn {
    /// A recording to summarise (default: the newest one).
    recording: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct CompareIn {
    /// The first recording.
    a: String,
    /// The second recording.
    b: String,
}

#[prompt_router]
impl Server {
    /// Summarise the last run: what ran, how each episode went, what was lost.
    #[prompt(name = "summarise_last_run")]
    async fn summarise_last_run(&self, Parameters(p): Parameters<LastRunIn>) -> Vec<PromptMessage> {
        let which = p.recording.map_or_else(
            || "the newest recording (`list_recordings`)".to_owned(),
            |r| format!("the recording {r}"),
        );
        vec![PromptMessage::new_text(
            Role::User,
            format!(
                "Summarise {which}. Read its resource (what `snapbus inspect` says: producers, \
                 schemas, counts, losses), then use `query_recording` with `per_episode: \
                 \"last\"` and `stats` on the per-episode schema to describe how the episodes \
                 went (outcomes, the fields that changed most), and name any loss or damage. \
                 If the experiment is still running, `ls` and `summarize` give its live state."
            ),
        )]
    }

    /// Compare two runs: outcomes and statistics side by side, and what differs.
    #[prompt(name = "compare_runs")]
    async fn compare_runs(&self, Parameters(p): Parameters<CompareIn>) -> Vec<PromptMessage> {
        vec![PromptMessage::new_text(
            Role::User,
            format!(
                "Compare the runs recorded in {} and {}. For each, read the recording resource \
                 (schemas, counts, producers, losses), then call `query_recording` with the \
                 same `schema`, `per_episode` and `stats` on both. Report the differences in \
                 outcomes and in the statistics of the main fields, as a table, and say \
                 whether losses make either comparison unreliable.",
                p.a, p.b
            ),
        )]
    }
}

#[tool_handler(router = self.tool_router)]
#[prompt_handler(router = self.prompt_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("snapbus", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "snapbus: a running experiment's telemetry (the live bus) and its recordings. \
             Start with `ls` (what runs now) or `list_recordings`. Results are cut at a byte \
             budget: pass `next_cursor` back as `cursor` for the rest. `snapshot` and `attach` \
             need the server started with --allow-write.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let cfg = Arc::clone(&self.cfg);
        let items = tokio::task::spawn_blocking(move || write::resources(&cfg))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListResourcesResult::with_all_items(items))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let cfg = Arc::clone(&self.cfg);
        let uri = request.uri.clone();
        let text = tokio::task::spawn_blocking(move || write::read_resource(&cfg, &uri))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .map_err(|e| ErrorData::resource_not_found(crate::bus::error_chain(&e), None))?;
        let contents = ResourceContents::text(text, request.uri).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// A resource entry.
pub(crate) fn resource(uri: String, name: String, description: String) -> Resource {
    Resource::new(uri, name)
        .with_description(description)
        .with_mime_type("application/json")
}
