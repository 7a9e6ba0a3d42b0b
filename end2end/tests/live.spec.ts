import { Page } from "@playwright/test";
import { test, expect, login, tag, embedderControl } from "./helpers";

// The pages follow jobs over one event stream (/api/events). When it cannot
// be reached (a proxy that drops it, a network blip), they must say so, keep
// up by polling, and go live again once the stream is back.

/** The dot in the header that tells how updates arrive. */
function liveDot(page: Page) {
  return page.locator(".live-dot");
}

async function chooseFile(page: Page, name: string, text: string) {
  await page.getByLabel("Choose files").setInputFiles({ name, mimeType: "text/plain", buffer: Buffer.from(text) });
}

test("with the event stream unreachable, home and job pages follow a job to done by polling, then go live again", async ({
  page,
}) => {
  // Every embedding of these documents takes 4 s: the jobs stay unfinished
  // across two polls, so only polling can show them done.
  const marker = `tortoise${tag()}`;
  await embedderControl(page.request, "slow", { marker, ms: 4000 });

  await page.route("**/api/events**", (route) => route.abort("connectionfailed"));
  await login(page, "alice@acme.test");
  await expect(liveDot(page)).toHaveAttribute("title", "Live updates interrupted; refreshing every 2 s");
  // Marks this document: a reload would lose it.
  await page.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));

  // Home: the card moves on to embed, then done, without the stream.
  const first = `slow-home-${marker}.txt`;
  await chooseFile(page, first, `The ${marker} crosses the harbour road slowly.\n`);
  const card = page.getByRole("listitem", { name: first });
  const bar = card.getByRole("progressbar", { name: `Progress of ${first}` });
  await expect(bar).toHaveAttribute("aria-valuetext", /^embed/, { timeout: 15_000 });
  await expect(bar).toHaveAttribute("aria-valuetext", "done", { timeout: 30_000 });

  // Job page: opened while the job is still embedding, it reaches done too.
  const second = `slow-page-${marker}.txt`;
  await chooseFile(page, second, `The ${marker} naps beside the quiet lighthouse.\n`);
  const secondBar = page.getByRole("listitem", { name: second }).getByRole("progressbar");
  await expect(secondBar).toHaveAttribute("aria-valuetext", /^embed/, { timeout: 15_000 });
  await page.getByRole("listitem", { name: second }).getByRole("link", { name: second }).click();
  await page.waitForURL(/\/jobs\//);
  const badge = page.locator(".badge.big");
  await expect(badge).toHaveText("processing");
  await expect(badge).toHaveText("done", { timeout: 30_000 });
  await expect(page.getByRole("list", { name: "Timeline" })).toContainText("done: the document is searchable");
  expect(await page.evaluate(() => (window as unknown as { noReload?: boolean }).noReload)).toBe(true);

  // The stream comes back: the browser reconnects by itself and the dot says so.
  await page.unroute("**/api/events**");
  await expect(liveDot(page)).toHaveAttribute("title", "Live updates on", { timeout: 30_000 });
  await embedderControl(page.request, "fix", { marker });
});
