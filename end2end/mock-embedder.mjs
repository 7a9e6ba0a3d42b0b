// An OpenAI-compatible embedding endpoint for the browser tests, so a test
// can break the embedding service for one document and fix it again, the
// way a real outage comes and goes.
//
//   POST /v1/embeddings   {"model", "input": [..]} → {"data": [{"index", "embedding"}]}
//                         503 while any input contains a broken marker
//   POST /control/break   {"marker": "..."}  inputs containing it get 503
//   POST /control/slow    {"marker": "...", "ms": n}  inputs containing it
//                         are answered n ms late (a slow service)
//   POST /control/fix     {"marker": "..."}  they work again, at full speed
//
// Embeddings are docflow's `local` ones (hashed word, bigram and character
// trigram features, 384 dimensions, L2-normalised), so search behaves the
// same as with the built-in embedder.
// Run: node mock-embedder.mjs <port>
import { createServer } from "node:http";
import { createHash } from "node:crypto";

const DIMS = 384;
const broken = new Set();
// Marker → extra milliseconds before answering.
const slow = new Map();

function bucket(feature) {
  const h = createHash("sha256").update(feature, "utf8").digest();
  return [Number(h.readBigUInt64LE(0) % BigInt(DIMS)), h[8] & 1 ? -1 : 1];
}

function embedding(text) {
  const features = new Map();
  const add = (f, weight) => {
    const e = features.get(f) ?? [weight, 0];
    e[1] += 1;
    features.set(f, e);
  };
  const words = text.split(/[^\p{L}\p{N}]+/u).filter((w) => w.length > 0).map((w) => w.toLowerCase());
  for (const w of words) {
    add(`w:${w}`, 2.0);
    const chars = Array.from(` ${w} `);
    for (let i = 0; i + 3 <= chars.length; i++) add(`c:${chars.slice(i, i + 3).join("")}`, 0.5);
  }
  for (let i = 0; i + 1 < words.length; i++) add(`b:${words[i]} ${words[i + 1]}`, 1.5);
  const v = new Array(DIMS).fill(0);
  for (const [f, [weight, n]] of features) {
    const [i, sign] = bucket(f);
    v[i] += sign * weight * (1 + Math.log(n));
  }
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return norm > 0 ? v.map((x) => x / norm) : v;
}

function reply(res, status, body) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

const server = createServer((req, res) => {
  let raw = "";
  req.setEncoding("utf8");
  req.on("data", (c) => (raw += c));
  req.on("end", () => {
    let body;
    try {
      body = raw ? JSON.parse(raw) : {};
    } catch {
      return reply(res, 400, { error: { message: "the body is not JSON" } });
    }
    if (req.method === "POST" && req.url.startsWith("/control/")) {
      if (typeof body.marker !== "string" || body.marker === "") return reply(res, 400, { error: { message: "marker is required" } });
      if (req.url === "/control/break") broken.add(body.marker);
      else if (req.url === "/control/slow") {
        if (!Number.isInteger(body.ms) || body.ms < 0) return reply(res, 400, { error: { message: "ms must be a whole number" } });
        slow.set(body.marker, body.ms);
      } else if (req.url === "/control/fix") {
        broken.delete(body.marker);
        slow.delete(body.marker);
      } else return reply(res, 404, { error: { message: "not found" } });
      return reply(res, 200, { broken: [...broken], slow: Object.fromEntries(slow) });
    }
    if (req.method === "POST" && req.url === "/v1/embeddings") {
      const input = Array.isArray(body.input) ? body.input : [body.input];
      if (input.some((t) => typeof t !== "string")) return reply(res, 400, { error: { message: "input must be text" } });
      if (input.some((t) => [...broken].some((m) => t.includes(m)))) {
        return reply(res, 503, { error: { message: "the embedding service is down" } });
      }
      const delay = Math.max(0, ...[...slow].filter(([m]) => input.some((t) => t.includes(m))).map(([, ms]) => ms));
      const answer = {
        object: "list",
        model: body.model ?? "mock",
        data: input.map((t, index) => ({ object: "embedding", index, embedding: embedding(t) })),
      };
      return void setTimeout(() => reply(res, 200, answer), delay);
    }
    reply(res, 404, { error: { message: "not found" } });
  });
});

server.listen(Number(process.argv[2] ?? 3918), "127.0.0.1");
