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
    const pages = ["/", "/inbox", "/search?q=accessible", `/jobs/${jobId}`, "/admin", "/admin/jobs", "/admin/dead-letters", "/admin/audit"];
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
  await page.getByLabel("Choose files").setInputFiles({ name: "photo.png", mimeType: "image/png", buffer: Buffer.from("x") });
  await expect(region).toContainText("photo.png was not uploaded");
  // Its reason is an alert of its own, read out as it appears.
  await expect(page.getByRole("alert").filter({ hasText: "photo.png" })).toContainText("cannot be uploaded: only PDF");
});

test("the header says in words whether updates are live", async ({ page }) => {
  await login(page, "alice@acme.test");
  await expect(page.locator(".live-state .live-text")).toHaveText("Live");
  await expect(page.locator(".live-state .live-text")).toBeVisible();
});

test.describe("at phone width", () => {
  test.use({ viewport: { width: 390, height: 844 } });

  for (const path of ["/", "/admin", "/admin/dead-letters"]) {
    test(`every control of ${path} lies inside the viewport`, async ({ page }) => {
      await login(page, "admin@demo.test");
      await page.goto(path);
      await hydrated(page);
      await expect(page.locator("h1").first()).toBeVisible();
      await page.waitForTimeout(500);
      const outside = await page.evaluate(() => {
        const width = document.documentElement.clientWidth;
        const bad: string[] = [];
        for (const el of Array.from(document.querySelectorAll("button, a[href], input, select, textarea"))) {
          if (el.closest(".skip-link, .sr-only")) continue;
          if (el.classList.contains("sr-only")) continue;
          const r = el.getBoundingClientRect();
          const s = getComputedStyle(el);
          if (r.width === 0 || r.height === 0 || s.visibility === "hidden") continue;
          if (r.left < -0.5 || r.right > width + 0.5) {
            bad.push(`${el.tagName.toLowerCase()} "${(el.textContent ?? "").trim().slice(0, 40) || el.getAttribute("aria-label")}" at ${Math.round(r.left)}..${Math.round(r.right)}`);
          }
        }
        if (document.documentElement.scrollWidth > width + 1) bad.push(`page scrolls sideways: ${document.documentElement.scrollWidth}px`);
        return bad;
      });
      expect(outside).toEqual([]);
    });
  }
});
