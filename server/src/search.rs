//! Hybrid search over a tenant's indexed chunks: a full-text ranking and a
//! vector ranking, fused.
//!
//! - **Words.** Every chunk has a `tsvector` (English stems, stop words
//!   left out, accents folded: "creme brulee" finds "crème brûlée", GIN
//!   index). A chunk matches when it holds any of the query's words; chunks
//!   are ranked by whether they hold the query as a phrase, then by how many
//!   of its distinct words they hold, then by cover density.
//! - **Meaning.** The query is embedded by the configured model and the
//!   nearest vectors of that model (and only that model) are read through
//!   its HNSW index (pgvector, cosine distance), filtered to the tenant with
//!   pgvector's iterative scan so that a small tenant among large ones still
//!   gets its `k`; for a small tenant PostgreSQL ranks its rows exactly.
//! - **Fusion.** Reciprocal rank fusion (each list adds `1 / (60 + rank)`;
//!   a phrase match counts as a third list), so neither list's scores
//!   need to be comparable. A passage holding none of the query's words is
//!   shown only when the model finds it close in meaning
//!   (`DOCFLOW_SEARCH_MIN_SCORE`); a query of stop words alone finds
//!   nothing.
//!
//! A hit carries its cosine similarity (an absolute measure, not scaled to
//! the best hit), a snippet around the match with the words marked, and
//! the PDF page it starts on. A passage found in several documents (the
//! same file uploaded twice) is shown once, from the most recent upload.

use serde::Serialize;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use std::collections::{HashMap, HashSet};

use crate::{
    pipeline::{embedder::words, vectors::Model},
    platform::config::EmbedderKind,
    state::AppState,
};

/// One search result (`GET /api/search`).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Hit {
    pub document_id: Uuid,
    /// The document's latest job, for a link to its page.
    pub job_id: Option<Uuid>,
    pub filename: String,
    /// Where the chunk sits in its document, from 0.
    pub chunk_index: i32,
    /// The whole passage.
    pub text: String,
    /// Up to about 35 words around the match, HTML-escaped, the query's
    /// words wrapped in `<mark>…</mark>`.
    pub snippet: String,
    /// The PDF page the passage starts on, from 1; `null` for formats
    /// without pages.
    pub page: Option<i32>,
    /// Cosine similarity of the passage and the query under the configured
    /// model (−1 to 1, higher is closer); `null` for a passage without a
    /// vector of that model yet (found by its words).
    pub score: Option<f32>,
    /// The passage holds words of the query (as the full-text index reads
    /// them: stems, no stop words), whichever ranking found it.
    pub matched_words: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The embedder could not embed the query (details are logged, never
    /// shown: they may name the provider's address or repeat its answer).
    #[error("search is unavailable right now: the embedding provider did not answer; try again in a moment")]
    Embed,
    /// Reading the chunks failed.
    #[error(transparent)]
    Db(sqlx::Error),
}

impl From<sqlx::Error> for SearchError {
    fn from(e: sqlx::Error) -> Self {
        SearchError::Db(e)
    }
}

/// Candidates each ranking contributes per hit asked for.
const CANDIDATES_PER_HIT: usize = 4;
/// The fusion constant of reciprocal rank fusion (Cormack et al., 2009).
const RRF_K: f64 = 60.0;
/// Distinct query terms a search looks for, at most: the lexical ranking
/// tests every matching chunk against each term, and a 2,000-byte query
/// can hold hundreds. The rest still count through the query's vector.
pub const MAX_QUERY_TERMS: usize = 32;

/// The tsquery matching any of the terms in the `text[]` parameter `param`.
fn any_term(param: &str) -> String {
    format!(
        "array_to_string(ARRAY(SELECT quote_literal(t) FROM unnest({param}::text[]) t), ' | ')::tsquery"
    )
}

/// The `k` best chunks of `tenant_id`'s indexed documents for `query`.
pub async fn search(
    state: &AppState,
    tenant_id: Uuid,
    query: &str,
    k: usize,
) -> Result<Vec<Hit>, SearchError> {
    let pool = &state.pool;
    let mut terms = query_terms(pool, query).await?;
    terms.truncate(MAX_QUERY_TERMS);
    if terms.is_empty() {
        // Stop words alone ("the", "what to do") say nothing to look for.
        return Ok(Vec::new());
    }
    let q = state.embedder.embed_query(query).await.map_err(|e| {
        // The provider's address and answer are for the logs only.
        tracing::warn!(error = %e, "embedding a search query failed");
        SearchError::Embed
    })?;
    let limit = k.saturating_mul(CANDIDATES_PER_HIT).max(1);
    let lexical = lexical(pool, tenant_id, query, &terms, limit).await?;
    let semantic = semantic(state, &state.model, tenant_id, &q, limit).await?;
    let earlier = earlier(state, tenant_id, query, limit).await?;
    let mut rankings = vec![Ranking {
        found: &semantic,
        min_score: state.config.search_min_score(),
        adds: true,
    }];
    for (found, model) in &earlier {
        rankings.push(Ranking::earlier(found, model));
    }

    let fused = fuse(&lexical, &rankings);
    if fused.is_empty() {
        return Ok(Vec::new());
    }
    let mut hits = details(state, query, &terms, &q, &fused).await?;
    if state.config.embedder == EmbedderKind::Local {
        // Hashed words score a little above zero for any two texts: a
        // passage found by its vector alone must hold a query word or a
        // near spelling of one.
        let words = query_words(query);
        hits.retain(|(_, h)| h.matched_words || shares_a_word(&words, &h.text));
    }
    Ok(best(hits, k))
}

/// The query's distinct lexemes as the full-text index has them, in the
/// query's order (none for a query of stop words).
async fn query_terms(pool: &PgPool, query: &str) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT coalesce(array_agg(lexeme ORDER BY positions[1]), '{}')
         FROM unnest(to_tsvector('docflow', $1))",
    )
    .bind(query)
    .fetch_one(pool)
    .await
}

/// A chunk found by a ranking, in the ranking's order.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Found {
    document_id: Uuid,
    chunk_index: i32,
    /// Lexical: holds the query as a phrase. Semantic: unused.
    phrase: bool,
    /// Lexical: the share of the query's distinct terms it holds, 0 to 1.
    /// Semantic: unused.
    coverage: f32,
    /// Semantic: cosine similarity. Lexical: unused.
    similarity: f32,
}

/// Chunks holding any of `terms`, best first.
async fn lexical(
    pool: &PgPool,
    tenant_id: Uuid,
    query: &str,
    terms: &[String],
    limit: usize,
) -> sqlx::Result<Vec<Found>> {
    let rows: Vec<(Uuid, i32, bool, i64)> = sqlx::query_as(&format!(
        "WITH q AS (SELECT {any} AS any_word, phraseto_tsquery('docflow', $3) AS phrase)
         SELECT c.document_id, c.chunk_index, c.tsv @@ q.phrase AS phrase,
                (SELECT count(*) FROM unnest($2::text[]) t WHERE c.tsv @@ quote_literal(t)::tsquery) AS terms
         FROM chunks c CROSS JOIN q
         JOIN documents d ON d.id = c.document_id
         WHERE c.tenant_id = $1 AND c.tsv @@ q.any_word AND d.indexed_at IS NOT NULL
         ORDER BY phrase DESC, terms DESC, ts_rank_cd(c.tsv, q.any_word, 1) DESC,
                  d.created_at DESC, c.chunk_index
         LIMIT $4",
        any = any_term("$2")
    ))
    .bind(tenant_id)
    .bind(terms)
    .bind(query)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .persistent(false)
    .fetch_all(pool)
    .await?;
    let all = terms.len().max(1) as f32;
    Ok(rows
        .into_iter()
        .map(|(document_id, chunk_index, phrase, held)| Found {
            document_id,
            chunk_index,
            phrase,
            coverage: (held as f32 / all).min(1.0),
            similarity: 0.0,
        })
        .collect())
}

/// While documents are re-embedded after a model change, the rankings
/// among each earlier model's vectors, each with a query vector of its own
/// model (see [`crate::pipeline::reembed`]). An earlier model this process
/// cannot embed queries with is left out: its documents are found by their
/// words until re-embedded.
async fn earlier(
    state: &AppState,
    tenant_id: Uuid,
    query: &str,
    limit: usize,
) -> sqlx::Result<Vec<(Vec<Found>, Model)>> {
    let mut rankings = Vec::new();
    for model in state.earlier.models(&state.pool).await? {
        if model.id == state.model.id {
            continue;
        }
        let Some(embedder) = state.earlier.get(&state.config, &model) else {
            continue;
        };
        match embedder.embed_query(query).await {
            Ok(q) => {
                let found = semantic(state, &model, tenant_id, &q, limit).await?;
                rankings.push((found, model));
            }
            Err(e) => {
                tracing::warn!(model = %model.name, error = %e, "embedding a search query with an earlier model failed");
            }
        }
    }
    Ok(rankings)
}

/// The chunks nearest to `q` among `model`'s vectors, best first.
async fn semantic(
    state: &AppState,
    model: &Model,
    tenant_id: Uuid,
    q: &[f32],
    limit: usize,
) -> sqlx::Result<Vec<Found>> {
    if q.len() != model.dims {
        tracing::warn!(
            got = q.len(),
            want = model.dims,
            "the query vector's dimensions are not the model's"
        );
        return Ok(Vec::new());
    }
    let mut tx: Transaction<'_, Postgres> = state.pool.begin().await?;
    let rows = nearest(&mut tx, model, tenant_id, q, limit).await?;
    tx.commit().await?;
    Ok(rows
        .into_iter()
        .map(|(document_id, chunk_index, similarity)| Found {
            document_id,
            chunk_index,
            phrase: false,
            coverage: 0.0,
            similarity,
        })
        .collect())
}

/// How the HNSW index is read, for the transaction of one search: past the
/// first `ef_search` candidates it reads on until `limit` of the tenant's
/// vectors are found (relaxed order: [`nearest_sql`] re-sorts them), or
/// `max_scan_tuples` were looked at.
pub const INDEX_SETTINGS: &str = "SELECT set_config('hnsw.ef_search', '200', true),
        set_config('hnsw.iterative_scan', 'relaxed_order', true),
        set_config('hnsw.max_scan_tuples', '100000', true)";

/// The `$3` chunks of tenant `$1` nearest to the vector `$2` among
/// `model`'s, with their cosine similarity, nearest first; read through
/// the model's HNSW index.
pub fn nearest_sql(model: &Model) -> String {
    format!(
        "WITH nearest AS MATERIALIZED (
             SELECT document_id, chunk_index, {expr} <=> $2::vector({dims}) AS distance
             FROM chunks
             WHERE tenant_id = $1 AND {predicate}
             ORDER BY {expr} <=> $2::vector({dims})
             LIMIT $3)
         SELECT n.document_id, n.chunk_index, (1 - n.distance)::real
         FROM nearest n JOIN documents d ON d.id = n.document_id
         WHERE d.indexed_at IS NOT NULL
         ORDER BY n.distance, d.created_at DESC, n.chunk_index",
        expr = model.vector_expr(),
        dims = model.dims,
        predicate = model.predicate(),
    )
}

/// The `limit` chunks of `tenant_id` nearest to `q` among `model`'s
/// vectors, with their cosine similarity, nearest first. Sets the index
/// settings for the rest of `tx`.
pub async fn nearest(
    tx: &mut sqlx::PgConnection,
    model: &Model,
    tenant_id: Uuid,
    q: &[f32],
    limit: usize,
) -> sqlx::Result<Vec<(Uuid, i32, f32)>> {
    sqlx::query(INDEX_SETTINGS).execute(&mut *tx).await?;
    let sql = nearest_sql(model);
    let vector = pgvector_literal(q);
    let wanted = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<(Uuid, i32, f32)> = sqlx::query_as(&sql)
        .bind(tenant_id)
        .bind(&vector)
        .bind(wanted)
        .persistent(false)
        .fetch_all(&mut *tx)
        .await?;
    if rows.len() >= limit {
        return Ok(rows);
    }
    // Read through the index, a tenant's vectors among many others' may run
    // out before `limit` are found (the scan stops at `hnsw.max_scan_tuples`
    // or its memory bound). Then the tenant's own vectors are ranked
    // exactly: all of them are looked at (what the planner picks anyway
    // for a small tenant; a tenant with fewer than `limit` costs little).
    sqlx::query("SELECT set_config('enable_indexscan', 'off', true)")
        .execute(&mut *tx)
        .await?;
    sqlx::query_as(&sql)
        .bind(tenant_id)
        .bind(&vector)
        .bind(wanted)
        .persistent(false)
        .fetch_all(&mut *tx)
        .await
}

/// A vector in pgvector's text form (`[0.1,0.2]`), bound as text and cast.
pub fn pgvector_literal(v: &[f32]) -> String {
    let mut s = String::with_capacity(v.len() * 12 + 2);
    s.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        // Rust prints the shortest text that reads back as the same f32.
        s.push_str(&x.to_string());
    }
    s.push(']');
    s
}

/// A fused candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fused {
    document_id: Uuid,
    chunk_index: i32,
    score: f64,
    matched_words: bool,
}

/// A ranking by vectors of one model.
struct Ranking<'a> {
    found: &'a [Found],
    /// A place counts only this close (cosine similarity, the model's own
    /// scale).
    min_score: f32,
    /// Whether it may add a chunk the words did not find. Hashed words
    /// (the local model) score a little above zero for any two texts: an
    /// earlier ranking of theirs only adds weight to what the words found.
    adds: bool,
}

impl<'a> Ranking<'a> {
    fn earlier(found: &'a [Found], model: &Model) -> Self {
        let local = model.name == crate::pipeline::embedder::LOCAL_MODEL;
        Self {
            found,
            min_score: match model.name.as_str() {
                crate::pipeline::embedder::LOCAL_MODEL => 0.12,
                crate::pipeline::minilm::MODEL_NAME => 0.25,
                _ => 0.3,
            },
            adds: !local,
        }
    }
}

/// Reciprocal rank fusion of the rankings (a phrase match counts as a
/// place in one more). A lexical place counts in proportion to the share of
/// the query's terms the chunk holds, so that one word of a long question
/// ("growing" in "caring for vegetables growing in a garden bed") does not
/// weigh as much as the passage nearest in meaning. A chunk only the
/// vectors found must be at least its ranking's `min_score` close, and a
/// place among the vectors counts only that close. Each model's vectors
/// rank apart (during a model change, two): places are fused, never
/// scores of different models. Best first.
fn fuse(lexical: &[Found], rankings: &[Ranking<'_>]) -> Vec<Fused> {
    let mut by_key: HashMap<(Uuid, i32), Fused> = HashMap::new();
    let mut phrase_rank = 0usize;
    for (rank, f) in lexical.iter().enumerate() {
        let mut score = f64::from(f.coverage) / (RRF_K + rank as f64 + 1.0);
        if f.phrase {
            phrase_rank += 1;
            score += 1.0 / (RRF_K + phrase_rank as f64);
        }
        by_key.insert(
            (f.document_id, f.chunk_index),
            Fused {
                document_id: f.document_id,
                chunk_index: f.chunk_index,
                score,
                matched_words: true,
            },
        );
    }
    // Those below `min_score` count for nothing: not close in meaning.
    for (rank, f, adds) in rankings.iter().flat_map(|r| {
        r.found
            .iter()
            .enumerate()
            .filter(|(_, f)| f.similarity >= r.min_score)
            .map(|(rank, f)| (rank, f, r.adds))
    }) {
        let add = 1.0 / (RRF_K + rank as f64 + 1.0);
        match by_key.get_mut(&(f.document_id, f.chunk_index)) {
            Some(hit) => hit.score += add,
            None if !adds => {}
            None => {
                by_key.insert(
                    (f.document_id, f.chunk_index),
                    Fused {
                        document_id: f.document_id,
                        chunk_index: f.chunk_index,
                        score: add,
                        matched_words: false,
                    },
                );
            }
        }
    }
    let mut fused: Vec<Fused> = by_key.into_values().collect();
    // Ties: a passage holding the query's words first, then key order, so
    // that the same data always ranks the same.
    fused.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.matched_words.cmp(&a.matched_words))
            .then(a.document_id.cmp(&b.document_id))
            .then(a.chunk_index.cmp(&b.chunk_index))
    });
    fused
}

/// Markers `ts_headline` puts around matched words: private-use characters,
/// turned into `<mark>` after the snippet is HTML-escaped.
const MARK_START: char = '\u{E000}';
const MARK_STOP: char = '\u{E001}';

/// The fused chunks with their documents, texts, snippets, pages,
/// similarities and whether they hold the query's terms, in fused order,
/// each with its place.
async fn details(
    state: &AppState,
    query: &str,
    terms: &[String],
    q: &[f32],
    fused: &[Fused],
) -> sqlx::Result<Vec<(usize, Hit)>> {
    let docs: Vec<Uuid> = fused.iter().map(|f| f.document_id).collect();
    let indexes: Vec<i32> = fused.iter().map(|f| f.chunk_index).collect();
    let model = &state.model;
    let similarity = if q.len() == model.dims {
        format!(
            "CASE WHEN c.{predicate} THEN (1 - (c.{expr} <=> $4::vector({dims})))::real END",
            predicate = model.predicate(),
            expr = model.vector_expr(),
            dims = model.dims
        )
    } else {
        "NULL::real".into()
    };
    let sql = format!(
        "SELECT w.n, c.document_id, c.chunk_index, j.id, d.filename, c.text, c.page,
                ts_headline('docflow', replace(replace(c.text, chr(57344), ' '), chr(57345), ' '),
                    CASE WHEN c.tsv @@ phraseto_tsquery('docflow', $3)
                         THEN phraseto_tsquery('docflow', $3) ELSE {any} END,
                    'StartSel=\"{MARK_START}\", StopSel=\"{MARK_STOP}\", MaxWords=35, MinWords=15, \
                     MaxFragments=2, FragmentDelimiter=\" … \"'),
                {similarity}, c.tsv @@ {any}
         FROM unnest($1::uuid[], $2::int[]) WITH ORDINALITY AS w(doc, idx, n)
         JOIN chunks c ON c.document_id = w.doc AND c.chunk_index = w.idx
         JOIN documents d ON d.id = c.document_id
         LEFT JOIN LATERAL (SELECT id FROM jobs WHERE document_id = d.id
                            ORDER BY enqueued_at DESC LIMIT 1) j ON true
         ORDER BY w.n",
        any = any_term("$5")
    );
    type Row = (
        i64,
        Uuid,
        i32,
        Option<Uuid>,
        String,
        String,
        Option<i32>,
        String,
        Option<f32>,
        bool,
    );
    let rows: Vec<Row> = sqlx::query_as(&sql)
        .bind(&docs)
        .bind(&indexes)
        .bind(query)
        .bind(pgvector_literal(q))
        .bind(terms)
        .persistent(false)
        .fetch_all(&state.pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                n,
                document_id,
                chunk_index,
                job_id,
                filename,
                text,
                page,
                headline,
                score,
                matched_words,
            )| {
                let place = usize::try_from(n).unwrap_or(usize::MAX);
                (
                    place,
                    Hit {
                        document_id,
                        job_id,
                        filename,
                        chunk_index,
                        text,
                        snippet: marked_snippet(&headline),
                        page,
                        score,
                        matched_words,
                    },
                )
            },
        )
        .collect())
}

/// `headline` HTML-escaped, its marked stretches in `<mark>…</mark>`
/// (always balanced).
fn marked_snippet(headline: &str) -> String {
    let mut out = String::with_capacity(headline.len() + 32);
    let mut open = false;
    for c in headline.chars() {
        match c {
            MARK_START if !open => {
                out.push_str("<mark>");
                open = true;
            }
            MARK_STOP if open => {
                out.push_str("</mark>");
                open = false;
            }
            MARK_START | MARK_STOP => {}
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    if open {
        out.push_str("</mark>");
    }
    out
}

/// A [`Hit::snippet`] as runs of plain text, `true` for the marked ones
/// (for a page that renders text, never HTML).
pub fn snippet_runs(snippet: &str) -> Vec<(String, bool)> {
    let mut runs: Vec<(String, bool)> = Vec::new();
    let mut marked = false;
    let mut rest = snippet;
    while !rest.is_empty() {
        let tag = if marked { "</mark>" } else { "<mark>" };
        let (run, next) = match rest.find(tag) {
            Some(i) => (&rest[..i], &rest[i + tag.len()..]),
            None => (rest, ""),
        };
        let text = run
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&");
        if !text.is_empty() {
            runs.push((text, marked));
        }
        marked = !marked;
        rest = next;
    }
    runs
}

/// The query's distinct words, lower-cased, as the local embedder splits
/// them.
fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = words(query).map(str::to_lowercase).collect();
    words.sort();
    words.dedup();
    words
}

/// Query words given the near-spelling comparison, at most: a 2,000-byte
/// query of distinct words would otherwise compare each of hundreds of
/// them with every word of every passage. The rest must match exactly.
const MAX_FUZZY_WORDS: usize = 16;

/// The query words that near spellings may stand for (four letters or
/// more; the first [`MAX_FUZZY_WORDS`] of them), with their trigrams.
fn fuzzy_words(query: &[String]) -> Vec<(usize, HashSet<String>)> {
    query
        .iter()
        .filter(|w| w.chars().count() >= 4)
        .take(MAX_FUZZY_WORDS)
        .map(|w| (w.chars().count(), trigrams(w)))
        .collect()
}

/// Whether `text` holds one of `query` (lower-cased words) or a near
/// spelling of one: a word of four letters or more whose character
/// trigrams (padded as the local embedder pads them) mostly agree, so that
/// "harbourmastr" still finds "harbourmaster" but "qqzxharbour" does not
/// find "harbour". Each distinct word of the text is looked at once.
pub(crate) fn shares_a_word(query: &[String], text: &str) -> bool {
    let fuzzy = fuzzy_words(query);
    let distinct: HashSet<String> = words(text).map(str::to_lowercase).collect();
    distinct.iter().any(|w| {
        if query.contains(w) {
            return true;
        }
        let len = w.chars().count();
        // Jaccard ≥ ½ needs lengths within a third of each other; only
        // words that can get there have their trigrams taken.
        let near: Vec<&HashSet<String>> = fuzzy
            .iter()
            .filter(|(qlen, _)| len * 3 >= qlen * 2 && qlen * 3 >= len * 2)
            .map(|(_, q)| q)
            .collect();
        if near.is_empty() {
            return false;
        }
        let t = trigrams(w);
        near.iter().any(|q| {
            let shared = q.intersection(&t).count();
            shared * 2 >= q.len() + t.len() - shared
        })
    })
}

fn trigrams(word: &str) -> HashSet<String> {
    let padded: Vec<char> = std::iter::once(' ')
        .chain(word.chars())
        .chain(std::iter::once(' '))
        .collect();
    padded.windows(3).map(|t| t.iter().collect()).collect()
}

/// The `k` best of `hits` (each with its fused place), each passage text
/// once: the copy from the newest document stays (the rankings put newer
/// documents first among equals).
fn best(mut hits: Vec<(usize, Hit)>, k: usize) -> Vec<Hit> {
    hits.sort_by_key(|(place, _)| *place);
    let mut seen = HashSet::new();
    hits.into_iter()
        .map(|(_, h)| h)
        .filter(|h| seen.insert(h.text.clone()))
        .take(k)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(found: &[Found], min_score: f32) -> Ranking<'_> {
        Ranking {
            found,
            min_score,
            adds: true,
        }
    }

    fn found(doc: u128, idx: i32, phrase: bool, similarity: f32) -> Found {
        Found {
            document_id: Uuid::from_u128(doc),
            chunk_index: idx,
            phrase,
            coverage: 1.0,
            similarity,
        }
    }

    #[test]
    fn a_phrase_match_outranks_what_only_the_vectors_found() {
        let lexical = [found(2, 0, false, 0.0), found(1, 3, true, 0.0)];
        let semantic = [found(9, 0, false, 0.9), found(1, 3, false, 0.5)];
        let fused = fuse(&lexical, &[ranking(&semantic, 0.35)]);
        let order: Vec<u128> = fused.iter().map(|f| f.document_id.as_u128()).collect();
        assert_eq!(order[0], 1, "{fused:?}");
        assert!(fused
            .iter()
            .all(|f| f.document_id.as_u128() != 9 || !f.matched_words));
    }

    #[test]
    fn a_passage_without_the_query_words_must_be_close_in_meaning() {
        let semantic = [found(1, 0, false, 0.2), found(2, 0, false, 0.6)];
        let fused = fuse(&[], &[ranking(&semantic, 0.35)]);
        assert_eq!(fused.len(), 1);
        assert_eq!(fused[0].document_id.as_u128(), 2);
        assert!(!fused[0].matched_words);
        // Holding a query word, a passage is shown however far its vector.
        let fused = fuse(&[found(1, 0, false, 0.0)], &[ranking(&semantic, 0.35)]);
        assert!(fused
            .iter()
            .any(|f| f.document_id.as_u128() == 1 && f.matched_words));
    }

    #[test]
    fn one_word_of_a_long_question_weighs_less_than_the_nearest_meaning() {
        let lexical = [Found {
            coverage: 0.2,
            ..found(1, 0, false, 0.0)
        }];
        // The passage holding the word is not close in meaning: no credit
        // for its place among the vectors.
        let semantic = [found(2, 0, false, 0.35), found(1, 0, false, 0.1)];
        let fused = fuse(&lexical, &[ranking(&semantic, 0.25)]);
        let order: Vec<u128> = fused.iter().map(|f| f.document_id.as_u128()).collect();
        assert_eq!(order, vec![2, 1], "{fused:?}");
        // All of the question's words outweigh the nearest meaning.
        let lexical = [found(1, 0, false, 0.0)];
        let fused = fuse(&lexical, &[ranking(&semantic, 0.25)]);
        assert_eq!(fused[0].document_id.as_u128(), 1, "{fused:?}");
    }

    #[test]
    fn snippets_are_escaped_and_their_marks_balanced() {
        let h = format!("a <b> & {MARK_START}crème{MARK_STOP} {MARK_STOP}x{MARK_START}brûlée");
        assert_eq!(
            marked_snippet(&h),
            "a &lt;b&gt; &amp; <mark>crème</mark> x<mark>brûlée</mark>"
        );
    }

    #[test]
    fn a_snippet_reads_back_as_the_text_it_was_made_from() {
        let h = format!("if a<b && c>\"d\" '{MARK_START}<mark>{MARK_STOP}' then");
        let runs = snippet_runs(&marked_snippet(&h));
        assert_eq!(
            runs,
            vec![
                ("if a<b && c>\"d\" '".to_string(), false),
                ("<mark>".to_string(), true),
                ("' then".to_string(), false),
            ]
        );
    }

    #[test]
    fn vectors_are_written_as_pgvector_reads_them() {
        assert_eq!(pgvector_literal(&[0.5, -1.0, 1e-7]), "[0.5,-1,0.0000001]");
    }

    #[test]
    fn a_passage_found_twice_is_shown_once_from_the_newest_upload() {
        let hit = |doc: u128| Hit {
            document_id: Uuid::from_u128(doc),
            job_id: None,
            filename: format!("{doc}.txt"),
            chunk_index: 0,
            text: "The warehouse revenue grew in the north.".into(),
            snippet: String::new(),
            page: None,
            score: Some(0.5),
            matched_words: true,
        };
        let hits = best(vec![(2, hit(1)), (1, hit(2))], 10);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].document_id, Uuid::from_u128(2));
    }

    #[test]
    fn a_passage_must_hold_a_query_word_or_a_near_spelling() {
        let text = "The harbourmaster k3x9qa counts the cormorants every dawn.";
        let has = |q: &str| shares_a_word(&query_words(q), text);
        assert!(has("Cormorants"));
        assert!(has("harbourmastr"), "one letter short is a near spelling");
        assert!(has("k3x9qa"));
        assert!(
            !has("qqzxk3x9qa vvkjw"),
            "a word inside a longer one is not it"
        );
        assert!(!has("harbor"), "too far from harbourmaster");
        assert!(!has("daw"), "short words must match whole");
        assert!(has("DAWN"));
        assert!(!has(""));
    }

    #[test]
    fn the_longest_query_compares_a_bounded_number_of_words_by_spelling() {
        // The longest query the API takes: 2,000 bytes of distinct words.
        let mut query = String::new();
        let mut i = 0;
        while query.len() + 12 <= 2_000 {
            query.push_str(&format!("wordy{i:05} "));
            i += 1;
        }
        let words = query_words(&query);
        assert!(words.len() > 150);
        assert_eq!(fuzzy_words(&words).len(), MAX_FUZZY_WORDS);
        // Past the bound, words still match exactly.
        let last = words.last().expect("a word").clone();
        assert!(shares_a_word(&words, &format!("It says {last}.")));
        assert!(!shares_a_word(&words, "Nothing of the sort."));
    }

    #[test]
    fn each_models_ranking_counts_by_place_never_by_score() {
        // During a model change: document 1 re-embedded (new model), 2
        // not yet (earlier model, whose similarities run on another
        // scale). Each is first in its own model's ranking: they weigh the
        // same, whatever their scores.
        let new = [found(1, 0, false, 0.4)];
        let old = [found(2, 0, false, 0.95)];
        let fused = fuse(&[], &[ranking(&new, 0.3), ranking(&old, 0.3)]);
        assert_eq!(fused.len(), 2, "{fused:?}");
        assert_eq!(fused[0].score, fused[1].score, "{fused:?}");
        // An earlier ranking of hashed words only adds weight to what the
        // words found.
        let lexical = [found(3, 0, false, 0.0)];
        let old = [found(2, 0, false, 0.95), found(3, 0, false, 0.9)];
        let local = Ranking {
            found: &old,
            min_score: 0.12,
            adds: false,
        };
        let fused = fuse(&lexical, &[local]);
        let docs: Vec<u128> = fused.iter().map(|f| f.document_id.as_u128()).collect();
        assert_eq!(docs, vec![3], "{fused:?}");
        assert!(fused[0].score > 1.0 / (RRF_K + 1.0), "{fused:?}");
    }
}
