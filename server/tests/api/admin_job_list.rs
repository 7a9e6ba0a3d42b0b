//! The admin job list's search by id and its orders, and the dashboard's
//! age threshold (`GET /api/admin/jobs`, `GET /api/admin/stats`).

use std::time::Duration;

use docflow::Roles;
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::{
    fixtures::prose,
    helpers::{spawn_with, Options, TestApp},
};

/// A web process without workers: uploaded jobs stay pending.
async fn without_workers(
    configure: impl FnOnce(&mut docflow::platform::config::Config) + Send + 'static,
) -> TestApp {
    spawn_with(Options {
        roles: Roles {
            web: true,
            background: true,
            queues: vec![],
            slots: 0,
        },
        configure: Box::new(configure),
        ..Default::default()
    })
    .await
}

/// The ids of the jobs `GET /api/admin/jobs?{query}` lists, in order.
async fn listed(app: &TestApp, query: &str) -> Vec<String> {
    let page: Value = app
        .get_json(ADMIN, &format!("/api/admin/jobs?{query}"))
        .await;
    page["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test]
async fn the_admin_job_list_finds_a_job_by_the_start_of_its_id_or_of_its_documents_id() {
    let app = without_workers(|_| {}).await;
    let mut uploads = Vec::new();
    for (who, name) in [
        (ALICE, "ledger.txt"),
        (BOB, "minutes.txt"),
        (ALICE, "notes.txt"),
    ] {
        uploads.push(app.upload_ok(who, name, prose(name, 3).into_bytes()).await);
    }
    let target = &uploads[1];
    let job_id = target["job_id"].as_str().expect("job id");
    let doc_id = target["document_id"].as_str().expect("document id");
    // UUIDv7 ids of one second share their start: a prefix long enough to
    // be found in no other id.
    let unique = |id: &str, of: &str| {
        (4..=id.len())
            .map(|n| id[..n].to_string())
            .find(|p| {
                uploads
                    .iter()
                    .flat_map(|u| [u["job_id"].as_str(), u["document_id"].as_str()])
                    .flatten()
                    .filter(|other| *other != of)
                    .all(|other| !other.contains(p.as_str()))
            })
            .expect("a unique prefix")
    };
    let by_job = unique(job_id, job_id);
    assert_eq!(listed(&app, &format!("q={by_job}")).await, [job_id]);
    // The id column shows an id's last 8 digits; those find the job too.
    let tail = &job_id[job_id.len() - 8..];
    assert_eq!(listed(&app, &format!("q={tail}")).await, [job_id]);
    // Upper case, as someone may paste it.
    assert_eq!(
        listed(&app, &format!("q={}", by_job.to_uppercase())).await,
        [job_id]
    );
    let by_doc = unique(doc_id, doc_id);
    assert_eq!(listed(&app, &format!("q={by_doc}")).await, [job_id]);
    // The whole id finds it too; a filename still matches by its part.
    assert_eq!(listed(&app, &format!("q={job_id}")).await, [job_id]);
    assert_eq!(listed(&app, "q=minutes").await, [job_id]);
    // Fewer than 4 characters search filenames only.
    assert!(listed(&app, &format!("q={}", &job_id[..3]))
        .await
        .is_empty());
    // The bulk counts follow the same filter.
    let r = app
        .client(ADMIN)
        .await
        .post(app.url("/api/admin/jobs/cancel"))
        .json(&serde_json::json!({"state": "", "queue": "", "tenant": "", "q": by_doc}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 202);
    assert_eq!(r.json::<Value>().await.expect("json")["count"], 1);
    assert_eq!(app.job(BOB, job_id).await["state"], "cancelled");
    assert_eq!(app.count("jobs WHERE state = 'pending'").await, 2);
}

#[tokio::test]
async fn the_admin_job_list_sorts_by_start_time_with_paging_and_refuses_an_unknown_order() {
    let app = without_workers(|_| {}).await;
    let mut ids = Vec::new();
    for name in ["first.txt", "second.txt", "third.txt"] {
        let up = app
            .upload_ok(ALICE, name, prose(name, 3).into_bytes())
            .await;
        ids.push(up["job_id"].as_str().expect("id").to_string());
    }
    // The first started a minute ago, the third three minutes ago, the second not yet.
    for (id, ago) in [(&ids[0], 60), (&ids[2], 180)] {
        sqlx::query(
            "UPDATE jobs SET started_at = now() - $2 * interval '1 second' WHERE id = $1::uuid",
        )
        .bind(id)
        .bind(f64::from(ago))
        .execute(&app.pool)
        .await
        .expect("started_at");
    }
    let newest_enqueued: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(listed(&app, "").await, newest_enqueued);
    assert_eq!(listed(&app, "sort=enqueued").await, newest_enqueued);
    let by_start = [ids[0].clone(), ids[2].clone(), ids[1].clone()];
    assert_eq!(listed(&app, "sort=started").await, by_start);
    // Keyset paging keeps the order.
    let page: Value = app
        .get_json(ADMIN, "/api/admin/jobs?sort=started&limit=1")
        .await;
    let next = page["next_before"]
        .as_str()
        .expect("next_before")
        .to_string();
    assert_eq!(next, by_start[0]);
    assert_eq!(
        listed(&app, &format!("sort=started&limit=1&before={next}")).await,
        [by_start[1].clone()]
    );
    // Nothing has finished: the finished order falls back to the newest id.
    assert_eq!(listed(&app, "sort=finished").await, newest_enqueued);

    let r = app
        .client(ADMIN)
        .await
        .get(app.url("/api/admin/jobs?sort=size"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "invalid_sort");
}

/// `POST /api/admin/jobs/cancel` with `filter`: its status and count.
async fn cancel_matching(app: &TestApp, filter: Value) -> (u16, Value) {
    let r = app
        .client(ADMIN)
        .await
        .post(app.url("/api/admin/jobs/cancel"))
        .json(&filter)
        .send()
        .await
        .expect("post");
    (r.status().as_u16(), r.json().await.expect("json"))
}

#[tokio::test]
async fn the_time_range_and_the_failed_step_narrow_the_admin_job_list_and_its_bulk_actions() {
    let app = without_workers(|_| {}).await;
    let mut ids = Vec::new();
    for name in ["old.txt", "fresh.txt", "broken.txt"] {
        let up = app
            .upload_ok(ALICE, name, prose(name, 3).into_bytes())
            .await;
        ids.push(up["job_id"].as_str().expect("id").to_string());
    }
    let (old, fresh, broken) = (ids[0].as_str(), ids[1].as_str(), ids[2].as_str());
    // `old` was enqueued two hours ago; `broken` failed twice at embed,
    // `fresh` embedded at its first try, `old` failed once at parse.
    sqlx::query("UPDATE jobs SET enqueued_at = now() - interval '2 hours' WHERE id = $1::uuid")
        .bind(old)
        .execute(&app.pool)
        .await
        .expect("enqueued_at");
    for (id, step, state, attempts) in [
        (broken, "embed", "failed", 2),
        (fresh, "embed", "done", 1),
        (old, "parse", "pending", 1),
    ] {
        sqlx::query(
            "INSERT INTO job_steps (job_id, step, state, attempts, started_at)
             VALUES ($1::uuid, $2, $3, $4, now())",
        )
        .bind(id)
        .bind(step)
        .bind(state)
        .bind(attempts)
        .execute(&app.pool)
        .await
        .expect("job step");
    }

    assert_eq!(listed(&app, "").await, [broken, fresh, old]);
    assert_eq!(listed(&app, "since=1h").await, [broken, fresh]);
    assert_eq!(listed(&app, "since=24h").await, [broken, fresh, old]);
    assert_eq!(
        listed(&app, "since=7d&sort=enqueued").await,
        [broken, fresh, old]
    );
    assert_eq!(listed(&app, "step=embed").await, [broken]);
    assert_eq!(listed(&app, "step=parse").await, [old]);
    assert!(listed(&app, "step=parse&since=1h").await.is_empty());

    for (query, code) in [
        ("since=yesterday", "invalid_since"),
        ("step=upload", "invalid_step"),
    ] {
        let r = app
            .client(ADMIN)
            .await
            .get(app.url(&format!("/api/admin/jobs?{query}")))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 400, "{query}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], code, "{query}");
    }

    // The bulk actions match the same way: the old job is neither counted
    // nor cancelled.
    let (status, body) = cancel_matching(
        &app,
        serde_json::json!({"state": "pending", "since": "1h", "step": "embed"}),
    )
    .await;
    assert_eq!((status, &body["count"]), (202, &Value::from(1)), "{body}");
    assert_eq!(app.job(ALICE, broken).await["state"], "cancelled");
    let (status, body) = cancel_matching(&app, serde_json::json!({"since": "1h"})).await;
    assert_eq!((status, &body["count"]), (202, &Value::from(1)), "{body}");
    assert_eq!(app.job(ALICE, fresh).await["state"], "cancelled");
    assert_eq!(app.job(ALICE, old).await["state"], "pending");
    let (status, body) = cancel_matching(&app, serde_json::json!({"since": "soon"})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &Value::from("invalid_since"))
    );
    assert_eq!(app.job(ALICE, old).await["state"], "pending");
}

#[tokio::test]
async fn the_dashboard_stats_carry_the_configured_age_threshold() {
    let app = without_workers(|c| c.age_warn = Duration::from_secs(90)).await;
    let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
    for q in stats["queues"].as_array().expect("queues") {
        assert_eq!(q["age_warn_s"], 90.0, "{q}");
    }
}
