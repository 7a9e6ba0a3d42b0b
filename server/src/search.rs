//! Search over a tenant's indexed chunks: embed the query with the same
//! embedder as the documents and rank by cosine similarity (exact, in Rust,
//! over the newest `DOCFLOW_SEARCH_MAX_CHUNKS` chunks, holding only a short
//! list in memory). Passages below the
//! relevance threshold are left out, and a passage found in several
//! documents (the same file uploaded twice) is shown once, from the most
//! recent upload.
//!
//! The local embedder hashes words into a few hundred dimensions, so two
//! passages with no word in common still score a little above zero, and
//! over thousands of chunks some pass any threshold by chance. With it, a
//! passage is a result only if it also holds one of the query's words, or
//! a near spelling of one (see [`shares_a_word`]).

use futures::TryStreamExt;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use std::collections::HashSet;

use crate::pipeline::embedder::{cosine, words};
use crate::state::AppState;

/// One search result (`GET /api/search`).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Hit {
    pub document_id: Uuid,
    /// The document's latest job, for a link to its page.
    pub job_id: Option<Uuid>,
    pub filename: String,
    /// Where the chunk sits in its document, from 0.
    pub chunk_index: i32,
    pub text: String,
    /// Cosine similarity, higher is better.
    pub score: f32,
}

/// The `k` best chunks of `tenant_id`'s indexed documents for `query`.
pub async fn search(
    state: &AppState,
    tenant_id: Uuid,
    query: &str,
    k: usize,
) -> Result<Vec<Hit>, SearchError> {
    let q = state
        .embedder
        .embed(&[query.to_string()])
        .await
        .map_err(|e| {
            // The provider's address and answer are for the logs only.
            tracing::warn!(error = %e, "embedding a search query failed");
            SearchError::Embed
        })?;
    let q = q.into_iter().next().unwrap_or_default();
    let min_score = state
        .config
        .search_min_score
        .unwrap_or(match state.config.embedder {
            crate::config::EmbedderKind::Local => 0.12,
            crate::config::EmbedderKind::Openai => 0.25,
        });
    let scan = state.config.search_max_chunks;
    // A provider's embeddings match meaning, so a passage may share no
    // word with the query and still be the answer; the local one's may not.
    let lexical = matches!(state.config.embedder, crate::config::EmbedderKind::Local);
    let filter = Filter {
        min_score,
        words: lexical.then(|| query_words(query)),
    };
    rank(&state.pool, tenant_id, &q, k, &filter, scan)
        .await
        .map_err(SearchError::Db)
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

/// Ranks the newest `scan` chunks of the tenant's indexed documents in two
/// passes, so that a search holds `k` × a few candidates in memory however
/// much the tenant has indexed: the vectors stream through a bounded
/// shortlist, then only the shortlisted passages' texts are read.
async fn rank(
    pool: &PgPool,
    tenant_id: Uuid,
    q: &[f32],
    k: usize,
    filter: &Filter,
    scan: u32,
) -> sqlx::Result<Vec<Hit>> {
    let mut list = Shortlist::new(k.saturating_mul(SHORTLIST_PER_HIT).max(1));
    let mut vectors = sqlx::query_as::<_, (Uuid, i32, Vec<f32>)>(
        "SELECT c.document_id, c.chunk_index, c.embedding
         FROM chunks c JOIN documents d ON d.id = c.document_id
         WHERE c.tenant_id = $1 AND d.indexed_at IS NOT NULL AND c.embedding IS NOT NULL
         ORDER BY d.created_at DESC, c.document_id, c.chunk_index
         LIMIT $2",
    )
    .bind(tenant_id)
    .bind(i64::from(scan))
    .fetch(pool);
    let mut order = 0;
    while let Some((document_id, chunk_index, embedding)) = vectors.try_next().await? {
        let score = cosine(q, &embedding);
        if score >= filter.min_score {
            list.offer(Scored {
                score,
                order,
                document_id,
                chunk_index,
            });
        }
        order += 1;
    }
    drop(vectors);
    let shortlisted = list.into_vec();
    if shortlisted.is_empty() {
        return Ok(Vec::new());
    }
    let docs: Vec<Uuid> = shortlisted.iter().map(|s| s.document_id).collect();
    let indexes: Vec<i32> = shortlisted.iter().map(|s| s.chunk_index).collect();
    let texts: Vec<(Uuid, i32, Option<Uuid>, String, String)> = sqlx::query_as(
        "SELECT c.document_id, c.chunk_index, j.id, d.filename, c.text
         FROM unnest($1::uuid[], $2::int[]) AS w(doc, idx)
         JOIN chunks c ON c.document_id = w.doc AND c.chunk_index = w.idx
         JOIN documents d ON d.id = c.document_id
         LEFT JOIN LATERAL (SELECT id FROM jobs WHERE document_id = d.id
                            ORDER BY enqueued_at DESC LIMIT 1) j ON true",
    )
    .bind(&docs)
    .bind(&indexes)
    .fetch_all(pool)
    .await?;
    let mut by_key: std::collections::HashMap<(Uuid, i32), (Option<Uuid>, String, String)> = texts
        .into_iter()
        .map(|(doc, idx, job, filename, text)| ((doc, idx), (job, filename, text)))
        .collect();
    let hits = shortlisted
        .into_iter()
        .filter_map(|s| {
            // A document deleted between the passes is no result.
            let (job_id, filename, text) = by_key.remove(&(s.document_id, s.chunk_index))?;
            if !filter.keeps(&text) {
                return None;
            }
            Some((
                s.order,
                Hit {
                    document_id: s.document_id,
                    job_id,
                    filename,
                    chunk_index: s.chunk_index,
                    text,
                    score: s.score,
                },
            ))
        })
        .collect();
    Ok(best(hits, k))
}

/// What a scored passage must pass to be a result.
struct Filter {
    min_score: f32,
    /// The query's words, when a passage must hold one of them.
    words: Option<Vec<String>>,
}

impl Filter {
    fn keeps(&self, text: &str) -> bool {
        self.words.as_ref().is_none_or(|w| shares_a_word(w, text))
    }
}

/// The query's distinct words, lower-cased, as the embedder splits them.
fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = words(query).map(str::to_lowercase).collect();
    words.sort();
    words.dedup();
    words
}

/// Query words given the near-spelling comparison, at most: a 2,000-byte
/// query of distinct words would otherwise compare each of hundreds of
/// them with every word of every shortlisted passage. The rest must match
/// exactly.
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
/// trigrams (padded as the embedder pads them) mostly agree, so that
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

/// Candidates kept per result asked for: room for passages that turn out
/// to be the same text in several documents.
const SHORTLIST_PER_HIT: usize = 4;

/// A chunk's score; `order` is its place in the scan (newest document first).
#[derive(Debug, Clone, Copy)]
struct Scored {
    score: f32,
    order: usize,
    document_id: Uuid,
    chunk_index: i32,
}

/// The `cap` best chunks offered, in a heap whose top is the worst kept.
struct Shortlist {
    cap: usize,
    heap: std::collections::BinaryHeap<Keyed>,
}

struct Keyed(Scored);

impl PartialEq for Keyed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Keyed {}

impl PartialOrd for Keyed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Keyed {
    /// Worse (a lower score, then an older document) is greater, so the
    /// heap's top is the one to drop.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .0
            .score
            .total_cmp(&self.0.score)
            .then(self.0.order.cmp(&other.0.order))
    }
}

impl Shortlist {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            heap: std::collections::BinaryHeap::with_capacity(cap + 1),
        }
    }

    fn offer(&mut self, s: Scored) {
        self.heap.push(Keyed(s));
        if self.heap.len() > self.cap {
            self.heap.pop();
        }
    }

    /// The kept chunks, best first.
    fn into_vec(self) -> Vec<Scored> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|k| k.0)
            .collect()
    }
}

/// The `k` best of `hits` (each with its place in the scan), each passage
/// text once: the copy from the newest document stays.
fn best(mut hits: Vec<(usize, Hit)>, k: usize) -> Vec<Hit> {
    hits.sort_by(|(ao, a), (bo, b)| b.score.total_cmp(&a.score).then(ao.cmp(bo)));
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
    use crate::pipeline::embedder::local_embedding;

    /// `texts` as scored hits, newest first, those at `min_score` or more.
    fn scored(texts: &[(u128, &str)], q: &[f32], min_score: f32) -> Vec<(usize, Hit)> {
        texts
            .iter()
            .enumerate()
            .map(|(order, (doc, text))| {
                let hit = Hit {
                    document_id: Uuid::from_u128(*doc),
                    job_id: None,
                    filename: format!("{doc}.txt"),
                    chunk_index: 0,
                    text: (*text).into(),
                    score: cosine(q, &local_embedding(text)),
                };
                (order, hit)
            })
            .filter(|(_, h)| h.score >= min_score)
            .collect()
    }

    #[test]
    fn the_shortlist_keeps_the_best_whatever_is_offered() {
        let mut list = Shortlist::new(3);
        for i in 0..10_000u32 {
            // Scores rise and fall; 9_999, 9_998 and 9_997 score best.
            let score = if i % 2 == 0 { i as f32 } else { -(i as f32) };
            list.offer(Scored {
                score,
                order: i as usize,
                document_id: Uuid::nil(),
                chunk_index: i as i32,
            });
            assert!(list.heap.len() <= 3);
        }
        let kept: Vec<i32> = list.into_vec().iter().map(|s| s.chunk_index).collect();
        assert_eq!(kept, [9_998, 9_996, 9_994]);
        // Equal scores: the newer document (earlier in the scan) is kept.
        let mut list = Shortlist::new(1);
        for order in [5, 1, 3] {
            list.offer(Scored {
                score: 0.5,
                order,
                document_id: Uuid::nil(),
                chunk_index: order as i32,
            });
        }
        assert_eq!(list.into_vec()[0].order, 1);
    }

    #[test]
    fn a_passage_found_twice_is_shown_once_from_the_newest_upload() {
        let q = local_embedding("warehouse revenue");
        let text = "The warehouse revenue grew in the north.";
        let hits = best(scored(&[(2, text), (1, text)], &q, 0.12), 10);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].document_id, Uuid::from_u128(2));
    }

    #[test]
    fn chance_similarity_over_many_passages_is_no_result() {
        // Thousands of ordinary sentences: hashed into 384 dimensions, some
        // score above the threshold for words none of them holds.
        let vocabulary = [
            "harbour",
            "ledger",
            "invoice",
            "river",
            "quarterly",
            "revenue",
            "north",
            "meeting",
            "engine",
            "garden",
            "policy",
            "customer",
            "shipment",
            "report",
            "winter",
            "budget",
            "office",
            "contract",
            "supplier",
            "train",
            "window",
            "market",
            "signal",
            "copper",
        ];
        let mut seed = 7u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        let texts: Vec<String> = (0..3_000)
            .map(|_| {
                let words: Vec<&str> = (0..12)
                    .map(|_| vocabulary[next(vocabulary.len())])
                    .collect();
                format!("The {} run {}.", words.join(" "), next(1_000_000))
            })
            .collect();
        let rows: Vec<(u128, &str)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u128, t.as_str()))
            .collect();
        let query = "qqzxv vvkjw plorb";
        let by_score = scored(&rows, &local_embedding(query), 0.12);
        assert!(
            !by_score.is_empty(),
            "the input no longer shows chance matches"
        );
        let words = query_words(query);
        assert!(by_score
            .iter()
            .all(|(_, h)| !shares_a_word(&words, &h.text)));
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
    fn unrelated_passages_are_not_results() {
        let rows = [
            (
                1,
                "The quarterly report shows revenue grew in the northern region.",
            ),
            (
                2,
                "Section notes describe ordinary operational matters in plain words.",
            ),
        ];
        let q = local_embedding("zebra xylophone");
        assert!(best(scored(&rows, &q, 0.12), 10).is_empty());
        assert_eq!(
            best(scored(&rows[..1], &local_embedding("revenue"), 0.12), 10).len(),
            1
        );
    }
}
