import * as fs from "node:fs";
import { Page } from "@playwright/test";
import { test, expect, bellCount, CORRUPT_PDF, hydrated, login, makePdf, tag, uploadViaApi, embedderControl } from "./helpers";

// One run's documents, shared by the tests below (they run in order).
const run = tag();
const sentence = `The heron ${run} studies quarterly invoices beside the quiet lighthouse.`;
const textName = `notes-${run}.txt`;
const pdfName = `report-${run}.pdf`;
const brokenName = `broken-${run}.pdf`;
let pdfJobUrl = "";

/** Drops files onto the drop zone the way a browser does (a DataTransfer on `drop`). */
async function dropFiles(page: Page, files: { name: string; type: string; data: Buffer }[]) {
  const payload = files.map((f) => ({ name: f.name, type: f.type, b64: f.data.toString("base64") }));
  const dataTransfer = await page.evaluateHandle((files) => {
    const dt = new DataTransfer();
    for (const f of files) {
      const bytes = Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0));
      dt.items.add(new File([bytes], f.name, { type: f.type }));
    }
    return dt;
  }, payload);
  await page.getByRole("group", { name: "Drop files here" }).dispatchEvent("drop", { dataTransfer });
}

function card(page: Page, name: string) {
  return page.getByRole("listitem", { name });
}

test.describe.serial("a member's documents", () => {
  test("two dropped files reach done live, a corrupt one says why, and the bell counts them", async ({ page }) => {
    await login(page, "alice@acme.test");
    const before = await bellCount(page);
    // Marks this document: a reload would lose it.
    await page.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));

    const text = `${sentence}\n\n` + "Plain paragraphs about ledgers and audits follow. ".repeat(200);
    await dropFiles(page, [
      { name: textName, type: "text/plain", data: Buffer.from(text) },
      { name: pdfName, type: "application/pdf", data: makePdf([sentence, "A second line about harbours."]) },
    ]);

    for (const name of [textName, pdfName]) {
      const bar = card(page, name).getByRole("progressbar", { name: `Progress of ${name}` });
      await expect(bar).toHaveAttribute("aria-valuetext", "done", { timeout: 30_000 });
      await expect(bar).toHaveAttribute("aria-valuenow", "100");
      await expect(card(page, name).getByText("done", { exact: true }).first()).toBeVisible();
    }
    await expect(page.getByRole("link", { name: /^Notifications/ })).toHaveAttribute(
      "aria-label",
      `Notifications, ${before + 2} unread`,
    );

    // A corrupt PDF fails for good, with the reason in user words.
    // Bytes of this run: the page asks before keeping a file the tenant already has.
    const broken = Buffer.concat([CORRUPT_PDF, Buffer.from(` ${run}`)]);
    await page.getByLabel("Choose files").setInputFiles({ name: brokenName, mimeType: "application/pdf", buffer: broken });
    await expect(card(page, brokenName)).toContainText("This file looks damaged or is not a real PDF", { timeout: 30_000 });
    await expect(card(page, brokenName).getByRole("progressbar")).toHaveAttribute("aria-valuetext", "failed at parse");
    await expect(page.getByRole("link", { name: /^Notifications/ })).toHaveAttribute(
      "aria-label",
      `Notifications, ${before + 3} unread`,
    );

    // Checked in the browser before anything is sent.
    const huge = test.info().outputPath(`huge-${run}.txt`);
    fs.writeFileSync(huge, Buffer.alloc(51 * 1024 * 1024, 97));
    await page.getByLabel("Choose files").setInputFiles({
      name: `photo-${run}.gif`,
      mimeType: "image/gif",
      buffer: Buffer.from("not a document"),
    });
    await page.getByLabel("Choose files").setInputFiles(huge);
    await expect(page.getByText(`photo-${run}.gif cannot be uploaded: only PDF`)).toBeVisible();
    await expect(page.getByText(`huge-${run}.txt is too large (51.0 MB): the limit is 50 MB.`)).toBeVisible();

    expect(await page.evaluate(() => (window as unknown as { noReload?: boolean }).noReload)).toBe(true);

    // The list is the user's recent jobs: it survives a reload.
    pdfJobUrl = (await card(page, pdfName).getByRole("link", { name: pdfName }).getAttribute("href")) ?? "";
    expect(pdfJobUrl).toMatch(/^\/jobs\//);
    await page.reload();
    await hydrated(page);
    await expect(card(page, textName)).toBeVisible();
    await expect(card(page, brokenName)).toContainText("failed");
  });

  test("reading a notification in the inbox lowers the bell", async ({ page }) => {
    await login(page, "alice@acme.test");
    const before = await bellCount(page);
    expect(before).toBeGreaterThan(0);
    await page.getByRole("link", { name: "Inbox", exact: true }).click();
    await hydrated(page);
    const note = page.getByRole("listitem", { name: `${pdfName} is ready` });
    // Each notice's link and button say whose they are, for a screen
    // reader's list of controls.
    await expect(note.getByRole("link", { name: `Open job: ${pdfName} is ready`, exact: true })).toBeVisible();
    await note.getByRole("button", { name: `Mark read: ${pdfName} is ready`, exact: true }).click();
    await expect(note.getByText("Read", { exact: true })).toBeVisible();
    await expect(page.getByRole("link", { name: /^Notifications/ })).toHaveAttribute(
      "aria-label",
      before - 1 === 0 ? "Notifications, none unread" : `Notifications, ${before - 1} unread`,
    );
  });

  test("search finds the sentence from the PDF with its words marked", async ({ page }) => {
    await login(page, "alice@acme.test");
    await page.getByRole("link", { name: "Search" }).click();
    await hydrated(page);
    await page.getByLabel("Search your documents").fill(`heron ${run} quarterly invoices lighthouse`);
    await page.getByRole("button", { name: "Search" }).click();
    const results = page.getByRole("list", { name: "Results" });
    const hit = results.getByRole("listitem").filter({ hasText: pdfName }).first();
    await expect(hit).toBeVisible();
    await expect(hit).toContainText("quiet lighthouse");
    await expect(hit.locator("mark", { hasText: "heron" })).toBeVisible();
    await expect(hit.getByRole("img", { name: /^Relevance: / })).toBeVisible();
    await expect(hit).not.toContainText(/score \d/);
  });

  test("a job page shows the timeline, steps and durations", async ({ page }) => {
    await login(page, "alice@acme.test");
    await page.goto(pdfJobUrl);
    await hydrated(page);
    await expect(page.getByRole("heading", { name: pdfName })).toBeVisible();
    const timeline = page.getByRole("list", { name: "Timeline" });
    await expect(timeline).toContainText("attempt 1 started");
    await expect(timeline).toContainText("done: the document is searchable");
    await expect(timeline).toContainText("since previous");
    const steps = page.getByRole("table");
    for (const step of ["parse", "chunk", "embed", "store"]) {
      await expect(steps.getByRole("row", { name: new RegExp(`^${step} done`) })).toBeVisible();
    }
  });

  test("another tenant sees none of it", async ({ page }) => {
    await login(page, "bob@globex.test");
    await expect(page.getByRole("heading", { name: "Your documents" })).toBeVisible();
    for (const name of [textName, pdfName, brokenName]) {
      await expect(page.getByText(name)).toHaveCount(0);
    }
    await page.goto(`/search?q=${encodeURIComponent(`heron ${run} lighthouse`)}`);
    await hydrated(page);
    await expect(page.getByText(pdfName)).toHaveCount(0);
    await expect(page.getByText(sentence)).toHaveCount(0);
    await page.goto(pdfJobUrl);
    await hydrated(page);
    await expect(page.getByRole("heading", { name: "Job not found" })).toBeVisible();
    const inbox = await page.request.get("/api/notifications");
    expect(JSON.stringify(await inbox.json())).not.toContain(run);
  });
});

test("a member cancels a running job from its page, then deletes its document", async ({ page, request }) => {
  test.setTimeout(90_000);
  // Its embedding takes a minute: the job is still running when cancelled.
  const marker = `slowcancel${tag()}`;
  await embedderControl(request, "slow", { marker, ms: 60_000 });
  try {
    await login(page, "alice@acme.test");
    const name = `long-${tag()}.txt`;
    const text = `The ${marker} survey of the estuary and its tides.\n`.repeat(40);
    const jobId = await uploadViaApi(page, name, Buffer.from(text), "text/plain");
    await page.goto(`/jobs/${jobId}`);
    await hydrated(page);
    const badge = page.locator(".page-head .badge");
    await expect(badge).toHaveText(/pending|processing/);
    await page.getByRole("button", { name: "Cancel job" }).click();
    await expect(page.getByRole("status")).toContainText("Cancelled; its partial results are removed.");
    await expect(badge).toHaveText("cancelled");
    await expect(page.getByRole("button", { name: "Cancel job" })).toHaveCount(0);

    // Asked with the focus on the safe answer; Escape keeps the document,
    // and the focus goes back to the button that asked.
    const deleteButton = page.getByRole("button", { name: "Delete document" });
    await deleteButton.click();
    const confirm = page.getByRole("group", { name: "Confirm deleting the document" });
    await expect(confirm).toContainText(`Delete ${name} and everything made from it?`);
    await expect(confirm.getByRole("button", { name: "Keep" })).toBeFocused();
    await page.keyboard.press("Escape");
    await expect(confirm).toHaveCount(0);
    await expect(deleteButton).toBeFocused();
    await page.keyboard.press("Enter");
    await expect(confirm).toBeVisible();
    await confirm.getByRole("button", { name: "Delete", exact: true }).click();
    await expect(page.getByRole("status")).toContainText("Document deleted");
    await expect(page.getByText("Document deleted", { exact: true })).toBeVisible();
    const job = await (await page.request.get(`/api/jobs/${jobId}`)).json();
    expect(job.document_deleted).toBe(true);
  } finally {
    await embedderControl(request, "fix", { marker });
  }
});

test("a click on the job page while the page reloads the job still acts, and the page lives on", async ({ page, request }) => {
  test.setTimeout(90_000);
  const marker = `slowstale${tag()}`;
  await embedderControl(request, "slow", { marker, ms: 60_000 });
  try {
    await login(page, "alice@acme.test");
    const name = `stale-${tag()}.txt`;
    const jobId = await uploadViaApi(page, name, Buffer.from(`The ${marker} tide table.\n`.repeat(40)), "text/plain");
    // Without the event stream the page re-reads the job every 2 s; the
    // first re-read is held, so the job's view is being replaced while its
    // old buttons stay on screen.
    await page.route("**/api/events**", (route) => route.abort("connectionfailed"));
    let rereading!: () => void;
    const reread = new Promise<void>((r) => (rereading = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    await page.route("**/sfn/job_with_events*", async (route) => {
      rereading();
      await released;
      await route.continue();
    });
    await page.goto(`/jobs/${jobId}`);
    await hydrated(page);
    const badge = page.locator(".page-head .badge");
    await expect(badge).toHaveText(/pending|processing/);
    await reread;
    await page.getByRole("button", { name: "Cancel job" }).click();
    await expect(page.getByRole("status")).toContainText("Cancelled; its partial results are removed.");
    release();
    await expect(badge).toHaveText("cancelled");
    await page.getByRole("button", { name: "Delete document" }).click();
    await expect(page.getByRole("group", { name: "Confirm deleting the document" })).toBeVisible();
  } finally {
    await embedderControl(request, "fix", { marker });
  }
});

test("a member retries a failed job from its page once the cause is fixed", async ({ page, request }) => {
  test.setTimeout(90_000);
  const marker = `brokenretry${tag()}`;
  await embedderControl(request, "break", { marker });
  await login(page, "alice@acme.test");
  const name = `flaky-${tag()}.txt`;
  const jobId = await uploadViaApi(page, name, Buffer.from(`A ${marker} note about harbours.\n`.repeat(10)), "text/plain");
  await page.goto(`/jobs/${jobId}`);
  await hydrated(page);
  const badge = page.locator(".page-head .badge");
  await expect(badge).toHaveText("failed", { timeout: 30_000 });
  await embedderControl(request, "fix", { marker });
  await page.getByRole("button", { name: "Retry", exact: true }).click();
  await expect(page.getByRole("status")).toContainText("Retrying; the job is pending again.");
  await expect(badge).toHaveText("done", { timeout: 30_000 });
  await expect(page.getByRole("list", { name: "Timeline" })).toContainText("retried by its uploader");
});
