import * as path from "node:path";
import { test, expect, CORRUPT_PDF, deadLetterOf, hydrated, login, makePdf, PASSWORD, pauseQueue, tag, uploadViaApi } from "./helpers";

// Screenshots of the main pages in light and dark, for the README and
// reviews: end2end/screenshots/<page>-<scheme>.png (git-ignored; the
// committed copies live in docs/screenshots/). Every page is taken at
// desktop width (the whole page) and at phone width, 390 px
// (<page>-phone-<scheme>.png, at most its first two screens).
const dir = path.join(__dirname, "..", "screenshots");
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

for (const colorScheme of ["light", "dark"] as const) {
  test(`screenshots of the main pages, ${colorScheme}`, async ({ page }) => {
    test.setTimeout(180_000);
    await page.setViewportSize(DESKTOP);
    await page.emulateMedia({ colorScheme });
    const shot = (name: string) => page.screenshot({ path: path.join(dir, `${name}-${colorScheme}.png`), fullPage: true });
    // The page as it is now at desktop width (as `name`), then at phone width.
    const both = async (name: string, phoneName = `${name}-phone`) => {
      await shot(name);
      await page.setViewportSize(PHONE);
      // Let the layout settle at the new width.
      await page.waitForTimeout(300);
      const height = await page.evaluate(() => document.documentElement.scrollHeight);
      await page.screenshot({
        path: path.join(dir, `${phoneName}-${colorScheme}.png`),
        fullPage: true,
        clip: { x: 0, y: 0, width: PHONE.width, height: Math.min(height, 2 * PHONE.height) },
      });
      await page.setViewportSize(DESKTOP);
    };
    // The login page, as a visitor sees it.
    await page.goto("/login");
    await hydrated(page);
    await both("login");
    // A member's view first: their own short list.
    await login(page, "alice@acme.test");
    const run = tag();

    // A dead letter for the list, and a job page that explains a failure.
    const broken = await uploadViaApi(page, `scan-${run}.pdf`, CORRUPT_PDF, "application/pdf");

    // `/` while documents are processing, then when they are done.
    // Bytes of this run: the page asks before keeping a file the tenant already has.
    const big = `Chapter one (${run}). ` + "The quarterly report describes the harbour, its cranes and ledgers. ".repeat(6000);
    await page.getByLabel("Choose files").setInputFiles([
      { name: `handbook-${run}.txt`, mimeType: "text/plain", buffer: Buffer.from(big) },
      { name: `summary-${run}.pdf`, mimeType: "application/pdf", buffer: makePdf(["Summary of the year.", `All is well (${run}).`]) },
      { name: `minutes-${run}.md`, mimeType: "text/markdown", buffer: Buffer.from(`# Minutes\n\nThe board met (${run}).\n`) },
    ]);
    await expect(page.getByRole("listitem", { name: `handbook-${run}.txt` })).toBeVisible({ timeout: 30_000 });
    await shot("home-processing");
    for (const name of [`handbook-${run}.txt`, `summary-${run}.pdf`, `minutes-${run}.md`]) {
      await expect(
        page.getByRole("listitem", { name }).getByRole("progressbar", { name: `Progress of ${name}` }),
      ).toHaveAttribute("aria-valuetext", "done", { timeout: 60_000 });
    }
    await both("home-done", "home-phone");

    const handbook = await page.getByRole("link", { name: `handbook-${run}.txt` }).getAttribute("href");
    await page.goto(handbook ?? "/");
    await hydrated(page);
    await expect(page.getByRole("list", { name: "Timeline" })).toContainText("done");
    await both("job");

    await page.goto(`/jobs/${broken}`);
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "Why it failed" })).toBeVisible();
    await shot("job-failed");

    // The inbox: a notification for each finished job.
    await page.goto("/inbox");
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "Inbox" })).toBeVisible();
    await expect(page.getByText(`handbook-${run}.txt`).first()).toBeVisible();
    await both("inbox");

    await page.goto(`/search?q=${encodeURIComponent("harbour cranes")}`);
    await hydrated(page);
    await expect(page.getByRole("list", { name: "Results" })).toBeVisible();
    await both("search");

    // Then the admin's pages.
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL((url) => url.pathname === "/login");
    await login(page, "admin@demo.test");
    await deadLetterOf(page, broken);
    await page.goto("/admin/dead-letters");
    await hydrated(page);
    await expect(page.getByRole("rowheader", { name: `scan-${run}.pdf` })).toBeVisible();
    await both("admin-dead-letters");

    await page.goto("/admin");
    await hydrated(page);
    await expect(page.getByRole("img", { name: "Queue depth" })).toBeVisible();
    await both("admin");

    await page.goto("/admin/jobs?since=24h");
    await hydrated(page);
    await expect(page.getByRole("rowheader", { name: `handbook-${run}.txt` })).toBeVisible();
    await both("admin-jobs");

    // An action for the audit log: the slow queue paused and resumed.
    expect((await page.request.post("/api/admin/queues/slow/pause")).status()).toBe(204);
    expect((await page.request.post("/api/admin/queues/slow/resume")).status()).toBe(204);
    await page.goto("/admin/audit");
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "Audit log" })).toBeVisible();
    await expect(page.getByRole("table")).toContainText("queue.resume");
    await both("admin-audit");
  });
}

// The operator controls: a paused queue on the dashboard, the tenant
// table, a job page's actions and the bulk cancel confirmation.
for (const colorScheme of ["light", "dark"] as const) {
  test(`screenshots of the operator controls, ${colorScheme}`, async ({ page, request }) => {
    test.setTimeout(120_000);
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.emulateMedia({ colorScheme });
    const shot = (name: string) => page.screenshot({ path: path.join(dir, `${name}-${colorScheme}.png`) });
    const run = tag();
    await login(page, "admin@demo.test");
    // globex's uploads wait on the paused `normal` queue.
    try {
      await pauseQueue(page, "normal");
      expect((await request.post("/api/login", { data: { email: "bob@globex.test", password: PASSWORD } })).status()).toBe(200);
      const ids: string[] = [];
      for (const name of ["invoice", "contract", "minutes"]) {
        const resp = await request.post("/api/documents", {
          multipart: {
            file: { name: `${name}-${run}.txt`, mimeType: "text/plain", buffer: Buffer.from(`The ${name} of Globex, run ${run}.`) },
          },
        });
        expect(resp.status()).toBe(202);
        ids.push((await resp.json()).job_id);
      }

      await page.goto("/admin");
      await hydrated(page);
      const normal = page.getByRole("article", { name: "Queue normal" });
      await expect(normal).toHaveAttribute("data-paused", "true");
      await expect(normal.getByRole("button", { name: "Resume queue normal" })).toBeVisible();
      await expect(normal.getByText("Not draining")).toBeVisible({ timeout: 15_000 });
      await page.getByRole("region", { name: "Queues" }).screenshot({ path: path.join(dir, `admin-queues-paused-${colorScheme}.png`) });
      const tenants = page.getByRole("table", { name: "Tenants" });
      await expect(tenants.locator('tr[data-tenant="globex"]')).toBeVisible();
      await tenants.scrollIntoViewIfNeeded();
      await tenants.screenshot({ path: path.join(dir, `admin-tenants-${colorScheme}.png`) });

      // A waiting job's page: Cancel and Delete.
      await page.goto(`/jobs/${ids[0]}`);
      await hydrated(page);
      await expect(page.getByRole("button", { name: "Cancel job" })).toBeVisible();
      await page.getByRole("button", { name: "Delete document" }).click();
      await expect(page.getByRole("group", { name: "Confirm deleting the document" })).toBeVisible();
      await shot("job-actions");

      // The bulk cancel confirmation, then the cancel itself (the queue stays clean).
      await page.goto(`/admin/jobs?state=pending&tenant=globex&q=${run}`);
      await hydrated(page);
      await page.getByRole("button", { name: "Cancel 3 jobs" }).click();
      await expect(page.getByRole("alertdialog")).toContainText("Cancel all 3 pending jobs of tenants starting with “globex”");
      await shot("admin-bulk-cancel");
      await page.getByRole("alertdialog").getByRole("button", { name: "Cancel 3 jobs" }).click();
      await expect(page.getByRole("status")).toContainText("Cancelled 3 jobs.");
    } finally {
      await page.request.post("/api/admin/queues/normal/resume");
    }
  });
}
