//! Retrieval as a user meets it: an exact phrase in a document of any
//! length, a question that shares no word with its answer (with the real
//! model), accents, stop words, snippets that name their PDF page, and a
//! small tenant among a large one on the vector index.

use std::time::Duration;

use docflow::{
    pipeline::{minilm, vectors::Model},
    platform::config::EmbedderKind,
    Roles,
};
use serde_json::Value;
use uuid::Uuid;

use crate::fixtures::{ALICE, BOB};
use crate::{
    helpers::{queues, spawn_with, Options, TestApp},
    sample_pdf,
};

async fn app(embedder: EmbedderKind) -> TestApp {
    spawn_with(Options {
        roles: Roles::all(queues(&["high=4", "normal=2", "slow=1"])),
        configure: Box::new(move |c| c.embedder = embedder),
        ..Default::default()
    })
    .await
}

async fn search(app: &TestApp, who: &str, q: &str, k: usize) -> Vec<Value> {
    let q = url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>();
    app.get_json(who, &format!("/api/search?q={q}&k={k}")).await
}

/// Uploads every file as alice, waits until all are done, and returns
/// their document ids in order.
async fn ingest(app: &TestApp, files: Vec<(String, Vec<u8>)>) -> Vec<String> {
    let mut accepted = Vec::new();
    for (name, bytes) in files {
        accepted.push(app.upload_ok(ALICE, &name, bytes).await);
    }
    let mut ids = Vec::new();
    for a in accepted {
        let job = a["job_id"].as_str().expect("job id");
        app.wait_job(ALICE, job, Duration::from_secs(240), |j| {
            j["state"] == "done" || j["state"] == "failed"
        })
        .await;
        assert_eq!(app.job(ALICE, job).await["state"], "done", "{a}");
        ids.push(a["document_id"].as_str().expect("document id").to_string());
    }
    ids
}

/// A small deterministic generator (xorshift), so every run builds the
/// same documents.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Words the phrases are made of; each document also holds a few of them
/// outside its phrase, so a document holding all five words apart is no
/// rarity and only the phrase itself tells them apart.
const PHRASE_WORDS: [&str; 24] = [
    "saffron", "tugboat", "hums", "dawn", "cobalt", "lantern", "whistles", "dusk", "velvet",
    "falcon", "drifts", "midnight", "amber", "glacier", "murmurs", "noon", "crimson", "otter",
    "sings", "twilight", "ivory", "beacon", "trembles", "harvest",
];
const FILLER: [&str; 30] = [
    "the", "report", "notes", "that", "staff", "review", "each", "quarter", "budget", "with",
    "care", "and", "file", "results", "in", "shared", "folder", "before", "meeting", "where",
    "managers", "discuss", "progress", "on", "projects", "of", "team", "plans", "for", "next",
];

/// 50 documents of 60 to 1,500 words, each with one 5-word phrase no other
/// holds, somewhere between its first and its last word.
fn phrase_documents() -> Vec<(String, String)> {
    let mut draw = Draw(0x5eed_cafe);
    let mut phrases: Vec<Vec<&str>> = Vec::new();
    while phrases.len() < 50 {
        let mut p: Vec<&str> = Vec::new();
        while p.len() < 5 {
            let w = PHRASE_WORDS[draw.below(PHRASE_WORDS.len())];
            if !p.contains(&w) {
                p.push(w);
            }
        }
        if !phrases.contains(&p) {
            phrases.push(p);
        }
    }
    phrases
        .into_iter()
        .enumerate()
        .map(|(i, phrase)| {
            let len = 60 + i * (1_500 - 60) / 49;
            let mut words: Vec<&str> = (0..len - 5)
                .map(|_| FILLER[draw.below(FILLER.len())])
                .collect();
            // Four phrase words alone, never side by side.
            for _ in 0..4 {
                let at = draw.below(words.len() / 2) * 2;
                words[at] = PHRASE_WORDS[draw.below(PHRASE_WORDS.len())];
            }
            // The phrase as one item, so that no sentence ends inside it.
            let joined = phrase.join(" ");
            let at = [0, len / 2, len - 5][i % 3].min(words.len());
            words.insert(at, &joined);
            let text = words
                .chunks(12)
                .map(|s| format!("{}.", s.join(" ")))
                .collect::<Vec<_>>()
                .join(" ");
            (phrase.join(" "), text)
        })
        .collect()
}

/// Each phrase finds its own document first, whichever its length.
async fn each_phrase_finds_its_document_first(embedder: EmbedderKind) {
    let app = app(embedder).await;
    let docs = phrase_documents();
    let ids = ingest(
        &app,
        docs.iter()
            .enumerate()
            .map(|(i, (_, text))| (format!("memo-{i:02}.txt"), text.clone().into_bytes()))
            .collect(),
    )
    .await;
    for (i, (phrase, text)) in docs.iter().enumerate() {
        assert!(text.contains(phrase.as_str()));
        let hits = search(&app, ALICE, phrase, 5).await;
        let first = hits
            .first()
            .unwrap_or_else(|| panic!("nothing for {phrase:?}"));
        assert_eq!(
            first["document_id"],
            ids[i],
            "{phrase:?} ({} words) found {} first: {hits:#?}",
            text.split(' ').count(),
            first["filename"]
        );
        let snippet = first["snippet"].as_str().expect("snippet");
        for w in phrase.split(' ') {
            assert!(
                snippet.contains(&format!("<mark>{w}</mark>")),
                "{w} not marked in {snippet}"
            );
        }
        assert_eq!(first["matched_words"], true);
        // A passage shown with marked words is never said to be found by
        // meaning alone, whichever ranking brought it.
        for h in &hits {
            let marked = h["snippet"].as_str().is_some_and(|s| s.contains("<mark>"));
            assert_eq!(h["matched_words"], marked, "{h:#}");
        }
    }
}

#[tokio::test]
async fn an_exact_phrase_finds_its_document_first_at_any_length_with_the_local_embedder() {
    each_phrase_finds_its_document_first(EmbedderKind::Local).await;
}

#[tokio::test]
async fn an_exact_phrase_finds_its_document_first_at_any_length_with_the_real_model() {
    each_phrase_finds_its_document_first(EmbedderKind::Minilm).await;
}

#[tokio::test]
async fn a_rare_word_on_the_last_line_of_a_6_mb_document_is_found() {
    let app = app(EmbedderKind::Local).await;
    let mut text = String::with_capacity(6_100_000);
    let mut i = 0;
    while text.len() < 6_000_000 {
        text.push_str(&format!(
            "Line {i} of the operations log records routine maintenance of the pumps.\n"
        ));
        i += 1;
    }
    text.push_str("The walrus signed the final page of the log.\n");
    let ids = ingest(&app, vec![("log.txt".into(), text.into_bytes())]).await;
    let hits = search(&app, ALICE, "walrus", 10).await;
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert_eq!(hits[0]["document_id"], ids[0]);
    assert!(hits[0]["snippet"]
        .as_str()
        .is_some_and(|s| s.contains("<mark>walrus</mark>")));
    // Words no passage holds find nothing, however many passages there are.
    assert_eq!(
        search(&app, ALICE, "tyre rotation", 10).await,
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn accents_are_folded_and_stop_words_alone_find_nothing() {
    let app = app(EmbedderKind::Local).await;
    let ids = ingest(
        &app,
        vec![
            (
                "desserts.txt".into(),
                "The chef's crème brûlée is torched at the table."
                    .as_bytes()
                    .to_vec(),
            ),
            (
                "minutes.txt".into(),
                "What to do about the meeting: the team will decide what the plan is."
                    .as_bytes()
                    .to_vec(),
            ),
        ],
    )
    .await;
    let hits = search(&app, ALICE, "creme brulee", 10).await;
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert_eq!(hits[0]["document_id"], ids[0]);
    let snippet = hits[0]["snippet"].as_str().expect("snippet");
    assert!(
        snippet.contains("<mark>crème</mark> <mark>brûlée</mark>"),
        "{snippet}"
    );
    // Every word of both documents' stop words: nothing to look for.
    for q in ["the", "what to do", "The"] {
        assert_eq!(
            search(&app, ALICE, q, 10).await,
            Vec::<Value>::new(),
            "{q:?}"
        );
    }
    // A query of stop words and one real word finds by that word.
    let hits = search(&app, ALICE, "what about the meeting", 10).await;
    assert_eq!(
        hits.first().map(|h| &h["document_id"]),
        Some(&Value::from(ids[1].clone()))
    );
}

#[tokio::test]
async fn a_query_of_hundreds_of_words_looks_for_its_first_ones_only() {
    let app = app(EmbedderKind::Local).await;
    // 2,000 bytes of distinct words: the first names one document, the
    // last (past MAX_QUERY_TERMS) the other.
    let words: Vec<String> = (0..)
        .map(|i| format!("zq{i:04}x"))
        .scan(0, |len, w| {
            *len += w.len() + 1;
            (*len <= 2_000).then_some(w)
        })
        .collect();
    assert!(words.len() > 5 * docflow::search::MAX_QUERY_TERMS);
    let first = words.first().expect("a word");
    let last = words.last().expect("a word");
    let ids = ingest(
        &app,
        vec![
            (
                "first.txt".into(),
                format!("The ledger names {first} once.").into_bytes(),
            ),
            (
                "last.txt".into(),
                format!("The ledger names {last} once.").into_bytes(),
            ),
        ],
    )
    .await;
    let hits = search(&app, ALICE, &words.join(" "), 10).await;
    assert_eq!(
        hits.first().map(|h| &h["document_id"]),
        Some(&Value::from(ids[0].clone()))
    );
    // The last word was not looked for: its passage holds no matched word.
    assert!(
        hits.iter()
            .filter(|h| h["matched_words"] == true)
            .all(|h| h["document_id"] == ids[0]),
        "{hits:#?}"
    );
}

#[tokio::test]
async fn a_hit_in_a_pdf_names_its_page_and_marks_the_words() {
    let app = app(EmbedderKind::Local).await;
    let page = |n: usize, extra: &str| -> Vec<String> {
        (0..30)
            .map(|i| format!("Page {n} line {i} covers the ordinary upkeep of the fleet."))
            .chain([extra.to_string()])
            .collect()
    };
    let pdf = sample_pdf::pdf(&[
        page(1, "Brake pads are checked at every service."),
        page(2, "The emission test is due each spring."),
        page(3, "Northwind pays the harbourmaster fees quarterly."),
        page(4, "Nothing else of note."),
    ]);
    let ids = ingest(&app, vec![("handbook.pdf".into(), pdf)]).await;
    for (q, page, word) in [
        ("brake pads", 1, "Brake"),
        ("emission test", 2, "emission"),
        ("Northwind harbourmaster", 3, "harbourmaster"),
    ] {
        let hits = search(&app, ALICE, q, 3).await;
        let first = hits.first().unwrap_or_else(|| panic!("nothing for {q:?}"));
        assert_eq!(first["document_id"], ids[0]);
        assert_eq!(first["page"], page, "{q:?}: {first:#}");
        let snippet = first["snippet"].as_str().expect("snippet");
        assert!(
            snippet.contains(&format!("<mark>{word}</mark>")),
            "{q:?}: {snippet}"
        );
        // A snippet is a stretch around the match, not the whole passage.
        assert!(snippet.len() < first["text"].as_str().expect("text").len());
    }
}

/// Passages and questions about them that share no word.
const PARAPHRASES: [(&str, &str); 10] = [
    (
        "Replace the motor oil and the oil filter of your car every five thousand miles to keep the pistons healthy.",
        "how frequently should I service my vehicle's engine lubricant",
    ),
    (
        "Water your tomato plants deeply in the early morning, and stake them so the fruit does not touch the soil.",
        "caring for vegetables growing in a garden bed",
    ),
    (
        "To reset your password, click the forgotten link on the sign-in page and follow the email we send you.",
        "I cannot log into my account and need new credentials",
    ),
    (
        "A puppy should receive its first vaccinations at eight weeks and visit the veterinarian twice in its first year.",
        "when do young dogs need shots from an animal doctor",
    ),
    (
        "Preheat the oven, whisk flour, sugar, butter and eggs, then bake the batter for thirty minutes until golden.",
        "recipe for making a cake at home",
    ),
    (
        "Our refund policy: return any purchase within thirty days with its receipt and we reimburse the full price.",
        "can I get my money back if I bring an item to the store",
    ),
    (
        "Earthquakes happen when tectonic plates slip along a fault and release stored energy as seismic waves.",
        "why does the ground shake",
    ),
    (
        "The train to the airport leaves platform four every fifteen minutes; tickets are sold at the machines in the hall.",
        "public transport schedule for reaching flights",
    ),
    (
        "Invest in a diversified index fund and contribute monthly to grow retirement savings over decades.",
        "how to put money aside for when I stop working when I'm old",
    ),
    (
        "Brush your teeth twice daily with fluoride toothpaste and floss to prevent cavities.",
        "dental hygiene routine",
    ),
];

#[tokio::test]
async fn questions_that_share_no_word_with_their_passages_find_them_with_the_real_model() {
    let app = app(EmbedderKind::Minilm).await;
    let ids = ingest(
        &app,
        PARAPHRASES
            .iter()
            .enumerate()
            .map(|(i, (passage, _))| (format!("topic-{i}.txt"), passage.as_bytes().to_vec()))
            .collect(),
    )
    .await;
    let mut right = Vec::new();
    for (i, (passage, question)) in PARAPHRASES.iter().enumerate() {
        // No word in common, as the full-text index sees words.
        let shared: Vec<String> = sqlx::query_scalar(
            "SELECT t FROM unnest(tsvector_to_array(to_tsvector('docflow', $1))) t
             WHERE t = ANY (tsvector_to_array(to_tsvector('docflow', $2)))",
        )
        .bind(passage)
        .bind(question)
        .fetch_all(&app.pool)
        .await
        .expect("lexemes");
        assert!(shared.is_empty(), "{question:?} shares {shared:?}");
        let hits = search(&app, ALICE, question, 3).await;
        match hits.first() {
            Some(first) if first["document_id"] == ids[i] => {
                assert_eq!(first["matched_words"], false);
                right.push(i);
            }
            other => println!("{question:?}: {other:?}"),
        }
    }
    println!("{} of 10 questions found their passage first", right.len());
    assert!(right.len() >= 9, "only {right:?}");
}

/// Documents in `tenant` with `chunks` chunks whose vectors (of `model`)
/// are `along` times `q` plus noise of `noise` per dimension; texts share
/// no word with any query here.
async fn insert_vectors(
    app: &TestApp,
    tenant: Uuid,
    model: &Model,
    q: &[f32],
    chunks: i32,
    along: f32,
    noise: f32,
) -> Uuid {
    let doc = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes,
                                sha256, pages, blob_key, indexed_at)
         SELECT $1, $2, u.id, 'vectors.txt', 'text/plain', 1,
                decode(md5($1::text) || md5($1::text), 'hex'), 1, 'none', now()
         FROM users u WHERE u.tenant_id = $2 LIMIT 1",
    )
    .bind(doc)
    .bind(tenant)
    .execute(&app.pool)
    .await
    .expect("document");
    sqlx::query(&format!(
        "INSERT INTO chunks (document_id, tenant_id, chunk_index, text, embedding, model_id)
         SELECT $1, $2, g - 1, 'passage ' || g,
                (SELECT array_agg($4 * x + $5 * (random() - 0.5) ORDER BY i)
                 FROM unnest($3::real[]) WITH ORDINALITY u(x, i) WHERE g > 0)::vector({dims}),
                $7
         FROM generate_series(1, $6) g",
        dims = model.dims
    ))
    .bind(doc)
    .bind(tenant)
    .bind(q)
    .bind(along)
    .bind(noise)
    .bind(chunks)
    .bind(model.id)
    .execute(&app.pool)
    .await
    .expect("chunks");
    doc
}

#[tokio::test]
async fn a_small_tenant_among_a_large_one_gets_its_own_results_from_the_index() {
    let app = app(EmbedderKind::Minilm).await;
    let query = "quarterly harbour fees";
    let embedder = minilm::MiniLm::load(&minilm::default_dir(), 1).expect("the model");
    let q = embedder
        .embed(&[query.to_string()])
        .expect("a vector")
        .remove(0);
    let model = docflow::pipeline::vectors::register(
        &app.pool,
        &docflow::pipeline::vectors::ModelSpec {
            name: minilm::MODEL_NAME.into(),
            dims: minilm::DIMS,
        },
    )
    .await
    .expect("the model is registered");
    let tenant = |email: &'static str| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar::<_, Uuid>("SELECT tenant_id FROM users WHERE email = $1")
                .bind(email)
                .fetch_one(&pool)
                .await
                .expect("tenant")
        }
    };
    let (acme, globex) = (tenant(ALICE).await, tenant(BOB).await);
    // Globex's 50,000 vectors are all nearer the query (cosine about 0.9)
    // than any of acme's 50 (about 0.5): an index read that filtered by
    // tenant after taking the nearest would leave acme nothing.
    // Inserted without the model's index and indexed after (a build is
    // several times faster than 50,050 inserts into the graph).
    let index = format!("chunks_embedding_m{}", model.id);
    let definition: String = sqlx::query_scalar("SELECT pg_get_indexdef($1::regclass)")
        .bind(&index)
        .fetch_one(&app.pool)
        .await
        .expect("the model's index");
    sqlx::query(&format!("DROP INDEX {index}"))
        .execute(&app.pool)
        .await
        .expect("drop");
    let big = insert_vectors(&app, globex, &model, &q, 50_000, 1.0, 0.085).await;
    let small = insert_vectors(&app, acme, &model, &q, 50, 0.5, 0.153).await;
    let mut conn = app.pool.acquire().await.expect("connection");
    sqlx::query("SET maintenance_work_mem = '512MB'")
        .execute(&mut *conn)
        .await
        .expect("memory");
    sqlx::query(&definition)
        .execute(&mut *conn)
        .await
        .expect("index");
    drop(conn);
    // The statistics autovacuum would gather in a minute, now.
    sqlx::query("ANALYZE chunks")
        .execute(&app.pool)
        .await
        .expect("analyze");

    let hits = search(&app, ALICE, query, 10).await;
    assert_eq!(hits.len(), 10, "{hits:#?}");
    for h in &hits {
        assert_eq!(h["document_id"], small.to_string());
        let score = h["score"].as_f64().expect("a similarity");
        assert!((0.35..0.7).contains(&score), "{score}");
    }
    let hits = search(&app, BOB, query, 10).await;
    assert_eq!(hits.len(), 10);
    assert!(hits.iter().all(|h| h["document_id"] == big.to_string()));

    // Through the HNSW index (the planner's pick for a larger tenant;
    // forced here by making sorting dear), acme's vectors run out among
    // globex's before 40 are found: search then ranks acme's own exactly.
    let mut tx = app.pool.begin().await.expect("tx");
    sqlx::query(docflow::search::INDEX_SETTINGS)
        .execute(&mut *tx)
        .await
        .expect("settings");
    sqlx::query("SELECT set_config('enable_sort', 'off', true)")
        .execute(&mut *tx)
        .await
        .expect("settings");
    let nearest = docflow::search::nearest_sql(&model);
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {nearest}"))
        .bind(acme)
        .bind(docflow::search::pgvector_literal(&q))
        .bind(40_i64)
        .fetch_all(&mut *tx)
        .await
        .expect("plan");
    let plan = plan.join("\n");
    assert!(
        plan.contains(&format!("Index Scan using chunks_embedding_m{}", model.id)),
        "{plan}"
    );
    let through_index: Vec<(Uuid, i32, f32)> = sqlx::query_as(&nearest)
        .bind(acme)
        .bind(docflow::search::pgvector_literal(&q))
        .bind(40_i64)
        .fetch_all(&mut *tx)
        .await
        .expect("nearest");
    println!(
        "the index alone found {} of acme's 40 nearest",
        through_index.len()
    );
    assert!(through_index.iter().all(|(doc, _, _)| *doc == small));
    let found = docflow::search::nearest(&mut tx, &model, acme, &q, 40)
        .await
        .expect("nearest");
    tx.rollback().await.expect("rollback");
    // Exact: every one of acme's vectors compared (no index may answer).
    let mut tx = app.pool.begin().await.expect("tx");
    sqlx::query("SET LOCAL enable_indexscan = off")
        .execute(&mut *tx)
        .await
        .expect("exact");
    let exact: Vec<(Uuid, i32)> = sqlx::query_as(&format!(
        "SELECT document_id, chunk_index FROM chunks WHERE tenant_id = $1 AND model_id = $3
         ORDER BY embedding::vector({}) <=> $2::vector LIMIT 40",
        model.dims
    ))
    .bind(acme)
    .bind(docflow::search::pgvector_literal(&q))
    .bind(model.id)
    .fetch_all(&mut *tx)
    .await
    .expect("exact scan");
    tx.rollback().await.expect("rollback");
    let found: Vec<(Uuid, i32)> = found.into_iter().map(|(d, c, _)| (d, c)).collect();
    if through_index.len() < 40 {
        // Ranked exactly after the index came short.
        assert_eq!(found, exact);
    } else {
        let recall = found.iter().filter(|f| exact.contains(f)).count();
        assert!(recall >= 36, "{recall} of the exact 40");
    }
}
