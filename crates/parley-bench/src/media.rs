//! The media scenario (docs/MEDIA.md; docs/PERFORMANCE.md, "Attachments: `media`"), three
//! measurements in one run:
//!
//! 1. Throughput of `POST /v1/media` and `GET /v1/media/{id}` through the SDK, for each file
//!    size of `--media-sizes-mib` at each count of uploads in flight of `--media-in-flight`,
//!    against a raw baseline on the same disk in the same run: the same bytes written to files
//!    beside `--out` (`write_all` then `sync_all`, what `cp` and an fsync do) and read back, at
//!    the same concurrency. Every file is distinct random bytes, so content addressing stores
//!    each once and nothing is deduplicated or compressed; every download is compared with what
//!    was uploaded.
//! 2. The server's resident memory (`VmRSS` of `--server-pid`, sampled every
//!    [`RSS_SAMPLE_INTERVAL_MS`]) while `--media-rss-uploads` uploads of `--media-rss-mib` run
//!    at once: an upload is streamed to disk, so the peak over the idle level stays far below
//!    the bytes in flight. It runs first, on the server as it was started, before the
//!    throughput runs have grown its allocator's pools.
//! 3. The media sweep's cost: `--media-sweep-uploads` small uploads no message names are
//!    registered in a scratch store of the bench's own (a PostgreSQL database created on
//!    `--database-url` and dropped afterwards, else an embedded store beside `--out`) with
//!    blobs on the same disk, then `sweep_once` rounds, as the server's sweep task runs them
//!    back to back, delete them; media rows and blobs deleted per second.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use parley_client::{Client, ClientOptions};
use parley_domain::{MediaId, UserId};
use parley_media::MediaBackend;
use parley_store::pg::PgStore;
use parley_store::sqlite::SqliteStore;
use parley_store::{NewMedia, Store};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

use crate::fixtures::{run_tag, user_with_device};
use crate::progress::phase;
use crate::report::{micros_histogram, percentiles_ms, publish, record};
use crate::rss::process_rss_bytes;
use crate::target::Target;
use crate::BenchArgs;

/// Bytes in a MiB.
const MIB: u64 = 1024 * 1024;
/// The goal of upload and download throughput through the server, as a share of the raw
/// disk's in the same run.
const THROUGHPUT_RATIO_GOAL: f64 = 0.7;
/// Interval between two reads of the server's resident memory during the concurrent uploads.
const RSS_SAMPLE_INTERVAL_MS: u64 = 50;
/// Most the server's resident memory may grow over its idle level while the concurrent
/// uploads run, in bytes: a small fraction of the default 16 × 25 MiB in flight.
const RSS_GROWTH_BYTES_MAX: u64 = 64 * MIB;
/// Pause before the idle memory is read, so the answer to the setup requests is behind it.
const RSS_SETTLE_MS: u64 = 500;
/// Time limit of one upload or download: 16 files of 25 MiB at once on a slow disk take
/// seconds, far past the SDK's default.
const MEDIA_REQUEST_TIMEOUT_MS: u64 = 300_000;
/// Registrations in flight while the sweep's uploads are made.
const SWEEP_REGISTER_IN_FLIGHT: usize = 16;
/// PostgreSQL connections of the sweep's scratch store: as many as registrations in flight.
const SWEEP_POOL_SIZE: u32 = 16;
/// How long before the sweep the scratch uploads are stamped, in ms; the sweep's grace
/// ([`SWEEP_GRACE_MS`]) is shorter, so every one of them is due.
const SWEEP_BACKDATE_MS: i64 = 60_000;
/// The grace period the sweep rounds are run with, in ms.
const SWEEP_GRACE_MS: u64 = 1_000;
/// Prefix of the scratch database of the sweep on `--database-url`.
const SCRATCH_DB_PREFIX: &str = "parley_bench_media_";

/// The options of the media scenario.
#[derive(Args, Debug, Clone)]
pub struct MediaArgs {
    /// File sizes of the throughput runs, in MiB (media).
    #[arg(long = "media-sizes-mib", value_delimiter = ',', default_values_t = [1u64, 10])]
    pub sizes_mib: Vec<u64>,
    /// Uploads (then downloads) in flight of the throughput runs, each with each size (media).
    #[arg(long = "media-in-flight", value_delimiter = ',', default_values_t = [1usize, 16])]
    pub in_flight: Vec<usize>,
    /// Files of each throughput run (media).
    #[arg(long = "media-files", default_value_t = 32)]
    pub files: usize,
    /// Uploads at once while the server's memory is sampled (media; needs --server-pid).
    #[arg(long = "media-rss-uploads", default_value_t = 16)]
    pub rss_uploads: usize,
    /// Size of each of those uploads, in MiB (media).
    #[arg(long = "media-rss-mib", default_value_t = 25)]
    pub rss_mib: u64,
    /// Unreferenced uploads the sweep deletes (media).
    #[arg(long = "media-sweep-uploads", default_value_t = 2_000)]
    pub sweep_uploads: usize,
    /// Size of each of them, in bytes (media).
    #[arg(long = "media-sweep-bytes", default_value_t = 4_096)]
    pub sweep_bytes: usize,
}

pub async fn run(args: &BenchArgs, target: &Target) -> Result<()> {
    let m = &args.media;
    if m.sizes_mib.is_empty() || m.sizes_mib.contains(&0) {
        bail!("--media-sizes-mib must name sizes of at least 1 MiB");
    }
    if m.in_flight.is_empty() || m.in_flight.contains(&0) || m.files == 0 {
        bail!("--media-in-flight and --media-files must be positive");
    }
    target.check_ready().await?;
    let load_before = load_average();
    let tag = run_tag(8);
    let token = user_with_device(&target.admin()?, &format!("media-{tag}")).await?;
    let client = Client::with_options(
        target.url(),
        &token,
        ClientOptions {
            request_timeout_ms: MEDIA_REQUEST_TIMEOUT_MS,
            ..ClientOptions::default()
        },
    )?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let rss = rss_run(args, &client, &mut rng).await?;
    let raw_dir = args.out.join(format!("media-raw-{tag}"));
    std::fs::create_dir_all(&raw_dir).with_context(|| format!("creating {}", raw_dir.display()))?;
    let mut runs = Vec::new();
    for &size_mib in &m.sizes_mib {
        for &in_flight in &m.in_flight {
            let cell = Cell {
                size: size_mib * MIB,
                in_flight,
                files: m.files,
            };
            runs.push(throughput_run(&client, &raw_dir, &cell, &mut rng).await?);
        }
    }
    let _ = std::fs::remove_dir_all(&raw_dir);
    let sweep = sweep_run(args, &tag, &mut rng).await?;
    let report = report(&runs, rss, sweep, load_before, load_average());
    println!("{}", summary(&report));
    publish(&args.out, &report)?;
    let mismatches = report["download_mismatches"].as_u64().unwrap_or(0);
    if mismatches > 0 {
        bail!("{mismatches} downloads differ from what was uploaded");
    }
    if report["sweep"]["blobs_left"].as_u64().unwrap_or(0) > 0 {
        bail!("the sweep left blobs on disk that no upload names");
    }
    Ok(())
}

/// One throughput run: files of one size at one count in flight.
struct Cell {
    size: u64,
    in_flight: usize,
    files: usize,
}

/// The timings of one direction (upload or download) of one path (server or raw).
struct Timed {
    wall: Duration,
    each: Histogram<u64>,
}

impl Timed {
    fn mib_per_s(&self, bytes: u64) -> f64 {
        bytes as f64 / MIB as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs `f(i)` for `0..n`, at most `k` at once (a slot is refilled as soon as any job ends);
/// answers the results in the order of `i`, with the wall time and each job's time.
async fn timed<T, F, Fut>(n: usize, k: usize, f: F) -> Result<(Timed, Vec<T>)>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let started = Instant::now();
    let mut done: Vec<(usize, Duration, T)> = futures::stream::iter(0..n)
        .map(|i| {
            let job = f(i);
            async move {
                let t = Instant::now();
                let out = job.await?;
                Ok::<_, anyhow::Error>((i, t.elapsed(), out))
            }
        })
        .buffer_unordered(k.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let wall = started.elapsed();
    done.sort_by_key(|(i, _, _)| *i);
    let mut each = micros_histogram()?;
    let mut out = Vec::with_capacity(n);
    for (_, d, t) in done {
        record(&mut each, d);
        out.push(t);
    }
    Ok((Timed { wall, each }, out))
}

/// `len` random bytes: incompressible, and distinct from every other file's.
fn random_bytes(rng: &mut StdRng, len: u64) -> Result<Bytes> {
    let mut v = vec![0u8; usize::try_from(len).context("a file larger than memory")?];
    rng.fill_bytes(&mut v);
    Ok(Bytes::from(v))
}

/// What `cp` and an fsync do: the bytes written to a new file, synced.
async fn raw_write(path: PathBuf, bytes: Bytes) -> Result<()> {
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&path)?;
        file.write_all(&bytes)?;
        file.sync_all()
    })
    .await?
    .context("writing a raw file")
}

async fn raw_read(path: PathBuf) -> Result<Bytes> {
    let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
        .await?
        .context("reading a raw file")?;
    Ok(Bytes::from(bytes))
}

/// One throughput run: raw writes, uploads, raw reads, downloads; every download is compared
/// with what was uploaded.
async fn throughput_run(
    client: &Client,
    raw_dir: &Path,
    cell: &Cell,
    rng: &mut StdRng,
) -> Result<Value> {
    let size_mib = cell.size / MIB;
    phase(&format!(
        "{} files of {size_mib} MiB, {} in flight: raw write, upload, raw read, download",
        cell.files, cell.in_flight
    ));
    let payloads = (0..cell.files)
        .map(|_| random_bytes(rng, cell.size))
        .collect::<Result<Vec<_>>>()?;
    let path = |i: usize| raw_dir.join(format!("{size_mib}mib-{}-{i}", cell.in_flight));
    let (raw_up, _) = timed(cell.files, cell.in_flight, |i| {
        raw_write(path(i), payloads[i].clone())
    })
    .await?;
    let (server_up, media) = timed(cell.files, cell.in_flight, |i| {
        let body = payloads[i].clone();
        let name = format!("bench-{size_mib}mib-{i}.bin");
        async move {
            let m = client.upload(body, Some(&name), None).await?;
            Ok(m)
        }
    })
    .await
    .context("uploading")?;
    let (raw_down, raw_read_back) =
        timed(cell.files, cell.in_flight, |i| raw_read(path(i))).await?;
    let (server_down, downloaded) = timed(cell.files, cell.in_flight, |i| {
        let id = media[i].media_id.clone();
        async move { Ok(client.download(&id).await?) }
    })
    .await
    .context("downloading")?;
    for i in 0..cell.files {
        let _ = std::fs::remove_file(path(i));
    }
    let mismatches = downloaded
        .iter()
        .zip(&payloads)
        .filter(|(got, sent)| got != sent)
        .count();
    let sizes_wrong = media
        .iter()
        .filter(|m| u64::try_from(m.size).ok() != Some(cell.size))
        .count();
    let raw_wrong = raw_read_back
        .iter()
        .zip(&payloads)
        .filter(|(got, sent)| got != sent)
        .count();
    if raw_wrong > 0 {
        bail!("{raw_wrong} raw files read back differ from what was written");
    }
    let bytes = cell.size * cell.files as u64;
    let direction = |server: &Timed, raw: &Timed| {
        let (s, r) = (server.mib_per_s(bytes), raw.mib_per_s(bytes));
        let ratio = s / r.max(1e-9);
        json!({
            "server_mib_per_s": s,
            "raw_mib_per_s": r,
            "ratio_server_to_raw": ratio,
            "held": ratio >= THROUGHPUT_RATIO_GOAL,
            "server_ms": percentiles_ms(&server.each),
            "raw_ms": percentiles_ms(&raw.each),
        })
    };
    Ok(json!({
        "size_mib": size_mib,
        "in_flight": cell.in_flight,
        "files": cell.files,
        "bytes": bytes,
        "upload": direction(&server_up, &raw_up),
        "download": direction(&server_down, &raw_down),
        "downloads_verified": cell.files - mismatches,
        "download_mismatches": mismatches + sizes_wrong,
    }))
}

/// The server's resident memory before and during concurrent large uploads; `skipped` without
/// `--server-pid`.
async fn rss_run(args: &BenchArgs, client: &Client, rng: &mut StdRng) -> Result<Value> {
    let m = &args.media;
    let Some(pid) = args.large_group.server_pid else {
        return Ok(json!({
            "skipped": "no --server-pid: the server's memory is read from /proc/<pid>/status",
        }));
    };
    if m.rss_uploads == 0 || m.rss_mib == 0 {
        return Ok(json!({"skipped": "--media-rss-uploads or --media-rss-mib is 0"}));
    }
    let size = m.rss_mib * MIB;
    phase(&format!(
        "{} uploads of {} MiB at once, the server's memory sampled every {RSS_SAMPLE_INTERVAL_MS} ms",
        m.rss_uploads, m.rss_mib
    ));
    let payloads = (0..m.rss_uploads)
        .map(|_| random_bytes(rng, size))
        .collect::<Result<Vec<_>>>()?;
    tokio::time::sleep(Duration::from_millis(RSS_SETTLE_MS)).await;
    let before = process_rss_bytes(pid).context("reading the server's /proc/<pid>/status")?;
    let peak = Arc::new(AtomicU64::new(before));
    let samples = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (peak, samples, stop) = (peak.clone(), samples.clone(), stop.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(RSS_SAMPLE_INTERVAL_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if let Some(rss) = process_rss_bytes(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                    samples.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let started = Instant::now();
    let uploads = futures::future::join_all(payloads.iter().enumerate().map(|(i, p)| {
        let name = format!("bench-rss-{i}.bin");
        async move { client.upload(p.clone(), Some(&name), None).await }
    }))
    .await;
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    if let Some(rss) = process_rss_bytes(pid) {
        peak.fetch_max(rss, Ordering::Relaxed);
        samples.fetch_add(1, Ordering::Relaxed);
    }
    let media = uploads
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .context("a concurrent large upload failed")?;
    if let Some(bad) = media
        .iter()
        .find(|m| u64::try_from(m.size).ok() != Some(size))
    {
        bail!("an upload of {size} bytes was stored as {} bytes", bad.size);
    }
    let peak = peak.load(Ordering::Relaxed);
    let growth = peak.saturating_sub(before);
    let in_flight = size * m.rss_uploads as u64;
    Ok(json!({
        "uploads": m.rss_uploads,
        "upload_mib": m.rss_mib,
        "bytes_in_flight": in_flight,
        "wall_s": wall.as_secs_f64(),
        "samples": samples.load(Ordering::Relaxed),
        "sample_interval_ms": RSS_SAMPLE_INTERVAL_MS,
        "server_rss_before_bytes": before,
        "server_rss_peak_bytes": peak,
        "server_rss_growth_bytes": growth,
        "growth_to_bytes_in_flight": growth as f64 / in_flight as f64,
        "growth_max_bytes": RSS_GROWTH_BYTES_MAX,
        "held": growth < RSS_GROWTH_BYTES_MAX,
    }))
}

/// A scratch PostgreSQL database of the sweep run, dropped by [`ScratchDb::drop_db`].
struct ScratchDb {
    server: PgConnectOptions,
    name: String,
    /// The store's pool, closed before the database is dropped.
    pool: Option<sqlx::PgPool>,
}

impl ScratchDb {
    async fn create(url: &str, tag: &str) -> Result<(ScratchDb, PgConnectOptions)> {
        let server = PgConnectOptions::from_str(url).context("parsing --database-url")?;
        let name = format!("{SCRATCH_DB_PREFIX}{tag}");
        let mut conn = server
            .connect()
            .await
            .context("connecting to --database-url")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .with_context(|| format!("creating the scratch database {name}"))?;
        let _ = conn.close().await;
        let opts = server.clone().database(&name);
        Ok((
            ScratchDb {
                server,
                name,
                pool: None,
            },
            opts,
        ))
    }

    async fn drop_db(self) {
        if let Some(pool) = &self.pool {
            pool.close().await;
        }
        let dropped = async {
            let mut conn = self.server.connect().await?;
            sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut conn)
            .await?;
            conn.close().await
        };
        if let Err(e) = dropped.await {
            tracing::warn!(database = %self.name, error = %e, "the scratch database was not dropped");
        }
    }
}

/// The sweep's cost on a scratch store: on PostgreSQL with --database-url, else embedded.
async fn sweep_run(args: &BenchArgs, tag: &str, rng: &mut StdRng) -> Result<Value> {
    let m = &args.media;
    let dir = args.out.join(format!("media-sweep-{tag}"));
    let (store, scratch): (Box<dyn Store>, Option<ScratchDb>) = match &args.database_url {
        Some(url) => {
            let (mut scratch, opts) = ScratchDb::create(url, tag).await?;
            let pool = PgPoolOptions::new()
                .max_connections(SWEEP_POOL_SIZE)
                .connect_with(opts)
                .await;
            match pool {
                Ok(pool) => {
                    scratch.pool = Some(pool.clone());
                    (Box::new(PgStore::from_pool(pool)), Some(scratch))
                }
                Err(e) => {
                    scratch.drop_db().await;
                    return Err(e).context("connecting to the scratch database");
                }
            }
        }
        None => (
            Box::new(
                SqliteStore::open_dir(&dir.join("store"))
                    .await
                    .context("opening the scratch embedded store")?,
            ),
            None,
        ),
    };
    let kind = if scratch.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    let outcome = sweep_on(&*store, &dir, m, rng).await;
    drop(store);
    if let Some(scratch) = scratch {
        scratch.drop_db().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = outcome?;
    report["store"] = json!(kind);
    Ok(report)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn sweep_on(store: &dyn Store, dir: &Path, m: &MediaArgs, rng: &mut StdRng) -> Result<Value> {
    store
        .migrate()
        .await
        .context("migrating the scratch store")?;
    let media_dir = dir.join("media");
    std::fs::create_dir_all(&media_dir)
        .with_context(|| format!("creating {}", media_dir.display()))?;
    let (backend, _) = MediaBackend::open_fs(&media_dir)
        .await
        .context("opening the scratch media directory")?;
    let n = m.sweep_uploads;
    phase(&format!(
        "the sweep: {n} unreferenced uploads of {} B registered, then deleted",
        m.sweep_bytes
    ));
    let payloads = (0..n)
        .map(|_| random_bytes(rng, m.sweep_bytes as u64))
        .collect::<Result<Vec<_>>>()?;
    let uploader = UserId::from_trusted("bench-sweep".to_owned());
    let stamped = now_ms() - SWEEP_BACKDATE_MS;
    let (registered, _) = timed(n, SWEEP_REGISTER_IN_FLIGHT, |i| {
        let body = futures::stream::iter([Ok::<_, Infallible>(payloads[i].clone())]);
        let (backend, uploader) = (&backend, &uploader);
        async move {
            let staged = backend.stage(body, None, u64::MAX).await?;
            let new = NewMedia {
                media_id: MediaId::new_random(),
                uploader: uploader.clone(),
                sha256: staged.id.as_str().to_owned(),
                size: i64::try_from(staged.size)?,
                content_type: staged.content_type.to_owned(),
                inline_safe: staged.inline_safe,
                filename: None,
                width: None,
                height: None,
                thumbnail: None,
                now_ms: stamped,
                quota_bytes: None,
            };
            store.register_media(&new).await?;
            backend.commit(staged).await?;
            Ok(())
        }
    })
    .await
    .context("registering the sweep's uploads")?;
    let blobs_before = count_files(&media_dir.join("blobs"))?;
    let grace = Duration::from_millis(SWEEP_GRACE_MS);
    let mut rounds = micros_histogram()?;
    let (mut media_deleted, mut blobs_deleted) = (0u64, 0u64);
    let started = Instant::now();
    let mut sweeping = Duration::ZERO;
    loop {
        let t = Instant::now();
        let r = parley_server::media::sweep::sweep_once(store, &backend, grace)
            .await
            .context("a sweep round")?;
        if r.media_deleted + r.blobs_deleted == 0 {
            break;
        }
        record(&mut rounds, t.elapsed());
        media_deleted += r.media_deleted;
        blobs_deleted += r.blobs_deleted;
        sweeping = started.elapsed();
    }
    let blobs_left = count_files(&media_dir.join("blobs"))?;
    let secs = sweeping.as_secs_f64().max(1e-9);
    Ok(json!({
        "uploads": n,
        "upload_bytes": m.sweep_bytes,
        "register_per_s": n as f64 / registered.wall.as_secs_f64().max(1e-9),
        "blobs_on_disk_before": blobs_before,
        "media_deleted": media_deleted,
        "blobs_deleted": blobs_deleted,
        "blobs_left": blobs_left,
        "rounds": rounds.len(),
        "round_batch_max": parley_server::media::sweep::SWEEP_BATCH_LEN_MAX,
        "round_ms": percentiles_ms(&rounds),
        "sweep_s": sweeping.as_secs_f64(),
        "media_per_s": media_deleted as f64 / secs,
        "blobs_per_s": blobs_deleted as f64 / secs,
    }))
}

/// Files below `dir`, recursively; 0 when it does not exist.
fn count_files(dir: &Path) -> Result<u64> {
    if !dir.exists() {
        return Ok(0);
    }
    let mut n = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            n += count_files(&entry.path())?;
        } else {
            n += 1;
        }
    }
    Ok(n)
}

/// The 1-minute load average of the machine, from `/proc/loadavg`.
pub(crate) fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn report(
    runs: &[Value],
    rss: Value,
    sweep: Value,
    load_before: Option<f64>,
    load_after: Option<f64>,
) -> Value {
    let ratios = |dir: &str| {
        runs.iter()
            .filter_map(|r| r[dir]["ratio_server_to_raw"].as_f64())
            .collect::<Vec<_>>()
    };
    let min = |v: Vec<f64>| v.into_iter().reduce(f64::min);
    let (up, down) = (min(ratios("upload")), min(ratios("download")));
    let sum = |k: &str| runs.iter().filter_map(|r| r[k].as_u64()).sum::<u64>();
    json!({
        "scenario": "media",
        "load_average_1m_before": load_before,
        "load_average_1m_after": load_after,
        "ratio_goal": THROUGHPUT_RATIO_GOAL,
        "upload_ratio_min": up,
        "download_ratio_min": down,
        "upload_ratio_held": up.is_some_and(|r| r >= THROUGHPUT_RATIO_GOAL),
        "download_ratio_held": down.is_some_and(|r| r >= THROUGHPUT_RATIO_GOAL),
        "downloads_verified": sum("downloads_verified"),
        "download_mismatches": sum("download_mismatches"),
        "throughput": runs,
        "rss": rss,
        "sweep": sweep,
    })
}

/// The readable end-of-run summary.
fn summary(r: &Value) -> String {
    let f = |v: &Value| v.as_f64().map_or("-".to_owned(), |x| format!("{x:.1}"));
    let ratio = |v: &Value| v.as_f64().map_or("-".to_owned(), |x| format!("{x:.2}"));
    let mut out = vec![format!(
        "{:>5} {:>9} | {:>10} {:>10} {:>6} {:>9} | {:>10} {:>10} {:>6} {:>9}",
        "MiB",
        "in flight",
        "up MiB/s",
        "raw MiB/s",
        "ratio",
        "p99 ms",
        "down MiB/s",
        "raw MiB/s",
        "ratio",
        "p99 ms"
    )];
    for run in r["throughput"].as_array().into_iter().flatten() {
        let (u, d) = (&run["upload"], &run["download"]);
        out.push(format!(
            "{:>5} {:>9} | {:>10} {:>10} {:>6} {:>9} | {:>10} {:>10} {:>6} {:>9}",
            run["size_mib"],
            run["in_flight"],
            f(&u["server_mib_per_s"]),
            f(&u["raw_mib_per_s"]),
            ratio(&u["ratio_server_to_raw"]),
            f(&u["server_ms"]["p99"]),
            f(&d["server_mib_per_s"]),
            f(&d["raw_mib_per_s"]),
            ratio(&d["ratio_server_to_raw"]),
            f(&d["server_ms"]["p99"]),
        ));
    }
    out.push(format!(
        "ratio goal {}: upload held {}, download held {}; downloads verified {}, mismatches {}",
        r["ratio_goal"],
        r["upload_ratio_held"],
        r["download_ratio_held"],
        r["downloads_verified"],
        r["download_mismatches"]
    ));
    let rss = &r["rss"];
    let mib = |v: &Value| {
        v.as_u64()
            .map_or("-".to_owned(), |b| format!("{:.1}", b as f64 / MIB as f64))
    };
    match rss["skipped"].as_str() {
        Some(why) => out.push(format!("server memory: not measured ({why})")),
        None => out.push(format!(
            "server memory, {} uploads of {} MiB at once: {} MiB before, {} MiB peak, +{} MiB (limit {} MiB, held {})",
            rss["uploads"],
            rss["upload_mib"],
            mib(&rss["server_rss_before_bytes"]),
            mib(&rss["server_rss_peak_bytes"]),
            mib(&rss["server_rss_growth_bytes"]),
            mib(&rss["growth_max_bytes"]),
            rss["held"]
        )),
    }
    let s = &r["sweep"];
    out.push(format!(
        "sweep ({}): {} media rows and {} blobs in {} s over {} rounds: {} rows/s, {} blobs/s; {} blobs left",
        s["store"].as_str().unwrap_or("?"),
        s["media_deleted"],
        s["blobs_deleted"],
        ratio(&s["sweep_s"]),
        s["rounds"],
        f(&s["media_per_s"]),
        f(&s["blobs_per_s"]),
        s["blobs_left"],
    ));
    out.join("\n")
}
