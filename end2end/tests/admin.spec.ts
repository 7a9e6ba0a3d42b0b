import { Page } from "@playwright/test";
import { test, expect, CORRUPT_PDF, deadLetterOf, hydrated, login, tag, uploadViaApi } from "./helpers";

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
  await r.getByText("Error", { exact: true }).click();
  await expect(r.locator("pre")).toContainText("the PDF is damaged");

  await r.getByRole("button", { name: `Re-enqueue ${name}` }).click();
  await expect(row(page, name)).toHaveCount(0);
  await expect(page.getByRole("status")).toContainText(`Re-enqueued ${name}; its job is pending again.`);

  // The job page shows the re-enqueue and the new attempt (which fails again: still corrupt).
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  const timeline = page.getByRole("list", { name: "Timeline" });
  await expect(timeline).toContainText("re-enqueued by an administrator");
  await expect(async () => {
    await page.reload();
    await expect(page.getByRole("list", { name: "Timeline" }).getByText("attempt 1 started")).toHaveCount(2);
  }).toPass({ timeout: 30_000 });

  await page.goto("/admin/audit");
  await hydrated(page);
  const audit = page.getByRole("row").filter({ hasText: dl.id });
  await expect(audit).toContainText("dead_letter.requeue");
  await expect(audit).toContainText("admin@demo.test");
  await expect(audit).toContainText(jobId);
});

test("an admin fixes the cause, re-enqueues the dead letter and watches its job reach done without redoing parse and chunk", async ({
  page,
  request,
}) => {
  test.setTimeout(90_000);
  const embedder = process.env.DOCFLOW_E2E_EMBEDDER;
  expect(embedder, "scripts/e2e.sh sets DOCFLOW_E2E_EMBEDDER").toBeTruthy();
  const run = tag();
  // The embedding service is down for this document.
  const marker = `outage${run}`;
  expect((await request.post(`${embedder}/control/break`, { data: { marker } })).ok()).toBe(true);
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
  expect((await request.post(`${embedder}/control/fix`, { data: { marker } })).ok()).toBe(true);
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
  for (const name of names) await expect(row(page, name)).toHaveCount(0);
  await expect(page.getByRole("status")).toContainText("Re-enqueued 3 dead letters");
  await expect(page.getByRole("button", { name: "Re-enqueue selected (0)" })).toBeDisabled();
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
  await expect(page.getByRole("img", { name: "Failure rate per step" })).toBeVisible();
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
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}$`));
  await hydrated(page);
  await expect(page.getByRole("heading", { name: "Why it failed" })).toBeVisible();
});
