import { test as base, expect, APIRequestContext, Page } from "@playwright/test";

export { expect };

/**
 * Playwright's `test`, failing any test whose page panics, fails to hydrate
 * or does anything its content security policy refuses.
 */
export const test = base.extend<{ browserErrors: void }>({
  browserErrors: [
    async ({ page }, use) => {
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      page.on("console", (m) => {
        if (m.type() === "error" && /hydration|panicked|Content Security Policy/i.test(m.text()))
          errors.push(m.text().slice(0, 500));
      });
      await use();
      expect(errors, "errors in the browser").toEqual([]);
    },
    { auto: true },
  ],
});

export const PASSWORD = process.env.DOCFLOW_DEMO_PASSWORD ?? "docflow-demo";

/** Waits until the WASM app has hydrated the page, so clicks are heard. */
export async function hydrated(page: Page) {
  // Generous: on a loaded 2-core machine (the cluster tests, the benches
  // and three browser parts side by side) hydration has taken over 15 s.
  await expect(page.locator("#root")).toHaveAttribute("data-hydrated", "true", { timeout: 45_000 });
}

/** Logs in through the real login page. */
export async function login(page: Page, email: string) {
  await page.goto("/login");
  await hydrated(page);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL((url) => url.pathname === "/");
  await hydrated(page);
}

/** A short random suffix, so each run's files are told apart. */
export function tag(): string {
  return Math.random().toString(36).slice(2, 8);
}

/** A valid one-page PDF with `lines` in Helvetica, correct xref and all. */
export function makePdf(lines: string[]): Buffer {
  const esc = (s: string) => s.replace(/[\\()]/g, (m) => "\\" + m);
  const text = lines.map((l, i) => (i === 0 ? `(${esc(l)}) Tj` : `T* (${esc(l)}) Tj`)).join("\n");
  const stream = `BT\n/F1 12 Tf\n14 TL\n72 720 Td\n${text}\nET`;
  const objects = [
    "<< /Type /Catalog /Pages 2 0 R >>",
    "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
    `<< /Length ${Buffer.byteLength(stream, "latin1")} >>\nstream\n${stream}\nendstream`,
    "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
  ];
  let out = "%PDF-1.4\n";
  const offsets: number[] = [];
  objects.forEach((o, i) => {
    offsets.push(Buffer.byteLength(out, "latin1"));
    out += `${i + 1} 0 obj\n${o}\nendobj\n`;
  });
  const xref = Buffer.byteLength(out, "latin1");
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  out += offsets.map((o) => `${String(o).padStart(10, "0")} 00000 n \n`).join("");
  out += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(out, "latin1");
}

/** Bytes that look like a PDF but are not one: the parse step fails for good. */
export const CORRUPT_PDF = Buffer.from("%PDF-1.7 garbage");

/** Uploads through the REST API with the page's session cookie; returns the job id. */
export async function uploadViaApi(page: Page, name: string, buffer: Buffer, mimeType: string): Promise<string> {
  const resp = await page.request.post("/api/documents", {
    multipart: { file: { name, mimeType, buffer } },
  });
  expect(resp.status(), await resp.text()).toBe(202);
  return (await resp.json()).job_id;
}

export type DeadLetter = { id: string; job_id: string | null; filename: string | null; reason: string };

/** Waits until the job is dead-lettered (admin session); returns its dead letter. */
export async function deadLetterOf(page: Page, jobId: string): Promise<DeadLetter> {
  let found: DeadLetter | undefined;
  await expect
    .poll(
      async () => {
        const resp = await page.request.get("/api/admin/dead-letters?limit=500");
        const list: DeadLetter[] = await resp.json();
        found = list.find((d) => d.job_id === jobId);
        return found !== undefined;
      },
      { timeout: 30_000 },
    )
    .toBe(true);
  return found as DeadLetter;
}

/** The unread count the bell announces. */
export async function bellCount(page: Page): Promise<number> {
  const label = (await page.getByRole("link", { name: /^Notifications/ }).getAttribute("aria-label")) ?? "";
  const m = label.match(/(\d+) unread/);
  return m ? Number(m[1]) : 0;
}

/**
 * Pauses `queue` (admin session) and waits until no worker consumes it, so
 * what is uploaded next waits on it.
 */
export async function pauseQueue(page: Page, queue: string) {
  expect((await page.request.post(`/api/admin/queues/${queue}/pause`)).status()).toBe(204);
  await expect
    .poll(
      async () => {
        // A busy server may answer 503 (no database connection within
        // 3 s): that is no answer yet, so the poll asks again.
        const r = await page.request.get("/api/admin/stats");
        if (!r.ok()) return undefined;
        const stats = await r.json();
        return stats.queues.find((q: { queue: string }) => q.queue === queue)?.consumers;
      },
      { timeout: 15_000 },
    )
    .toBe(0);
}

/**
 * Tells the test embedding service (end2end/mock-embedder.mjs) what to do
 * with texts containing `data.marker`: `break` (answer 503), `slow` (take
 * `data.ms`) or `fix`.
 */
export async function embedderControl(
  request: APIRequestContext,
  action: "break" | "slow" | "fix",
  data: { marker: string; ms?: number },
) {
  const embedder = process.env.DOCFLOW_E2E_EMBEDDER;
  expect(embedder, "scripts/e2e.sh sets DOCFLOW_E2E_EMBEDDER").toBeTruthy();
  // A connection of its own each time: the mock closes idle ones after 5 s
  // (Node's default), and a request sent on one it is closing is reset.
  const headers = { connection: "close" };
  expect((await request.post(`${embedder}/control/${action}`, { data, headers })).ok()).toBe(true);
}
