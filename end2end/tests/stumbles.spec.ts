import { Page } from "@playwright/test";
import { test, expect, CORRUPT_PDF, deadLetterOf, hydrated, login, tag, uploadViaApi } from "./helpers";

// What a new user and an operator stumbled on (issue 18): dead letters that
// hide their errors and re-enqueue a hopeless job without a word, a list
// that needs a reload, a second copy of a file kept without asking, search
// results without a way to their job.

function row(page: Page, name: string) {
  return page.getByRole("row").filter({ has: page.getByRole("rowheader", { name, exact: true }) });
}

/** A corrupt PDF of its own bytes (so no earlier upload makes it a duplicate). */
function brokenPdf(run: string): Buffer {
  return Buffer.concat([CORRUPT_PDF, Buffer.from(` ${run}`)]);
}

/** Waits until the job is `state` (any session of its tenant, or an admin's). */
async function waitState(page: Page, jobId: string, state: string) {
  await expect
    .poll(async () => (await (await page.request.get(`/api/jobs/${jobId}`)).json()).state, { timeout: 30_000 })
    .toBe(state);
}

/** Marks the page: a reload would lose the mark. */
async function markNoReload(page: Page) {
  await page.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));
}

async function stillNoReload(page: Page) {
  expect(await page.evaluate(() => (window as unknown as { noReload?: boolean }).noReload)).toBe(true);
}

test("a dead letter shows its error inline, and re-enqueueing a permanent failure asks first", async ({ page }) => {
  await login(page, "admin@demo.test");
  const run = tag();
  const name = `stumble-broken-${run}.pdf`;
  const jobId = await uploadViaApi(page, name, brokenPdf(run), "application/pdf");
  const dl = await deadLetterOf(page, jobId);
  expect(dl.reason).toBe("permanent");

  await page.goto("/admin/dead-letters");
  await hydrated(page);
  const r = row(page, name);
  // The error is in the row without a click, the reason a badge, the queue
  // named as on the dashboard, the attempts as on the job page.
  await expect(r.getByRole("cell").filter({ hasText: "the PDF is damaged" })).toBeVisible();
  await expect(r.locator(".badge.reason")).toHaveText("permanent");
  await expect(r.getByRole("cell", { name: "high", exact: true })).toBeVisible();
  await expect(r).not.toContainText("docflow.jobs");
  const attempts = (await r.locator("td.num").textContent())?.trim();
  expect(attempts).toBe("1");

  // Re-enqueue asks first; Cancel changes nothing.
  await r.getByRole("button", { name: `Re-enqueue ${name}` }).click();
  const confirm = page.getByRole("group", { name: `Confirm re-enqueueing ${name}` });
  await expect(confirm).toContainText("failed permanently: it will fail again unless its cause changed");
  await expect(confirm.getByRole("button", { name: "Cancel" })).toBeFocused();
  await confirm.getByRole("button", { name: "Cancel" }).click();
  await expect(confirm).toHaveCount(0);
  await expect(r).toBeVisible();
  const job = await (await page.request.get(`/api/jobs/${jobId}`)).json();
  expect(job.state, "nothing was re-enqueued").toBe("failed");

  // Yes re-enqueues it.
  await r.getByRole("button", { name: `Re-enqueue ${name}` }).click();
  await confirm.getByRole("button", { name: "Re-enqueue anyway" }).click();
  await expect(page.getByRole("status")).toContainText(`Re-enqueued ${name}; its job is pending again.`);

  // Its job page counts the same attempts: the header, the steps and the timeline.
  await waitState(page, jobId, "failed");
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  const fact = (label: string) => page.locator(".facts > div").filter({ has: page.getByText(label, { exact: true }) }).locator("dd");
  await expect(fact("Attempts")).toHaveText("2");
  const timeline = page.getByRole("list", { name: "Timeline" });
  await expect(timeline.getByText(/^attempt \d+ started$/)).toHaveText(["attempt 1 started", "attempt 2 started"]);
  const parse = page.getByRole("row").filter({ has: page.getByRole("rowheader", { name: "parse", exact: true }) });
  await expect(parse.getByRole("cell").nth(1)).toHaveText("2");
  await expect(fact("Dead-lettered")).toContainText("in the dead-letter list for");
  await expect(fact("Dead-lettered")).toContainText("dead for");
});

test("the dead-letter list updates live: new dead letters and ones that fail again after a re-enqueue appear without a reload", async ({
  page,
}) => {
  test.setTimeout(90_000);
  await login(page, "admin@demo.test");
  const run = tag();
  await page.goto("/admin/dead-letters?reason=permanent");
  await hydrated(page);
  await markNoReload(page);

  // A job that fails while the list is open appears in it.
  const name = `stumble-live-${run}.pdf`;
  const jobId = await uploadViaApi(page, name, brokenPdf(run), "application/pdf");
  const r = row(page, name);
  await expect(r).toBeVisible({ timeout: 30_000 });

  // Re-enqueued while still corrupt, it leaves the list, fails again and comes back.
  await r.getByRole("button", { name: `Re-enqueue ${name}` }).click();
  await page.getByRole("group", { name: `Confirm re-enqueueing ${name}` }).getByRole("button", { name: "Re-enqueue anyway" }).click();
  await expect(page.getByRole("status")).toContainText(`Re-enqueued ${name}`);
  await expect(page.getByRole("status")).toContainText(`${name} failed again after its re-enqueue`, { timeout: 30_000 });
  await expect(r).toBeVisible();
  await expect(r.locator("td.num")).toHaveText("2");
  const job = await (await page.request.get(`/api/jobs/${jobId}`)).json();
  expect(job.attempt).toBe(2);
  await stillNoReload(page);
});

test("dead letters filter by reason, queue and tenant in the URL, and bulk discard asks as a single one does", async ({ page }) => {
  await login(page, "admin@demo.test");
  const run = tag();
  const names = [1, 2].map((i) => `stumble-bulk-${run}-${i}.pdf`);
  for (const name of names) {
    const jobId = await uploadViaApi(page, name, brokenPdf(`${run}-${name}`), "application/pdf");
    await deadLetterOf(page, jobId);
  }
  await page.goto("/admin/dead-letters");
  await hydrated(page);

  // The reasons the README lists, and only those.
  const reasons = await page.getByLabel("Reason", { exact: true }).locator("option").evaluateAll((options) =>
    options.map((o) => (o as HTMLOptionElement).value).filter((v) => v !== ""),
  );
  expect(reasons).toEqual(["permanent", "exhausted", "crashed", "malformed", "delivery_limit"]);
  await page.getByLabel("Reason", { exact: true }).selectOption("permanent");
  await expect(page).toHaveURL(/\/admin\/dead-letters\?reason=permanent$/);
  await hydrated(page);
  await page.getByLabel("Tenant", { exact: true }).selectOption("acme");
  await expect(page).toHaveURL(/\?reason=permanent&tenant=acme$/);
  await hydrated(page);
  for (const name of names) await expect(row(page, name)).toBeVisible();
  // acme's uploads go to `high`: none of them is on `normal`.
  await page.getByLabel("Queue", { exact: true }).selectOption("normal");
  await expect(page).toHaveURL(/\?reason=permanent&queue=normal&tenant=acme$/);
  for (const name of names) await expect(row(page, name)).toHaveCount(0);
  await page.getByLabel("Queue", { exact: true }).selectOption("");
  await expect(page).toHaveURL(/\?reason=permanent&tenant=acme$/);
  await hydrated(page);

  for (const name of names) await page.getByRole("checkbox", { name: `Select ${name}` }).check();
  await page.getByRole("button", { name: "Discard selected (2)" }).click();
  const confirm = page.getByRole("group", { name: "Confirm discarding 2 dead letters" });
  await expect(confirm).toContainText("Discard 2 dead letters for good? Their jobs stay failed.");
  await confirm.getByRole("button", { name: "Cancel" }).click();
  for (const name of names) await expect(row(page, name)).toBeVisible();
  await page.getByRole("button", { name: "Discard selected (2)" }).click();
  await confirm.getByRole("button", { name: "Confirm discard" }).click();
  await expect(page.getByRole("status")).toContainText("Discarded 2 dead letters; their jobs stay failed.");
  for (const name of names) await expect(row(page, name)).toHaveCount(0);
  await page.reload();
  await hydrated(page);
  for (const name of names) await expect(row(page, name)).toHaveCount(0);
});

test("at phone width each dead letter is a card with its buttons in view", async ({ page }) => {
  await login(page, "admin@demo.test");
  const run = tag();
  const name = `stumble-phone-${run}.pdf`;
  await deadLetterOf(page, await uploadViaApi(page, name, brokenPdf(run), "application/pdf"));
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/admin/dead-letters?reason=permanent");
  await hydrated(page);
  const r = row(page, name);
  for (const button of [`Re-enqueue ${name}`, `Discard ${name}`]) {
    const b = r.getByRole("button", { name: button });
    await b.scrollIntoViewIfNeeded();
    await expect(b).toBeInViewport();
    const box = await b.boundingBox();
    expect(box, button).not.toBeNull();
    expect(box!.x).toBeGreaterThanOrEqual(0);
    expect(box!.x + box!.width).toBeLessThanOrEqual(390);
  }
  const card = await r.boundingBox();
  expect(card!.width).toBeLessThanOrEqual(390);
});

test("uploading a file again asks first, and only yes keeps a second copy", async ({ page }) => {
  await login(page, "alice@acme.test");
  const run = tag();
  const name = `stumble-ledger-${run}.txt`;
  const file = { name, mimeType: "text/plain", buffer: Buffer.from(`The ledger ${run} lists the harbour fees of the year.\n`) };
  await page.getByLabel("Choose files").setInputFiles(file);
  const card = page.getByRole("listitem", { name });
  await expect(card).toHaveCount(1, { timeout: 30_000 });
  await expect(card).toContainText("Uploaded");
  const today = new Date().toISOString().slice(0, 10);

  // The same bytes under another name: asked, and "Don't upload" keeps nothing.
  const copy = `stumble-copy-${run}.txt`;
  await page.getByLabel("Choose files").setInputFiles({ ...file, name: copy });
  const question = page.getByRole("group", { name: `${copy} was uploaded before` });
  await expect(question).toContainText(`You uploaded this file on ${today} as ${name}; upload it again?`);
  await question.getByRole("button", { name: "Don't upload" }).click();
  await expect(question).toHaveCount(0);
  // The answer's buttons went with it: the focus is on the picker, not the
  // top of the page.
  await expect(page.getByLabel("Choose files")).toBeFocused();
  await expect(page.getByRole("listitem", { name: copy })).toHaveCount(0);
  let jobs = (await (await page.request.get("/api/jobs?limit=200")).json()).jobs;
  expect(jobs.filter((j: { filename: string }) => j.filename === copy)).toHaveLength(0);

  // Asked again, Escape is "Don't upload"; a third time, "Upload again"
  // keeps the copy.
  await page.getByLabel("Choose files").setInputFiles({ ...file, name: copy });
  await question.getByRole("button", { name: "Upload again" }).focus();
  await page.keyboard.press("Escape");
  await expect(question).toHaveCount(0);
  await expect(page.getByRole("listitem", { name: copy })).toHaveCount(0);
  await page.getByLabel("Choose files").setInputFiles({ ...file, name: copy });
  await question.getByRole("button", { name: "Upload again" }).click();
  await expect(page.getByRole("listitem", { name: copy })).toHaveCount(1, { timeout: 30_000 });
  jobs = (await (await page.request.get("/api/jobs?limit=200")).json()).jobs;
  expect(jobs.filter((j: { filename: string }) => j.filename === copy)).toHaveLength(1);
});

test("search says when no passage matches, and a hit's file name leads to its job", async ({ page }) => {
  await login(page, "alice@acme.test");
  const run = tag();
  const name = `stumble-harbour-${run}.txt`;
  const sentence = `The harbourmaster ${run} counts the cormorants on the breakwater every dawn.`;
  const jobId = await uploadViaApi(page, name, Buffer.from(`${sentence}\n`), "text/plain");
  await waitState(page, jobId, "done");

  await page.goto("/search");
  await hydrated(page);
  const box = page.getByLabel("Search your documents");
  await box.fill(`qqzx${run} vvkjw`);
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.getByText("No passages match. Try other words.")).toBeVisible();

  // An empty search leaves no empty parameter behind.
  await box.fill("");
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page).toHaveURL(/\/search$/);

  await box.fill(`harbourmaster ${run} cormorants breakwater`);
  await page.getByRole("button", { name: "Search" }).click();
  // Spaces travel as '+', as a browser's own form would send them.
  await expect(page).toHaveURL(new RegExp(`/search\\?q=harbourmaster\\+${run}\\+cormorants\\+breakwater$`));
  const hit = page.getByRole("list", { name: "Results" }).getByRole("listitem").filter({ hasText: name });
  await expect(hit).toHaveCount(1);
  await expect(hit.getByRole("img", { name: /^Relevance: / })).toBeVisible();
  await expect(hit).not.toContainText(/score|0\.\d{3}/);
  const link = hit.getByRole("link", { name });
  await expect(link).toHaveAttribute("href", `/jobs/${jobId}`);
  await link.click();
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}$`));
  await expect(page.getByRole("heading", { name })).toBeVisible();
});

// Issue 38: `/favicon.ico` answered 404 on every page, a console error each
// time.
test("pages name a favicon that exists, and loading one logs no missing file", async ({ page }) => {
  const missing: string[] = [];
  page.on("response", (r) => {
    if (r.status() === 404) missing.push(r.url());
  });
  await page.goto("/login");
  await hydrated(page);
  const icons = await page.locator('link[rel="icon"]').evaluateAll((links) =>
    links.map((l) => (l as HTMLLinkElement).getAttribute("href")),
  );
  expect(icons).toEqual(["/favicon.svg", "/favicon.ico"]);
  for (const href of [...icons, "/favicon.ico"]) {
    const r = await page.request.get(href!);
    expect(r.status(), href!).toBe(200);
    expect(r.headers()["content-type"], href!).toMatch(/^image\//);
  }
  expect(missing).toEqual([]);
});

// Issue 38: `.csv` and `.tsv` were refused in the browser though the server
// reads them as text; the browser and the server worded a refusal each
// their own way.
test("CSV and TSV exports upload and reach done, and a refused type reads the same from the browser and the server", async ({
  page,
}) => {
  await login(page, "alice@acme.test");
  const run = tag();
  const files = [
    { name: `stumble-sales-${run}.csv`, mimeType: "text/csv", buffer: Buffer.from(`Region,Q1\nNorth ${run},1200\n`) },
    { name: `stumble-stock-${run}.tsv`, mimeType: "text/tab-separated-values", buffer: Buffer.from(`Item\tCount\nrope ${run}\t7\n`) },
  ];
  const accept = await page.getByLabel("Choose files").getAttribute("accept");
  for (const f of files) {
    expect(accept).toContain(`.${f.name.split(".").pop()}`);
    await page.getByLabel("Choose files").setInputFiles(f);
    const bar = page.getByRole("listitem", { name: f.name }).getByRole("progressbar");
    await expect(bar).toHaveAttribute("aria-valuetext", "done", { timeout: 30_000 });
  }

  await page.getByLabel("Choose files").setInputFiles({ name: `photo-${run}.gif`, mimeType: "image/gif", buffer: Buffer.from("x") });
  const browser = page.getByRole("alert").filter({ hasText: `photo-${run}.gif` });
  await expect(browser).toContainText(`photo-${run}.gif cannot be uploaded: only PDF`);
  const words = /cannot be uploaded: (.*? are accepted)/.exec(await browser.innerText())?.[1] ?? "";
  expect(words).toContain("only PDF");
  // The server's refusal of the same file, sent past the browser's check.
  const gif = Buffer.from([0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 1, 0, 1, 0, 0x80, 0, 0, 0, 0, 0]);
  const r = await page.request.post("/api/documents", {
    multipart: { file: { name: `photo-${run}.gif`, mimeType: "image/gif", buffer: gif } },
  });
  expect(r.status()).toBe(415);
  expect((await r.json()).error.message).toContain(words);
});

test("a member's Retry of a permanent failure says first that it will fail again; Escape keeps the job as it is", async ({
  page,
}) => {
  await login(page, "alice@acme.test");
  const run = tag();
  const name = `member-broken-${run}.pdf`;
  const jobId = await uploadViaApi(page, name, brokenPdf(run), "application/pdf");
  await waitState(page, jobId, "failed");
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  const retry = page.getByRole("button", { name: "Retry", exact: true });
  await retry.click();
  const confirm = page.getByRole("group", { name: "Confirm retrying a permanent failure" });
  await expect(confirm).toContainText(`${name} failed for good: a retry fails the same way unless its cause changed`);
  await expect(confirm.getByRole("button", { name: "Don't retry" })).toBeFocused();
  await page.keyboard.press("Escape");
  await expect(confirm).toHaveCount(0);
  await expect(retry).toBeFocused();
  expect((await (await page.request.get(`/api/jobs/${jobId}`)).json()).state).toBe("failed");

  // Asked again, a yes retries it: it fails again, as it said.
  await retry.click();
  await confirm.getByRole("button", { name: "Retry anyway" }).click();
  await expect(page.getByRole("status")).toContainText("Retrying; the job is pending again.");
  await expect(confirm).toHaveCount(0);
  await expect(page.locator(".page-head .badge")).toHaveText("failed", { timeout: 30_000 });
});

test("a bulk retry says how many of its jobs failed permanently before it runs", async ({ page }) => {
  await login(page, "admin@demo.test");
  const run = tag();
  const ids: string[] = [];
  for (const part of ["a", "b"]) {
    ids.push(await uploadViaApi(page, `bulk-broken-${run}-${part}.pdf`, brokenPdf(`${run}${part}`), "application/pdf"));
  }
  for (const id of ids) await waitState(page, id, "failed");
  await page.goto(`/admin/jobs?state=failed&q=bulk-broken-${run}`);
  await hydrated(page);
  await page.getByRole("region", { name: "Bulk actions" }).getByRole("button", { name: "Retry 2 jobs" }).click();
  const dialog = page.getByRole("alertdialog");
  await expect(dialog).toContainText(`Retry all 2 failed jobs of all tenants whose filename contains “bulk-broken-${run}”?`);
  await expect(dialog).toContainText("All 2 failed permanently: they will fail again unless their cause changed");
  await dialog.getByRole("button", { name: "Go back" }).click();
  await expect(dialog).toHaveCount(0);
});

test("an upload under way can be cancelled, and the server keeps nothing of it", async ({ page }) => {
  test.setTimeout(90_000);
  await login(page, "alice@acme.test");
  await hydrated(page);
  // A slow line: 3 MB at 64 kB/s takes most of a minute to send.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.emulateNetworkConditions", {
    offline: false,
    latency: 0,
    downloadThroughput: -1,
    uploadThroughput: 64 * 1024,
  });
  const run = tag();
  const name = `cancelled-upload-${run}.txt`;
  await page
    .getByLabel("Choose files")
    .setInputFiles({ name, mimeType: "text/plain", buffer: Buffer.from(`A long ${run} survey.\n`.repeat(150_000)) });
  const card = page.getByRole("listitem").filter({ hasText: name });
  await expect(card.getByText(/Uploading… \d+%/)).toBeVisible();
  await card.getByRole("button", { name: `Cancel the upload of ${name}` }).click();
  await expect(card).toHaveCount(0);
  await expect(page.getByLabel("Choose files")).toBeFocused();
  await expect(page.locator("#upload-announcer")).toHaveText(`Upload of ${name} cancelled; nothing of it was kept.`);
  await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  // No job and no document of it, then or a moment later.
  await page.waitForTimeout(2_000);
  const jobs = await (await page.request.get("/api/jobs?limit=200")).json();
  expect(JSON.stringify(jobs)).not.toContain(name);
});

test("a member's page of a 500-chunk document speaks of the document and keeps its timeline to the state changes", async ({
  page,
}) => {
  test.setTimeout(120_000);
  await login(page, "alice@acme.test");
  const run = tag();
  const name = `handbook-${run}.txt`;
  // About 900 KB of prose: more than 500 chunks of about 1,800 characters.
  const paragraph = (i: number) =>
    `Section ${i} of the ${run} handbook says how the fleet keeps its vans on the road in winter. `.repeat(3);
  const text = Array.from({ length: 3000 }, (_, i) => paragraph(i)).join("\n\n");
  const jobId = await uploadViaApi(page, name, Buffer.from(text), "text/plain");
  await expect
    .poll(async () => (await (await page.request.get(`/api/jobs/${jobId}`)).json()).state, { timeout: 100_000 })
    .toBe("done");
  const job = await (await page.request.get(`/api/jobs/${jobId}`)).json();
  const chunks: number = job.progress.chunks_total;
  expect(chunks).toBeGreaterThanOrEqual(500);
  // Its embedding reported progress batch by batch on the way.
  const all = await (await page.request.get(`/api/jobs/${jobId}/events`)).text();
  expect((all.match(/"embed \d+\/\d+"/g) ?? []).length, "progress events").toBeGreaterThan(3);

  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  // One line of the timeline for the whole embedding, its count and rate in the step's row.
  const timeline = page.getByRole("list", { name: "Timeline" });
  await expect(timeline.getByText(/^embed \d+\/\d+/)).toHaveText([`embed ${chunks}/${chunks} done`]);
  expect(await timeline.locator("li").count()).toBeLessThanOrEqual(12);
  const embed = page.getByRole("row").filter({ has: page.getByRole("rowheader", { name: "embed", exact: true }) });
  await expect(embed).toContainText(`${chunks}/${chunks} chunks`);
  expect(await page.evaluate(() => document.documentElement.scrollHeight)).toBeLessThan(4000);

  // The member reads about their document: received, done, how long it took.
  await expect(timeline.locator("li").first()).toContainText("received, waiting for a worker");
  const facts = page.locator(".facts");
  for (const word of ["Queue", "Attempts", "Tenant", "Enqueued", "Dead-lettered"]) {
    await expect(facts.getByText(word, { exact: true })).toHaveCount(0);
  }
  await expect(facts).toContainText("Total time");
  await expect(page.locator("main")).not.toContainText(/queue|dead.letter/i);
  await page.goto("/");
  await hydrated(page);
  await expect(page.getByRole("listitem", { name })).not.toContainText(/queue|attempt/i);
});

test("re-enqueue all that match takes every dead letter of the filter, after a question that counts them", async ({
  page,
}) => {
  await login(page, "bob@globex.test");
  const run = tag();
  const names = [1, 2].map((i) => `stumble-all-${run}-${i}.pdf`);
  const jobs: string[] = [];
  for (const name of names) jobs.push(await uploadViaApi(page, name, brokenPdf(`${run}-${name}`), "application/pdf"));
  await page.context().clearCookies();
  await login(page, "admin@demo.test");
  for (const id of jobs) await deadLetterOf(page, id);
  const ids = async (tenant: string) =>
    ((await (await page.request.get(`/api/admin/dead-letters?tenant=${tenant}&limit=500`)).json()) as { id: string }[])
      .map((d) => d.id)
      .sort();
  const matching = (await ids("globex")).length;
  const acme = await ids("acme");

  await page.goto("/admin/dead-letters?tenant=globex");
  await hydrated(page);
  const all = page.getByRole("button", { name: `Re-enqueue all ${matching} that match` });
  await all.click();
  const confirm = page.getByRole("group", { name: "Confirm re-enqueueing every matching dead letter" });
  await expect(confirm).toContainText(`Re-enqueue all ${matching} dead letters that match these filters, on every page?`);
  await expect(confirm).toContainText("failed permanently");
  await confirm.getByRole("button", { name: "Cancel" }).click();
  await expect(confirm).toHaveCount(0);
  expect(await ids("globex"), "nothing re-enqueued on Cancel").toHaveLength(matching);

  await all.click();
  await confirm.getByRole("button", { name: "Re-enqueue all" }).click();
  await expect(page.getByRole("status").first()).toContainText(`Re-enqueued ${matching} dead letters`);
  // Each ran again (still corrupt, so it fails again); acme's stayed put.
  for (const id of jobs) {
    await expect.poll(async () => (await (await page.request.get(`/api/jobs/${id}`)).json()).attempt).toBe(2);
  }
  expect(await ids("acme")).toEqual(acme);
});
