import { APIRequestContext, Page } from "@playwright/test";
import { test, expect, CORRUPT_PDF, deadLetterOf, hydrated, login, PASSWORD, pauseQueue, tag, uploadViaApi, embedderControl } from "./helpers";

function row(page: Page, name: string) {
  return page.getByRole("row").filter({ has: page.getByRole("rowheader", { name, exact: true }) });
}

async function corruptUpload(page: Page, name: string) {
  const jobId = await uploadViaApi(page, name, CORRUPT_PDF, "application/pdf");
  const dl = await deadLetterOf(page, jobId);
  return { jobId, dl };
}

test("a corrupt upload becomes a dead letter that the admin re-enqueues, with a new attempt and an audit row", async ({
  page,
}) => {
  await login(page, "admin@demo.test");
  const name = `broken-${tag()}.pdf`;
  const { jobId, dl } = await corruptUpload(page, name);
  expect(dl.reason).toBe("permanent");

  await page.getByRole("link", { name: "Admin", exact: true }).click();
  await hydrated(page);
  await page.getByRole("navigation", { name: "Admin" }).getByRole("link", { name: "Dead letters" }).click();
  await expect(page).toHaveURL(/\/admin\/dead-letters$/);
  await hydrated(page);
  const r = row(page, name);
  await expect(r).toBeVisible();
  await expect(r).toContainText("permanent");
  await expect(r).toContainText("acme");
  // The error is shown in the row, and a permanent failure asks before it is re-enqueued.
  await expect(r).toContainText("the PDF is damaged");

  await r.getByRole("button", { name: `Re-enqueue ${name}` }).click();
  await r.getByRole("group", { name: `Confirm re-enqueueing ${name}` }).getByRole("button", { name: "Re-enqueue anyway" }).click();
  await expect(row(page, name)).toHaveCount(0);
  await expect(page.getByRole("status")).toContainText(`Re-enqueued ${name}; its job is pending again.`);

  // The job page shows the re-enqueue and the new attempt (which fails again: still corrupt).
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  const timeline = page.getByRole("list", { name: "Timeline" });
  await expect(timeline).toContainText("re-enqueued by an administrator");
  await expect(async () => {
    await page.reload();
    // Attempts count on across the re-enqueue.
    await expect(page.getByRole("list", { name: "Timeline" }).getByText("attempt 2 started")).toHaveCount(1);
  }).toPass({ timeout: 30_000 });

  await page.goto("/admin/audit");
  await hydrated(page);
  const audit = page.getByRole("row").filter({ hasText: dl.id });
  await expect(audit).toContainText("dead_letter.requeue");
  await expect(audit).toContainText("admin@demo.test");
  await expect(audit.getByRole("link", { name })).toHaveAttribute("href", `/jobs/${jobId}`);

  // A time range applies as it is chosen and stays in the URL: the
  // re-enqueue a moment ago is in the last hour.
  await page.getByLabel("When").selectOption("1h");
  await expect(page).toHaveURL(/[?&]since=1h/);
  await expect(audit).toContainText("dead_letter.requeue");
  await page.reload();
  await hydrated(page);
  await expect(page.getByLabel("When")).toHaveValue("1h");
  await expect(audit).toContainText("dead_letter.requeue");
});

test("an admin fixes the cause, re-enqueues the dead letter and watches its job reach done without redoing parse and chunk", async ({
  page,
  request,
}) => {
  test.setTimeout(90_000);
  const run = tag();
  // The embedding service is down for this document.
  const marker = `outage${run}`;
  await embedderControl(request, "break", { marker });
  await login(page, "admin@demo.test");
  const name = `ledger-${run}.txt`;
  const jobId = await uploadViaApi(page, name, Buffer.from(`The ledger ${marker} lists the harbour fees of the year.`), "text/plain");
  const dl = await deadLetterOf(page, jobId);
  expect(dl.reason).toBe("exhausted");

  // The job's page, open in its own tab, says why it failed.
  const jobPage = await page.context().newPage();
  await jobPage.goto(`/jobs/${jobId}`);
  await hydrated(jobPage);
  await expect(jobPage.getByRole("heading", { name: "Why it failed" })).toBeVisible();
  await jobPage.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));

  // The service is back; one click re-enqueues.
  await embedderControl(request, "fix", { marker });
  await page.goto("/admin/dead-letters");
  await hydrated(page);
  const r = row(page, name);
  await expect(r).toContainText("exhausted");
  await r.getByRole("button", { name: `Re-enqueue ${name}` }).click();
  await expect(page.getByRole("status")).toContainText(`Re-enqueued ${name}; its job is pending again.`);
  await expect(row(page, name)).toHaveCount(0);

  // The job page follows it live to done; parse and chunk ran once only.
  await expect(jobPage.locator(".badge.big")).toHaveText("done", { timeout: 30_000 });
  await expect(jobPage.getByRole("list", { name: "Timeline" })).toContainText("re-enqueued by an administrator");
  await expect(jobPage.getByRole("list", { name: "Timeline" })).toContainText("done: the document is searchable");
  const step = (s: string) => jobPage.getByRole("row").filter({ has: jobPage.getByRole("rowheader", { name: s, exact: true }) });
  for (const s of ["parse", "chunk"]) {
    await expect(step(s).getByRole("cell").nth(0)).toHaveText("done");
    await expect(step(s).getByRole("cell").nth(1)).toHaveText("1");
  }
  await expect(step("embed").getByRole("cell").nth(0)).toHaveText("done");
  expect(Number(await step("embed").getByRole("cell").nth(1).textContent())).toBeGreaterThan(1);
  expect(await jobPage.evaluate(() => (window as unknown as { noReload?: boolean }).noReload)).toBe(true);
});

test("three dead letters are re-enqueued at once", async ({ page }) => {
  await login(page, "admin@demo.test");
  const run = tag();
  const names = [1, 2, 3].map((i) => `bulk-${run}-${i}.pdf`);
  for (const name of names) await corruptUpload(page, name);

  await page.goto("/admin/dead-letters");
  await hydrated(page);
  for (const name of names) await page.getByRole("checkbox", { name: `Select ${name}` }).check();
  await page.getByRole("button", { name: "Re-enqueue selected (3)" }).click();
  // They failed permanently: asked first.
  await page.getByRole("group", { name: "Confirm re-enqueueing 3 dead letters" }).getByRole("button", { name: "Re-enqueue anyway" }).click();
  await expect(page.getByRole("status").first()).toContainText("Re-enqueued 3 dead letters");
  await expect(page.getByRole("button", { name: "Re-enqueue selected (0)" })).toBeDisabled();
  // Still corrupt, so each fails again at once and its row comes back live,
  // as a new dead letter of attempt 2.
  for (const name of names) {
    await expect(row(page, name)).toHaveCount(1);
    const job = await page.request.get(`/api/admin/jobs?q=${encodeURIComponent(name)}`);
    const jobs = (await job.json()).jobs;
    expect(jobs).toHaveLength(1);
    await expect.poll(async () => (await (await page.request.get(`/api/jobs/${jobs[0].id}`)).json()).attempt).toBe(2);
  }
});

test("discarding a dead letter asks for confirmation", async ({ page }) => {
  await login(page, "admin@demo.test");
  const name = `discard-${tag()}.pdf`;
  await corruptUpload(page, name);
  await page.goto("/admin/dead-letters");
  await hydrated(page);

  await row(page, name).getByRole("button", { name: `Discard ${name}` }).click();
  const confirm = page.getByRole("group", { name: `Confirm discarding ${name}` });
  await expect(confirm).toBeVisible();
  await confirm.getByRole("button", { name: "Cancel" }).click();
  await expect(row(page, name)).toBeVisible();

  await row(page, name).getByRole("button", { name: `Discard ${name}` }).click();
  await confirm.getByRole("button", { name: "Confirm discard" }).click();
  await expect(row(page, name)).toHaveCount(0);
  await expect(page.getByRole("status")).toContainText(`Discarded ${name}; its job stays failed.`);
  await page.reload();
  await hydrated(page);
  await expect(row(page, name)).toHaveCount(0);
});

test("a member gets the 403 page and sees no admin link", async ({ page }) => {
  await login(page, "alice@acme.test");
  await expect(page.getByRole("link", { name: "Admin", exact: true })).toHaveCount(0);
  for (const path of ["/admin", "/admin/dead-letters", "/admin/jobs", "/admin/audit"]) {
    const resp = await page.goto(path);
    expect(resp?.status(), path).toBe(403);
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "You are not allowed to see this page" })).toBeVisible();
    await expect(page.getByRole("link", { name: "Admin", exact: true })).toHaveCount(0);
  }
  expect((await page.request.get("/api/admin/stats")).status()).toBe(403);
});

test("the dashboard's dead-letter count and queue depths equal /api/admin/stats", async ({ page }) => {
  await login(page, "admin@demo.test");
  await page.goto("/admin");
  await hydrated(page);
  await expect(page.getByRole("heading", { name: "Operations" })).toBeVisible();
  await expect(page.getByRole("img", { name: "Queue depth" })).toBeVisible();
  // Its bars are links to the jobs that failed at each step: a group of them.
  await expect(page.getByRole("group", { name: "Failure rate per step" })).toBeVisible();
  // The page refreshes every 5 s; the numbers converge on the API's.
  await expect(async () => {
    const stats = await (await page.request.get("/api/admin/stats?window=1h")).json();
    await expect(page.getByRole("group", { name: "Dead letters" })).toHaveAttribute(
      "data-value",
      String(stats.dead_letters),
      { timeout: 1_000 },
    );
    for (const q of stats.queues) {
      const card = page.getByRole("article", { name: `Queue ${q.queue}` });
      await expect(card.getByRole("group", { name: "Depth" })).toHaveAttribute("data-value", String(q.depth), {
        timeout: 1_000,
      });
      await expect(card.getByRole("group", { name: "Consumers" })).toHaveAttribute("data-value", String(q.consumers), {
        timeout: 1_000,
      });
    }
  }).toPass({ timeout: 30_000 });
  const card = page.getByRole("link", { name: /^Dead letters: \d+\. Open the list/ });
  await card.click();
  await expect(page).toHaveURL(/\/admin\/dead-letters$/);
});

test("an admin pauses a queue from the dashboard; its upload waits until the admin resumes it", async ({ page }) => {
  test.setTimeout(90_000);
  await login(page, "admin@demo.test");
  await page.goto("/admin");
  await hydrated(page);
  // The admin's tenant is on the paid plan: its uploads go to `high`.
  const card = page.getByRole("article", { name: "Queue high" });
  const stats = async () => {
    const all = await (await page.request.get("/api/admin/stats")).json();
    return all.queues.find((q: { queue: string }) => q.queue === "high");
  };
  const state = async (jobId: string) => (await (await page.request.get(`/api/jobs/${jobId}`)).json()).state;
  try {
    // `high` is the paying tenants' queue: its pause asks first, with the
    // focus on keeping it running, and Escape keeps it running.
    await card.getByRole("button", { name: "Pause queue high" }).click();
    const ask = card.getByRole("group", { name: "Confirm pausing queue high" });
    await expect(ask).toContainText("Pause high? Paying tenants' new uploads wait until it is resumed");
    await expect(ask.getByRole("button", { name: "Keep running" })).toBeFocused();
    await page.keyboard.press("Escape");
    await expect(ask).toHaveCount(0);
    await expect(card.getByRole("button", { name: "Pause queue high" })).toBeFocused();
    expect((await stats()).paused).toBe(false);
    await card.getByRole("button", { name: "Pause queue high" }).click();
    await ask.getByRole("button", { name: "Pause high", exact: true }).click();
    await expect(page.getByRole("status")).toContainText("Paused high: workers take no new jobs from it; running jobs finish.");
    await expect(ask).toHaveCount(0);
    await expect(card).toHaveAttribute("data-paused", "true");
    await expect(card.getByText("Paused", { exact: true })).toBeVisible();
    await expect(card.getByRole("button", { name: "Resume queue high" })).toBeVisible();
    expect((await stats()).paused).toBe(true);
    await expect.poll(async () => (await stats()).consumers, { timeout: 15_000 }).toBe(0);

    const name = `paused-${tag()}.txt`;
    const jobId = await uploadViaApi(page, name, Buffer.from("The harbour log waits for its queue to run again."), "text/plain");
    // Its message waits on the queue, ready; no worker takes it.
    await expect.poll(async () => (await stats()).depth, { timeout: 15_000 }).toBeGreaterThanOrEqual(1);
    await expect(card.getByRole("group", { name: "Depth" })).not.toHaveAttribute("data-value", "0");
    await page.waitForTimeout(2_000);
    expect(await state(jobId)).toBe("pending");

    await card.getByRole("button", { name: "Resume queue high" }).click();
    await expect(page.getByRole("status")).toContainText("Resumed high: workers take its jobs again.");
    await expect(card).toHaveAttribute("data-paused", "false");
    await expect(card.getByText("Paused", { exact: true })).toHaveCount(0);
    await expect(card.getByRole("button", { name: "Pause queue high" })).toBeVisible();
    await expect.poll(() => state(jobId), { timeout: 30_000 }).toBe("done");
  } finally {
    // Whatever happened above, the other tests need `high` running.
    await page.request.post("/api/admin/queues/high/resume");
  }
});

test("the admin job list filters by state and filename and links to job pages", async ({ page }) => {
  await login(page, "admin@demo.test");
  const name = `filter-${tag()}.pdf`;
  const { jobId } = await corruptUpload(page, name);
  await page.goto("/admin/jobs");
  await hydrated(page);
  await page.getByLabel("State").selectOption("failed");
  await page.getByLabel("Filename").fill(name);
  await page.getByRole("button", { name: "Apply" }).click();
  await expect(page).toHaveURL(/state=failed/);
  const link = page.getByRole("link", { name, exact: true });
  await expect(link).toBeVisible();
  await expect(page.getByRole("row")).toHaveCount(2);
  await link.click();
  // Opened from the admin list: the job page's breadcrumb leads back there.
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}\\?from=admin$`));
  await hydrated(page);
  await expect(page.getByRole("heading", { name: "Why it failed" })).toBeVisible();
});

/** Logs `request` (its own cookie jar) in as `email` through the API. */
async function apiLogin(request: APIRequestContext, email: string) {
  const resp = await request.post("/api/login", { data: { email, password: PASSWORD } });
  expect(resp.status(), await resp.text()).toBe(200);
}

/** Uploads a small text file as the user `request` is logged in as; returns the job id. */
async function apiUpload(request: APIRequestContext, name: string, text: string): Promise<string> {
  const resp = await request.post("/api/documents", {
    multipart: { file: { name, mimeType: "text/plain", buffer: Buffer.from(text) } },
  });
  expect(resp.status(), await resp.text()).toBe(202);
  return (await resp.json()).job_id;
}

test("an admin cancels every pending job of a tenant by filter after a confirmation that states the count", async ({
  page,
  request,
}) => {
  test.setTimeout(90_000);
  await login(page, "admin@demo.test");
  const run = tag();
  // globex is on the free plan: its uploads go to `normal`, paused here so they wait.
  try {
    await pauseQueue(page, "normal");
    await apiLogin(request, "bob@globex.test");
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await apiUpload(request, `bulk-${run}-${i}.txt`, `Globex memo ${i} of run ${run}.`));

    // The tenant filter takes the start of a slug.
    await page.goto(`/admin/jobs?state=pending&tenant=glob&q=bulk-${run}`);
    await hydrated(page);
    await expect(page.getByRole("row")).toHaveCount(4);
    const cancel = page.getByRole("region", { name: "Bulk actions" }).getByRole("button", { name: "Cancel 3 jobs" });
    await expect(cancel).toBeEnabled();
    await expect(page.getByRole("button", { name: "Retry 0 jobs" })).toBeDisabled();

    // Asked first, with the count from the server; going back changes nothing.
    await cancel.click();
    const dialog = page.getByRole("alertdialog");
    await expect(dialog).toContainText(`Cancel all 3 pending jobs of tenants starting with “glob” whose filename contains “bulk-${run}”?`);
    await dialog.getByRole("button", { name: "Go back" }).click();
    await expect(dialog).toHaveCount(0);
    await expect(page.getByRole("row")).toHaveCount(4);

    await cancel.click();
    await expect(dialog).toContainText("Cancel all 3 pending jobs of tenants starting with “glob”");
    await dialog.getByRole("button", { name: "Cancel 3 jobs" }).click();
    await expect(page.getByRole("status")).toContainText("Cancelled 3 jobs.");
    await expect(dialog).toHaveCount(0);
    await expect(page.getByText("No jobs match these filters.")).toBeVisible();
    await expect(page.getByRole("button", { name: "Cancel 0 jobs" })).toBeDisabled();
    for (const id of ids) {
      const job = await (await page.request.get(`/api/jobs/${id}`)).json();
      expect(job.state, id).toBe("cancelled");
    }
    // The list of cancelled jobs has them.
    await page.getByLabel("State").selectOption("cancelled");
    await page.getByRole("button", { name: "Apply" }).click();
    await expect(page).toHaveURL(/state=cancelled/);
    await expect(page.getByRole("row")).toHaveCount(4);
    // The job page says where it stopped; its uploader is told, by whom.
    await page.goto(`/jobs/${ids[0]}`);
    await hydrated(page);
    await expect(page.getByText("cancelled before it started").first()).toBeVisible();
    const inbox = await (await request.get("/api/notifications")).json();
    const notices = inbox.notifications.filter((n: { job_id: string }) => ids.includes(n.job_id));
    expect(notices.map((n: { kind: string }) => n.kind)).toEqual(["job_cancelled", "job_cancelled", "job_cancelled"]);
    expect(notices[0].body).toContain("Cancelled by an administrator before it started");
  } finally {
    await page.request.post("/api/admin/queues/normal/resume");
  }
});

test("an admin retries a failed job from its row in the job list", async ({ page }) => {
  await login(page, "admin@demo.test");
  const name = `row-retry-${tag()}.pdf`;
  const { jobId } = await corruptUpload(page, name);
  await page.goto(`/admin/jobs?state=failed&q=${encodeURIComponent(name)}`);
  await hydrated(page);
  await row(page, name).getByRole("button", { name: `Retry ${name}` }).click();
  await expect(page.getByRole("status")).toContainText(`Retrying ${name}; it is pending again.`);
  // Its timeline says so, and it ran again (still corrupt: it fails again).
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  await expect(page.getByRole("list", { name: "Timeline" })).toContainText("retried by an administrator");
  await expect(async () => {
    await page.reload();
    await expect(page.getByRole("list", { name: "Timeline" }).getByText(/^attempt \d+ started$/)).toHaveCount(2);
  }).toPass({ timeout: 30_000 });
});

test("the dashboard's tenant table counts each tenant's work, sorts by a column and links to its jobs", async ({
  page,
  request,
}) => {
  // globex has a job of its own here, whatever else this server ran.
  await apiLogin(request, "bob@globex.test");
  await apiUpload(request, `tenant-table-${tag()}.txt`, "A globex memo for the tenant table.");
  await login(page, "admin@demo.test");
  await page.goto("/admin");
  await hydrated(page);
  const table = page.getByRole("table", { name: "Tenants" });
  const tenantRow = (slug: string) => table.locator(`tr[data-tenant="${slug}"]`);
  // The numbers are those of /api/admin/stats (the page refreshes every 5 s).
  await expect(async () => {
    const stats = await (await page.request.get("/api/admin/stats?window=1h")).json();
    expect(stats.tenants.map((t: { tenant: string }) => t.tenant)).toEqual(["acme", "globex"]);
    for (const t of stats.tenants) {
      const cells = tenantRow(t.tenant).getByRole("cell");
      await expect(cells.nth(0)).toHaveText(String(t.unfinished), { timeout: 1_000 });
      await expect(cells.nth(1)).toHaveText(String(t.done), { timeout: 1_000 });
      await expect(cells.nth(2)).toHaveText(String(t.failed), { timeout: 1_000 });
      await expect(cells.nth(3)).toHaveText(String(t.dead_letters), { timeout: 1_000 });
      await expect(cells.nth(4)).toContainText(`${Math.round(t.backlog_share * 100)} %`, { timeout: 1_000 });
    }
  }).toPass({ timeout: 30_000 });

  const firstTenant = () => table.locator("tbody tr").first();
  const header = (name: string) => table.getByRole("columnheader", { name });
  await header("Tenant").getByRole("button").click();
  await expect(header("Tenant")).toHaveAttribute("aria-sort", "ascending");
  await expect(firstTenant()).toHaveAttribute("data-tenant", "acme");
  await header("Tenant").getByRole("button").click();
  await expect(header("Tenant")).toHaveAttribute("aria-sort", "descending");
  await expect(firstTenant()).toHaveAttribute("data-tenant", "globex");
  await expect(header("Done")).toHaveAttribute("aria-sort", "none");
  // The order holds across the dashboard's refreshes.
  await page.waitForTimeout(6_000);
  await expect(firstTenant()).toHaveAttribute("data-tenant", "globex");

  await table.getByRole("link", { name: "Jobs of globex" }).click();
  await expect(page).toHaveURL(/\/admin\/jobs\?tenant=globex$/);
  await hydrated(page);
  await expect(page.getByLabel("Tenant")).toHaveValue("globex");
  const rows = page.getByRole("row");
  // The list has loaded globex's jobs (a header row alone would check nothing).
  await expect.poll(() => rows.count()).toBeGreaterThan(1);
  const n = await rows.count();
  // Cells after the file name: the job's id, then its tenant.
  for (let i = 1; i < n; i++) await expect(rows.nth(i).getByRole("cell").nth(1)).toHaveText("globex");
});

test("retry now runs a retrying job at once instead of after its wait", async ({ page, request }) => {
  test.setTimeout(90_000);
  const marker = `retrynow${tag()}`;
  await embedderControl(request, "break", { marker });
  await login(page, "admin@demo.test");
  const jobId = await uploadViaApi(page, `wait-${tag()}.txt`, Buffer.from(`A ${marker} note about lighthouses.\n`.repeat(10)), "text/plain");
  const state = async () => (await (await page.request.get(`/api/jobs/${jobId}`)).json()).state;
  // Its first run fails. With its queue paused, the retry's message waits
  // in RabbitMQ, so the job stays `retrying` for as long as it takes.
  await expect.poll(state, { intervals: [50], timeout: 20_000 }).toBe("retrying");
  await pauseQueue(page, "high");
  const badge = page.locator(".page-head .badge");
  try {
    await page.waitForTimeout(1_500);
    expect(await state()).toBe("retrying");
    await embedderControl(request, "fix", { marker });
    await page.goto(`/jobs/${jobId}`);
    await hydrated(page);
    await expect(badge).toHaveText("retrying");
    await page.getByRole("button", { name: "Retry now" }).click();
    await expect(page.getByRole("status")).toContainText("Retrying; the job is pending again.");
    await expect(badge).toHaveText("pending");
  } finally {
    expect((await page.request.post("/api/admin/queues/high/resume")).status()).toBe(204);
  }
  await expect(badge).toHaveText("done", { timeout: 30_000 });
});

test("a viewer sees the dashboard, jobs, dead letters and audit log with no action buttons", async ({ page }) => {
  // A dead letter and a failed job for the viewer to look at.
  await login(page, "admin@demo.test");
  const run = tag();
  const name = `viewer-${run}.pdf`;
  const jobId = await uploadViaApi(page, name, Buffer.concat([CORRUPT_PDF, Buffer.from(run)]), "application/pdf");
  await deadLetterOf(page, jobId);
  await page.context().clearCookies();

  await login(page, "viewer@demo.test");
  await expect(page.getByText("Your role reads only")).toBeVisible();
  await expect(page.getByLabel("Choose files")).toHaveCount(0);
  const actions = /^(Pause|Resume|Re-enqueue|Discard|Cancel|Retry|Delete)/;
  for (const [path, heading] of [
    ["/admin", "Operations"],
    ["/admin/jobs", "All jobs"],
    ["/admin/dead-letters", "Dead letters"],
    ["/admin/audit", "Audit log"],
  ]) {
    await page.goto(path);
    await hydrated(page);
    await expect(page.getByRole("heading", { level: 1 })).toHaveText(heading);
    await expect(page.getByRole("button", { name: actions }), path).toHaveCount(0);
    await expect(page.getByRole("checkbox"), path).toHaveCount(0);
  }
  await page.goto("/admin/dead-letters");
  await expect(page.getByRole("rowheader", { name })).toBeVisible();
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  await expect(page.getByRole("heading", { name })).toBeVisible();
  await expect(page.getByRole("button", { name: actions })).toHaveCount(0);
  // The API refuses what the pages do not offer.
  const r = await page.request.post(`/api/jobs/${jobId}/retry`);
  expect(r.status()).toBe(403);
  expect((await r.json()).error.message).toContain("viewer role reads only");
});
