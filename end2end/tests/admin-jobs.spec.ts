import { Page } from "@playwright/test";
import { test, expect, deadLetterOf, hydrated, login, PASSWORD, pauseQueue, tag, uploadViaApi, embedderControl } from "./helpers";

function row(page: Page, name: string) {
  return page.getByRole("row").filter({ has: page.getByRole("rowheader", { name, exact: true }) });
}

/** The State cell of a job's row (the file is the row header; ID, Tenant, Queue come first). */
function stateOf(page: Page, name: string) {
  return row(page, name).getByRole("cell").nth(3);
}

/** Marks the document: a reload would lose the mark. */
async function markPage(page: Page) {
  await page.evaluate(() => ((window as unknown as { noReload: boolean }).noReload = true));
}

async function notReloaded(page: Page) {
  expect(await page.evaluate(() => (window as unknown as { noReload?: boolean }).noReload)).toBe(true);
}

test("the admin job list finds a job by the part of its id it shows, keeps the filter in the URL and leads back from the job", async ({
  page,
}) => {
  await login(page, "admin@demo.test");
  const name = `find-me-${tag()}.txt`;
  const jobId = await uploadViaApi(page, name, Buffer.from(`Find ${name} by its id.\n`), "text/plain");
  const other = `other-${tag()}.txt`;
  await uploadViaApi(page, other, Buffer.from(`Another ${other}.\n`), "text/plain");

  await page.goto("/admin/jobs");
  await hydrated(page);
  await expect(page.getByRole("columnheader", { name: "ID" })).toBeVisible();
  // Ids are UUIDv7: their start is the time, the same for both uploads;
  // the column shows the random end, which is what one searches for.
  const shown = jobId.slice(-8);
  await expect(row(page, name)).toContainText(shown);
  await expect(row(page, other)).not.toContainText(shown);

  await page.getByLabel("Filename or ID").fill(shown);
  await page.getByLabel("Newest by").selectOption("finished");
  await page.getByRole("button", { name: "Apply" }).click();
  await expect(page).toHaveURL(new RegExp(`[?&]q=${shown}`));
  await expect(page).toHaveURL(/[?&]sort=finished/);
  await expect(row(page, name)).toBeVisible();
  await expect(row(page, other)).toHaveCount(0);
  await expect(page.locator("tbody tr")).toHaveCount(1);

  // The URL is the filter: a reload shows the same list and the same form.
  await page.reload();
  await hydrated(page);
  await expect(page.getByLabel("Filename or ID")).toHaveValue(shown);
  await expect(page.getByLabel("Newest by")).toHaveValue("finished");
  await expect(page.locator("tbody tr")).toHaveCount(1);

  // A job opened from here has a breadcrumb back to it.
  await row(page, name).getByRole("link", { name }).click();
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}\\?from=admin$`));
  await hydrated(page);
  const crumbs = page.getByRole("navigation", { name: "Breadcrumb" });
  await expect(crumbs.getByRole("link", { name: "Admin" })).toHaveAttribute("href", "/admin");
  await crumbs.getByRole("link", { name: "All jobs" }).click();
  await expect(page).toHaveURL(/\/admin\/jobs$/);
});

test("Enter in a filter field applies it without a stray parameter, a done job's row says how long it took, and a bad filter in the URL is said once", async ({
  page,
}) => {
  await login(page, "admin@demo.test");
  const name = `enter-${tag()}.txt`;
  const jobId = await uploadViaApi(page, name, Buffer.from(`Found by pressing Enter: ${name}.\n`), "text/plain");
  await expect
    .poll(async () => (await (await page.request.get(`/api/jobs/${jobId}`)).json()).state, { timeout: 30_000 })
    .toBe("done");
  await page.goto("/admin/jobs");
  await hydrated(page);
  const field = page.getByLabel("Filename or ID");
  await field.fill(name);
  await field.press("Enter");
  await expect(page).toHaveURL(new RegExp(`[?&]q=${name.replace(/\./g, "\\.")}`));
  expect(page.url()).not.toContain("&=");
  expect(new URL(page.url()).searchParams.has("")).toBe(false);
  await expect(page.locator("tbody tr")).toHaveCount(1);
  await expect(row(page, name)).toBeVisible();
  // Once done, the row says how long the job took, from its start to its end.
  await expect(page.getByRole("columnheader", { name: "Duration" })).toBeVisible();
  await expect(stateOf(page, name)).toHaveText("done");
  await expect(row(page, name).getByRole("cell").nth(9)).toHaveText(/^(\d+ ms|\d+\.\d s)$/);

  // A value no filter takes: one message, where the list would be.
  await page.goto("/admin/jobs?since=fortnight");
  await hydrated(page);
  await expect(page.getByRole("alert")).toHaveCount(1);
  await expect(page.getByRole("alert")).toContainText("unknown time range `fortnight`");
  await expect(page.getByRole("region", { name: "Bulk actions" })).toContainText("None until the filters are corrected.");
});

test("a queue card on the dashboard opens the job list filtered by its queue", async ({ page }) => {
  await login(page, "admin@demo.test");
  // The admin's tenant is on the paid plan: its uploads go to `high`.
  const name = `queued-${tag()}.txt`;
  await uploadViaApi(page, name, Buffer.from(`Queued ${name}.\n`), "text/plain");
  await page.goto("/admin");
  await hydrated(page);
  await page.getByRole("article", { name: "Queue high" }).getByRole("link", { name: "high" }).click();
  await expect(page).toHaveURL(/\/admin\/jobs\?queue=high$/);
  await hydrated(page);
  await expect(page.getByLabel("Queue", { exact: true })).toHaveValue("high");
  await expect(row(page, name)).toBeVisible();
  const queues = await page.locator("tbody tr td:nth-child(4)").allTextContents();
  expect(queues.length).toBeGreaterThan(0);
  expect(new Set(queues)).toEqual(new Set(["high"]));
});

test("a step's failure bar on the dashboard opens the jobs that failed at it, whose rows then follow the job live", async ({
  page,
  request,
}) => {
  test.setTimeout(90_000);
  const run = tag();
  // The embedding service is down for this document: it fails at embed.
  const marker = `barlink${run}`;
  await embedderControl(request, "break", { marker });
  await login(page, "admin@demo.test");
  const name = `embed-fails-${run}.txt`;
  const jobId = await uploadViaApi(page, name, Buffer.from(`The ${marker} tide table of the harbour.\n`), "text/plain");
  await deadLetterOf(page, jobId);

  await page.goto("/admin");
  await hydrated(page);
  const failures = page.getByRole("group", { name: "Failure rate per step" });
  await failures.getByRole("link", { name: /^embed: \d+ % failed\. Open the jobs that failed at embed$/ }).click();
  await expect(page).toHaveURL(/\/admin\/jobs\?step=embed$/);
  await hydrated(page);
  await expect(page.getByLabel("Failed at step")).toHaveValue("embed");
  await expect(stateOf(page, name)).toHaveText("failed");

  // A time range applies as it is chosen, with no Apply click, and stays in
  // the URL; chosen with the keyboard, the focus stays on the list box.
  const range = page.getByLabel("Enqueued in");
  await expect(range).toHaveValue("");
  await range.focus();
  await range.press("ArrowDown");
  await expect(page).toHaveURL(/[?&]since=1h/);
  await expect(page).toHaveURL(/[?&]step=embed/);
  await expect(range).toHaveValue("1h");
  await expect(range).toBeFocused();
  await expect(stateOf(page, name)).toHaveText("failed");
  await expect(page.getByRole("button", { name: /^Retry \d+ jobs?$/ })).toBeEnabled();

  // The service is back and the job is retried from elsewhere: its row
  // changes to done without a reload (the job failed at embed once, so it
  // stays in the list).
  await markPage(page);
  await embedderControl(request, "fix", { marker });
  expect((await page.request.post(`/api/jobs/${jobId}/retry`)).status()).toBe(202);
  await expect(stateOf(page, name)).toHaveText("done", { timeout: 30_000 });
  await expect(row(page, name).getByRole("button", { name: `Retry ${name}` })).toHaveCount(0);
  await notReloaded(page);
});

test("rows of the admin job list change state without a reload, for the admin's tenant and for others", async ({
  page,
  request,
}) => {
  test.setTimeout(90_000);
  const run = tag();
  await login(page, "admin@demo.test");
  try {
    // acme's uploads wait on `high`, globex's on `normal`.
    await pauseQueue(page, "high");
    await pauseQueue(page, "normal");
    const ours = `live-ours-${run}.txt`;
    const oursId = await uploadViaApi(page, ours, Buffer.from(`Ours ${run}.\n`), "text/plain");
    expect((await request.post("/api/login", { data: { email: "bob@globex.test", password: PASSWORD } })).status()).toBe(200);
    const theirs = `live-theirs-${run}.txt`;
    const up = await request.post("/api/documents", {
      multipart: { file: { name: theirs, mimeType: "text/plain", buffer: Buffer.from(`Theirs ${run}.\n`) } },
    });
    expect(up.status()).toBe(202);
    const theirsId = (await up.json()).job_id;

    await page.goto(`/admin/jobs?q=${run}`);
    await hydrated(page);
    await expect(stateOf(page, ours)).toHaveText("pending");
    await expect(stateOf(page, theirs)).toHaveText("pending");
    await expect(page.getByRole("button", { name: "Cancel 2 jobs" })).toBeVisible();
    await markPage(page);

    // Cancelled through the API, as another admin would: the admin's live
    // feed carries acme's job; globex's is read by the list's poll.
    expect((await page.request.post(`/api/jobs/${oursId}/cancel`)).status()).toBe(202);
    await expect(stateOf(page, ours)).toHaveText("cancelled", { timeout: 5_000 });
    expect((await page.request.post(`/api/jobs/${theirsId}/cancel`)).status()).toBe(202);
    await expect(stateOf(page, theirs)).toHaveText("cancelled", { timeout: 10_000 });
    // The bulk counts follow too.
    await expect(page.getByRole("button", { name: "Cancel 0 jobs" })).toBeDisabled();
    await notReloaded(page);
  } finally {
    await page.request.post("/api/admin/queues/high/resume");
    await page.request.post("/api/admin/queues/normal/resume");
  }
});
