import { test, expect, hydrated, login, tag, uploadViaApi, embedderControl } from "./helpers";

// A step that takes long must look alive on the job page: an animated
// "running" badge and the time it has run so far, counting up.

test("a step that runs long shows its elapsed time counting up beside an animated running badge", async ({
  page,
  request,
}) => {
  test.setTimeout(90_000);
  // Each embedding of this document takes 12 s.
  const marker = `sloth${tag()}`;
  await embedderControl(request, "slow", { marker, ms: 12_000 });
  try {
    await login(page, "alice@acme.test");
    const jobId = await uploadViaApi(page, `slow-${marker}.txt`, Buffer.from(`The ${marker} crosses the quay.\n`), "text/plain");
    await page.goto(`/jobs/${jobId}`);
    await hydrated(page);
    const embed = page.getByRole("row").filter({ has: page.getByRole("rowheader", { name: "embed", exact: true }) });
    const state = embed.getByRole("cell").nth(0);
    await expect(state).toHaveText("running", { timeout: 15_000 });
    // The badge turns (unless the user asked for less motion).
    const spinner = state.locator(".spinner");
    await expect(spinner).toBeVisible();
    expect(await spinner.evaluate((e) => getComputedStyle(e).animationName)).toBe("spin");
    expect(await spinner.evaluate((e) => getComputedStyle(e).animationIterationCount)).toBe("infinite");
    // The duration cell counts the time so far, each second, beside the
    // step's count of chunks.
    const time = embed.getByRole("cell").nth(2);
    await expect(time).toHaveText(/^(\d+ ms|\d+\.\d s) so far · 0\/1 chunks$/);
    const seconds = async () => Number(((await time.textContent()) ?? "").match(/^([\d.]+) s/)?.[1] ?? 0);
    await expect.poll(seconds, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    const earlier = await seconds();
    await expect.poll(seconds, { timeout: 5_000 }).toBeGreaterThan(earlier);
    // Once it ends, the cell holds its duration and the spinner is gone.
    await expect(state).toHaveText("done", { timeout: 30_000 });
    await expect(time).toHaveText(/^\d+(\.\d)? s · 1\/1 chunks, [\d.]+\/s$/);
    await expect(state.locator(".spinner")).toHaveCount(0);
  } finally {
    await embedderControl(request, "fix", { marker });
  }
});
