import { ChildProcess, execSync, spawn } from "node:child_process";
import { once } from "node:events";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test, expect, hydrated, login, tag } from "./helpers";

// A change of the embedding model, as an operator lives it: a deployment of
// its own (database, vhost, port) embeds documents with the local model,
// restarts with another (the mock endpoint's), and the dashboard's card
// follows the background re-embedding, pauses and resumes it, until it is
// finished. Search answers meanwhile.

const shots = path.join(__dirname, "..", "screenshots");
const shared = new URL(process.env.DOCFLOW_E2E_URL ?? "http://127.0.0.1:3917");
const port = Number(shared.port) + 5;
const origin = `http://127.0.0.1:${port}`;
const db = `docflow_e2e_reembed_${port}`;
const vhost = `docflow-e2e-reembed-${port}`;
const embedder = process.env.DOCFLOW_E2E_EMBEDDER ?? "http://127.0.0.1:3918";
const docflow = path.join(__dirname, "..", "..", "target", "debug", "docflow");
const DOCUMENTS = 30;

function sh(cmd: string) {
  execSync(cmd, { stdio: "ignore" });
}

/** `docflow run --demo` of this test, with `env` over the shared settings. */
function start(work: string, env: Record<string, string>): ChildProcess {
  const log = fs.openSync(path.join(work, "docflow.log"), "a");
  return spawn(docflow, ["run", "--demo"], {
    env: {
      ...process.env,
      DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${db}`,
      AMQP_URL: `amqp://guest:guest@127.0.0.1:5672/${vhost}`,
      DOCFLOW_LISTEN: `127.0.0.1:${port}`,
      DOCFLOW_DATA_DIR: path.join(work, "data"),
      ...env,
    },
    stdio: ["ignore", log, log],
  });
}

async function ready(work: string) {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const status = await fetch(`${origin}/readyz`).then((r) => r.status, () => 0);
    if (status === 200) return;
    if (Date.now() > deadline) {
      const log = fs.readFileSync(path.join(work, "docflow.log"), "utf8");
      throw new Error(`docflow did not become ready (${status}):\n${log.slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function stop(p: ChildProcess) {
  if (p.exitCode !== null) return;
  const exited = once(p, "exit");
  p.kill("SIGTERM");
  await exited;
}

test("a model change re-embeds in the background; the dashboard follows, pauses and resumes it", async ({ browser }) => {
  test.setTimeout(300_000);
  const run = tag();
  const marker = `ledgermark${run}`;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "docflow-reembed-"));
  sh(`psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS ${db} WITH (FORCE)"`);
  sh(`rabbitmqctl -q delete_vhost ${vhost} || true`);
  sh(`rabbitmqctl -q add_vhost ${vhost}`);
  sh(`rabbitmqctl -q set_permissions -p ${vhost} guest '.*' '.*' '.*'`);
  let server = start(work, { DOCFLOW_EMBEDDER: "local" });
  const context = await browser.newContext({ baseURL: origin });
  const contexts = [context];
  try {
    await ready(work);
    // The earlier deploy: documents embedded with the local model.
    const page = await context.newPage();
    await login(page, "alice@acme.test");
    const jobs: string[] = [];
    for (let i = 0; i < DOCUMENTS; i++) {
      const text = `Quarterly ledger ${i} ${marker}: the north region closed the quarter with ${1000 + i} orders.`;
      const resp = await page.request.post("/api/documents", {
        multipart: { file: { name: `ledger-${i}.txt`, mimeType: "text/plain", buffer: Buffer.from(text) } },
      });
      expect(resp.status(), await resp.text()).toBe(202);
      jobs.push((await resp.json()).job_id);
    }
    for (const id of jobs) {
      await expect
        .poll(async () => (await (await page.request.get(`/api/jobs/${id}`)).json()).state, { timeout: 60_000 })
        .toBe("done");
    }
    await stop(server);

    // The next deploy embeds with the mock endpoint's model, slowed down
    // for these documents so that the run lasts a while.
    await fetch(`${embedder}/control/slow`, { method: "POST", body: JSON.stringify({ marker, ms: 400 }) });
    server = start(work, {
      DOCFLOW_EMBEDDER: "openai",
      DOCFLOW_EMBED_URL: embedder,
      DOCFLOW_EMBED_MODEL: "docflow-mock-next",
      DOCFLOW_EMBED_DIMS: "384",
    });
    await ready(work);
    // The operator, in a browser of their own.
    const operator = await browser.newContext({ baseURL: origin });
    contexts.push(operator);
    const admin = await operator.newPage();
    await login(admin, "admin@demo.test");
    await admin.goto("/admin");
    await hydrated(admin);
    const card = admin.getByRole("article", { name: "Re-embedding" });
    await expect(card).toBeVisible({ timeout: 30_000 });
    await expect(card).toContainText("docflow-local-hash → docflow-mock-next");
    await expect(card).toContainText(`of ${DOCUMENTS}`);
    await expect(card.getByRole("progressbar", { name: "Documents re-embedded" })).toHaveAttribute(
      "aria-valuemax",
      String(DOCUMENTS),
    );

    // Search answers while the documents are re-embedded.
    const hits = await admin.request.get(`/api/search?q=${marker}&k=5`);
    expect(hits.status()).toBe(200);
    expect((await hits.json()).length).toBeGreaterThan(0);

    await admin.getByRole("region", { name: "Queues" }).screenshot({ path: path.join(shots, "reembed-light.png") });
    // Pause: the card says so (that nothing is taken meanwhile is the
    // integration test's).
    await card.getByRole("button", { name: "Pause re-embedding" }).click();
    await expect(admin.getByText("Paused re-embedding")).toBeVisible();
    await expect(card.locator(".badge.paused")).toBeVisible({ timeout: 15_000 });
    await expect(card).toHaveAttribute("data-paused", "true");
    await card.getByRole("button", { name: "Resume re-embedding" }).click();
    await expect(admin.getByText("Resumed re-embedding")).toBeVisible();
    await expect(card).toContainText("Finished at", { timeout: 120_000 });
    await expect(card).toContainText(`${DOCUMENTS} of ${DOCUMENTS} documents`);
    await expect(card.getByRole("button")).toHaveCount(0);
  } finally {
    for (const c of contexts) await c.close();
    await stop(server);
    await fetch(`${embedder}/control/fix`, { method: "POST", body: JSON.stringify({ marker }) }).catch(() => {});
    sh(`psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS ${db} WITH (FORCE)"`);
    sh(`rabbitmqctl -q delete_vhost ${vhost} || true`);
  }
});
