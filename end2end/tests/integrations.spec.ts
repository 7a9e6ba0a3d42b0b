import * as http from "node:http";
import * as crypto from "node:crypto";
import * as path from "node:path";
import { AddressInfo } from "node:net";
import { test, expect, CORRUPT_PDF, hydrated, login, tag, uploadViaApi } from "./helpers";

// Batches and webhooks in the browser: a drop of several files is one
// batch whose page follows it live to the end; an admin registers a
// webhook, keeps its secret (shown once), sees its deliveries and
// redelivers one; a viewer reads the page without its actions.

const shots = path.join(__dirname, "..", "screenshots");

test("a drop of twenty files, one damaged, is one batch, and its page follows it live to done", async ({ page }) => {
  test.setTimeout(120_000);
  await login(page, "alice@acme.test");
  const run = tag();
  // Twenty files, one of them a damaged PDF (bytes of this run: the same
  // bytes uploaded before would ask first).
  const files = Array.from({ length: 19 }, (_, i) => ({
    name: `q${i + 1}-${run}.txt`,
    mimeType: "text/plain",
    buffer: Buffer.from(`Quarter ${i + 1} (${run}): the harbour grew.`),
  }));
  files.splice(7, 0, { name: `scan-${run}.pdf`, mimeType: "application/pdf", buffer: Buffer.concat([CORRUPT_PDF, Buffer.from(run)]) });
  await page.getByLabel("Choose files").setInputFiles(files);
  const link = page.getByTestId("batch-link");
  await expect(link).toContainText("These 20 files are one batch", { timeout: 60_000 });
  await link.getByRole("link", { name: "Follow the batch" }).click();
  await page.waitForURL(/\/batches\//);
  await hydrated(page);
  await expect(page.getByRole("heading", { level: 1 })).toHaveText(`20 files from q1-${run}.txt`);
  // Live: done once the last job ended, with 19 done and one failed.
  await expect(page.getByTestId("batch-state")).toHaveText("Done", { timeout: 60_000 });
  await expect(page.getByTestId("count-done")).toContainText("19");
  await expect(page.getByTestId("count-failed")).toContainText("1");
  await expect(page.getByTestId("batch-progress")).toContainText("20 of 20 documents ended");
  await expect(page.getByRole("row")).toHaveCount(21);
  await expect(page.getByRole("link", { name: `scan-${run}.pdf` })).toBeVisible();
  await page.screenshot({ path: path.join(shots, "batch-light.png"), fullPage: true });
  // Retry the failed one: the batch runs again, and ends again.
  await page.getByRole("button", { name: "Retry 1 failed" }).click();
  await expect(page.getByText("Failed documents retried")).toBeVisible();
  await expect(page.getByTestId("batch-state")).toHaveText("Done", { timeout: 60_000 });
  await expect(page.getByTestId("count-failed")).toContainText("1");
});

/** A webhook receiver on this machine that records each delivery. */
async function receiver() {
  const got: { headers: http.IncomingHttpHeaders; body: string }[] = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      got.push({ headers: req.headers, body });
      res.writeHead(200).end("ok");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}/hook`, got, close: () => server.close() };
}

test("an admin registers a webhook, keeps its secret, sees its deliveries and redelivers one", async ({ page, browser }) => {
  test.setTimeout(120_000);
  const hook = await receiver();
  try {
    await login(page, "admin@demo.test");
    await page.goto("/admin/webhooks");
    await hydrated(page);
    const form = page.getByRole("form", { name: "Register an endpoint" });
    // An address inside docflow's network is refused unless allowed; here
    // (the test's receiver) it is allowed, so try a malformed one instead.
    await form.getByLabel("URL").fill("ftp://files.example.com/");
    await form.getByRole("button", { name: "Register" }).click();
    await expect(form.getByRole("alert")).toContainText("https");
    await form.getByLabel("URL").fill(hook.url);
    await form.getByLabel("Description (optional)").fill(`search index ${tag()}`);
    await form.getByRole("button", { name: "Register" }).click();
    const secretBox = page.getByTestId("webhook-secret");
    await expect(secretBox).toContainText("Store this signing secret now");
    const secret = (await secretBox.locator(".secret").innerText()).trim();
    expect(secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    const card = page.getByTestId("webhook").filter({ hasText: hook.url });
    await expect(card).toContainText("job.done");

    // A finished job reaches the receiver, signed with that secret.
    const jobId = await uploadViaApi(page, `hooked-${tag()}.txt`, Buffer.from("The ledger balanced."), "text/plain");
    await expect.poll(() => hook.got.length, { timeout: 60_000 }).toBeGreaterThan(0);
    const first = hook.got[0];
    const [t, v1] = String(first.headers["docflow-signature"]).split(",").map((p) => p.split("=")[1]);
    const expected = crypto.createHmac("sha256", secret).update(`${t}.${first.body}`).digest("hex");
    expect(v1).toBe(expected);
    const event = JSON.parse(first.body);
    expect(event.type).toBe("job.done");
    expect(event.data.id).toBe(jobId);

    // Its delivery is listed; redeliver sends the same event again.
    await card.getByRole("button", { name: "Deliveries" }).click();
    const row = card.getByTestId("delivery").first();
    await expect(row).toContainText("delivered");
    await expect(row).toContainText("200");
    await page.screenshot({ path: path.join(shots, "webhooks-light.png"), fullPage: true });
    await row.getByRole("button", { name: "Redeliver" }).click();
    await expect.poll(() => hook.got.length, { timeout: 30_000 }).toBe(2);
    expect(hook.got[1].headers["docflow-event-id"]).toBe(first.headers["docflow-event-id"]);
    expect(hook.got[1].body).toBe(first.body);

    // A viewer reads the same page without its actions.
    const viewer = await browser.newPage();
    await login(viewer, "viewer@demo.test");
    await viewer.goto("/admin/webhooks");
    await hydrated(viewer);
    const seen = viewer.getByTestId("webhook").filter({ hasText: hook.url });
    await expect(seen).toBeVisible();
    await expect(viewer.getByRole("form", { name: "Register an endpoint" })).toHaveCount(0);
    await expect(seen.getByRole("button", { name: "Delete" })).toHaveCount(0);
    await seen.getByRole("button", { name: "Deliveries" }).click();
    await expect(seen.getByTestId("delivery").first()).toBeVisible();
    await expect(seen.getByRole("button", { name: "Redeliver" })).toHaveCount(0);
    await viewer.close();

    // Deleting asks first.
    await card.getByRole("button", { name: "Delete" }).click();
    await card.getByRole("group", { name: "Delete this endpoint?" }).getByRole("button", { name: "Delete" }).click();
    await expect(card).toHaveCount(0);
  } finally {
    hook.close();
  }
});
