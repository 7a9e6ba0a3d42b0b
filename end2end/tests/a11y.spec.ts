import AxeBuilder from "@axe-core/playwright";
import { FileChooser, Page } from "@playwright/test";
import { test, expect, hydrated, login, tag, uploadViaApi } from "./helpers";

/** Serious and critical axe violations on the page as it is now, as readable lines. */
async function seriousViolations(page: Page): Promise<string[]> {
  const result = await new AxeBuilder({ page }).analyze();
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .flatMap((v) => v.nodes.map((n) => `${v.id} (${v.impact}): ${n.target.join(" ")} — ${n.failureSummary ?? ""}`));
}

/** Opens `path` and waits until it has hydrated and drawn its heading. */
async function open(page: Page, path: string) {
  await page.goto(path);
  await hydrated(page);
  await expect(page.locator("h1").first()).toBeVisible();
  // Let resources behind Suspense settle (the SSE stream keeps the network busy).
  await page.waitForTimeout(500);
}

for (const scheme of ["light", "dark"] as const) {
  test(`every page has no serious or critical accessibility violations in ${scheme} mode`, async ({ page }) => {
    test.setTimeout(120_000);
    await page.emulateMedia({ colorScheme: scheme });
    await open(page, "/login");
    // Placeholders are drawn: their contrast is checked too.
    expect(await seriousViolations(page), "/login").toEqual([]);

    await login(page, "admin@demo.test");
    const jobId = await uploadViaApi(page, `a11y-${tag()}.txt`, Buffer.from("Accessible pages for everyone.\n"), "text/plain");
    // A finished job, so its page and the list show the `done` badge.
    await expect
      .poll(async () => (await (await page.request.get(`/api/jobs/${jobId}`)).json()).state, { timeout: 30_000 })
      .toBe("done");
    const batch = await (await page.request.post("/api/batches", { data: { name: `a11y ${tag()}` } })).json();
    const pages = [
      "/", "/inbox", "/search?q=accessible", `/jobs/${jobId}`, `/batches/${batch.id}`,
      "/admin", "/admin/jobs", "/admin/dead-letters", "/admin/audit", "/admin/webhooks",
    ];
    const found: Record<string, string[]> = {};
    for (const path of pages) {
      await open(page, path);
      const v = await seriousViolations(page);
      if (v.length) found[path] = v;
    }
    expect(found).toEqual({});
  });
}

test("Enter, like Space, opens the file picker from Choose files", async ({ page }) => {
  // Listen before anything is pressed: Playwright turns on file-chooser
  // interception when the first listener is added, asynchronously, so a
  // listener added just before a key press can miss the chooser it opens.
  const choosers: FileChooser[] = [];
  page.on("filechooser", (fc) => choosers.push(fc));
  await login(page, "alice@acme.test");
  // The keys are handled by the hydrated page.
  await hydrated(page);
  const picker = page.getByLabel("Choose files");
  for (const key of ["Enter", "Space"]) {
    await picker.focus();
    await expect(picker).toBeFocused();
    await page.keyboard.press(key);
    await expect.poll(() => choosers.length, { message: `${key} opens the file picker` }).toBeGreaterThan(0);
    for (const fc of choosers.splice(0)) {
      expect(fc.isMultiple()).toBe(true);
      await fc.setFiles([]);
    }
  }
});

test("a finished upload is announced to screen readers", async ({ page }) => {
  await login(page, "alice@acme.test");
  const region = page.locator("#upload-announcer");
  await expect(region).toHaveAttribute("aria-live", "polite");
  const name = `announce-${tag()}.txt`;
  await page.getByLabel("Choose files").setInputFiles({ name, mimeType: "text/plain", buffer: Buffer.from(`Announced ${name}\n`) });
  await expect(region).toContainText(`${name} uploaded`);
  // A refused file is announced with its reason.
  await page.getByLabel("Choose files").setInputFiles({ name: "photo.gif", mimeType: "image/gif", buffer: Buffer.from("x") });
  await expect(region).toContainText("photo.gif was not uploaded");
  // Its reason is an alert of its own, read out as it appears.
  await expect(page.getByRole("alert").filter({ hasText: "photo.gif" })).toContainText("cannot be uploaded: only PDF");
});

test("the header says in words whether updates are live", async ({ page }) => {
  await login(page, "alice@acme.test");
  await expect(page.locator(".live-state .live-text")).toHaveText("Live");
  await expect(page.locator(".live-state .live-text")).toBeVisible();
});

test.describe("at phone width", () => {
  test.use({ viewport: { width: 390, height: 844 } });

  /** What lies outside a 390 px page: controls past its edges, a sideways scroll, words broken apart. */
  async function outsideViewport(page: Page): Promise<string[]> {
    return page.evaluate(() => {
      const width = document.documentElement.clientWidth;
      const bad: string[] = [];
      const describe = (el: Element) =>
        `${el.tagName.toLowerCase()} "${(el.textContent ?? "").trim().slice(0, 40) || el.getAttribute("aria-label")}"`;
      for (const el of Array.from(document.querySelectorAll("button, a[href], input, select, textarea, summary"))) {
        if (el.closest(".skip-link, .sr-only") || el.classList.contains("sr-only")) continue;
        const r = el.getBoundingClientRect();
        const s = getComputedStyle(el);
        if (r.width === 0 || r.height === 0 || s.visibility === "hidden") continue;
        // Inside a box that scrolls sideways on its own, a control is reached by scrolling that box.
        let box = el.parentElement;
        while (box && box !== document.body && !/(auto|scroll)/.test(getComputedStyle(box).overflowX)) box = box.parentElement;
        if (box && box !== document.body) continue;
        if (r.left < -0.5 || r.right > width + 0.5) bad.push(`${describe(el)} at ${Math.round(r.left)}..${Math.round(r.right)}`);
      }
      if (document.documentElement.scrollWidth > width) bad.push(`page scrolls sideways: ${document.documentElement.scrollWidth}px`);
      // E-mail addresses, badges and the words of an error are not cut mid-word
      // (a long file name may wrap: it is one word).
      for (const el of Array.from(document.querySelectorAll(".badge, .chip, .actor, .error-cell, .error-line"))) {
        const text = (el.textContent ?? "").trim();
        if (!text) continue;
        const range = document.createRange();
        range.selectNodeContents(el);
        const lines = new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top)));
        const words = text.split(/\s+/).length;
        if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === "hidden") bad.push(`${describe(el)} is cut off`);
        if (lines.size > words) bad.push(`${describe(el)} breaks mid-word over ${lines.size} lines`);
      }
      return bad;
    });
  }

  test("no page scrolls sideways, cuts a word or puts a control out of reach", async ({ page }) => {
    await login(page, "admin@demo.test");
    const run = tag();
    // Every page with something on it: a document that is done, one that
    // failed with its error, and audit rows naming an administrator.
    const done = await uploadViaApi(
      page,
      `phone-width-quarterly-maintenance-handbook-${run}.md`,
      Buffer.from(`# Handbook ${run}\n\nThe harbour pilot boards the tanker at dawn.`),
      "text/markdown",
    );
    const failed = await uploadViaApi(page, `phone-width-${run}.pdf`, Buffer.from(`%PDF-1.7 garbage ${run}`), "application/pdf");
    await expect.poll(async () => (await (await page.request.get(`/api/jobs/${done}`)).json()).state, { timeout: 30_000 }).toBe("done");
    await expect.poll(async () => (await (await page.request.get(`/api/jobs/${failed}`)).json()).state, { timeout: 30_000 }).toBe("failed");
    expect((await page.request.post("/api/admin/queues/slow/pause")).status()).toBe(204);
    expect((await page.request.post("/api/admin/queues/slow/resume")).status()).toBe(204);

    const problems: string[] = [];
    const pages = ["/", "/inbox", `/search?q=harbour+pilot+${run}`, `/jobs/${done}`, `/jobs/${failed}`, "/admin", "/admin/jobs", "/admin/dead-letters", "/admin/audit"];
    for (const path of pages) {
      await open(page, path);
      problems.push(...(await outsideViewport(page)).map((p) => `${path}: ${p}`));
    }
    // The job list's filters are folded: its first job is on the first screen.
    await open(page, "/admin/jobs");
    const first = await page.locator(".table-wrap tbody tr").first().boundingBox();
    expect(first, "a job row").not.toBeNull();
    expect.soft(first!.y, "the first job row is on the first screen").toBeLessThan(844);
    await page.context().clearCookies();
    await open(page, "/login");
    problems.push(...(await outsideViewport(page)).map((p) => `/login: ${p}`));
    expect.soft(problems).toEqual([]);
  });
});
