import * as path from "node:path";
import { test, expect, CORRUPT_PDF, deadLetterOf, hydrated, login, makePdf, tag, uploadViaApi } from "./helpers";

// Screenshots of the main pages in light and dark, for the README and
// reviews: end2end/screenshots/<page>-<scheme>.png (git-ignored; the
// committed copies live in docs/screenshots/).
const dir = path.join(__dirname, "..", "screenshots");

for (const colorScheme of ["light", "dark"] as const) {
  test(`screenshots of the main pages, ${colorScheme}`, async ({ page }) => {
    test.setTimeout(120_000);
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.emulateMedia({ colorScheme });
    // A member's view first: their own short list.
    await login(page, "alice@acme.test");
    const run = tag();
    const shot = (name: string) => page.screenshot({ path: path.join(dir, `${name}-${colorScheme}.png`), fullPage: true });

    // A dead letter for the list, and a job page that explains a failure.
    const broken = await uploadViaApi(page, `scan-${run}.pdf`, CORRUPT_PDF, "application/pdf");

    // `/` while documents are processing, then when they are done.
    const big = "Chapter one. The quarterly report describes the harbour, its cranes and ledgers. ".repeat(6000);
    await page.getByLabel("Choose files").setInputFiles([
      { name: `handbook-${run}.txt`, mimeType: "text/plain", buffer: Buffer.from(big) },
      { name: `summary-${run}.pdf`, mimeType: "application/pdf", buffer: makePdf(["Summary of the year.", "All is well."]) },
      { name: `minutes-${run}.md`, mimeType: "text/markdown", buffer: Buffer.from("# Minutes\n\nThe board met.\n") },
    ]);
    await expect(page.getByRole("listitem", { name: `handbook-${run}.txt` })).toBeVisible({ timeout: 30_000 });
    await shot("home-processing");
    for (const name of [`handbook-${run}.txt`, `summary-${run}.pdf`, `minutes-${run}.md`]) {
      await expect(
        page.getByRole("listitem", { name }).getByRole("progressbar", { name: `Progress of ${name}` }),
      ).toHaveAttribute("aria-valuetext", "done", { timeout: 60_000 });
    }
    await shot("home-done");

    const handbook = await page.getByRole("link", { name: `handbook-${run}.txt` }).getAttribute("href");
    await page.goto(handbook ?? "/");
    await hydrated(page);
    await expect(page.getByRole("list", { name: "Timeline" })).toContainText("done");
    await shot("job");

    await page.goto(`/jobs/${broken}`);
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "Why it failed" })).toBeVisible();
    await shot("job-failed");

    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto("/");
    await hydrated(page);
    await shot("home-phone");
    await page.setViewportSize({ width: 1280, height: 900 });

    // Then the admin's pages.
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL((url) => url.pathname === "/login");
    await login(page, "admin@demo.test");
    await deadLetterOf(page, broken);
    await page.goto("/admin/dead-letters");
    await hydrated(page);
    await expect(page.getByRole("rowheader", { name: `scan-${run}.pdf` })).toBeVisible();
    await shot("admin-dead-letters");

    await page.goto("/admin");
    await hydrated(page);
    await expect(page.getByRole("img", { name: "Queue depth" })).toBeVisible();
    await shot("admin");

    await page.goto(`/search?q=${encodeURIComponent("harbour cranes")}`);
    await hydrated(page);
    await expect(page.getByRole("list", { name: "Results" })).toBeVisible();
    await shot("search");

    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto("/admin/dead-letters");
    await hydrated(page);
    await shot("admin-dead-letters-phone");
  });
}
