//! Every Prometheus metric docflow exposes, declared in one place with its
//! help text (DESIGN §7, prefix `docflow_`). Counters and histograms are
//! observed where things happen; gauges are set by the sampler, so a scrape
//! never queries PostgreSQL.

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Seconds, from a tenth of a second to an hour: job latencies and step durations.
const SECONDS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// HTTP request durations: a millisecond to ten seconds.
const HTTP_SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub queue_depth: IntGaugeVec,
    pub queue_unacked: IntGaugeVec,
    pub queue_consumers: IntGaugeVec,
    pub jobs: IntGaugeVec,
    pub job_age_p99_seconds: GaugeVec,
    pub job_latency_seconds: HistogramVec,
    pub step_duration_seconds: HistogramVec,
    pub step_runs_total: IntCounterVec,
    pub step_failures_total: IntCounterVec,
    pub job_retries: Histogram,
    pub dead_letters: IntGauge,
    pub outbox_pending: IntGauge,
    pub outbox_oldest_seconds: Gauge,
    pub uploads_total: IntCounterVec,
    pub http_request_duration_seconds: HistogramVec,
    pub sse_clients: IntGauge,
    pub embed_requests_total: IntCounterVec,
    pub embed_seconds: Histogram,
    pub queue_paused: IntGaugeVec,
    pub dependency_up: IntGaugeVec,
    pub reconciled_total: IntCounter,
    pub broker_failovers_total: IntCounter,
    pub broker_published_total: IntCounterVec,
    pub webhook_deliveries_total: IntCounterVec,
    pub webhook_pending: IntGauge,
    pub reembed_pending: IntGauge,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("docflow")
}

fn hopts(name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace("docflow")
        .buckets(buckets.to_vec())
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let m = Self {
            registry: Registry::new(),
            queue_depth: IntGaugeVec::new(
                opts("queue_depth", "Ready messages on the work queue."),
                &["queue"],
            )?,
            queue_unacked: IntGaugeVec::new(
                opts(
                    "queue_unacked",
                    "Messages delivered to workers and not yet acked.",
                ),
                &["queue"],
            )?,
            queue_consumers: IntGaugeVec::new(
                opts("queue_consumers", "Consumers of the work queue."),
                &["queue"],
            )?,
            jobs: IntGaugeVec::new(opts("jobs", "Jobs by state."), &["state"])?,
            job_age_p99_seconds: GaugeVec::new(
                opts(
                    "job_age_p99_seconds",
                    "99th percentile of now - enqueued_at over the queue's unfinished jobs.",
                ),
                &["queue"],
            )?,
            job_latency_seconds: HistogramVec::new(
                hopts("job_latency_seconds", "Time from enqueue to done.", SECONDS),
                &["queue"],
            )?,
            step_duration_seconds: HistogramVec::new(
                hopts(
                    "step_duration_seconds",
                    "Duration of one step run.",
                    SECONDS,
                ),
                &["step"],
            )?,
            step_runs_total: IntCounterVec::new(
                opts("step_runs_total", "Step runs started."),
                &["step"],
            )?,
            step_failures_total: IntCounterVec::new(
                opts("step_failures_total", "Step runs that failed, by kind."),
                &["step", "kind"],
            )?,
            job_retries: Histogram::with_opts(hopts(
                "job_retries",
                "Retries spent per finished job.",
                &[0.0, 1.0, 2.0, 3.0],
            ))?,
            dead_letters: IntGauge::with_opts(opts("dead_letters", "Unresolved dead letters."))?,
            outbox_pending: IntGauge::with_opts(opts(
                "outbox_pending",
                "Outbox rows not yet published.",
            ))?,
            outbox_oldest_seconds: Gauge::with_opts(opts(
                "outbox_oldest_seconds",
                "Age of the oldest due outbox row not yet published.",
            ))?,
            uploads_total: IntCounterVec::new(
                opts("uploads_total", "Uploads by outcome."),
                &["outcome"],
            )?,
            http_request_duration_seconds: HistogramVec::new(
                hopts(
                    "http_request_duration_seconds",
                    "HTTP request duration by matched route and status.",
                    HTTP_SECONDS,
                ),
                &["route", "status"],
            )?,
            sse_clients: IntGauge::with_opts(opts(
                "sse_clients",
                "Connected SSE clients of this process.",
            ))?,
            webhook_deliveries_total: IntCounterVec::new(
                opts(
                    "webhook_deliveries_total",
                    "Webhook delivery attempts by outcome: delivered, retry, failed (given up), refused (an internal target).",
                ),
                &["outcome"],
            )?,
            webhook_pending: IntGauge::with_opts(opts(
                "webhook_pending",
                "Webhook deliveries waiting for a first or further attempt.",
            ))?,
            reembed_pending: IntGauge::with_opts(opts(
                "reembed_pending",
                "Documents still holding vectors of an earlier embedding model, to re-embed.",
            ))?,
            embed_requests_total: IntCounterVec::new(
                opts("embed_requests_total", "Embedding requests by outcome."),
                &["outcome"],
            )?,
            embed_seconds: Histogram::with_opts(hopts(
                "embed_seconds",
                "Time to embed one batch of chunks (the model in process, or a call to the provider), whatever its outcome.",
                &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0],
            ))?,
            queue_paused: IntGaugeVec::new(
                opts(
                    "queue_paused",
                    "1 while an admin has paused the queue (workers take nothing from it), else 0.",
                ),
                &["queue"],
            )?,
            dependency_up: IntGaugeVec::new(
                opts(
                    "dependency_up",
                    "1 while this process's circuit breaker for the dependency is closed, 0 while it is open.",
                ),
                &["dependency"],
            )?,
            reconciled_total: IntCounter::with_opts(opts(
                "reconciled_total",
                "Jobs whose lost message the reconciler re-published.",
            ))?,
            broker_failovers_total: IntCounter::with_opts(opts(
                "broker_failovers_total",
                "Reconnections of this process to another RabbitMQ node than the one it lost.",
            ))?,
            broker_published_total: IntCounterVec::new(
                opts(
                    "broker_published_total",
                    "Messages this process published and RabbitMQ confirmed, by exchange.",
                ),
                &["exchange"],
            )?,
        };
        let r = &m.registry;
        r.register(Box::new(m.queue_depth.clone()))?;
        r.register(Box::new(m.queue_unacked.clone()))?;
        r.register(Box::new(m.queue_consumers.clone()))?;
        r.register(Box::new(m.jobs.clone()))?;
        r.register(Box::new(m.job_age_p99_seconds.clone()))?;
        r.register(Box::new(m.job_latency_seconds.clone()))?;
        r.register(Box::new(m.step_duration_seconds.clone()))?;
        r.register(Box::new(m.step_runs_total.clone()))?;
        r.register(Box::new(m.step_failures_total.clone()))?;
        r.register(Box::new(m.job_retries.clone()))?;
        r.register(Box::new(m.dead_letters.clone()))?;
        r.register(Box::new(m.outbox_pending.clone()))?;
        r.register(Box::new(m.outbox_oldest_seconds.clone()))?;
        r.register(Box::new(m.uploads_total.clone()))?;
        r.register(Box::new(m.http_request_duration_seconds.clone()))?;
        r.register(Box::new(m.sse_clients.clone()))?;
        r.register(Box::new(m.embed_requests_total.clone()))?;
        r.register(Box::new(m.embed_seconds.clone()))?;
        r.register(Box::new(m.queue_paused.clone()))?;
        r.register(Box::new(m.dependency_up.clone()))?;
        r.register(Box::new(m.reconciled_total.clone()))?;
        r.register(Box::new(m.broker_failovers_total.clone()))?;
        r.register(Box::new(m.broker_published_total.clone()))?;
        r.register(Box::new(m.webhook_deliveries_total.clone()))?;
        r.register(Box::new(m.webhook_pending.clone()))?;
        r.register(Box::new(m.reembed_pending.clone()))?;
        Ok(m)
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
